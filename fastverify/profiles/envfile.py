"""Strict parser for profile env files: the subset that systemd `EnvironmentFile=`
and docker compose `env_file:` read identically.

Accepted, per line:
- an empty line;
- a comment: `#` in column 0 (metadata lives in the leading comment block as
  `# key: value`, keys `description`, `requires`, `extends`, `tags`);
- an assignment `NAME=value`: NAME matches `[A-Za-z_][A-Za-z0-9_]*`, value is
  non-empty printable ASCII without quotes, `$`, backslashes, backticks,
  whitespace or `#`.

Everything else is refused with `path:line: what is wrong (what would be right)`:
NUL bytes, invalid UTF-8, CRLF, `export`, leading whitespace, spaces around `=`,
quotes, `$`, backslashes, inline comments, `;` comments (systemd only), lines
without `=`, empty values, duplicate keys. The parser never raises on any input;
every problem carries a line number in 1..number-of-lines (0 only for an empty path).
"""

from __future__ import annotations

import os
import re
import stat
from typing import TYPE_CHECKING

from fastverify.profiles import env_policy
from fastverify.profiles.model import Problem, Record

if TYPE_CHECKING:
    from typing import TypeAlias

    StrPath: TypeAlias = str | os.PathLike[str]  # a path as text or a Path (no pathlib here)

ASCII_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
ASCII_DIGITS = frozenset("0123456789")
_NAME_FIRST = ASCII_LETTERS | {"_"}
_NAME_REST = _NAME_FIRST | ASCII_DIGITS


def is_word(text: str, first: frozenset[str], rest: frozenset[str], longest: int = 0) -> bool:
    """`text` is a character of `first` and then characters of `rest`, at most `longest` in
    all (0: any number): the regex `[first][rest]*` as `fullmatch` reads it, without compiling
    one (each pattern costs `profile list`'s start-up ~0.1 ms to compile)."""
    if not text or (longest and len(text) > longest):
        return False
    return text[0] in first and rest.issuperset(text)


def is_name(text: str) -> bool:
    """A variable name: `[A-Za-z_][A-Za-z0-9_]*`."""
    return is_word(text, _NAME_FIRST, _NAME_REST)


META_KEYS = ("description", "requires", "extends", "tags")
_META_RE = re.compile(r"#\s*([A-Za-z][A-Za-z0-9_-]*)\s*:\s?(.*)")
_VALUE_FORBIDDEN = {
    '"': "a double quote",
    "'": "a single quote",
    "$": "'$' (variable expansion differs between systemd and compose)",
    "\\": "a backslash (escapes differ between systemd and compose)",
    "`": "a backtick (a shell-ism neither reader executes)",
}


class Assignment(Record):
    """`key=value` on `line`."""

    _fields = ("line", "key", "value")
    line: int
    key: str
    value: str

    def __init__(self, line: int, key: str, value: str):
        self._set(line=line, key=key, value=value)


class ParsedFile:
    """The result of `parse_bytes`: assignments in file order, metadata, problems."""

    _fields = ("path", "assignments", "meta", "problems", "line_count")

    def __init__(
        self,
        path: str,
        assignments: list[Assignment] | None = None,
        meta: dict[str, tuple[int, str]] | None = None,
        problems: list[Problem] | None = None,
        line_count: int = 0,
    ):
        self.path = path
        self.assignments: list[Assignment] = [] if assignments is None else assignments
        self.meta: dict[str, tuple[int, str]] = {} if meta is None else meta  # key -> (line, raw)
        self.problems: list[Problem] = [] if problems is None else problems
        self.line_count = line_count

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, like a non-frozen dataclass

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"ParsedFile({inner})"

    @property
    def env(self) -> dict[str, str]:
        return {a.key: a.value for a in self.assignments}

    def error(self, line: int, message: str) -> None:
        self.problems.append(Problem(self.path, line, message, "error"))

    def warning(self, line: int, message: str) -> None:
        self.problems.append(Problem(self.path, line, message, "warning"))


def _split_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # trailing newline ends the last line; it does not start another
    return lines


def parse_bytes(data: bytes, path: str = "<profile>") -> ParsedFile:
    """Parse env-file bytes; never raises. Problems are in `result.problems`."""
    out = ParsedFile(path)
    lines = _split_lines(data)
    out.line_count = len(lines)
    seen: dict[str, int] = {}
    in_header = True
    for number, raw in enumerate(lines, start=1):
        if b"\x00" in raw:
            out.error(number, "NUL byte in line (env files are text; remove it)")
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.error(
                number, f"invalid UTF-8 at byte {exc.start} of the line (save the file as UTF-8)"
            )
            continue
        if number == 1 and text.startswith("\ufeff"):
            out.error(number, "UTF-8 byte-order mark at the start (save the file without a BOM)")
            text = text[1:]
        if text.endswith("\r"):
            out.error(
                number,
                "CRLF line ending (save with LF endings; readers differ on the trailing \\r)",
            )
            text = text[:-1]
        if text == "":
            continue
        if text.startswith("#"):
            _comment(out, number, text, in_header)
            continue
        in_header = False
        _assignment(out, number, text, seen)
    return out


def _comment(out: ParsedFile, number: int, text: str, in_header: bool) -> None:
    m = _META_RE.fullmatch(text)
    if not m:
        return
    key, value = m.group(1).lower(), m.group(2).strip()
    if key not in META_KEYS:
        import difflib  # only on this rare path: keeps start-up light

        if in_header and difflib.get_close_matches(key, META_KEYS, n=1, cutoff=0.7):
            out.warning(
                number,
                f"unknown metadata key {key!r} (known: {', '.join(META_KEYS)}); "
                "treated as a plain comment",
            )
        return
    if not in_header:
        out.warning(
            number,
            f"'# {key}:' after the first variable is ignored "
            "(move it to the leading comment block)",
        )
        return
    if key in out.meta:
        out.error(number, f"duplicate '# {key}:' (first on line {out.meta[key][0]}; keep one)")
        return
    if not value:
        out.error(number, f"empty '# {key}:' (give a value or remove the line)")
        return
    out.meta[key] = (number, value)


