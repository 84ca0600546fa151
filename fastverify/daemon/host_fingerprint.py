"""fastverifyd's host fingerprint: computed once at start, in the background, from the facts
tune's inventory reads (`collect`: nvidia-smi, `nvidia-smi topo -m`, lspci and the IOMMU
state, the server interpreter's package versions; from the daemon itself its engine, SGLang
release, server argv and engine host), so the daemon's and a tune's fingerprint of one host
are one. On a host without GPUs or lspci each of those is a missing program, answered at
once. The sim's "host" is its simulated one: two sim daemons of one configuration have one
fingerprint, another `sim_sglang_version` another. Kept in the state dir (fastverify.host.here).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastverify.host import fingerprint, here

if TYPE_CHECKING:
    from fastverify.daemon.statestore import StateStore

log = logging.getLogger("fastverify.daemon")


def collect(
    status: Mapping[str, Any], argv: list[str], eagle3_argv: list[str], python: str
) -> dict[str, Any]:
    """{id, facts} of this host and the daemon's engine (`status`: its /v1/status; `argv` and
    `eagle3_argv`: the server argv it would start, masked as /v1/server/argv gives them)."""
    from fastverify.experiments.preflight.hostcheck import visible_gpus
    from fastverify.experiments.tune.inventory import package_versions, torch_nccl_version
    from fastverify.host import pcie
    from fastverify.profiles import topology as topo_mod

    path_env = os.environ.get("PATH")
    gpus = visible_gpus()
    versions = package_versions(python)
    if isinstance(versions, dict) and versions.get("torch") and gpus:
        versions["nccl (torch)"] = torch_nccl_version(python)
    topo = topo_mod.detect(path_env)
    caps = (status.get("engine") or {}).get("capabilities") or {}
    facts = fingerprint.build(
        gpu=fingerprint.gpu_identity(),
        gpus=gpus,
        topology=topo.to_dict() if topo else None,
        pcie=pcie.collect(pcie.HostInputs(path_env=path_env)).to_dict(),
        versions=versions if isinstance(versions, dict) else {},
        status=status,
        argv=argv,
        eagle3_argv=eagle3_argv,
        engine_host=caps.get("host"),
    )
    return fingerprint.record(facts)


def of_daemon(api: Any, python: str) -> dict[str, Any]:
    """The fingerprint of the daemon whose control facade is `api`: its status, its server
    argv (the EAGLE-3 one names the drafter), and its engine's host once probed."""
    stop = threading.Event()  # never set: the wait between two looks at the probe
    status = api.status()
    for _ in range(180):  # a real engine's host is probed in the background (seconds)
        caps = (status.get("engine") or {}).get("capabilities") or {}
        if "probing" not in str(caps.get("error") or "") or stop.wait(1.0):
            break
        status = api.status()

    def argv(mode: str | None) -> list[str]:
        try:
            return list(api.server_argv(None, mode, False).get("argv") or [])
        except Exception:  # no EAGLE-3 configured, a profile that cannot resolve: no fact
            return []

    return collect(status, argv(None), argv("eagle3"), python)


def start(api: Any, store: StateStore, python: str) -> threading.Thread:
    """Compute the daemon's fingerprint in the background and keep it in its state dir."""

    def work() -> None:
        try:
            rec = of_daemon(api, python)
        except Exception as exc:  # the daemon serves without one; what depends on it says so
            log.warning("cannot compute the host fingerprint: %s", exc)
            return
        store.save_json(here.FILE, rec)
        log.info("host fingerprint %s (%s)", rec["id"], fingerprint.host_label(rec["facts"]))

    # the last start's is gone first: until this start's is known there is none, never a stale one
    (Path(store.dir) / here.FILE).unlink(missing_ok=True)
    t = threading.Thread(target=work, name="host-fingerprint", daemon=True)
    t.start()
    return t
