"""Click options and parsers that several commands share (light: click only).

`stack`: several options as one decorator. `accept_length_option`: `sweep`'s and `tune`'s
--accept-length. `follow_options`: how `profile set`, `mode set`
and `restart` print the operation they follow. `measurement_options`: how `sweep` and `tune`
measure one profile and mode (repeats, window, load shape, how long a load may take), so both
take the same flags with the same defaults. `rank_options`: how
`preflight` and `rehearse` start their rank processes (ranks, interpreter, environment, NCCL
call, timeout, logs). `env_pairs`: `--env KEY=VALUE` values of the GPU experiments and `tune`.
`batch_size_list`: a comma list of batch sizes (the `spec` commands). `flag_options`: the options
of a command declared once as a dataclass (`render systemd|compose|kubernetes`).
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


# How an operation the daemon runs (profile set, mode set, restart) is followed: its result
# printed alone, with the engine's log lines, or as JSON.
follow_options = stack(
    click.option("--quiet", "-q", is_flag=True, help="Print only the result."),
    click.option("--verbose", "-v", is_flag=True, help="Also print the engine's log lines."),
    click.option("--json", "as_json", is_flag=True, help="Print the final result as JSON."),
)


def accept_length_option(help: str) -> Decorator:
    """--accept-length: the real EAGLE-3 accept length (>= 1) that `sweep` and `tune` judge a
    dummy-weights trial's break-even by; `help` says where they take it from without one."""
    return click.option("--accept-length", type=click.FloatRange(min=1.0), default=None, help=help)


def measurement_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--repeats, --duration, --concurrency, --input-len, --output-len, --switch-timeout."""
    return stack(
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
        click.option(
            "--switch-timeout",
            default=1800.0,
            show_default=True,
            type=float,
            help="Seconds to wait for one profile switch (model load included).",
        ),
    )(f)


def rank_options(*, timeout_s: float, nproc_help: str, logs_help: str) -> Decorator:
    """--nproc, --share-gpu, --call, --timeout, --env, --config, --python, --logs: the rank
    processes of `preflight` and `rehearse` (`timeout_s`: the default per profile)."""
    return stack(
        click.option("--nproc", type=click.IntRange(1), default=None, help=nproc_help),
        click.option(
            "--share-gpu",
            is_flag=True,
            help="Allow more ranks than GPUs (rank r on GPU r mod GPUs): FlashInfer PCIe-IPC "
            "candidates run, NCCL ones are skipped (NCCL refuses two ranks on one GPU); the "
            "timings are same-GPU ranks, not a PCIe measurement.",
        ),
        click.option(
            "--call",
            type=click.Choice(["pynccl", "torch"]),
            default="pynccl",
            show_default=True,
            help="How ranks call NCCL: pynccl = ncclAllReduce on the current stream, as SGLang "
            "0.5.23 does; torch = torch.distributed.all_reduce (adds its own stream hops).",
        ),
        click.option(
            "--timeout",
            "timeout_s",
            default=timeout_s,
            show_default=True,
            type=float,
            help="Seconds per profile before its ranks are killed.",
        ),
        click.option(
            "--env",
            "extra_env",
            multiple=True,
            metavar="KEY=VALUE",
            help="Extra variable on top of every profile (e.g. NCCL_NVLS_ENABLE=0).",
        ),
        click.option(
            "--config",
            "config_path",
            default=None,
            type=click.Path(dir_okay=False),
            help="fastverifyd config whose [server] env / env_passthrough the ranks also get "
            "(default: the daemon's default config file, when it exists).",
        ),
        click.option(
            "--python", default="", help="Interpreter for the rank processes (needs torch)."
        ),
        click.option(
            "--logs", "logs_dir", default="", type=click.Path(file_okay=False), help=logs_help
        ),
    )


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
