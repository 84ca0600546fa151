"""Shared output helpers for `fastverifyctl` commands: JSON, tables, exit codes.

Every command that prints data offers `--json`; these helpers keep the two forms
consistent and keep heavy imports off the start-up path:

- `emit_json(obj)`: one JSON document on stdout (sorted keys off, 2-space indent,
  non-ASCII kept), paths and other objects converted with `str`.
- `emit_file(text)`: a file's text on stdout (`render ... -o -`, a profile to `-`), as it is.
- `table(columns, rows, title=None)`: a rich table printed to stdout; rich is
  imported only inside this function. Cells, like everything printed, pass through
  `fastverify.cli.term.safe`: no control sequence from a cell reaches the terminal.
- `fail(message, code=EXIT_PROBLEMS)`: print `message` to stderr and exit with `code`.
- `fail_with_reason(label, message, code, reason, as_json)`: the same as `label: message`,
  with --json first the error document `{"error": message, "reason": reason}` on stdout.
- Exit codes, each with one meaning, defined here only (docs/reference/api.md lists them):
  `EXIT_OK` 0, `EXIT_PROBLEMS` 1 (validation problems, a failed or rolled-back operation,
  a failed check), `EXIT_USAGE` 2 (bad arguments, unknown or invalid profile; click's own
  code for usage errors), `EXIT_UNAVAILABLE` 3 (the daemon is not reachable, stopped,
  overloaded or reset the connection), `EXIT_BUSY` 4 (another operation in flight, or an
  experiment's lease),
  `EXIT_LOST` 5 (the connection broke after the daemon accepted an operation),
  `EXIT_MISSING_DEPENDENCY` 6 (an optional dependency is not installed), `EXIT_CANCELLED` 7
  (the operation was cancelled), `EXIT_REFUSED` 8 (the daemon refused this client: a
  missing or wrong token, a rejected client certificate, its auth backoff, the socket's
  permissions), `EXIT_INTERRUPTED` 130 (Ctrl-C, as shells report SIGINT).
- `daemon_exit(exc, code)`: EXIT_REFUSED for a client error that is a refusal of this
  client (`refused`), else `code`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

import click

# Exit codes every command shares (scripts rely on them; docs/reference/api.md lists them).
EXIT_OK = 0
EXIT_PROBLEMS = 1  # validation problems, a failed or rolled-back switch, a failed check
EXIT_USAGE = 2  # bad arguments, unknown or invalid profile
EXIT_UNAVAILABLE = 3  # the daemon is not reachable
EXIT_BUSY = 4  # another operation is in flight (HTTP 409)
EXIT_LOST = 5  # the connection to the daemon broke before a result arrived
EXIT_MISSING_DEPENDENCY = 6  # an optional dependency (torch, sglang) is not installed
EXIT_CANCELLED = 7  # the operation was cancelled (`fastverifyctl cancel`)
EXIT_REFUSED = 8  # the daemon refused this client (token, client certificate, permissions)
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


def daemon_exit(exc: BaseException, code: int) -> int:
    """The exit code for a daemon error: EXIT_REFUSED when it refused this client
    (fastverify.client's `refused`: DaemonRefused, ApiError 401/429), else `code`."""
    return EXIT_REFUSED if getattr(exc, "refused", False) else code


def _default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return str(obj)


def to_json(obj: Any) -> str:
    """Serialise `obj` the way every command prints JSON (Paths and sets become str/list)."""
    import json  # only commands that print JSON pay for it

    from fastverify.cli.term import json_safe

    return json_safe(json.dumps(obj, indent=2, ensure_ascii=False, default=_default))


def emit_json(obj: Any) -> None:
    """Print `obj` as one JSON document on stdout, as it is (no hint rewriting: cli/hints.py)."""
    from fastverify.cli.hints import unhinted

    click.echo(to_json(obj), file=unhinted(sys.stdout))


def emit_file(text: str) -> None:
    """Print a file's text on stdout as it is: a rendered unit or a profile is used on another
    host or by another daemon, so its `fastverifyctl ...` lines must not carry this
    command's --socket (cli/hints.py rewrites hints only)."""
    from fastverify.cli.hints import unhinted

    click.echo(text, nl=False, file=unhinted(sys.stdout))


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    title: str | None = None,
    *,
    no_wrap: Sequence[str] = (),
) -> None:
    """Print a rich table (rich imported lazily); cells are converted with `str`.

    Falls back to plain tab-separated text when stdout is not a terminal so that
    pipes (`| grep`, `| awk`) see one line per row.
    """
    from fastverify.cli.term import raw, safe

    rows = [[("" if c is None else str(c)) for c in row] for row in rows]
    if not sys.stdout.isatty():
        lines = [f"# {safe(title, newlines=False)}"] if title else []
        lines.append("\t".join(columns))
        for row in rows:  # one line per row, whatever a cell holds
            lines.append("\t".join(safe(c, newlines=False).replace("\t", "\\t") for c in row))
        click.echo("\n".join(lines))  # one write: each echo costs its own stream checks
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    rows = [[safe(c) for c in row] for row in rows]
    title = safe(title, newlines=False) if title else title

    t = Table(title=title, show_edge=False, header_style="bold")
    for col in columns:
        t.add_column(col, no_wrap=col in no_wrap, overflow="fold")
    for row in rows:
        t.add_row(*(Text(c) for c in row))  # Text: no markup parsing
    Console(file=raw(sys.stdout), highlight=False).print(t)


def warn(message: str) -> None:
    """Print a warning line to stderr."""
    click.echo(message, err=True)


def fail(message: str, code: int = EXIT_PROBLEMS) -> NoReturn:
    """Print `message` to stderr and exit with `code` (see the EXIT_* constants)."""
    click.echo(message, err=True)
    sys.exit(code)


def fail_with_reason(label: str, message: str, code: int, reason: str, as_json: bool) -> NoReturn:
    """`label: message` on stderr and exit `code`; with --json first the error document
    `{"error": message, "reason": reason}` on stdout (scripts branch on `reason`)."""
    if as_json:
        emit_json({"error": message, "reason": reason})
    fail(f"{label}: {message}", code)
