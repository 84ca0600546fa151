"""`rank_options`: how `preflight` and `rehearse` start their rank processes (ranks,
interpreter, environment, NCCL call, timeout, logs), handed to the command as one `Ranks`.

Apart from cli/options.py, which every command imports: a NamedTuple costs a few hundred µs
to create, paid here only by the two commands that start ranks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import click

from fastverify.cli.options import Decorator, choice_option, env_pairs, file_option, flag, stack


class Ranks(NamedTuple):
    """What `rank_options` read: how `preflight` and `rehearse` start their rank processes
    (a NamedTuple, not a dataclass: light to import)."""

    nproc: int | None
    share_gpu: bool
    call: str
    timeout_s: float
    extra_env: tuple[str, ...]
    config_path: str | None
    python: str
    logs_dir: str

    def env(self) -> dict[str, str]:
        """The --env pairs as a dict (a malformed one is a usage error)."""
        return env_pairs(self.extra_env)

    def fields(
        self, extra_env: dict[str, str], backend: str, share_gpu: bool = True
    ) -> dict[str, Any]:
        """The fields of an experiment's config these options give (`extra_env`: the
        variables the ranks get, `backend`: the command's --backend; `share_gpu`: False for
        a config without that field, rehearse's grid)."""
        given = ["nproc", "call", "timeout_s", "python", "logs_dir"]
        given += ["share_gpu"] if share_gpu else []
        return {**{n: getattr(self, n) for n in given}, "backend": backend, "extra_env": extra_env}


def rank_options(*, timeout_s: float, nproc_help: str, logs_help: str) -> Decorator:
    """--nproc, --share-gpu, --call, --timeout, --env, --config, --python, --logs: the rank
    processes of `preflight` and `rehearse` (`timeout_s`: the default per profile), given to
    the command as one `ranks` (`Ranks`)."""
    options = stack(
        click.option("--nproc", type=click.IntRange(1), default=None, help=nproc_help),
        flag(
            "--share-gpu",
            "Allow more ranks than GPUs (rank r on GPU r mod GPUs): FlashInfer PCIe-IPC "
            "candidates run, NCCL ones are skipped (NCCL refuses two ranks on one GPU); the "
            "timings are same-GPU ranks, not a PCIe measurement.",
        ),
        choice_option(
            "--call",
            ("pynccl", "torch"),
            "pynccl",
            "How ranks call NCCL: pynccl = ncclAllReduce on the current stream, as SGLang "
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
        file_option(
            "--config",
            "config_path",
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

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def with_ranks(*args: Any, **kwargs: Any) -> Any:
            ranks = Ranks(**{name: kwargs.pop(name) for name in Ranks._fields})
            return command(*args, ranks=ranks, **kwargs)

        return options(with_ranks)

    return decorate
