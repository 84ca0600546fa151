"""What the measurement commands (`bench`, `sweep`, `tune`, `preflight`, `rehearse`;
cli/bench_cmd.py, sweep_cmd.py, tune_cmd.py, preflight_cmd.py, rehearse_cmd.py) share: number
formatting, integer-list options, the accepted-drafts histogram as text, the progress display
(a rich bar on a terminal, plain lines on stderr otherwise; `tune`'s own display draws with
`stderr_bar` too), the exit codes of a rank-process run (`rank_run`; a run through the daemon:
cli/daemon_call.py's `daemon_run`), and the delivery of a report (`--output` file,
`--json` or a table; both options declared here).
Imports stay light: rich only when a bar is drawn, the experiments only when a run starts."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from fastverify.cli import output as out
from fastverify.durable import atomic_write_text
from fastverify.experiments.common.stats import cell

# What `deliver` reads: the report file and the JSON switch of the rank experiments
# (preflight, rehearse), declared once.
report_file_option = click.option(
    "--output",
    "-o",
    "output",
    default=None,
    type=click.Path(dir_okay=False),
    help="Also write the JSON report to this file.",
)
report_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the report as JSON."
)


fmt = cell  # a table cell: `-` for None, yes/no for a flag, a float to `digits` places


def int_list(text: str, what: str = "") -> tuple[int, ...]:
    """`1,2, 4` -> (1, 2, 4); anything else a usage error (prefixed with `what`, the option,
    where click does not name it)."""
    prefix = f"{what}: " if what else ""
    try:
        values = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        raise click.BadParameter(
            f"{prefix}expected comma-separated integers, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise click.BadParameter(f"{prefix}expected positive integers, got {text!r}")
    return values


def int_list_option(
    _ctx: click.Context, _param: click.Parameter, text: str | None
) -> tuple[int, ...]:
    """Click callback: `int_list` of the option's value, () when the option is not given."""
    return () if text is None else int_list(text)


@contextmanager
def rank_run(
    cmd: str,
    *,
    usage: tuple[type[BaseException], ...] = (),
    problems: tuple[type[BaseException], ...] = (),
    resume: bool = False,
) -> Iterator[None]:
    """A run of rank processes, its failures as the command's exit codes: Ctrl-C 130 (the
    ranks are stopped by then; `resume`: running again resumes), torch missing 6, the errors
    in `usage` 2 and in `problems` 1, each printed as `CMD: what`."""
    from fastverify.experiments.preflight.hostcheck import TorchMissing

    try:
        yield
    except KeyboardInterrupt:
        again = "; run again to resume" if resume else ""
        out.fail(
            f"{cmd}: interrupted (every rank started was stopped{again})", out.EXIT_INTERRUPTED
        )
    except TorchMissing as exc:
        out.fail(str(exc), out.EXIT_MISSING_DEPENDENCY)
    except usage as exc:
        out.fail(f"{cmd}: {exc}", out.EXIT_USAGE)
    except problems as exc:
        out.fail(f"{cmd}: {exc}", out.EXIT_PROBLEMS)


def stderr_bar(*columns: Any) -> Any:
    """A rich progress display of `columns` on stderr, entered, that leaves nothing behind
    when it exits (rich is imported only here and by the caller's columns)."""
    from rich.console import Console
    from rich.progress import Progress as Bar

    from fastverify.cli.term import raw

    bar = Bar(*columns, console=Console(file=raw(sys.stderr)), transient=True)
    bar.__enter__()
    return bar


def bar_note(bar: Any, line: str) -> None:
    """A line printed above the progress display `bar`, or on stderr without one."""
    from fastverify.cli.term import safe

    if bar is not None:
        bar.console.print(safe(line), highlight=False, markup=False)
    else:
        click.echo(line, err=True)


def host_fingerprint(config_path: str | None) -> Any:
    """This host's fingerprint, to stamp on a result or compare one with: the daemon's on the
    command's socket, else the one its configuration's state dir holds (None: unknown)."""
    from pathlib import Path

    from fastverify import config as config_mod
    from fastverify.cli.daemon_call import client_for
    from fastverify.host import here

    try:
        daemon = client_for(click.get_current_context(), timeout=5).status().get("daemon") or {}
        if daemon.get("fingerprint"):
            return daemon["fingerprint"]
    except Exception:  # no daemon answers: the state dir of its configuration
        pass
    try:
        return here.load(config_mod.load(Path(config_path) if config_path else None).state_dir)
    except config_mod.ConfigError:
        return None


def deliver(
    report: dict[str, Any],
    output: str | None,
    as_json: bool,
    show: Callable[[dict[str, Any]], None],
) -> None:
    """An experiment's report: written to `output` as JSON when given, then printed as JSON
    (`as_json`) or by `show`."""
    if output:
        atomic_write_text(output, out.to_json(report) + "\n", mode=0o644)
    if as_json:
        out.emit_json(report)
    else:
        show(report)


def acceptance_text(record: dict[str, Any]) -> tuple[str, int, str] | None:
    """A result's summed accepted-drafts histogram as `0:40% 1:35% ...`, its verify passes,
    and the accept length at every step count it gives as `1:1.60  2:1.95` ('' without one);
    None without a histogram (a baseline server)."""
    hist = record.get("accept_histogram")
    if not hist:
        return None
    total = sum(hist) or 1
    dist = " ".join(f"{j}:{100 * n / total:.0f}%" for j, n in enumerate(hist))
    curve = "  ".join(f"{k}:{v:.2f}" for k, v in (record.get("accept_curve") or {}).items())
    return dist, total, curve


class Progress:
    """A rich progress bar on a terminal, plain lines on stderr otherwise (or nothing)."""

    def __init__(
        self,
        description: str,
        total: float | None,
        enabled: bool = True,
        unit: str = "",
        plain_lines: bool = True,
    ):
        self.description = description
        self.unit = unit
        self.total = total
        self.enabled = enabled
        self.plain_lines = plain_lines  # False: piped, the notes alone tell the progress
        self.tty = enabled and sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None
        self._last_line = 0.0

    def __enter__(self) -> Progress:
        if self.tty:
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

            info = TextColumn("{task.fields[info]}")
            self._bar = stderr_bar(
                TextColumn("{task.description}"), BarColumn(), info, TimeElapsedColumn()
            )
            self._task = self._bar.add_task(self.description, total=self.total, info="")
        return self

    def update(self, completed: float, info: str = "", total: float | None = None) -> None:
        if not self.enabled:
            return
        if total is not None:
            self.total = total
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, info=info, total=self.total)
            return
        if not self.plain_lines:
            return
        now = time.monotonic()
        if now - self._last_line >= 5.0:
            self._last_line = now
            of = f"/{self.total:g}" if self.total else ""
            line = f"{self.description}: {completed:.0f}{of} {self.unit} {info}"
            click.echo(" ".join(line.split()), err=True)

    def note(self, line: str) -> None:
        if self.enabled:
            bar_note(self._bar, line)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
