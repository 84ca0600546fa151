"""`fastverifyctl profile ...`: the offline profile commands show, validate, diff, new,
import-sitecustomize and vars, registered on the group in `fastverify.cli.profile_group`
(which imports this module only when one of them runs; `list` lives in
`fastverify.cli.profile_list`, `set`/`current` in `fastverify.cli.profile_switch`).

Exit codes (fastverify.cli.output): 0 ok, 1 validation problems (or `diff`: profiles
differ), 2 usage errors (unknown profile, bad arguments).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from fastverify.cli.daemon_call import socket_option
from fastverify.cli.options import (
    Decorator,
    choice_option,
    dir_option,
    flag,
    force_ll128_option,
    json_option,
    maybe_count,
)
from fastverify.cli.output import (
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_USAGE,
    emit_file,
    emit_json,
    fail,
    table,
    warn,
)
from fastverify.cli.profile_group import make_store, profile, user_dirs
from fastverify.durable import atomic_write_text

TOPOLOGY_CHOICES = ("auto", "nvlink", "pcie", "unknown")


def _load_or_exit(store: Any, name: str, force: bool = False) -> Any:
    from fastverify.profiles.model import ProfileError

    try:
        return store.load(name, force=force)
    except ProfileError as exc:
        for p in exc.problems:
            warn(str(p))
        sys.exit(EXIT_USAGE if not_found(exc, name) else EXIT_PROBLEMS)


def not_found(exc: Any, target: str) -> bool:
    """The ProfileError says `target` names nothing (unknown name, missing file, not a name):
    a usage error (exit 2), unlike a profile that exists and has problems (exit 1)."""
    from fastverify.profiles.store import name_problem

    bad_name = name_problem(target, paths_allowed=True)
    return any(
        p.line == 0
        and (
            "no profile named" in p.message
            or "no such profile file" in p.message
            or (bad_name is not None and p.message == bad_name)
        )
        for p in exc.problems
    )


def _effective_option(name: str, text: str) -> Decorator:
    """An engine fact `show --effective` is worked out for: a whole number, None unless given
    (then the daemon's engine's)."""
    return maybe_count(name, f"With --effective: {text}")


@profile.command("show")
@click.argument("name")
@flag("--effective", "What NCCL will see: extends + NCCL config files.")
@json_option()
@dir_option("--home", help="Home directory whose .nccl.conf the server reads (default: $HOME).")
@click.option(
    "--etc-conf",
    type=click.Path(dir_okay=False),
    default="/etc/nccl.conf",
    show_default=True,
    help="System NCCL config file.",
)
@flag("--force", "Accept LL128 without NVLink.")
@_effective_option(
    "--tp-size",
    "the TP size SGLang's own NCCL rules are applied for (default: the daemon's engine's, else 8).",
)
@_effective_option(
    "--hidden-size",
    "the model's hidden size, to give the all-reduce backend's size bound in bytes "
    "(default: the daemon's engine's model; without one: in rows).",
)
@_effective_option(
    "--decode-max-bs",
    "the server's --cuda-graph-max-bs-decode (default: the daemon's server args, else "
    "SGLang's choice).",
)
@_effective_option(
    "--draft-tokens",
    "EAGLE-3 draft tokens per request (rows per verify; default: the daemon's server args).",
)
@socket_option
@click.pass_context
def show_cmd(
    ctx: click.Context,
    name: str,
    effective: bool,
    as_json: bool,
    home: str | None,
    etc_conf: str,
    force: bool,
    tp_size: int | None,
    hidden_size: int | None,
    decode_max_bs: int | None,
    draft_tokens: int | None,
) -> None:
    """Show a profile's variables (with --effective: each marked with its source)."""
    from fastverify.profiles import effective as eff

    store = make_store(ctx)
    prof = _load_or_exit(store, name, force=force)
    data = prof.to_dict()
    if effective:
        from fastverify.cli.engine_view import engine_view
        from fastverify.engines.allreduce_host import dispatch_for, server_args

        base = dict(os.environ)
        if home is not None:
            base["HOME"] = home
        view = eff.effective_view(prof, base_env=base, etc_conf=Path(etc_conf))
        data["effective"] = [v.to_dict() for v in view]
        data["conf_files"] = [
            {"label": c.label, "path": str(c.path), "exists": c.path.is_file()}
            for c in eff.conf_files(eff.effective_env(prof, base), Path(etc_conf))
        ]
        extra: list[str] = []
        if prof.requires.get("custom-all-reduce") == "off":
            extra.append("--disable-custom-all-reduce")
        if decode_max_bs is not None:
            extra += ["--cuda-graph-max-bs-decode", str(decode_max_bs)]
        if draft_tokens is not None:
            extra += ["--speculative-algorithm", "EAGLE3",
                      "--speculative-num-draft-tokens", str(draft_tokens)]  # fmt: skip
        ev = engine_view(ctx, tp_size=tp_size, hidden=hidden_size, extra_args=extra)
        if tp_size is None and not ev.from_daemon:
            ev.argv = with_tp_default(ev.argv)
        tp_size = server_args(ev.host, ev.argv).tp_size
        data["engine_env"] = eff.engine_env_view(
            eff.effective_env(prof, base),
            tp_size,
            cuda_graph=prof.requires.get("cuda-graph") != "off",
            custom_all_reduce=prof.requires.get("custom-all-reduce") != "off",
        )
        data["allreduce"] = {
            **dispatch_for(ev.host, eff.effective_env(prof, base), ev.argv).to_dict(),
            "view": ev.view,
        }
        from fastverify.profiles.tuner import tuner_view

        if (tuner := tuner_view(prof)) is not None:
            data["tuner"] = tuner
    if as_json:
        emit_json(data)
        return
    click.echo(f"{prof.name}  ({prof.source}: {prof.path})")
    if prof.shadows:
        click.echo(f"  overrides shipped {prof.shadows}")
    if prof.description:
        click.echo(f"  {prof.description}")
    if prof.extends:
        click.echo(f"  extends: {prof.extends}")
    if prof.requires:
        click.echo("  requires: " + ", ".join(f"{k}={v}" for k, v in prof.requires.items()))
    if prof.tags:
        click.echo("  tags: " + ", ".join(prof.tags))
    for w in prof.warnings:
        warn(str(w))
    if effective:
        rows = []
        for v in data["effective"]:
            where = v["source"]
            if v["path"] and v["source"] != "profile":
                where = f"{v['source']} ({v['path']}:{v['line']})"
            rows.append([v["name"], v["value"], where])
        if not rows:
            click.echo("  (no NCCL variables: NCCL decides everything)")
        else:
            table(["VARIABLE", "VALUE", "SOURCE"], rows, no_wrap=("VARIABLE",))
        if "tuner" in data:
            from fastverify.profiles.tuner import tuner_lines

            click.echo("\n".join(tuner_lines(data["tuner"])))
        for line in data["engine_env"]["lines"]:
            click.echo(f"  {line} (TP {tp_size})")
        ar = data["allreduce"]
        click.echo(f"  all-reduce backend (TP {tp_size}; {ar['view']}):")
        click.echo(f"    {ar['description']}")
        if ar.get("rows_rule"):
            click.echo(f"    bound: {ar['rows_rule']}")
        for note in ar.get("notes") or []:
            click.echo(f"    note: {note}")
        if ar.get("serving") == "pcie_ipc" and ar.get("max_bytes") is None:
            click.echo("    (sizes in bytes need the model's hidden size: --hidden-size, or ask "
                       "a running daemon, whose engine knows its model)")  # fmt: skip
        if ar["serving"] == "pcie_ipc":
            click.echo("  (the profile's NCCL variables apply only to the all-reduces above that)")
        read = [c for c in data["conf_files"] if c["exists"]]
        click.echo(
            "  NCCL config files read: "
            + (", ".join(f"{c['path']}" for c in read) if read else "none present")
        )
        return
    if not prof.env:
        click.echo("  (no variables: NCCL decides everything)")
        return
    rows = []
    for k, v in prof.env.items():
        setter = prof.env_sources.get(k, prof.name)
        rows.append([k, v, "profile" if setter == prof.name else f"extends:{setter}"])
    table(["VARIABLE", "VALUE", "SOURCE"], rows, no_wrap=("VARIABLE",))


