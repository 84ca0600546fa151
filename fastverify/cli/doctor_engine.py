"""`doctor`'s all-reduce part: the engine the daemon serves (its engine capabilities in
/v1/status, fastverify.engines.allreduce_host), or this machine's when no daemon answers,
saying whose view it is; with FlashInfer's JIT and tuning findings (doctor_flashinfer)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastverify.engines import allreduce_host as ah
from fastverify.profiles import topology as topo_mod
from fastverify.profiles.doctor import DoctorReport, Finding
from fastverify.profiles.doctor_flashinfer import check_flashinfer, served_findings
from fastverify.sglang import flashinfer_facts as ff


def apply_engine(
    report: DoctorReport,
    host: Any,
    argv: list[str],
    status: Mapping[str, Any] | None,
    env: Mapping[str, str],
    available: set[str],
    python: str = "",
    view: str | None = None,
) -> None:
    """Describe the engine `status` describes (fastverify.engines.allreduce_host: the
    daemon's engine capabilities), or this machine's when `status` is None, saying whose:
    the all-reduce backend serving now (the daemon's confirmed one, else SGLang's dispatch
    for `env`), the backends possible, the recommendations for that host, and FlashInfer's
    JIT and tuning findings (doctor_flashinfer)."""
    args = ah.server_args(host, argv)
    tp = args.tp_size
    possible = ah.possible_backends(host, tp)
    eng = (status or {}).get("engine") or {}
    served = eng.get("allreduce") if eng.get("pid") else None
    if served:  # what the daemon confirmed for the engine serving now
        asked = ah.ENABLED_ENV if served.get("requested") == "pcie_ipc" else {}
        rule = ah.dispatch_for(host, asked, argv)  # SGLang's reasons (fusion, groups, ...)
        ar = {
            "requested": served.get("requested"),
            "serving": served.get("backend"),
            "description": served.get("description"),
            "evidence": served.get("evidence"),
            "profile": (status or {}).get("profile"),
            "notes": [*rule.notes, *(served.get("notes") or [])],
            "fallbacks": rule.fallbacks,
        }
    else:
        d = ah.dispatch_for(host, env, argv)
        ar = {**d.to_dict(), "profile": None}
    report.allreduce = {**ar, "tp_size": tp, "possible_backends": possible}
    report.engine = {"view": view or host.view, "host": host.host, "simulated": host.simulated,
                     "from_daemon": status is not None}  # fmt: skip
    if status is not None and host.has_nvlink is not None:
        ipc_ok = any(b["backend"] == "pcie_ipc" and b["possible"] for b in possible)
        recs = topo_mod.recommend_for(
            tp, f"{tp} GPUs ({host.host})", available,
            all_nvlink=bool(host.has_nvlink), has_nvlink=bool(host.has_nvlink),
        )  # fmt: skip
        report.recommendations = [r for r in recs if ipc_ok or r.profile != "pcie-ipc"]
    report.findings += served_findings(served, Finding)
    report.findings += daemon_failure(status, Finding)
    if not host.simulated:  # the sim's FlashInfer is simulated: nothing to compile here
        fi_env = dict(env)
        state_dir = ((status or {}).get("daemon") or {}).get("state_dir")
        if state_dir:  # the daemon puts FlashInfer's workspace on its state volume
            fi_env[ff.WORKSPACE_BASE_VAR] = str(Path(state_dir) / "flashinfer")
        report.findings += check_flashinfer(env, python, fi_env, Finding)


def daemon_failure(status: Mapping[str, Any] | None, finding: Any) -> list[Any]:
    """The daemon's last failure while it is current (FAILED, or no engine since it), as a
    finding: `doctor` on a host whose daemon cannot start says why."""
    fail = (status or {}).get("last_failure") or {}
    if not fail or not fail.get("current", True):
        return []
    state = (status or {}).get("state")
    return [
        finding(
            "error" if state == "FAILED" else "warning",
            f"the daemon's last failure: {fail.get('reason')}: {fail.get('message')}",
            f"fastverifyd (state {state}, {fail.get('profile')}/{fail.get('mode')})",
            "fix what it says, then `fastverifyctl profile set NAME` (or let its recovery "
            "retries start it: `fastverifyctl status`)",
            "daemon",
        )
    ]
