"""Click options and parsers that several commands share (light: click only).

`stack`: several options as one decorator. `accept_length_option`: `sweep`'s and `tune`'s
--accept-length. `follow_options`: how `profile set`, `mode set`
and `restart` print the operation they follow. Kinds of option, each declared once
(`json_option`, `count_option`, `maybe_count`, `choice_option`, `file_option`, `dir_option`,
`flag`), and the options several commands share (`duration_option`, `switch_timeout_option`,
`trace_options`, `load_format_option`, `backend_option`, `seed_option`, `output_dir_option`,
`force_ll128_option`). `measurement_options`: how `sweep` and `tune`
measure one profile and mode (repeats, window, load shape, how long a load may take), so both
take the same flags with the same defaults (`rank_options`, preflight's and rehearse's rank
processes, lives in cli/rank_options.py). `env_pairs`: `--env KEY=VALUE`
values of the GPU experiments and `tune`. `batch_size_list`: a comma list of batch sizes (the
`spec` commands). `flag_options`: the options of a command declared once as a dataclass
(`render systemd|compose|kubernetes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def stack(*options: Decorator) -> Decorator:
    """One decorator of several click options, in the order given (so --help lists them)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def accept_length_option(help: str) -> Decorator:
    """--accept-length: the real EAGLE-3 accept length (>= 1) that `sweep` and `tune` judge a
    dummy-weights trial's break-even by; `help` says where they take it from without one."""
    return click.option("--accept-length", type=click.FloatRange(min=1.0), default=None, help=help)


# ----------------------------------------------------------------------------- kinds of option
# What a value may be and how --help shows it, declared once for every option of that kind.

SECONDS = click.FloatRange(min=0, min_open=True)  # a duration: more than 0 seconds


def json_option(help: str | None = None) -> Decorator:
    """--json (`as_json`): print the command's result as one JSON document."""
    return click.option("--json", "as_json", is_flag=True, help=help)


# How an operation the daemon runs (profile set, mode set, restart) is followed: its result
# printed alone, with the engine's log lines, or as JSON.
# The command hands the three on as they are (run_operation's quiet, verbose and as_json).
follow_options = stack(
    click.option("--quiet", "-q", is_flag=True, help="Print only the result."),
    click.option("--verbose", "-v", is_flag=True, help="Also print the engine's log lines."),
    json_option("Print the final result as JSON."),
)


def count_option(
    name: str, default: int, help: str | None = None, *, short: str = "", low: int = 1
) -> Decorator:
    """A whole number >= `low` with its default shown (`short`: its one-letter form)."""
    decls = (name, short) if short else (name,)
    kind = click.IntRange(low)
    return click.option(*decls, default=default, show_default=True, type=kind, help=help)


def maybe_count(name: str, help: str, low: int = 1) -> Decorator:
    """A whole number >= `low`, None unless given (its default is worked out later)."""
    return click.option(name, type=click.IntRange(min=low), default=None, help=help)


def choice_option(
    name: str, choices: tuple[str, ...], default: str, help: str, **shown: Any
) -> Decorator:
    """One of `choices`, `default` unless given; --help shows the default unless `shown`
    says otherwise (`hidden=True`: the option is not listed at all)."""
    shown = shown or {"show_default": True}
    return click.option(name, type=click.Choice(list(choices)), default=default, help=help, **shown)


def file_option(*decls: str, help: str, exists: bool = False) -> Decorator:
    """A file's path (not a directory; `exists`: it must be there), None unless given."""
    kind = click.Path(exists=exists, dir_okay=False)
    return click.option(*decls, default=None, type=kind, help=help)


def dir_option(*decls: str, help: str, multiple: bool = False) -> Decorator:
    """A directory's path, None unless given (`multiple`: repeatable, a tuple)."""
    kind = click.Path(file_okay=False)
    if multiple:
        return click.option(*decls, multiple=True, type=kind, help=help)
    return click.option(*decls, default=None, type=kind, help=help)


def flag(name: str, help: str) -> Decorator:
    """A flag, off unless given."""
    return click.option(name, is_flag=True, help=help)


# ----------------------------------------------------------------------------- shared options
# Options several commands take: the same flag, type and default everywhere, each command's
# own words in its help.


