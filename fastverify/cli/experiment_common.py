"""What the measurement commands (`bench`, `sweep`, `preflight`; cli/bench_cmd.py,
sweep_cmd.py, preflight_cmd.py) share: number formatting, integer-list options and the
progress display (a rich bar on a terminal, plain lines on stderr otherwise). Imports stay
light: rich only when a bar is drawn."""

from __future__ import annotations

import sys
import time
from typing import Any

import click


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def int_list(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        raise click.BadParameter(
            f"{what}: expected comma-separated integers, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise click.BadParameter(f"{what}: expected positive integers, got {text!r}")
    return values


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
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.__enter__()
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
            total = f"/{self.total:g}" if self.total else ""
            line = f"{self.description}: {completed:.0f}{total} {self.unit} {info}"
            click.echo(" ".join(line.split()), err=True)

    def note(self, line: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.console.print(line, highlight=False, markup=False)
        else:
            click.echo(line, err=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
