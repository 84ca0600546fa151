"""The server arguments the all-reduce dispatch depends on (`ServerArgs.from_argv`), and the
model's config.json they read (dtype, architecture)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastverify.sglang.envvars import env_int


@dataclass(frozen=True)
class ServerArgs:
    """The server flags the dispatch depends on (read from an argv by `from_argv`)."""

    tp_size: int = 1
    dtype: str = "auto"
    disable_custom_all_reduce: bool = False
    deterministic: bool = False
    enable_symm_mem: bool = False
    enable_mscclpp: bool = False
    enable_torch_symm_mem: bool = False
    enable_nccl_nvls: bool = False
    decode_max_bs: int | None = None  # --cuda-graph-max-bs-decode (None: SGLang's choice)
    decode_max_bs_from: str | None = None  # who set decode_max_bs when not the flag
    decode_graph: bool = True  # a decode CUDA graph is captured
    draft_tokens: int = 1  # rows per request in a decode/verify pass
    decode_bs: tuple[int, ...] | None = None  # --cuda-graph-bs-decode
    max_running_requests: int | None = None  # --max-running-requests
    disable_cuda_graph_padding: bool = False
    speculative: bool = False
    log_level: str = "info"  # --log-level
    model_path: str = ""
    model_dtype: str | None = None  # config.json's torch_dtype (what --dtype auto loads)
    architecture: str | None = None  # config.json's architectures[0]
    dp_attention: bool = False  # --enable-dp-attention
    ep_size: int = 1  # --ep-size / --expert-parallel-size
    nnodes: int = 1
    rl_on_policy_target: bool = False  # --rl-on-policy-target (turns deterministic on)
    fusion_backend: str | None = None  # --flashinfer-allreduce-fusion-backend
    fusion_disabled: bool = False  # --enforce-disable-flashinfer-allreduce-fusion
    moe_a2a_backend: str = "none"

    @property
    def dtype_resolved(self) -> tuple[str, str]:
        """(dtype, why): `--dtype`, or with `auto` the model's config.json `torch_dtype`
        (SGLang's ModelConfig: auto loads the checkpoint's dtype; float32 checkpoints are
        served as bfloat16); "auto" when the config cannot be read here."""
        if self.dtype != "auto":
            return self.dtype, f"--dtype {self.dtype}"
        if self.model_dtype is None:
            return "auto", "--dtype auto (the model's config.json was not readable here)"
        dt = self.model_dtype
        served = "bfloat16" if dt == "float32" else dt
        return served, f"--dtype auto: {self.model_path}/config.json has torch_dtype {dt}"

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> ServerArgs:
        from fastverify.sglang.launch import LaunchArgs

        la = LaunchArgs.from_argv(list(argv))

        def on(*names: str) -> bool:
            return la.flag(*names) is not None

        max_bs = la.flag("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
        spec = la.speculative
        cfg = model_config(la.model_path)
        archs = cfg.get("architectures") or [None]
        return cls(
            tp_size=la.tp_size,
            dtype=(la.flag("--dtype") or "auto"),
            disable_custom_all_reduce=not la.custom_all_reduce,
            deterministic=on("--enable-deterministic-inference"),
            enable_symm_mem=on("--enable-symm-mem"),
            enable_mscclpp=on("--enable-mscclpp"),
            enable_torch_symm_mem=on("--enable-torch-symm-mem"),
            enable_nccl_nvls=on("--enable-nccl-nvls"),
            decode_max_bs=env_int(max_bs) if max_bs else None,
            decode_graph=not la.phases_off()["decode"],
            draft_tokens=spec.num_draft_tokens if spec is not None else 1,
            decode_bs=_int_list(la, "--cuda-graph-bs-decode"),
            max_running_requests=env_int(la.flag("--max-running-requests") or None),
            disable_cuda_graph_padding=on("--disable-cuda-graph-padding"),
            speculative=spec is not None,
            log_level=(la.flag("--log-level") or "info").lower(),
            model_path=la.model_path,
            model_dtype=_config_dtype(cfg),
            architecture=archs[0] if isinstance(archs, list) and archs else None,
            dp_attention=on("--enable-dp-attention"),
            ep_size=env_int(la.flag("--ep-size", "--expert-parallel-size", "--ep") or None) or 1,
            nnodes=la.nnodes,
            rl_on_policy_target=la.flag("--rl-on-policy-target") not in (None, ""),
            fusion_backend=la.flag("--flashinfer-allreduce-fusion-backend") or None,
            fusion_disabled=on("--enforce-disable-flashinfer-allreduce-fusion"),
            moe_a2a_backend=la.flag("--moe-a2a-backend") or "none",
        )


def model_config(model_path: str) -> dict[str, Any]:
    """The model directory's config.json (empty when it is not a readable local file)."""
    if not model_path:
        return {}
    try:
        data = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _config_dtype(cfg: Mapping[str, Any]) -> str | None:
    """config.json's `torch_dtype` (transformers 5 also writes `dtype`), normalised."""
    dt = cfg.get("torch_dtype") or cfg.get("dtype")
    if not isinstance(dt, str):
        text = cfg.get("text_config")
        return _config_dtype(text) if isinstance(text, dict) else None
    dt = dt.removeprefix("torch.")
    return {"half": "float16", "float": "float32", "bf16": "bfloat16"}.get(dt, dt)


def _int_list(la: Any, name: str) -> tuple[int, ...] | None:
    """A flag that takes several ints (`--cuda-graph-bs-decode 1 2 4`)."""
    args = list(la.extra_args)
    for i, a in enumerate(args):
        vals: list[str] = []
        if a == name:
            vals = list(itertools.takewhile(lambda x: not x.startswith("--"), args[i + 1 :]))
        elif a.startswith(name + "="):
            vals = a.split("=", 1)[1].replace(",", " ").split()
        else:
            continue
        try:
            return tuple(int(v) for v in vals) or None
        except ValueError:
            return None
    return None
