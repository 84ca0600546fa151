"""What this machine tells about the host an SGLang server would run on, for
`Engine.allreduce_host` (fastverify.engines.allreduce_host): the GPU links (`nvidia-smi topo
-m`), GPU memory and compute capability (`nvidia-smi --query-gpu`), FlashInfer's
`pcie_ipc_comm` in the server's interpreter (fastverify.host.flashinfer), and the model's hidden
size from its config.json. Each probe that cannot answer leaves its field unknown (None) and
says so in `host`."""

from __future__ import annotations

import subprocess
from typing import Any

from fastverify.engines.allreduce_host import AllreduceHost
from fastverify.host.flashinfer import flashinfer_pcie_ipc
from fastverify.sglang import allreduce

GPU_QUERY = ["--query-gpu=memory.total,compute_cap", "--format=csv,noheader,nounits"]


def gpu_memory_and_sm(timeout: float = 10.0) -> tuple[int | None, int | None]:
    """(MiB, compute capability x10) of GPU 0, or (None, None) without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", *GPU_QUERY], capture_output=True, text=True,
                             timeout=timeout, check=False)  # fmt: skip
        first = out.stdout.strip().splitlines()[0]
        mem, cap = (x.strip() for x in first.split(","))
        return int(float(mem)), round(float(cap) * 10)
    except (OSError, subprocess.TimeoutExpired, IndexError, ValueError):
        return None, None


def model_hidden(model_path: str) -> int | None:
    """config.json's hidden_size (a multimodal model's text_config's)."""
    cfg = allreduce.model_config(model_path)
    for c in (cfg, cfg.get("text_config") or {}):
        if isinstance(c, dict) and isinstance(c.get("hidden_size"), int):
            return int(c["hidden_size"])
    return None


def probe_host(engine: Any, argv: list[str]) -> AllreduceHost:
    from fastverify.profiles.topology import detect_cached

    args = allreduce.ServerArgs.from_argv(argv)
    topo = detect_cached()
    mem, sm = gpu_memory_and_sm()
    python = getattr(engine, "python", "") or ""
    fi_ok, fi_why = flashinfer_pcie_ipc(python)
    return AllreduceHost(
        engine=engine.name,
        view=f"the {engine.name} engine on this machine",
        host=topo.source,
        has_nvlink=topo.has_nvlink,
        p2p=None,
        flashinfer_pcie_ipc=fi_ok,
        flashinfer_why=fi_why,
        hidden=model_hidden(args.model_path),
        gpu_mem_mib=mem,
        gpu_sm=sm,
        request_pool=None,  # SGLang sizes it at load (the built line then gives the bound)
    )
