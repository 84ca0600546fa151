"""`fastverifyctl profile import CSV --name NAME`: a tuner table in NCCL's own format (the CSV
NCCL's example tuner plugin reads from NCCL_TUNER_CONFIG_FILE, e.g. one made by its
`optimize_config.py`) becomes a tuner profile: NAME.tuner.csv in fastverify's format (nranks
before nnodes) and NAME.env extending a base profile. Every line is checked first
(fastverify.tuner.nccl_csv: the spellings NCCL would misread, the fields fastverify's table
lacks, overlaps, LL128 without NVLink); on any error nothing is written."""

from __future__ import annotations

from pathlib import Path

import click

from fastverify.cli.options import dir_option, flag, force_ll128_option, json_option
from fastverify.cli.output import EXIT_PROBLEMS, EXIT_USAGE, emit_json, fail, warn
from fastverify.cli.profile_cmds import _check_and_write, _dest
from fastverify.cli.profile_group import make_store, profile
from fastverify.durable import atomic_write_text


@profile.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--name", required=True, help="Name of the new tuner profile.")
@click.option("--extends", "base", default="nccl-default", show_default=True,
              help="The profile whose settings the table is applied over.")  # fmt: skip
@dir_option(
    "--output-dir", "out_dir", help="Where to write (default: the first user profile directory)."
)
@flag("--force", "Overwrite existing NAME.env / NAME.tuner.csv.")
@force_ll128_option("Accept LL128 rows without NVLink.")
@json_option("Print what was written as JSON.")
@click.pass_context
def import_cmd(
    ctx: click.Context,
    path: str,
    name: str,
    base: str,
    out_dir: str | None,
    force: bool,
    force_ll128: bool,
    as_json: bool,
) -> None:
    """Import NCCL's tuner CSV (its example plugin's format) as a tuner profile."""
    from fastverify.profiles.model import ProfileError
    from fastverify.profiles.tuner import profile_text
    from fastverify.tuner import nccl_csv
    from fastverify.tuner.table import render

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{path}: cannot read ({exc})", EXIT_USAGE)
    store = make_store(ctx)
    try:
        store.load(base, force=True)
    except ProfileError as exc:
        fail(f"--extends {base}: {exc}", EXIT_USAGE)
    check = nccl_csv.parse(text, path, lambda: store._topology().has_nvlink, force_ll128)
    for p in check.problems:
        warn(str(p))
    if not check.ok:
        fail(f"not imported: {len(check.errors)} problem(s) in {path}; nothing was written",
             EXIT_PROBLEMS)  # fmt: skip
    if not check.rows:
        fail(f"{path}: no rows to import", EXIT_PROBLEMS)
    dest = _dest(ctx, name, out_dir)
    table = dest.with_name(f"{name}.tuner.csv")
    for f in (dest, table):
        if f.exists() and not force:
            fail(f"{f} exists (pass --force to overwrite); nothing was written", EXIT_USAGE)
    before = table.read_bytes() if table.exists() else None
    notes = [f"imported from {path} (NCCL's example tuner plugin format) by fastverifyctl "
             "profile import"]  # fmt: skip
    atomic_write_text(table, render(check.rows, notes), mode=0o644)
    env_text = profile_text(
        table.name,
        f"NCCL tuner table imported from {Path(path).name} ({len(check.rows)} rows) over {base}",
        base,
    )
    try:
        written = _check_and_write(ctx, name, env_text, dest, force, force_ll128, echo=False)
    except SystemExit:  # the profile was refused: leave the table as it was
        if before is None:
            table.unlink(missing_ok=True)
        else:
            table.write_bytes(before)
        raise
    if as_json:
        emit_json({"profile": str(written), "table": str(table), "rows": len(check.rows),
                   "choices": [r.to_dict() for r in check.rows]})  # fmt: skip
    else:
        click.echo(f"wrote {table} ({len(check.rows)} rows) and {written}")
        click.echo(f"apply with: fastverifyctl profile set {name}")