def duration_option(default: float, help: str) -> Decorator:
    """--duration/-d: seconds of one measurement window (`sweep`, `tune`, the `spec` commands)."""
    return click.option(
        "--duration", "-d", default=default, show_default=True, type=SECONDS, help=help
    )


def switch_timeout_option(help: str) -> Decorator:
    """--switch-timeout: how long one load may take (`sweep`, `tune`, `spec costs`)."""
    return click.option(
        "--switch-timeout", default=1800.0, show_default=True, type=float, help=help
    )


def trace_options(steps_help: str, none_help: str) -> Decorator:
    """--trace-steps and --no-traces: the profile window of a trial (`sweep`, `spec costs`)."""
    return stack(count_option("--trace-steps", 5, steps_help), flag("--no-traces", none_help))


def load_format_option(help: str) -> Decorator:
    """--load-format auto|dummy: real weights, or a timing trial on random ones."""
    return choice_option("--load-format", ("auto", "dummy"), "auto", help)


def backend_option(help: str, **shown: bool) -> Decorator:
    """--backend nccl|gloo: the rank processes' collectives (gloo: CPU ranks, for tests)."""
    return choice_option("--backend", ("nccl", "gloo"), "nccl", help, **shown)


# --seed: the random prompts' seed (`bench`, `sweep`).
seed_option = click.option("--seed", default=0, show_default=True, type=int)


def output_dir_option(help: str) -> Decorator:
    """--output/-o DIR (`output_dir`): where an experiment (`sweep`, `tune`) writes."""
    return dir_option("--output", "-o", "output_dir", help=help)


def force_ll128_option(help: str) -> Decorator:
    """--force-ll128: accept LL128 without NVLink (the commands that write a profile)."""
    return flag("--force-ll128", help)


def measurement_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--repeats, --duration, --concurrency, --input-len, --output-len, --switch-timeout."""
    return stack(
        count_option("--repeats", 3, "Measurements per profile and mode.", short="-r"),
        duration_option(20.0, "Seconds per measurement."),
        count_option("--concurrency", 1, "Concurrent requests during a measurement.", short="-c"),
        count_option("--input-len", 128, "Prompt tokens per request."),
        count_option("--output-len", 256, "Generated tokens per request."),
        switch_timeout_option("Seconds to wait for one profile switch (model load included)."),
    )(f)


def env_pairs(values: tuple[str, ...]) -> dict[str, str]:
    """`KEY=VALUE` strings -> a dict; a malformed one is a usage error naming it."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"--env expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def batch_size_list(_ctx: Any, _param: Any, value: str) -> list[int]:
    """Click callback: `1,2,4` -> the sorted distinct sizes, each >= 1 (else a usage error)."""
    try:
        sizes = sorted({int(v) for v in value.split(",") if v.strip()})
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers") from None
    if not sizes or sizes[0] < 1:
        raise click.BadParameter(f"{value!r}: batch sizes must be >= 1")
    return sizes


def flag_options(cls: type) -> Decorator:
    """The options of a command whose options are declared once, as the fields of `cls`
    (fastverify.flags: each field's flag, help, default and type); `from_flags` turns what
    the command line gave back into `cls`."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        import dataclasses

        from fastverify.flags import flag_fields, flag_name, flag_of

        for f in reversed(flag_fields(cls)):
            spec = flag_of(f)
            kw: dict[str, Any] = {"help": spec.help or None, "show_default": spec.show_default}
            if spec.switch and f.default is False:
                kw.update(is_flag=True, default=False)
            elif spec.switch:  # --no-X: on unless given
                kw.update(flag_value=False, default=True)
            elif spec.multiple:
                kw.update(multiple=True)
            else:  # a default made per instance: None here, made by from_flags
                kw["default"] = None if f.default is dataclasses.MISSING else f.default
                if spec.choices:
                    kw["type"] = click.Choice(list(spec.choices))
                elif spec.low is not None or spec.high is not None:
                    kw["type"] = click.IntRange(spec.low, spec.high)
                elif spec.file:
                    kw["type"] = click.Path(dir_okay=False)
                elif "int" in str(f.type):
                    kw["type"] = int
            command = click.option(flag_name(f), f.name, **kw)(command)
        return command

    return decorate
