"""Whose engine a command describes: the daemon's (its `engine.capabilities` in /v1/status,
the one source of truth), or, with no daemon answering, this machine's, saying so.

`engine_view(ctx, ...)` -> `EngineView`: the host (`fastverify.engines.allreduce_host`),
the server argv the daemon would start now (or the config's), the daemon's status (None
without a daemon) and `view`, one line naming whose view it is. `doctor`, `profile show
--effective` and `tune`'s inventory use it, so all three describe the engine `status` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import click

from fastverify.engines.allreduce_host import AllreduceHost, host_from_caps, with_tp

DAEMON_TIMEOUT_S = 5.0


@dataclass
class EngineView:
    host: AllreduceHost
    argv: list[str]
    view: str
    status: dict[str, Any] | None = None

    @property
    def from_daemon(self) -> bool:
        return self.status is not None

    def to_dict(self) -> dict[str, Any]:
        return {"view": self.view, "from_daemon": self.from_daemon, "host": self.host.to_dict()}


def _daemon(ctx: click.Context) -> tuple[dict[str, Any] | None, list[str], str]:
    """(status, argv, why not) of the daemon on the command's socket."""
    from fastverify.cli.daemon_call import client_for

    try:
        client = client_for(ctx, timeout=DAEMON_TIMEOUT_S)
        st = client.status()
        argv = list(client.server_argv().get("argv") or [])
    except Exception as exc:  # unreachable, refused, an old daemon: this machine's view
        return None, [], str(exc).split(" (", 1)[0].split(";", 1)[0]
    return st, argv, ""


def _local(why: str) -> tuple[AllreduceHost, list[str]]:
    """This machine's view: the daemon config's server (when it loads) on these GPUs."""
    from fastverify.engines.sglang import server_args
    from fastverify.profiles.topology import detect_cached

    argv: list[str] = []
    try:
        from fastverify import config

        server = config.load(None).server
        argv = server_args(server, server.mode, {}, "new", server.model_path or "model",
                           server.draft_model_path or "draft")  # fmt: skip
    except Exception:  # doctor and profile show must answer with a broken config too
        argv = ["--model-path", "model", "--tp-size", "8"]
    from fastverify.engines.host_probe import gpu_memory_and_sm, model_hidden
    from fastverify.sglang.allreduce import ServerArgs

    topo = detect_cached()
    mem, sm = gpu_memory_and_sm()
    host = AllreduceHost(
        engine="none",
        view=f"this machine's view, not a daemon's (no daemon answers: {why})",
        host=topo.source,
        has_nvlink=topo.has_nvlink,
        p2p=None,
        flashinfer_pcie_ipc=None,
        flashinfer_why="FlashInfer not checked without a daemon",
        hidden=model_hidden(ServerArgs.from_argv(argv).model_path),
        gpu_mem_mib=mem,
        gpu_sm=sm,
    )
    return host, argv


def engine_view(
    ctx: click.Context,
    *,
    tp_size: int | None = None,
    hidden: int | None = None,
    extra_args: Sequence[str] = (),
) -> EngineView:
    """The engine to describe, with `tp_size`/`hidden`/`extra_args` applied on top."""
    st, argv, why = _daemon(ctx)
    caps = ((st or {}).get("engine") or {}).get("capabilities") or {}
    if st is not None and caps.get("host"):
        host = host_from_caps(caps)
        view = f"the daemon's engine: {host.view} ({host.host})"
    else:
        if st is not None:
            why = caps.get("error") or "this daemon reports no engine capabilities"
        host, argv = _local(why)
        view = host.view
    if hidden is not None:
        host = replace(host, hidden=hidden)
    argv = with_tp([*argv, *extra_args], tp_size)
    return EngineView(host=host, argv=argv, view=view, status=st)
