"""`fastverifyctl logs parse FILE [--json] [--kind K ...]`: typed records from a server log.

Reads an SGLang / NCCL log offline (no daemon; `-` reads stdin) and prints one record per
recognised line (`fastverify.sglang.loglines`): `kind` is decode, prefill, ready,
load_progress, capture_progress, nccl_env, nccl_version, nccl_tuning or nccl_warn, plus
`line` (1-based) and the typed fields (decode: running_reqs, token_count, token_usage,
accept_len (null when absent), accept_rate, cuda_graph, gen_throughput, queue_reqs;
nccl_env: var, value). `--json` prints one JSON object per line (JSON Lines).

Exit codes: 0 (also when nothing was recognised: the summary on stderr says so),
1 the file exists but cannot be read, 2 usage (also: the file does not exist).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import click

from fastverify.cli.options import json_option
from fastverify.cli.output import EXIT_PROBLEMS, EXIT_USAGE

KINDS = (
    "decode",
    "prefill",
    "ready",
    "load_progress",
    "capture_progress",
    "nccl_env",
    "nccl_version",
    "nccl_tuning",
    "nccl_warn",
)


def _human(rec: dict[str, Any]) -> str:
    fields = " ".join(
        f"{k}={v}" for k, v in rec.items() if k not in ("kind", "line") and v is not None
    )
    return f"{rec['line']:>7}  {rec['kind']:<16} {fields}"


@click.command("parse")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@json_option("One JSON object per recognised line.")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(KINDS),
    help="Only these record kinds (repeatable).",
)
def parse(file: str, as_json: bool, kinds: tuple[str, ...]) -> None:
    """Parse a server log into typed records (decode/prefill lines, NCCL settings, ...)."""
    from fastverify.sglang.loglines import iter_records

    try:
        fh = (
            sys.stdin if file == "-" else open(file, encoding="utf-8", errors="replace")  # noqa: SIM115
        )
    except FileNotFoundError:  # a missing input file is a usage error, as for `trace analyze`
        click.echo(f"error: {file}: no such file (give the path of a server log, or -)", err=True)
        sys.exit(EXIT_USAGE)
    except OSError as exc:
        click.echo(f"error: cannot read {file}: {exc.strerror}", err=True)
        sys.exit(EXIT_PROBLEMS)
    counts: Counter[str] = Counter()
    out = sys.stdout
    try:
        for rec in iter_records(line.rstrip("\n") for line in fh):
            if kinds and rec["kind"] not in kinds:
                continue
            counts[rec["kind"]] += 1
            out.write((json.dumps(rec) if as_json else _human(rec)) + "\n")
    except BrokenPipeError:  # `| head`
        sys.stderr.close()
        return
    finally:
        if fh is not sys.stdin:
            fh.close()
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no recognised line"
    click.echo(f"{file}: {summary}", err=True)
