"""Tune stage 1, inventory: doctor, topology, GPUs, versions, what SGLang adds, and which
all-reduce backends are possible on this host.

Versions are read from the server's interpreter (the daemon config's `server.python`)
with `importlib.metadata`, in a subprocess, so nothing heavy is imported here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from fastverify.engines.sim import allreduce_sim
from fastverify.experiments.common.allreduce import flashinfer_pcie_ipc
from fastverify.experiments.tune.context import Ctx, StageResult
from fastverify.sglang.allreduce import (
    CUSTOM,
    CUSTOM_PCIE_TEXT,
    ENABLE_VAR,
    NCCL,
    PCIE_IPC,
    PCIE_IPC_WORLD_SIZES,
)
from fastverify.sglang.allreduce import possible_backends as possible_backends_of

PACKAGES = ("sglang", "flashinfer-python", "torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13")
_VERSIONS = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        out[name] = None\n"
    "print(json.dumps(out))\n"
)


def package_versions(python: str) -> dict[str, str | None] | str:
    """Installed versions in `python` (None: not installed), or why they are unknown."""
    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", _VERSIONS, *PACKAGES],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return json.loads(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return f"cannot ask {python or sys.executable}: {exc}"


_TORCH_NCCL = (
    "import json, torch\n"
    "v = torch.cuda.nccl.version() if torch.cuda.is_available() else None\n"
    "print(json.dumps('.'.join(map(str, v)) if isinstance(v, tuple) else v))\n"
)


def torch_nccl_version(python: str) -> str | None:
    """The NCCL torch was built with, asked in a subprocess (torch is never imported here)."""
    try:
        proc = subprocess.run([python or sys.executable, "-c", _TORCH_NCCL], capture_output=True,
                              text=True, timeout=90, check=False)  # fmt: skip
        return json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def possible_backends(
    topology: Any,
    gpus: int,
    tp_size: int,
    flashinfer: tuple[bool, str] | None = None,
    *,
    simulated: bool = False,
) -> list[dict[str, Any]]:
    """The TP all-reduce backends SGLang 0.5.23 could use here, with why
    (`fastverify.sglang.allreduce.possible_backends` decides; this says it for people).
    `flashinfer`: (importable, message) of FlashInfer's PCIe-IPC in the server's
    interpreter; None: not checked. `possible` None: cannot tell here. `simulated`: the
    engine is the sim, whose host is PCIe-only with P2P (`allreduce_sim.HOST_TEXT`), not
    this machine's GPUs."""
    if tp_size < 2:
        why = f"TP {tp_size}: no all-reduce"
        return [{"backend": b, "possible": False, "why": why} for b in (CUSTOM, PCIE_IPC, NCCL)]
    known = simulated or (topology is not None and bool(getattr(topology, "gpus", None)))
    has_nvlink = (False if simulated else bool(topology.all_nvlink)) if known else None
    fi_ok = None if flashinfer is None else flashinfer[0]
    can = possible_backends_of(tp_size, has_nvlink, p2p=None, flashinfer_pcie_ipc=fi_ok)
    unknown = (
        f"no GPU topology here ({gpus} GPU(s) visible): cannot tell"
        if gpus == 0
        else "topology unknown (nvidia-smi topo -m failed)"
    )
    if CUSTOM not in can:
        custom = (
            False,
            f"SGLang's custom all-reduce {CUSTOM_PCIE_TEXT.rstrip('.')} (TP {tp_size})",
        )
    elif not known:
        custom = (None, unknown)
    else:
        custom = (True, "full NVLink" if has_nvlink else "2 GPUs over PCIe with P2P")
    if simulated:
        custom = (custom[0], f"{custom[1]}; {allreduce_sim.HOST_TEXT}")
    if tp_size not in PCIE_IPC_WORLD_SIZES:
        ipc = (
            False,
            f"FlashInfer PCIe-IPC serves {'/'.join(map(str, PCIE_IPC_WORLD_SIZES))} ranks",
        )
    elif flashinfer is not None and not flashinfer[0]:
        ipc = (False, flashinfer[1])
    elif not known or flashinfer is None:
        ipc = (None, unknown if not known else "FlashInfer not checked")
    else:
        ipc = (
            True,
            f"{ENABLE_VAR}=1 (the pcie-ipc profile): decode/verify-sized reductions"
            + (", after SGLang's custom all-reduce (NVLink host)" if has_nvlink else ""),
        )
    return [
        {"backend": NCCL, "possible": True, "why": "always (pynccl inside CUDA graphs)"},
        {"backend": CUSTOM, "possible": custom[0], "why": custom[1]},
        {"backend": PCIE_IPC, "possible": ipc[0], "why": ipc[1]},
    ]


