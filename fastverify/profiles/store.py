"""Profile lookup and loading: user directories first, then the shipped profiles.

`ProfileStore(user_dirs, shipped_dir).load("ring-ll")` finds `ring-ll.env` in the
first user directory that has it, else in the shipped directory; a user profile
with a shipped name wins and records the shipped file in `Profile.shadows`.
`# extends: NAME` is resolved at load time (base first, the file's own
assignments override); `# extends:` naming the profile's own name means "the
same name further down the search path" (a user file refining the shipped one).
Cycles are reported with the chain. `load()` also accepts a path to a `.env` file.

Paths are handled as strings with os.path inside (normalized as `str(Path(...))` would be);
`Entry.path`, `Profile.path`, `user_dirs` and `shipped_dir` give Paths on access, so
listing profiles never imports pathlib.
"""

from __future__ import annotations

import builtins
import os
import stat
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fastverify import paths
from fastverify.profiles import envfile
from fastverify.profiles.model import Problem, Profile, ProfileError, Record, Source
from fastverify.profiles.validate import (
    Topology,
    is_profile_name,
    parse_requires,
    validate,
)

if TYPE_CHECKING:
    from pathlib import Path

SUFFIX = ".env"
MAX_EXTENDS_DEPTH = 16
_SHELL_META = frozenset(";&|$`<>(){}[]*?!~'\"\\")  # and whitespace (str.isspace, as re's \s)

TopologySource = Topology | Callable[[], Topology] | None


def _detect_topology() -> Topology:
    """nvidia-smi, once per process; imported here so plain loads never pay for it."""
    from fastverify.profiles.topology import detect_cached

    return detect_cached()


def name_problem(name: str, paths_allowed: bool = False) -> str | None:
    """Why `name` is not a valid profile name, or None.

    `paths_allowed`: the caller also loads `.env` files by path (offline CLI commands), so the
    hint may suggest one; the daemon loads profiles by name only and must not suggest it.
    """
    if name == "":
        return "empty profile name (use letters, digits, '.', '_', '-')"
    if len(name) > 64:
        return f"profile name is {len(name)} characters long (at most 64)"
    by_name = (
        "the daemon loads profiles by NAME from its profile directories; copy the file into "
        "one of them (see `fastverifyctl profile list`) and give its name"
    )
    if name.startswith("/"):
        hint = "give a NAME, or a path ending in .env" if paths_allowed else by_name
        return f"{name!r} is an absolute path, not a profile name ({hint})"
    if "/" in name or name in (".", ".."):
        hint = (
            "names cannot contain '/' or be '.'/'..'; a profile file's path ends in .env"
            if paths_allowed
            else by_name
        )
        return f"{name!r} is a path, not a profile name ({hint})"
    if any(c in _SHELL_META or c.isspace() for c in name):
        return (
            f"{name!r} contains shell metacharacters or spaces (use letters, digits, '.', '_', '-')"
        )
    if not is_profile_name(name):
        return (
            f"{name!r} is not a profile name "
            "(start with a letter or digit; then letters, digits, '.', '_', '-')"
        )
    if name.endswith(SUFFIX):
        if paths_allowed:
            return f"{name!r}: give the name without '.env' (or a path such as ./{name})"
        return f"{name!r}: give the name without '.env' ({name[: -len(SUFFIX)]})"
    return None


def _join(directory: str, name: str) -> str:
    """`str(Path(directory) / name)` for a normalized `directory` and a plain file name."""
    return name if directory == "." else os.path.join(directory, name)


def _opt(path: str | os.PathLike[str] | None) -> str | None:
    return None if path is None else paths.normalize(path)


def _as_path(text: str) -> Path:
    from pathlib import Path

    return Path(text)