def _assignment(out: ParsedFile, number: int, text: str, seen: dict[str, int]) -> None:
    if text[0] in " \t":
        out.error(number, "leading whitespace (start the line with NAME=value or '#')")
        return
    if text.startswith(";"):
        out.error(number, "';' comment (systemd reads it as a comment, compose does not; use '#')")
        return
    if text.startswith("export ") or text.startswith("export\t"):
        out.error(number, "'export' prefix (write NAME=value; env files are not shell scripts)")
        return
    # Problems name the line and at most the offending token, never the rest of the line:
    # a file that is not a profile at all may hold secrets (a password hash, a token).
    if "=" not in text:
        out.error(number, "not an assignment: no '=' (write NAME=value, or '#' for a comment)")
        return
    key, value = text.split("=", 1)
    if key != key.rstrip() or (value and value[0] in " \t"):
        name = key.strip()
        shown = name if is_name(name) else "NAME"
        out.error(number, f"whitespace around '=' (write {shown}=VALUE with no spaces)")
        return
    if not is_name(key):
        out.error(number, f"invalid variable name {_clip(key, 40)!r} (use [A-Za-z_][A-Za-z0-9_]*)")
        return
    problem = value_problem(value)
    if problem:
        out.error(number, f"{key}: {problem}")
        return
    if key in seen:
        out.error(number, f"duplicate {key} (first set on line {seen[key]}; keep one)")
        return
    seen[key] = number
    out.assignments.append(Assignment(number, key, value))


def value_problem(value: str) -> str | None:
    """Why `value` is not in the portable subset, or None when it is."""
    if value == "":
        return "empty value (remove the line to leave the variable unset)"
    for ch in value:
        if ch in _VALUE_FORBIDDEN:
            return f"value contains {_VALUE_FORBIDDEN[ch]} (write the value bare: no quoting)"
        if ch == "#":
            return (
                "'#' in value (inline comments differ between readers; "
                "put comments on their own line)"
            )
        if ch in " \t":
            return "whitespace in value (the readers trim and split differently; remove it)"
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return f"control character {ch!r} in value (remove it)"
    return env_policy.value_problem(value)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


MAX_FILE_BYTES = 1 << 20  # a profile is a few hundred bytes; never read a huge file whole


class UnsafeFile(OSError):
    """A profile file that must not be read (a link leaving its directory, not a regular file)."""


def _inside(real: str, root: StrPath) -> bool:
    root_real = os.path.realpath(root)
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def read_checked(path: StrPath, root: StrPath | None = None) -> bytes:
    """The bytes of the regular file `path` (at most MAX_FILE_BYTES + 1).

    With `root` (the profile directory the file was found in), a symbolic link is followed
    only when its target resolves inside `root`: a link in a root daemon's profile directory
    must never make it read (and quote) a file the link's author could not. FIFOs, devices,
    sockets and directories are refused without being opened for reading (a FIFO would block).
    Raises UnsafeFile for a refused file, OSError when it cannot be read.
    """
    target = str(path)
    if root is not None and os.path.islink(path):
        target = os.path.realpath(path)
        if not _inside(target, root):
            raise UnsafeFile(
                f"is a symbolic link to a file outside {root} (refused: profiles are read "
                "only from inside their directory; copy the file in instead of linking it)"
            )
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if root is not None:
        flags |= getattr(os, "O_NOFOLLOW", 0)  # the target checked above, not a swapped link
    fd = os.open(target, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile("is not a regular file (a profile is a plain text file)")
        if problem := env_policy.owner_problem(target, st):
            raise UnsafeFile(f"refused: {problem}")
        chunks = []
        left = MAX_FILE_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 65536))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def parse_file(path: StrPath, root: StrPath | None = None) -> ParsedFile:
    """Read and parse `path`; an unreadable, refused or oversized file gives one problem at
    line 0 that never quotes the file (see `read_checked` for what `root` refuses)."""
    try:
        data = read_checked(path, root)
    except UnsafeFile as exc:
        out = ParsedFile(str(path))
        out.error(0, str(exc))
        return out
    except OSError as exc:
        out = ParsedFile(str(path))
        out.error(0, f"cannot read file: {exc.strerror or exc}")
        return out
    if len(data) > MAX_FILE_BYTES:
        out = ParsedFile(str(path))
        out.error(0, f"file is larger than {MAX_FILE_BYTES} bytes (a profile is a short text file)")
        return out
    return parse_bytes(data, str(path))


def render(
    env: dict[str, str],
    *,
    description: str = "",
    requires: dict[str, str] | None = None,
    extends: str | None = None,
    tags: tuple[str, ...] | list[str] = (),
    comments: list[str] | None = None,
) -> str:
    """Write a profile in the accepted format (metadata first, then one line per variable)."""
    lines: list[str] = []
    if description:
        lines.append(f"# description: {' '.join(description.split())}")
    if extends:
        lines.append(f"# extends: {extends}")
    if requires:
        lines.append("# requires: " + ", ".join(f"{k}={v}" for k, v in requires.items()))
    if tags:
        lines.append("# tags: " + ", ".join(tags))
    for c in comments or []:
        for part in c.splitlines() or [""]:
            lines.append(f"# {part}".rstrip())
    lines.extend(f"{k}={v}" for k, v in env.items())
    return "\n".join(lines) + "\n"
