"""The host fingerprint: every fact a recorded result depends on, so a decision measured on
one node can be reused on an identical one, and a difference says what changed and which
recorded results it invalidates.

Facts (`FACTS`, each a JSON value; None where it could not be read, and an unreadable fact
only equals an unreadable one):

    gpu_model, gpu_count, driver   nvidia-smi --query-gpu=name,driver_version
    topology                       nvidia-smi topo -m: the link of every GPU pair
    pcie_links                     lspci LnkSta per GPU (speed, width)
    acs_iommu                      the PCIe path verdict, the redirecting bridges, IOMMU mode
    numa                           each GPU's NUMA affinity
    cuda, nccl, sglang, torch      the server's interpreter (torch's +cuXXX build), the
                                   daemon's engine (the SGLang it runs, or plays)
    engine                         the daemon's engine and its host (the sim's simulated one)
    tp_size, model, drafter        the server argv: TP size, the model and the EAGLE-3 drafter
                                   (config.json's sha256 when readable, else the path)

`fingerprint_id(facts)` is a short sha256 of the canonical JSON. `diff(recorded, here)`
lists each changed fact with the results it invalidates (`INVALIDATES`); `compare(recorded,
here, kind, name)` reads one recorded result back against this host: only the facts that
invalidate that kind count, and a result written before fingerprints is accepted with a note.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

FACTS = ("gpu_model", "gpu_count", "driver", "topology", "pcie_links", "acs_iommu", "numa",
         "cuda", "torch", "nccl", "sglang", "engine", "tp_size", "model", "drafter")  # fmt: skip
# the recorded results a fact change invalidates ("cost file": `spec costs`' engine trials)
_HW = ("tune decision", "preflight report", "tuner table", "rehearse costs", "cost file",
       "speculation plan")  # fmt: skip
_SERVED = ("tune decision", "rehearse costs", "cost file", "speculation plan", "acceptance record")
INVALIDATES: dict[str, tuple[str, ...]] = {
    "gpu_model": (*_HW, "acceptance record"),
    "gpu_count": _HW,
    "driver": ("tune decision", "preflight report", "tuner table"),
    "topology": _HW,
    "pcie_links": ("tune decision", "preflight report", "tuner table"),
    "acs_iommu": ("tune decision", "preflight report", "tuner table"),
    "numa": ("tune decision", "preflight report", "tuner table"),
    "cuda": ("tune decision", "preflight report", "rehearse costs", "cost file"),
    "torch": ("tune decision", "preflight report", "rehearse costs", "cost file"),
    "nccl": ("tune decision", "preflight report", "tuner table", "rehearse costs", "cost file"),
    "sglang": _SERVED,
    "engine": (*_HW, "acceptance record"),
    "tp_size": _HW,
    "model": _SERVED,
    "drafter": (
        "tune decision (its EAGLE-3 options)",
        "cost file",
        "speculation plan",
        "acceptance record",
    ),
}
# how a fact is named in one line ("GPU model, count, topology differ")
LABELS = {"gpu_model": "GPU model", "gpu_count": "GPU count", "topology": "topology",
          "pcie_links": "PCIe links", "acs_iommu": "ACS/IOMMU", "numa": "NUMA",
          "driver": "driver", "cuda": "CUDA", "torch": "torch", "nccl": "NCCL",
          "sglang": "SGLang", "engine": "engine", "tp_size": "TP size", "model": "model",
          "drafter": "drafter"}  # fmt: skip


def _flag(argv: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def model_identity(path: str | None) -> dict[str, Any] | None:
    """A model (or drafter) directory as {path, config_sha256}: the digest of its
    config.json when readable (then the path is informational), else the path alone."""
    if not path:
        return None
    digest = None
    with contextlib.suppress(OSError):
        digest = hashlib.sha256((Path(path) / "config.json").read_bytes()).hexdigest()[:16]
    return {"config_sha256": digest} if digest else {"path": path}


def gpu_identity(path_env: str | None = None) -> dict[str, Any]:
    """{gpu_model, driver} of GPU 0 from nvidia-smi (None each without it)."""
    exe = shutil.which("nvidia-smi", path=path_env)
    if exe is None:
        return {"gpu_model": None, "driver": None}
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)  # fmt: skip
        first = out.stdout.strip().splitlines()[0]
        name, driver = (x.strip() for x in first.split(","))
        return {"gpu_model": name, "driver": driver}
    except (OSError, subprocess.TimeoutExpired, IndexError, ValueError):
        return {"gpu_model": None, "driver": None}


def build(
    *,
    gpu: Mapping[str, Any],
    gpus: int,
    topology: Mapping[str, Any] | None,
    pcie: Mapping[str, Any] | None,
    versions: Mapping[str, Any] | None,
    status: Mapping[str, Any],
    argv: Sequence[str],
    eagle3_argv: Sequence[str],
    engine_host: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The facts of this host (see the module docstring), from what tune's inventory read."""
    ver = dict(versions or {})
    torch = ver.get("torch")
    topo = dict(topology or {})
    links = topo.get("links") or {}
    pcie = dict(pcie or {})
    engine = status.get("engine") or {}
    host = dict(engine_host or {})
    tp = _flag(argv, "--tp-size") or _flag(argv, "--tp")
    return {
        "gpu_model": gpu.get("gpu_model"),
        "gpu_count": gpus,
        "driver": gpu.get("driver"),
        "topology": dict(sorted(links.items())) or None,
        "pcie_links": {g["bdf"]: g.get("link") for g in pcie.get("gpus") or []} or None,
        "acs_iommu": {
            "status": pcie.get("status"),
            "redirecting": pcie.get("redirecting_bridges") or [],
            "iommu": (pcie.get("iommu") or {}).get("mode"),
        }
        if pcie
        else None,
        "numa": dict(sorted((topo.get("numa_affinity") or {}).items())) or None,
        "cuda": torch.split("+", 1)[1] if isinstance(torch, str) and "+" in torch else None,
        "torch": torch,
        "nccl": ver.get("nccl (torch)")
        or ver.get("nvidia-nccl-cu13")
        or ver.get("nvidia-nccl-cu12"),
        "sglang": (status.get("sglang") or {}).get("version"),
        "engine": {
            "name": engine.get("name"),
            "simulated": bool(engine.get("simulated")),
            "host": host.get("host"),
            "has_nvlink": host.get("has_nvlink"),
            "flashinfer_pcie_ipc": host.get("flashinfer_pcie_ipc"),
        },
        "tp_size": int(tp) if tp and tp.isdigit() else 1,
        "model": model_identity(_flag(argv, "--model-path")),
        "drafter": model_identity(_flag(eagle3_argv, "--speculative-draft-model-path")),
    }


