"""`doctor` findings about FlashInfer's PCIe-IPC all-reduce (the `pcie-ipc` profile):

- JIT at the first start: FlashInfer's wheel ships no prebuilt `pcie_ipc_comm`, so the server's
  first PCIe-IPC start compiles it (nvcc, then ninja links it) unless a JIT cache already
  holds it (`flashinfer_jit_cache`, or a `pcie_ipc_comm.so` a previous start left in the
  workspace, e.g. the daemon's state volume). Without either, the workspace build fails and
  SGLang serves with NCCL; `FLASHINFER_DISABLE_JIT` makes it fail too.
- `csrc/nv_internal`: an install without FlashInfer's `data/csrc/nv_internal` sources cannot
  build the autotuner's `trtllm_utils`: tuning skips every tactic, saves 0 configs and runs
  again at every start. Seen in the installed package (its files), and in what the daemon's
  engine reported (its tactics file, FlashInfer's own lines).

`check_flashinfer(env, python, workspace_env, finding)` and `served_findings(served, finding)`
return the findings; `python` is the
server's interpreter (asked in a subprocess that imports nothing heavy: `find_spec` only).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from fastverify.sglang import flashinfer_facts as ff

_PROBE = (
    "import importlib.util, json, pathlib\n"
    "out = {'flashinfer': None, 'nv_internal': None, 'jit_cache': None}\n"
    "spec = importlib.util.find_spec('flashinfer')\n"
    "if spec is not None and spec.submodule_search_locations:\n"
    "    root = pathlib.Path(list(spec.submodule_search_locations)[0])\n"
    "    out['flashinfer'] = str(root)\n"
    f"    out['nv_internal'] = (root / {ff.NV_INTERNAL_DIR!r}).is_dir()\n"
    "out['jit_cache'] = importlib.util.find_spec('flashinfer_jit_cache') is not None\n"
    "print(json.dumps(out))\n"
)


def installed(python: str) -> dict[str, Any] | str:
    """Where `python` has FlashInfer, whether its nv_internal sources and a JIT cache
    package are there; or why that is unknown."""
    try:
        out = subprocess.run([python or sys.executable, "-c", _PROBE], capture_output=True,
                             text=True, timeout=60, check=False)  # fmt: skip
        found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return found
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return f"cannot ask {python or sys.executable}: {exc}"


def served_findings(served: Mapping[str, Any] | None, finding: Any) -> list[Any]:
    """The no-nv_internal failure mode as the daemon's engine reported it (its tactics file
    holds no configs, or FlashInfer's own lines said so)."""
    tactics = (served or {}).get("tactics") or {}
    if ff.NO_NV_INTERNAL in ((served or {}).get("notes") or []) or tactics.get("empty"):
        return [finding("warning", "the serving engine's FlashInfer tuning saved 0 configs "
                        f"({tactics.get('path') or 'its tactics file'}): it re-tunes at every "
                        "start", "the daemon's engine (status: engine.allreduce)",
                        ff.NO_NV_INTERNAL, "flashinfer")]  # fmt: skip
    return []


def check_flashinfer(
    env: Mapping[str, str],
    python: str,
    workspace_env: Mapping[str, str],
    finding: Any,
) -> list[Any]:
    """Findings about the server's FlashInfer (built with `finding(severity, what, where,
    fix, check)`). `workspace_env`: the FlashInfer variables the server gets (the daemon
    puts its workspace on the state volume)."""
    out: list[Any] = []
    info = installed(python)
    where = f"server interpreter {python or sys.executable}"
    if isinstance(info, str) or not info.get("flashinfer"):
        if not isinstance(info, str):
            out.append(finding("info", "FlashInfer is not installed: the pcie-ipc profile "
                               "cannot serve here", where, "install flashinfer-python 0.7.2 "
                               "(SGLang 0.5.23's pin)", "flashinfer"))  # fmt: skip
        return out
    if info.get("nv_internal") is False:
        out.append(finding("warning", f"FlashInfer at {info['flashinfer']} has no "
                           f"{ff.NV_INTERNAL_DIR}", where, ff.NO_NV_INTERNAL,
                           "flashinfer"))  # fmt: skip
    libs = ff.jit_libraries(workspace_env)
    path = env.get("PATH") or ""
    tools = {t: shutil.which(t, path=path) for t in ("nvcc", "ninja")}
    missing = [t for t, p in tools.items() if p is None]
    if info.get("jit_cache") or libs:
        have = "the flashinfer_jit_cache package" if info.get("jit_cache") else str(libs[-1])
        out.append(finding("info", f"FlashInfer PCIe-IPC: {ff.PCIE_IPC_LIB} is prebuilt "
                           f"({have}): nothing to compile at the next start", where, "",
                           "flashinfer"))  # fmt: skip
    elif env.get(ff.DISABLE_JIT_VAR):
        out.append(finding("warning", f"{ff.DISABLE_JIT_VAR} is set and no prebuilt "
                           f"{ff.PCIE_IPC_LIB} exists: the PCIe-IPC workspace build fails and "
                           "SGLang serves with NCCL", "environment",
                           f"unset {ff.DISABLE_JIT_VAR}, or install flashinfer-jit-cache",
                           "flashinfer"))  # fmt: skip
    elif missing:
        out.append(finding("warning", f"FlashInfer PCIe-IPC: no prebuilt {ff.PCIE_IPC_LIB} and "
                           f"{' and '.join(missing)} not on PATH: the first pcie-ipc start "
                           "cannot compile it and serves with NCCL", "PATH",
                           "install the CUDA toolkit's nvcc and ninja (the image has both), or "
                           "flashinfer-jit-cache", "flashinfer"))  # fmt: skip
    else:
        out.append(finding("info", f"FlashInfer PCIe-IPC: the first pcie-ipc start compiles "
                           f"with {tools['nvcc']}: {ff.first_start_note()}; later starts reuse "
                           "it", "PATH", "", "flashinfer"))  # fmt: skip
    return out
