"""Whether FlashInfer's PCIe-IPC all-reduce imports in a given interpreter: the server's
(`Engine.allreduce_host`, fastverify.engines.host_probe) or the ranks' of an experiment
(fastverify.experiments.common.allreduce). Checked in a subprocess of that interpreter,
once per interpreter; nothing is imported here."""

from __future__ import annotations

import functools
import subprocess
import sys

IMPORT_CHECK = "from flashinfer.comm import PcieIpcAllReduceWorkspace"


@functools.lru_cache(maxsize=8)
def flashinfer_pcie_ipc(python: str = "") -> tuple[bool, str]:
    """(importable, message) of FlashInfer's PCIe-IPC all-reduce in `python`'s environment."""
    exe = python or sys.executable
    try:
        out = subprocess.run(
            [exe, "-c", IMPORT_CHECK],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"cannot run {exe}: {exc}"
    if out.returncode == 0:
        return True, f"{IMPORT_CHECK} works in {exe}"
    last = (out.stderr.strip().splitlines() or ["(no message)"])[-1]
    return False, f"`{IMPORT_CHECK}` fails in {exe}: {last}"