def canonical(facts: Mapping[str, Any]) -> str:
    return json.dumps({k: facts.get(k) for k in FACTS}, sort_keys=True, separators=(",", ":"))


def fingerprint_id(facts: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(facts).encode()).hexdigest()[:16]


def record(facts: Mapping[str, Any]) -> dict[str, Any]:
    """What is stored with a result: {id, facts}."""
    return {"id": fingerprint_id(facts), "facts": {k: facts.get(k) for k in FACTS}}


def diff(recorded: Mapping[str, Any], here: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each fact that differs: {fact, recorded, here, invalidates}."""
    out = []
    for k in FACTS:
        a, b = recorded.get(k), here.get(k)
        if json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
            out.append({"fact": k, "recorded": a, "here": b, "invalidates": list(INVALIDATES[k])})
    return out


def describe(changes: Sequence[Mapping[str, Any]], invalidates: bool = True) -> str:
    """One sentence per changed fact: `sglang: 0.5.23 there, 0.5.22 here (invalidates ...)`."""

    def short(v: Any) -> str:
        text = json.dumps(v, sort_keys=True) if not isinstance(v, str) else v
        return text if len(text) <= 80 else text[:77] + "..."

    return "; ".join(
        f"{c['fact']}: {short(c['recorded'])} there, {short(c['here'])} here"
        + (f" (invalidates {', '.join(c['invalidates'])})" if invalidates else "")
        for c in changes
    )


def relevant(kind: str) -> tuple[str, ...]:
    """The facts whose change invalidates a recorded result of `kind`."""
    return tuple(k for k in FACTS if any(r.split(" (")[0] == kind for r in INVALIDATES[k]))


def host_label(facts: Mapping[str, Any]) -> str:
    """The host in a few words: `2 x NVIDIA H200 (NV18)`, `the sim engine (TP 2, ...)`."""
    engine = facts.get("engine") or {}
    if engine.get("simulated"):
        return f"the sim engine (TP {facts.get('tp_size')}, SGLang {facts.get('sglang')})"
    links = sorted({str(v) for v in (facts.get("topology") or {}).values()})
    topo = f" ({'/'.join(links)})" if links else ""
    return f"{facts.get('gpu_count') or 0} x {facts.get('gpu_model') or 'unknown GPU'}{topo}"


def compare(
    recorded: Mapping[str, Any] | None, here: Mapping[str, Any] | None, kind: str, name: str
) -> dict[str, Any]:
    """A recorded result of `kind` (its stored fingerprint `recorded`, {id, facts}) read back
    on this host (`here`): {status, changes, message}. status "same"; "differs" (the facts
    that invalidate `kind` differ: `message` names them and the two hosts); "unrecorded" (a
    result written before fingerprints: accepted, `message` is a one-line note); "unknown"
    (this host's fingerprint is not known: nothing to compare, said)."""
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("facts"), Mapping):
        return {"status": "unrecorded", "changes": [],
                "message": f"note: {kind} {name} carries no host fingerprint (written before "
                "fingerprints): used as it is, not checked against this host"}  # fmt: skip
    if not isinstance(here, Mapping) or not isinstance(here.get("facts"), Mapping):
        return {"status": "unknown", "changes": [],
                "message": f"note: this host's fingerprint is unknown (no fastverifyd has "
                f"recorded one): {kind} {name} (fingerprint {recorded.get('id')}) is not "
                "checked against it"}  # fmt: skip
    keep = relevant(kind)
    changes = [c for c in diff(recorded["facts"], here["facts"]) if c["fact"] in keep]
    if not changes:
        return {"status": "same", "changes": [], "message": ""}
    facts = ", ".join(LABELS[c["fact"]] for c in changes)
    message = (
        f"{kind} {name} was measured on a host with {host_label(recorded['facts'])} "
        f"(fingerprint {recorded.get('id')}), this host has {host_label(here['facts'])} "
        f"(fingerprint {here.get('id')}): {facts} differ; its numbers do not describe this "
        f"host ({describe(changes, invalidates=False)})"
    )
    return {"status": "differs", "changes": changes, "message": message}