@profile.command("validate")
@click.argument("targets", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Validate every profile in the search path.")
@flag("--force", "Accept LL128 without NVLink (a warning, not an error).")
@choice_option(
    "--topology",
    TOPOLOGY_CHOICES,
    "auto",
    "GPU links to validate against (auto: nvidia-smi when present, else unknown).",
)
@flag("--strict", "Treat warnings as problems (exit 1).")
@json_option()
@click.pass_context
def validate_cmd(
    ctx: click.Context,
    targets: tuple[str, ...],
    all_: bool,
    force: bool,
    topology: str,
    strict: bool,
    as_json: bool,
) -> None:
    """Validate profiles given by NAME or path to a .env file; every problem as path:line.

    Exit 0 all valid, 1 problems found (or warnings with --strict), 2 a NAME or file that
    does not exist.
    """
    from fastverify.profiles.model import ProfileError

    store = make_store(ctx, topology)
    names = list(targets)
    if all_:
        names += [e.name for e in store.entries()]
    if not names:
        fail("give at least one profile NAME or PATH (or --all)", EXIT_USAGE)
    results: list[dict[str, Any]] = []
    bad = missing = False
    for target in names:
        try:
            prof = store.load(target, force=force)
            problems = list(prof.warnings)
            path = str(prof.path)
            ok = not (strict and problems)
        except ProfileError as exc:
            problems = exc.problems
            path = problems[0].path if problems else target
            ok = False
            missing |= not_found(exc, target)
        bad |= not ok
        results.append(
            {
                "target": target,
                "path": path,
                "valid": ok,
                "problems": [p.to_dict() for p in problems],
            }
        )
        if not as_json:
            for p in problems:
                click.echo(str(p), err=True)
            if ok:
                click.echo(f"{path}: ok" + (f" ({len(problems)} warning(s))" if problems else ""))
    if as_json:
        emit_json(results)
    # 2: a target names nothing (usage); 1: problems found; 0: every target is valid
    sys.exit(EXIT_USAGE if missing else EXIT_PROBLEMS if bad else EXIT_OK)


@profile.command("diff")
@click.argument("a")
@click.argument("b")
@json_option()
@click.pass_context
def diff_cmd(ctx: click.Context, a: str, b: str, as_json: bool) -> None:
    """Compare two profiles after extends (exit 0 identical, 1 different, like diff(1))."""
    from fastverify.profiles.diff import diff_profiles, unified

    store = make_store(ctx)
    pa, pb = _load_or_exit(store, a, force=True), _load_or_exit(store, b, force=True)
    rows = diff_profiles(pa, pb)
    if as_json:
        emit_json({"a": pa.name, "b": pb.name, "identical": not rows, "changes": rows})
    elif rows:
        click.echo(unified(pa, pb, rows))
    else:
        click.echo(f"{pa.name} and {pb.name} are identical")
    sys.exit(EXIT_PROBLEMS if rows else EXIT_OK)


def _parse_sets(sets: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key:
            fail(f"--set {item!r}: expected KEY=VALUE (e.g. NCCL_ALGO=Ring)", EXIT_USAGE)
        out[key] = value
    return out


def _check_and_write(
    ctx: click.Context,
    name: str,
    text: str,
    dest: Path | None,
    force: bool,
    force_ll128: bool,
    echo: bool = True,
) -> Path | None:
    """Validate `text` as profile `name`; write it to dest (None: stdout unless `echo` is
    False, for --json). Exits on problems."""
    from fastverify.profiles import envfile
    from fastverify.profiles.store import name_problem
    from fastverify.profiles.validate import validate

    label = str(dest) if dest else f"<{name}>"
    parsed = envfile.parse_bytes(text.encode(), label)
    store = make_store(ctx)
    problems = validate(parsed, topology=store._topology, force=force_ll128)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        for p in problems:
            warn(str(p))
        fail(f"not written: {len(errors)} problem(s)", EXIT_PROBLEMS)
    for p in problems:
        warn(str(p))
    if dest is None:
        if echo:
            emit_file(text)
        return None
    np_ = name_problem(name)
    if np_:
        fail(np_, EXIT_USAGE)
    if dest.exists() and not force:
        fail(f"{dest} exists (pass --force to overwrite)", EXIT_USAGE)
    try:
        atomic_write_text(dest, text, mode=0o644, overwrite=force)
    except FileExistsError:
        fail(f"{dest} exists (pass --force to overwrite)", EXIT_USAGE)
    except OSError as exc:
        fail(f"{dest}: cannot write ({exc.strerror or exc}); use --dir DIR", EXIT_PROBLEMS)
    return dest


def _dest(ctx: click.Context, name: str, out_dir: str | None) -> Path:
    from fastverify.profiles.store import name_problem

    problem = name_problem(name)
    if problem:
        fail(problem, EXIT_USAGE)
    if out_dir:
        return Path(out_dir) / f"{name}.env"
    dirs = user_dirs(ctx)
    if not dirs:
        fail("no user profile directory configured (pass --dir DIR)", EXIT_USAGE)
    return dirs[0] / f"{name}.env"


def _warn_if_shadowing(ctx: click.Context, name: str, dest: Path) -> None:
    """A user profile named like a shipped one replaces it for every profile extending it."""
    store = make_store(ctx)
    shipped = store.shipped_dir / f"{name}.env"
    if not shipped.exists() or dest.parent.resolve() == store.shipped_dir.resolve():
        return
    users = store.extenders(name)
    also = (
        f"; {', '.join(users)} extend{'s' if len(users) == 1 else ''} it and now inherit "
        "from this file"
        if users
        else ""
    )
    warn(
        f"warning: {dest} shadows the shipped profile {name} ({shipped}){also} "
        f"(pick another name, or put `# extends: {name}` in the file to refine the shipped one)"
    )


@profile.command("new")
@click.argument("name")
@click.option("--from", "base", default=None, help="Start from this profile (resolved).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a variable.")
@click.option("--unset", "unsets", multiple=True, metavar="KEY", help="Drop a variable.")
@click.option("--description", default=None)
@click.option(
    "--require",
    "requires",
    multiple=True,
    metavar="KEY=VALUE",
    help="Add a requirement, e.g. cuda-graph=off.",
)
@dir_option("--dir", "out_dir", help="Write here instead of the first user profile directory.")
@flag("--force", "Overwrite an existing profile.")
@force_ll128_option("Accept LL128 without NVLink.")
@json_option()
@click.pass_context
def new_cmd(
    ctx: click.Context,
    name: str,
    base: str | None,
    sets: tuple[str, ...],
    unsets: tuple[str, ...],
    description: str | None,
    requires: tuple[str, ...],
    out_dir: str | None,
    force: bool,
    force_ll128: bool,
    as_json: bool,
) -> None:
    """Create a profile from BASE with --set/--unset changes; validated, written atomically."""
    from fastverify.profiles import envfile

    dest = _dest(ctx, name, out_dir)
    env: dict[str, str] = {}
    req: dict[str, str] = {}
    tags: tuple[str, ...] = ()
    if base:
        bp = _load_or_exit(make_store(ctx), base, force=True)
        env, req, tags = dict(bp.env), dict(bp.requires), bp.tags
    for k in unsets:
        if k not in env:
            fail(f"--unset {k}: {base or 'the new profile'} does not set it", EXIT_USAGE)
        env.pop(k)
    env.update(_parse_sets(sets))
    req.update(_parse_sets(requires))
    if description is None:
        changes = [f"{k}={v}" for k, v in _parse_sets(sets).items()] + [f"-{k}" for k in unsets]
        description = f"{base or 'empty'}" + (f" with {', '.join(changes)}" if changes else "")
    comments = [f"created by fastverifyctl profile new from {base}"] if base else []
    text = envfile.render(env, description=description, requires=req, tags=tags, comments=comments)
    written = _check_and_write(ctx, name, text, dest, force, force_ll128)
    _warn_if_shadowing(ctx, name, dest)
    if as_json:
        emit_json({"name": name, "path": str(written), "env": env, "requires": req})
    else:
        click.echo(f"wrote {written}")


@profile.command("import-sitecustomize")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--name", required=True, help="Name of the new profile.")
@click.option(
    "--output",
    "output",
    default=None,
    metavar="FILE|-",
    help="Write here ('-' for stdout); default: the first user profile directory.",
)
@click.option("--description", default=None)
@flag("--force", "Overwrite an existing file.")
@force_ll128_option("Accept LL128 without NVLink.")
@json_option("Print the translation report as JSON.")
@click.pass_context
def import_cmd(
    ctx: click.Context,
    path: str,
    name: str,
    output: str | None,
    description: str | None,
    force: bool,
    force_ll128: bool,
    as_json: bool,
) -> None:
    """Turn the NCCL variables a legacy sitecustomize.py sets into a profile (never runs it)."""
    from fastverify.profiles import envfile
    from fastverify.profiles.sitecustomize import SEMANTIC_NOTE, import_sitecustomize
    from fastverify.profiles.store import name_problem

    problem = name_problem(name)
    if problem:
        fail(problem, EXIT_USAGE)
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{path}: cannot read ({exc})", EXIT_USAGE)
    result = import_sitecustomize(source, path)
    for line, why in result.untranslated:
        warn(f"{path}:{line}: not translated: {why}")
    for line, why in result.skipped:
        warn(f"{path}:{line}: skipped: {why}")
    for line, note in result.notes:
        warn(f"{path}:{line}: note: {note}")
    if not result.variables:
        fail(f"{path}: no NCCL variables found to import", EXIT_PROBLEMS)
    cond = sorted(k for k, v in result.variables.items() if v.conditional)
    if cond:
        warn(SEMANTIC_NOTE)
    comments = [f"imported from {path} by fastverifyctl profile import-sitecustomize"]
    if cond:
        comments.append("the old file set these only when unset: " + ", ".join(cond))
    text = envfile.render(
        result.env,
        description=description or f"imported from {Path(path).name}",
        comments=comments,
    )
    if output == "-":
        dest: Path | None = None
    elif output:
        dest = Path(output)
    else:
        dest = _dest(ctx, name, None)
    written = _check_and_write(ctx, name, text, dest, force, force_ll128, echo=not as_json)
    if as_json:
        report = result.to_dict()
        report["written"] = str(written) if written else None
        report["profile"] = text
        emit_json(report)
    elif written:
        click.echo(f"wrote {written}")


@profile.command("vars")
@json_option()
def vars_cmd(as_json: bool) -> None:
    """Known NCCL variables: kind, allowed values, first NCCL version, status."""
    from fastverify.profiles import nccl_vars

    rows = sorted(nccl_vars.KNOWN.values(), key=lambda v: v.name)
    if as_json:
        emit_json(
            [
                {
                    "name": v.name,
                    "kind": v.kind,
                    "values": v.describe_values(),
                    "since": v.since,
                    "status": v.status or "current",
                    "replacement": v.replacement or None,
                }
                for v in rows
            ]
        )
        return
    table(
        ["VARIABLE", "VALUES", "SINCE", "STATUS"],
        [
            [
                v.name,
                v.describe_values(),
                v.since,
                (v.status + f" -> {v.replacement}").strip() if v.status else "",
            ]
            for v in rows
        ],
    )


def with_tp_default(argv: list[str]) -> list[str]:
    """Without a daemon and without --tp-size: TP 8 (the field's host), as before."""
    from fastverify.engines.allreduce_host import with_tp

    return with_tp(argv, 8)
