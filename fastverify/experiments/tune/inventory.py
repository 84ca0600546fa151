"""Tune stage 1, inventory: doctor, topology, GPUs, versions, what SGLang adds, and which
all-reduce backends are possible for the daemon's engine: asked of the daemon
(`engine.capabilities` in /v1/status, fastverify.engines.allreduce_host), never worked out
here, so the sim's simulated host and a real server's host are reported the same way.

Versions are read from the server's interpreter (the daemon config's `server.python`)
with `importlib.metadata`, in a subprocess, so nothing heavy is imported here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from fastverify.experiments.tune.context import Ctx, StageResult

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


def _server_argv(ctx: Ctx) -> list[str]:
    """The argv the daemon would launch; [] (the configuration's TP size is used) when it
    cannot build one, said as a line: a refusal here is never swallowed."""
    from fastverify.client import ApiError

    try:
        return list(ctx.client.server_argv().get("argv") or [])
    except ApiError as exc:
        ctx.emit(f"inventory: the daemon cannot build its server argv ({exc}); using the "
                 "configuration's TP size")  # fmt: skip
        return []


def server_tp_size(ctx: Ctx) -> int | None:
    """The TP size of the server the daemon would launch (its argv's `--tp-size`); None
    when it cannot build one (the inventory stage says why)."""
    try:
        return _tp_size(list(ctx.client.server_argv().get("argv") or []))
    except Exception:
        return None


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
    from fastverify.experiments.preflight.hostcheck import torch_available, visible_gpus
    from fastverify.profiles import doctor as doc
    from fastverify.profiles.store import ProfileStore

    status = ctx.client.status()
    engine = status.get("engine") or {}
    argv = _server_argv(ctx)
    tp = _tp_size(argv)
    caps = engine.get("capabilities") or {}
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
    data: dict[str, Any] = {
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
        # the daemon's engine capabilities: what the engine it serves could use
        "backends": caps.get("possible_backends") or [],
        "backends_view": (caps.get("host") or {}).get("view")
        or caps.get("error")
        or "the daemon reports no engine capabilities",
    }
    data["pcie"] = report.pcie.to_dict() if report.pcie else None
    data["fingerprint"] = host_fingerprint(ctx, data, status, argv, caps)
    ver = versions if isinstance(versions, dict) else {}
    nccl = ver.get("nccl (torch)") or ver.get("nvidia-nccl-cu13") or ver.get("nvidia-nccl-cu12")
    ctx.emit(
        f"inventory: engine {engine.get('name')} TP {tp}, {gpus} GPU(s), "
        f"topology {data['topology_summary']}, doctor {report.worst}, sglang "
        f"{ver.get('sglang') or '-'}, flashinfer {ver.get('flashinfer-python') or '-'}, "
        f"NCCL {nccl or '-'}; backends possible: "
        + ", ".join(b["backend"] for b in data["backends"] if b["possible"])
    )
    ctx.emit(f"inventory: backends as the daemon's engine reports them: {data['backends_view']}")
    if data["pcie"] and data["pcie"]["status"] == "redirect":
        ctx.emit(f"inventory: {data['pcie']['message']}; {data['pcie']['fix']}")
    ctx.emit(f"inventory: host fingerprint {data['fingerprint']['id']}")
    return StageResult("done", None, data)


def host_fingerprint(
    ctx: Ctx, data: dict, status: dict, argv: list[str], caps: dict
) -> dict[str, object]:
    """This host's fingerprint (fastverify.host.fingerprint) from what the inventory read
    and the daemon's server argv (the EAGLE-3 one names the drafter)."""
    from fastverify.host import fingerprint

    try:
        eagle3 = list(ctx.client.server_argv(mode="eagle3").get("argv") or [])
    except Exception:  # an old daemon, or no EAGLE-3 configured: no drafter fact
        eagle3 = []
    versions = data["versions"] if isinstance(data["versions"], dict) else {}
    facts = fingerprint.build(
        gpu=fingerprint.gpu_identity(),
        gpus=data["gpus"],
        topology=data["topology"],
        pcie=data["pcie"],
        versions=versions,
        status=status,
        argv=argv,
        eagle3_argv=eagle3,
        engine_host=caps.get("host"),
    )
    return fingerprint.record(facts)