class Entry(Record):
    """One profile file found in the search path (not yet loaded).

    `file`, `shadows_file` and `root_dir` are the strings; `path`, `shadows` and `root` the
    same as Paths. `root` is the directory links may not leave (None: a path given by hand).
    """

    _fields = ("name", "path", "source", "shadows", "root")
    name: str
    source: Source
    file: str
    shadows_file: str | None
    root_dir: str | None

    def __init__(
        self,
        name: str,
        path: str | os.PathLike[str],
        source: Source,
        shadows: str | os.PathLike[str] | None = None,
        root: str | os.PathLike[str] | None = None,
    ):
        self._set(
            name=name,
            file=paths.normalize(path),
            source=source,
            shadows_file=_opt(shadows),
            root_dir=_opt(root),
        )

    @property
    def path(self) -> Path:
        return _as_path(self.file)

    @property
    def shadows(self) -> Path | None:
        return None if self.shadows_file is None else _as_path(self.shadows_file)

    @property
    def root(self) -> Path | None:
        return None if self.root_dir is None else _as_path(self.root_dir)


def _present(path: str) -> bool:
    """Something other than a directory is at `path` (a link, a FIFO, ... included: loading
    refuses those with a reason instead of pretending the profile does not exist)."""
    try:
        return not stat.S_ISDIR(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def _real(path: str) -> str:
    """`str(Path(path).resolve())`."""
    return os.path.realpath(path)


def _closes_cycle(path: str, chain: list[str]) -> str | None:
    """The resolved `path` when it is already in the extends `chain`, else None."""
    try:
        real = _real(path)
    except OSError:
        return None
    return real if real in chain else None


class ProfileStore:
    """Profiles from `user_dirs` (searched in order) and then `shipped_dir`."""

    def __init__(
        self,
        user_dirs: Sequence[str | Path] | None = None,
        shipped_dir: str | Path | None = None,
        topology: TopologySource = None,
    ):
        self.user_dir_strs = (
            [paths.normalize(d) for d in user_dirs]
            if user_dirs is not None
            else paths.user_profile_dirs_str()
        )
        self.shipped_dir_str = (
            paths.normalize(shipped_dir) if shipped_dir else paths.shipped_profile_dir_str()
        )
        self.topology = topology if topology is not None else _detect_topology
        # resolved profiles by (real path, force), kept only while one listing runs: a base
        # that several profiles extend is parsed and validated once per `list_entries`
        self._memo: dict[tuple[Any, ...], Profile] | None = None

    @property
    def user_dirs(self) -> list[Path]:
        return [_as_path(d) for d in self.user_dir_strs]

    @property
    def shipped_dir(self) -> Path:
        return _as_path(self.shipped_dir_str)

    # --- lookup
    def search_path(self) -> list[tuple[Path, str]]:
        return [(_as_path(d), source) for d, source in self._search()]

    def _search(self) -> builtins.list[tuple[str, Source]]:
        return [(d, "user") for d in self.user_dir_strs] + [(self.shipped_dir_str, "shipped")]

    def _candidates(self, name: str) -> list[Entry]:
        found = []
        for d, source in self._search():
            p = _join(d, f"{name}{SUFFIX}")
            if _present(p):
                found.append(Entry(name, p, source, root=d))
        return found

    def find(self, name: str) -> Entry | None:
        """Where `name` would be loaded from (the first hit), or None."""
        cands = self._candidates(name)
        if not cands:
            return None
        first = cands[0]
        shipped = next((c.file for c in cands[1:] if c.source == "shipped"), None)
        return Entry(
            first.name,
            first.file,
            first.source,
            shipped if first.source == "user" else None,
            root=first.root_dir,
        )

    def entries(self) -> list[Entry]:
        """Every profile name in the search path, sorted, each with the file that wins."""
        names: set[str] = set()
        for d, _ in self._search():
            try:
                files = os.listdir(d)
            except (OSError, ValueError):
                continue
            for f in files:
                stem = f[: -len(SUFFIX)]
                if f.endswith(SUFFIX) and name_problem(stem) is None and _present(_join(d, f)):
                    names.add(stem)
        return [e for e in (self.find(n) for n in sorted(names)) if e is not None]

    def list(self) -> list[Profile]:
        """Every loadable profile (invalid ones are skipped; see `list_entries`)."""
        return [p for _e, p, _problems in self.list_entries() if p is not None]

    def list_entries(self) -> builtins.list[tuple[Entry, Profile | None, builtins.list[Problem]]]:
        """Every profile file with its loaded Profile (or None) and its problems."""
        out: builtins.list[tuple[Entry, Profile | None, builtins.list[Problem]]] = []
        self._memo = {}
        try:
            for e in self.entries():
                try:
                    p = self._load_entry(e, force=False)
                    out.append((e, p, list(p.warnings)))
                except ProfileError as exc:
                    out.append((e, None, exc.problems))
        finally:
            self._memo = None
        return out

    def extenders(self, name: str) -> builtins.list[str]:
        """Profiles whose `# extends:` chain reaches `name` (direct and indirect), sorted."""
        parents: dict[str, str] = {}
        for e in self.entries():
            meta = envfile.parse_file(e.file, e.root_dir).meta
            if "extends" in meta and meta["extends"][1] != e.name:
                parents[e.name] = meta["extends"][1]
        found: set[str] = set()
        frontier = {name}
        while frontier:
            frontier = {child for child, base in parents.items() if base in frontier} - found
            found |= frontier
        found.discard(name)
        return sorted(found)

    # --- loading
    @staticmethod
    def looks_like_path(arg: str) -> bool:
        return arg.endswith(SUFFIX) and ("/" in arg or _present(arg))

    def load(
        self, name_or_path: str | Path, force: bool = False, allow_path: bool = True
    ) -> Profile:
        """Load, resolve `extends`, validate; raises ProfileError listing every problem."""
        arg = str(name_or_path)
        if allow_path and (isinstance(name_or_path, os.PathLike) or self.looks_like_path(arg)):
            p = paths.normalize(arg)
            if not _present(p):
                raise ProfileError([Problem(arg, 0, "no such profile file (check the path)")])
            base = os.path.basename(p)
            name = base[: -len(SUFFIX)] if base.endswith(SUFFIX) else base
            source: Source = "file"
            for d, src in self._search():
                try:
                    if os.path.dirname(_real(p)) == _real(d):
                        source = src
                except OSError:
                    pass
            return self._load_entry(Entry(name, p, source), force=force)
        if allow_path and arg.endswith(SUFFIX) and self.find(arg[: -len(SUFFIX)]) is None:
            # `nosuch.env`: neither a file here nor the name of a profile
            raise ProfileError([Problem(arg, 0, (
                f"no such profile file: {arg} does not exist here, and no profile is named "
                f"{arg[: -len(SUFFIX)]!r} (check the path, or see `fastverifyctl profile list`)"
            ))])  # fmt: skip
        problem = name_problem(arg, paths_allowed=allow_path)
        if problem:
            raise ProfileError([Problem(arg, 0, problem)])
        entry = self.find(arg)
        if entry is None:
            where = ", ".join(d for d, _ in self._search())
            raise ProfileError(
                [Problem(arg, 0, f"no profile named {arg!r} in {where} ({self.hint(arg)})")]
            )
        return self._load_entry(entry, force=force)

    def hint(self, name: str) -> str:
        """`did you mean ring-ll?` for a name no profile answers to, else where to look."""
        import difflib

        close = difflib.get_close_matches(name, [e.name for e in self.entries()], n=3)
        return (
            f"did you mean {' or '.join(close)}?" if close else "see `fastverifyctl profile list`"
        )

    def _topology(self) -> Topology:
        t = self.topology
        return t() if callable(t) else t

    def _load_entry(self, entry: Entry, force: bool) -> Profile:
        chain: builtins.list[str] = []
        return self._resolve(entry, force, chain)

    def _resolve(self, entry: Entry, force: bool, chain: builtins.list[str]) -> Profile:
        path = entry.file
        real = _real(path) if os.path.exists(path) else path
        if real in chain:
            names = " -> ".join(os.path.basename(p) for p in [*chain, real])
            raise ProfileError([Problem(path, 0, f"extends cycle: {names} (break the cycle)")])
        if len(chain) >= MAX_EXTENDS_DEPTH:
            raise ProfileError(
                [Problem(path, 0, f"extends chain deeper than {MAX_EXTENDS_DEPTH} (flatten it)")]
            )
        chain = [*chain, real]
        memo = self._memo
        # the entry's strings (hashing an Entry itself would build Paths)
        key = (real, force, entry.name, entry.file, entry.source, entry.shadows_file)
        if memo is not None and key in memo:
            # resolved without error before (so without a cycle through it): the same
            # files give the same profile
            return memo[key]
        profile = self._resolve_file(entry, force, chain)
        if memo is not None:
            memo[key] = profile
        return profile

    def _resolve_file(self, entry: Entry, force: bool, chain: builtins.list[str]) -> Profile:
        path = entry.file
        parsed = envfile.parse_file(path, entry.root_dir)
        base: Profile | None = None
        base_problems: builtins.list[Problem] = []
        extends = parsed.meta.get("extends")
        if extends and is_profile_name(extends[1]):
            line, base_name = extends
            base_entry = self._find_base(base_name, entry)
            if base_entry is None:
                base_problems.append(
                    Problem(
                        str(path),
                        line,
                        f"extends: no profile named {base_name!r} "
                        "(see `fastverifyctl profile list`)",
                    )
                )
            elif (cycle := _closes_cycle(base_entry.file, chain)) is not None:
                names = " -> ".join(os.path.basename(p) for p in [*chain, cycle])
                raise ProfileError(
                    [Problem(str(path), line, f"extends cycle: {names} (break the cycle)")]
                )
            else:
                try:
                    base = self._resolve(base_entry, force, chain)
                except ProfileError as exc:
                    if any("extends cycle" in p.message for p in exc.problems):
                        raise
                    base_problems.append(
                        Problem(str(path), line, f"extends: base profile {base_name!r} is invalid")
                    )
                    base_problems.extend(exc.problems)
        env: dict[str, str] = dict(base.env) if base else {}
        sources: dict[str, str] = dict(base.env_sources) if base else {}
        own = parsed.env
        for k, v in own.items():
            env[k] = v
            sources[k] = entry.name
        lines = {a.key: a.line for a in parsed.assignments}
        ext_line = extends[0] if extends else 0
        full_lines = {k: lines.get(k, ext_line) for k in env}
        problems = validate(parsed, topology=self._topology, force=force, env=env, lines=full_lines)
        problems = base_problems + problems
        errors = [p for p in problems if p.severity == "error"]
        if errors:
            raise ProfileError(problems)
        requires = dict(base.requires) if base else {}
        if "requires" in parsed.meta:
            requires.update(parse_requires(parsed.meta["requires"][1]))
        tags: tuple[str, ...] = ()
        if "tags" in parsed.meta:
            tags = tuple(t.strip() for t in parsed.meta["tags"][1].split(",") if t.strip())
        warnings = list(base.warnings) if base else []
        warnings += [p for p in problems if p.severity == "warning"]
        return Profile(
            name=entry.name,
            path=path,
            source=entry.source,
            description=parsed.meta.get("description", (0, ""))[1],
            requires=requires,
            extends=extends[1] if extends else None,
            tags=tags,
            env=env,
            own_env=own,
            shadows=entry.shadows_file,
            warnings=tuple(warnings),
            env_sources=sources,
            lines=lines,
        )

    def _find_base(self, base_name: str, child: Entry) -> Entry | None:
        cands = self._candidates(base_name)
        if base_name != child.name:
            if cands:
                return cands[0]
            # a file loaded by path may extend a sibling file in its own directory
            parent = os.path.dirname(child.file) or "."
            sib = _join(parent, f"{base_name}{SUFFIX}")
            return Entry(base_name, sib, "file", root=parent) if _present(sib) else None
        # same name: the next one down the search path after the child's own file
        try:
            child_real = _real(child.file)
        except OSError:
            child_real = child.file
        paths_real = [_real(c.file) for c in cands]
        if child_real not in paths_real:
            # a file outside the search path refines the profile of the same name
            return cands[0] if cands else None
        idx = paths_real.index(child_real)
        return cands[idx + 1] if idx + 1 < len(cands) else None