def _server_argv(ctx: Ctx) -> list[str]:
    try:
        return list(ctx.client.get("/v1/server/argv").get("argv") or [])
    except Exception:  # the daemon answers status; an old one may lack this: use the config
        return []


def _tp_size(argv: list[str]) -> int:
    for i, a in enumerate(argv):
        if a == "--tp-size" and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--tp-size="):
            return int(a.split("=", 1)[1])
    return 1


def run(ctx: Ctx) -> StageResult:
    import os

    from fastverify import config as config_mod
    from fastverify.experiments.preflight.run import torch_available, visible_gpus
    from fastverify.profiles import doctor as doc
    from fastverify.profiles.store import ProfileStore

    status = ctx.client.get("/v1/status")
    engine = status.get("engine") or {}
    argv = _server_argv(ctx)
    tp = _tp_size(argv)
    simulated = bool(engine.get("simulated"))
    try:
        server = config_mod.load(None).server
        python, extra_args = server.python, tuple(server.extra_args)
    except config_mod.ConfigError:
        python, extra_args = "", ()
    ctx.emit("inventory: doctor, topology, versions ...")
    report = doc.run(
        doc.DoctorInputs(
            env=dict(os.environ),
            tp_size=tp,
            sglang_args=extra_args,
            interpreters=[python] if python else [],
        ),
        ProfileStore(),
    )
    gpus = visible_gpus()
    versions = package_versions(python)
    if isinstance(versions, dict) and versions.get("torch") and gpus:
        versions["nccl (torch)"] = torch_nccl_version(python)
    topo = report.topology
    data = {
        "engine": {
            "name": engine.get("name"),
            "simulated": engine.get("simulated"),
            "tp_size": tp,
            "serving": status.get("profile"),
            "mode": status.get("mode"),
        },
        "gpus": gpus,
        "torch_here": torch_available(),
        "topology": topo.to_dict() if topo else None,
        "topology_summary": topo.summary() if topo else "unknown (no nvidia-smi)",
        "doctor": {
            "status": report.worst,
            "findings": [f.to_dict() for f in report.findings],
            "recommendations": [r.to_dict() for r in report.recommendations],
        },
        "versions": versions,
        "sglang_adds": (report.engine_env or {}).get("lines") or [],
        # the sim serves with its simulated FlashInfer, not the interpreter's
        "backends": possible_backends(
            topo,
            gpus,
            tp,
            allreduce_sim.flashinfer_offer(argv) if simulated else flashinfer_pcie_ipc(python),
            simulated=simulated,
        ),
    }
    ver = versions if isinstance(versions, dict) else {}
    nccl = ver.get("nccl (torch)") or ver.get("nvidia-nccl-cu13") or ver.get("nvidia-nccl-cu12")
    ctx.emit(
        f"inventory: engine {engine.get('name')} TP {tp}, {gpus} GPU(s), "
        f"topology {data['topology_summary']}, doctor {report.worst}, sglang "
        f"{ver.get('sglang') or '-'}, flashinfer {ver.get('flashinfer-python') or '-'}, "
        f"NCCL {nccl or '-'}; backends possible: "
        + ", ".join(b["backend"] for b in data["backends"] if b["possible"])
    )
    return StageResult("done", None, data)
