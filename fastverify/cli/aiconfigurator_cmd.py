"""`fastverifyctl aiconfigurator export PREFLIGHT.json`: this host's measured all-reduces
(a `fastverifyctl preflight` report) as an NVIDIA AIConfigurator custom system, written by
AIConfigurator's own venv (`--python`; scripts/aiconfigurator-venv.sh makes one), for
`aiconfigurator cli estimate --systems-paths OUT,default --system NAME`
(fastverify.experiments.aiconfigurator; docs/guides/host.md).

Exit 0 written (with --json, what was written), 2 bad input (the file and what is wrong),
1 the export failed in AIConfigurator's venv (its message).
"""

from __future__ import annotations

import click

from fastverify.cli.groups import SuggestingGroup
from fastverify.cli.options import json_option
from fastverify.cli.output import EXIT_PROBLEMS, EXIT_USAGE, emit_json, fail


@click.group("aiconfigurator", cls=SuggestingGroup)
def aiconfigurator() -> None:
    """NVIDIA AIConfigurator fed this host's measured all-reduces."""


@aiconfigurator.command("export")
@click.argument("preflight", type=click.Path(dir_okay=False))
@click.option("--name", required=True, help="The system's name (letters, digits and _).")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Where to write it (AIConfigurator's --systems-paths).")  # fmt: skip
@click.option("--python", required=True, help="AIConfigurator's venv python.")
@click.option("--base-system", default="h200_sxm", show_default=True,
              help="The SKU whose GPU this host has (its compute tables).")  # fmt: skip
@click.option("--profile", default="nccl-default", show_default=True,
              help="The preflight profile to export.")  # fmt: skip
@json_option("Print what was written as JSON.")
def export_cmd(preflight: str, name: str, out: str, python: str, base_system: str,
               profile: str, as_json: bool) -> None:  # fmt: skip
    """Write the preflight report as AIConfigurator system NAME under OUT."""
    import subprocess
    from pathlib import Path

    from fastverify.experiments.aiconfigurator.system import export

    try:
        written = export(Path(preflight), name, Path(out), python, base_system, profile)
    except ValueError as exc:
        fail(f"aiconfigurator export: {exc}", EXIT_USAGE)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        fail(f"aiconfigurator export: {exc}", EXIT_PROBLEMS)
    if as_json:
        emit_json(written)
        return
    tables = ", ".join(
        f"{table} ({t.get('fastverify_rows')} rows of this host)"
        for table, t in sorted((written.get("tables") or {}).items())
    )
    click.echo(f"wrote system {name} under {out}: {tables or 'no tables'}")
    click.echo(f"next: aiconfigurator cli estimate --systems-paths {out},default --system {name}")
