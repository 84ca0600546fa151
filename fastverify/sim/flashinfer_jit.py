"""The sim's FlashInfer JIT: the libraries a real FlashInfer 0.7.2 compiles at the first start
and every scheduler process then has mapped.

A real server with `SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1` JIT-builds `pcie_ipc_comm.so` on the
first workspace build (nvcc; FlashInfer's wheel ships none: `flashinfer/jit/comm.py`) and the
autotuner's `trtllm_utils.so`, both under `$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<ver>/
<arch>/cached_ops/<name>/`, and loads `pcie_ipc_comm.so` in every TP rank's process. The
first-start times are the ones measured on one H200 (../shared/fixtures/flashinfer-0.7.2-
pcie-ipc-h200-same-gpu/ws2-results.json: 10.6-13.0 s `pcie_ipc_comm`, 7.0 s `trtllm_utils`),
scaled here by the sim's `--sim-load-seconds` like its other start-up phases
(`COMPILE_SHARE`). A second start finds the libraries and compiles nothing.

`ensure(env, name, sleep, scale)` builds (writes) a library when it is missing; `Mapped(path)`
keeps a read-only mapping of it open in the calling process, so that `/proc/PID/maps` shows
it exactly as it shows a loaded shared object (what `fastverify.sglang.pcie_ipc_evidence`
reads, whatever the server's --log-level). `--sim-flashinfer no-nv-internal` is FlashInfer
installed without its `csrc/nv_internal` sources: `trtllm_utils` cannot be built, the
autotuner skips every tactic and saves a cache with no configs (see allreduce_sim).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from fastverify.sglang import flashinfer_facts as ff

SIM_ARCH = "120"  # the simulated host: SM120 GPUs as in pcie_ipc_ar.py's published figures
# measured first-start compile seconds (ws2-results.json) and the share of the sim's
# --sim-load-seconds each one takes (the sim's start-up phases all scale with it)
COMPILE_SHARE = {ff.PCIE_IPC_LIB: 0.05, ff.TRTLLM_UTILS_LIB: 0.03}
SIM_MAGIC = b"\x7fELF fastverify sim: a stand-in for FlashInfer's JIT-built library\n"


def jit_dir(env: Mapping[str, str]) -> Path:
    """`cached_ops/` under the JIT workspace the environment names (FlashInfer's jit/env.py)."""
    return ff.workspace_dir(env, ff.FLASHINFER_VERSION, SIM_ARCH) / "cached_ops"


def library(env: Mapping[str, str], name: str) -> Path:
    return jit_dir(env) / name / f"{name}.so"


def ensure(
    env: Mapping[str, str], name: str, sleep: Callable[[float], None], scale_s: float
) -> tuple[Path, bool]:
    """(path, built now): the library, "compiled" (written after `COMPILE_SHARE` of
    `scale_s`) when absent; a file that cannot be written leaves it absent."""
    path = library(env, name)
    if path.is_file():
        return path, False
    sleep(scale_s * COMPILE_SHARE.get(name, 0.03))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(SIM_MAGIC + b"\0" * (4096 - len(SIM_MAGIC)))
        os.replace(tmp, path)
    except OSError:
        return path, False
    return path, True


class Mapped:
    """A read-only mapping of `path` held by this process (like a loaded .so)."""

    def __init__(self, path: Path):
        self.path = path
        self._map: mmap.mmap | None = None
        try:
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            self._map = None

    @property
    def ok(self) -> bool:
        return self._map is not None
