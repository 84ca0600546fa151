"""Click options and parsers that several commands share (light: click only).

`measurement_options`: how `sweep` and `tune` measure one profile and mode (repeats,
window, load shape), so both take the same flags with the same defaults. `env_pairs`:
`--env KEY=VALUE` values of the GPU experiments and `tune`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def measurement_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--repeats, --duration, --concurrency, --input-len, --output-len."""
    for option in reversed(
        (
            click.option(
                "--repeats",
                "-r",
                default=3,
                show_default=True,
                type=click.IntRange(1),
                help="Measurements per profile and mode.",
            ),
            click.option(
                "--duration",
                "-d",
                default=20.0,
                show_default=True,
                type=click.FloatRange(min=0, min_open=True),
                help="Seconds per measurement.",
            ),
            click.option(
                "--concurrency",
                "-c",
                default=1,
                show_default=True,
                type=click.IntRange(1),
                help="Concurrent requests during a measurement.",
            ),
            click.option(
                "--input-len",
                default=128,
                show_default=True,
                type=click.IntRange(1),
                help="Prompt tokens per request.",
            ),
            click.option(
                "--output-len",
                default=256,
                show_default=True,
                type=click.IntRange(1),
                help="Generated tokens per request.",
            ),
        )
    ):
        f = option(f)
    return f


def env_pairs(values: tuple[str, ...]) -> dict[str, str]:
    """`KEY=VALUE` strings -> a dict; a malformed one is a usage error naming it."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"--env expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out
