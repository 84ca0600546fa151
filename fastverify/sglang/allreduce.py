"""SGLang 0.5.23's all-reduce dispatch: which backend serves which TP all-reduce sizes.

The one home of these facts (tests/contract/ pins each to the installed sglang 0.5.23 and
flashinfer-python 0.7.2). Sources, under `sglang/srt/`:

- `distributed/parallel_state.py` (`GroupCoordinator.__init__`, `all_reduce`,
  `_resolve_outplace_all_reduce_method`), per tensor, in this order: NCCL with symmetric
  memory (`--enable-symm-mem`); FlashInfer's fusion all-reduce where the layer boundary
  fuses it (`--flashinfer-allreduce-fusion-backend`, auto-enabled on SM90/SM100 for the
  architectures `arg_groups/overrides.py` lists); then SGLang's custom all-reduce (`ca`);
  then FlashInfer PCIe-IPC (`pcie_ipc`); then quick all-reduce, MSCCL++, torch symmetric
  memory, pynccl inside piecewise graphs; everything else in-place pynccl
  (`ncclAllReduce`) / torch.distributed. MSCCL++ goes first when it wants the tensor (custom
  all-reduce and PCIe-IPC both step aside for it).
- Groups: only the `tp` group is eligible for PCIe-IPC: DP-attention (`attention_tp`) and
  EP (`moe_tp`) groups never get it. A TP group across nodes cannot use it (FlashInfer's
  PCIe-IPC is intra-node only). `--rl-on-policy-target` turns deterministic inference on
  (`arg_groups/attention_hook.py`), which keeps PCIe-IPC off.
- `distributed/device_communicators/custom_all_reduce*.py`: custom all-reduce only in one
  node, world size 2/4/6/8, and full NVLink, or exactly 2 GPUs over PCIe with P2P ("not
  supported on more than two PCIe-only GPUs"); v2 (default on CUDA) needs full NVLink and
  caps at `SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB` (16 MiB); the legacy class at 8 MiB.
  `--disable-custom-all-reduce` turns it off.
- `distributed/device_communicators/pcie_ipc_ar.py`: `SGLANG_ENABLE_PCIE_IPC_ALLREDUCE`
  (EnvBool, default False), the `tp` group only, world size > 1 and in (2, 4, 8), never
  with deterministic collectives (`SGLANG_USE_1STAGE_ALLREDUCE` when set, else
  `--enable-deterministic-inference`), bf16 tensors only, up to `max_numel` elements:
  `SGLANG_PCIE_IPC_MAX_NUMEL` when set (non-zero), else the widest decode reduction
  (`model_executor/runner/base_runner.py` `_widest_decode_rows`): the largest entry of the
  decode batch list (`--cuda-graph-bs-decode`, else generated up to max_bs:
  `arg_groups/memory_hook.py`, `cuda_graph_hook.py`), clamped to the request pool
  (`base_cuda_graph_runner.get_batch_sizes_to_capture`), x draft tokens, x hidden. The list
  exists with `--disable-cuda-graph` too: the bound does not depend on capturing.
  `--dtype auto` serves the checkpoint's dtype (config.json `torch_dtype`): an fp16 model's
  reductions all stay on NCCL although every rank builds the workspace (bf16 probe).

FlashInfer 0.7.2 (`flashinfer/comm/pcie_ipc_tuning.py`, `jit/env.py`,
`data/include/flashinfer/comm/pcie_ipc_all_reduce.cuh`): tactics persist at
`$FLASHINFER_AUTOTUNE_DIR/pcie_ipc_all_reduce_ws{N}.json` (default
`$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<arch>/autotune`, and SGLang sets
that base to `$SGLANG_CACHE_DIR`, `~/.cache/sglang`, unless it is set:
`flashinfer_facts.workspace_base`); the JIT workspace
lives under `$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`; the all-reduce kernels are
`flashinfer::comm::pcie_ipc::{KERNELS}` (`pcie_ipc_all_reduce.cuh`) or, for the
copy-engine tactics, `ce_*_kernel` plus memcpys on three streams (`pcie_ipc_ce_ring.cuh`).

`requested_backend(env)` and `possible_backends(...)` are the labels other modules
(experiments, `tune`) put on a candidate; `dispatch(...)` is the whole picture.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastverify.sglang.envvars import (  # noqa: F401  (the dispatch's names, re-exported)
    ALLREDUCE_VARS,
    BOOL_FALSE,
    BOOL_TRUE,
    CUSTOM_V2_MAX_KB_VAR,
    CUSTOM_V2_VAR,
    DETERMINISTIC_VAR,
    ENABLE_VAR,
    MAX_NUMEL_VAR,
    ONE_STAGE_VAR,
    env_bool,
    env_int,
)

# ----------------------------------------------------------------- names (srt/environ.py)
# FlashInfer's own (flashinfer/comm/pcie_ipc_tuning.py, flashinfer/jit/env.py)
AUTOTUNE_DIR_VAR = "FLASHINFER_AUTOTUNE_DIR"
WORKSPACE_BASE_VAR = "FLASHINFER_WORKSPACE_BASE"
CACHE_FILE = "pcie_ipc_all_reduce_ws{world}.json"

# ----------------------------------------------------------------- defaults and bounds
PCIE_IPC_WORLD_SIZES = (2, 4, 8)  # pcie_ipc_ar._SUPPORTED_WORLD_SIZES
PCIE_IPC_GROUPS = ("tp",)  # pcie_ipc_ar._ELIGIBLE_GROUP_NAMES
FALLBACK_DECODE_WIDTH = 64  # pcie_ipc_ar._FALLBACK_DECODE_WIDTH (rows)
CUSTOM_WORLD_SIZES = (2, 4, 6, 8)  # CustomAllreduce._SUPPORTED_WORLD_SIZES
CUSTOM_MAX_BYTES = 8192 * 1024  # CustomAllreduce._MAX_CAR_SIZE on CUDA (legacy class)
CUSTOM_V2_MAX_KB = 16 * 1024  # envs.SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB default
BF16_BYTES = 2
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")  # --dtype choices
# SGLang's EnvBool (srt/environ.py): case-insensitive

# ----------------------------------------------------------------- backends
PCIE_IPC = "pcie_ipc"
CUSTOM = "custom"
NCCL = "nccl"
MSCCLPP = "mscclpp"
TORCH_SYMM_MEM = "torch_symm_mem"
FUSION = "flashinfer_fusion"
# arg_groups/overrides.py _FLASHINFER_ALLREDUCE_FUSION_ARCHS (tests/contract/ compares)
FUSION_ARCHS = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM",
    "GptOssForCausalLM", "GlmMoeDsaForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
    "MistralLarge3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3NextForCausalLM", "Qwen4ExpForConditionalGeneration", "KimiK25ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Omni_Reasoning_V3",
})  # fmt: skip
FUSE_ALLREDUCE_MAX_TOKENS = 2048  # layers/layer_boundary/residual/add_norm.py
BACKEND_NAMES = {
    FUSION: "FlashInfer fusion all-reduce",
    PCIE_IPC: "FlashInfer PCIe-IPC",
    CUSTOM: "SGLang custom all-reduce",
    NCCL: "NCCL",
    MSCCLPP: "MSCCL++",
    TORCH_SYMM_MEM: "torch symmetric memory",
}

# ----------------------------------------------------------------- log texts (pcie_ipc_ar.py)
ENABLED_TEXT = "FlashInfer PCIe-IPC all-reduce enabled (world="
BUILT_TEXT = "FlashInfer PCIe-IPC workspace built (world="
NO_COMM_TEXT = "this FlashInfer build has no pcie_ipc_comm; falling back to NCCL all-reduce."
BUILD_FAILED_TEXT = "FlashInfer PCIe-IPC workspace (max_numel="
BUILD_FAILED_TAIL = "reductions stay on NCCL"
DETERMINISTIC_TEXT = "Deterministic inference is on; leaving PCIe-IPC all-reduce off."
DTYPE_TEXT = "FlashInfer PCIe-IPC all-reduce serves bf16 only;"
SETUP_FAILED_TEXT = "Setup FlashInfer PCIe-IPC allreduce failed with"  # parallel_state.py
FIXED_WIDTH_TEXT = "FlashInfer PCIe-IPC is sizing its workspace from the fixed fallback width"
AUTOTUNED_TEXT = "FlashInfer PCIe-IPC all-reduce autotuned"
AUTOTUNE_FAILED_TEXT = "FlashInfer PCIe-IPC autotune failed"
AUTOTUNE_OFF_TEXT = "--disable-flashinfer-autotune is set; keeping FlashInfer's seed policy."
CUSTOM_PCIE_TEXT = "is disabled because it's not supported on more than two PCIe-only GPUs."
# the exact formats (for the sim; tests/contract/ compares them with the source)
ENABLED_FORMAT = (
    "FlashInfer PCIe-IPC all-reduce enabled (world={world}, workspace sized on first reduction)"
)
BUILT_FORMAT = (
    "FlashInfer PCIe-IPC workspace built (world={world}, max_numel={max_numel}, hidden={hidden})"
)
NO_COMM_FORMAT = f"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is set but {NO_COMM_TEXT}"
BUILD_FAILED_FORMAT = (
    "FlashInfer PCIe-IPC workspace (max_numel={max_numel}) failed: {error}; reductions stay on NCCL"
)
DETERMINISTIC_FORMAT = (
    f"{DETERMINISTIC_TEXT} Its kernels pick a tactic per shape, so the reduction order "
    "would follow the batch shape."
)
DTYPE_FORMAT = f"{DTYPE_TEXT} {{dtype}} reductions stay on NCCL."
AUTOTUNED_FORMAT = f"{AUTOTUNED_TEXT} {{n}} shape(s) (hidden={{hidden}}, rows={{rows}})"

# ----------------------------------------------------------------- published figures
# The one per-message table SGLang 0.5.23 publishes for this backend, in the module docstring
# of srt/distributed/device_communicators/pcie_ipc_ar.py: one 8x SM120 host, GPUs 0-3 and 4-7
# on separate NUMA nodes, hidden 6144 bf16, FlashInfer's PCIe-IPC all-reduce against NCCL.
# (message bytes, FlashInfer us, NCCL us); tests/contract/test_published_allreduce_contract.py
# reads the real docstring and fails when it changes.
PUBLISHED_WHERE = (
    "sglang 0.5.23 srt/distributed/device_communicators/pcie_ipc_ar.py docstring: one 8x "
    "SM120 PCIe host (NUMA halves 0-3/4-7), hidden 6144 bf16"
)
PUBLISHED_WORLD = 8
PUBLISHED_US = (
    (12 * 1024, 5.3, 205.1),
    (96 * 1024, 15.3, 584.9),
    (384 * 1024, 34.6, 1169.3),
    (100 * 1024 * 1024, 8500.0, 50400.0),
)


# ----------------------------------------------------------------- kernels (FlashInfer 0.7.2)
KERNEL_NAMESPACE = "flashinfer::comm::pcie_ipc::"
KERNELS = (
    "ipc_tp2_remote_push_kernel",
    "ipc_rsag_ring_push_param_kernel",
    "ipc_rsag_push_param_kernel",
    "ipc_topo_rsag8_push_param_kernel",
    "ipc_topo_rsag8_ring_push_param_kernel",
    "ipc_topo_rsag8_block_param_kernel",
    "push_oneshot_param_kernel",
)
_KERNEL_RE = re.compile(re.escape(KERNEL_NAMESPACE) + r"(" + "|".join(KERNELS) + r")\b")


# The copy-engine tactics (`pcie_ipc_ce_ring.cuh`, IpcVariant COPY_ENGINE_RING / _ISLAND /
# _RING_MEMOP, picked only by the autotuner, at 4 and 8 ranks): one all-reduce launches
# many small kernels on three streams plus device-to-device memcpys. On the caller's stream
# a flag wait and then an add (reduce-scatter) or a memcpy (all-gather) per ring step and
# piece, and a closing publish + wait handshake; on a flag stream one publish per step; on
# a copy stream the memcpys. The memop variant (SM120) replaces the per-step flag kernels
# with stream memops and an extern "C" wait kernel (`pcie_ipc_ce_sm120.cuh`).
CE_KERNELS = ("ce_publish_flag_kernel", "ce_wait_flag_kernel", "ce_add_kernel")
CE_MEMOP_WAIT_KERNEL = "kernel_pcie_ipc_ce_sm120_binary_wait_clear"  # no namespace
CE_ROLES = {
    "ce_publish_flag_kernel": "publish",
    "ce_wait_flag_kernel": "wait",
    "ce_add_kernel": "add",
    CE_MEMOP_WAIT_KERNEL: "memop_wait",
}
_CE_RE = re.compile(
    r"^(?:void )?(?:"
    + re.escape(KERNEL_NAMESPACE)
    + r"("
    + "|".join(CE_KERNELS)
    + r")|("
    + CE_MEMOP_WAIT_KERNEL
    + r"))(?=[<( ]|$)"
)


def ce_role(name: str) -> str | None:
    """ "publish", "wait", "add" or "memop_wait" for a kernel of FlashInfer's copy-engine
    all-reduce as kineto names it (`void flashinfer::comm::pcie_ipc::ce_add_kernel<
    __nv_bfloat16>(uint4*, ...)`, `flashinfer::comm::pcie_ipc::ce_wait_flag_kernel(int*,
    int*)`), else None."""
    if "ce_" not in name:
        return None
    m = _CE_RE.match(name)
    return None if m is None else CE_ROLES[m.group(1) or m.group(2)]


def is_pcie_ipc_kernel(name: str) -> bool:
    """A FlashInfer PCIe-IPC all-reduce kernel as kineto names it (demangled:
    `void flashinfer::comm::pcie_ipc::ipc_topo_rsag8_push_param_kernel<__nv_bfloat16,
    true>(...)`). Its all-gather / reduce-scatter kernels (sub-namespaces) are not."""
    return KERNEL_NAMESPACE in name and _KERNEL_RE.search(name) is not None


# FlashInfer's seed policy (`flashinfer/comm/pcie_ipc_policy.py`, `_seed`), the launch
# config of a shape nothing has tuned (`--disable-flashinfer-autotune`, or before tune()):
# 2 ranks always the unstaged TP2 push; 4 and 8 ranks the neighbour-ordered staged ring
# from SEED_STAGE_BYTES up; below it, 4 ranks the staged push ("the one-shot push is never
# the answer"), 8 ranks the unstaged island push. Variant -> kernel: the dispatch table in
# `pcie_ipc_all_reduce.cuh` (`all_reduce`), launched without PDL as SGLang calls it.
SEED_STAGE_BYTES = 32 * 1024  # pcie_ipc_policy._SEED_STAGE_BYTES
_SEED_KERNELS = {
    # (world, at or above SEED_STAGE_BYTES) -> (kernel with template arguments, params type)
    (2, False): ("ipc_tp2_remote_push_kernel<__nv_bfloat16, false, false>", "IpcTp2RemotePushData"),
    (2, True): ("ipc_tp2_remote_push_kernel<__nv_bfloat16, false, false>", "IpcTp2RemotePushData"),
    (4, False): ("ipc_rsag_push_param_kernel<__nv_bfloat16, 4, false>", "PushOneshotParamData"),
    (4, True): ("ipc_rsag_ring_push_param_kernel<__nv_bfloat16, 4, false>", "PushOneshotParamData"),
    (8, False): ("ipc_topo_rsag8_push_param_kernel<__nv_bfloat16, false>", "PushOneshotParamData"),
    (8, True): (
        "ipc_topo_rsag8_ring_push_param_kernel<__nv_bfloat16, false>",
        "PushOneshotParamData",
    ),
}


def kernel_name(world: int, nbytes: int) -> str:
    """The demangled name (as kineto writes it) of the kernel FlashInfer's seed policy
    launches for a bf16 all-reduce of `nbytes` at `world` ranks (2, 4 or 8)."""
    inner, data = _SEED_KERNELS[(world, nbytes >= SEED_STAGE_BYTES)]
    return f"void {KERNEL_NAMESPACE}{inner}({KERNEL_NAMESPACE}{data}<__nv_bfloat16>)"


# ----------------------------------------------------------------- environment
def requested_backend(env: Mapping[str, str]) -> str:
    """What an environment asks of SGLang 0.5.23 for TP all-reduces: "pcie_ipc" when
    `SGLANG_ENABLE_PCIE_IPC_ALLREDUCE` is true, else "nccl". (Custom all-reduce is asked
    for by server flags, not the environment; `possible_backends` says where it serves.)"""
    return PCIE_IPC if env_bool(env.get(ENABLE_VAR)) else NCCL


def possible_backends(
    tp_size: int,
    has_nvlink: bool | None,
    *,
    p2p: bool | None = True,
    flashinfer_pcie_ipc: bool | None = None,
) -> list[str]:
    """Backends SGLang 0.5.23 could serve TP all-reduces with on this host, best first.

    `has_nvlink`: full NVLink between the TP GPUs (None: unknown, both answers kept);
    `p2p`: CUDA P2P between them; `flashinfer_pcie_ipc`: FlashInfer with `pcie_ipc_comm`
    importable (None: unknown, kept). NCCL is always possible."""
    out: list[str] = []
    if tp_size in CUSTOM_WORLD_SIZES and (
        has_nvlink is not False or (tp_size == 2 and p2p is not False)
    ):
        out.append(CUSTOM)
    if tp_size in PCIE_IPC_WORLD_SIZES and flashinfer_pcie_ipc is not False:
        out.append(PCIE_IPC)
    out.append(NCCL)
    return out


def serving_backend(
    env: Mapping[str, str],
    argv: Sequence[str],
    *,
    has_nvlink: bool | None = False,
    p2p: bool | None = True,
    flashinfer_pcie_ipc: bool | None = True,
) -> str:
    """The backend SGLang 0.5.23 serves decode/verify-sized TP all-reduces with for this
    environment and server argv on this topology: "custom", "pcie_ipc", "nccl" (or "none"
    at TP 1). A label for a candidate; `dispatch` has the whole picture."""
    return dispatch(
        env=env,
        args=ServerArgs.from_argv(list(argv)),
        has_nvlink=has_nvlink,
        p2p=p2p,
        flashinfer_pcie_ipc=flashinfer_pcie_ipc,
    ).serving


# ----------------------------------------------------------------- server args
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


# ----------------------------------------------------------------- the dispatch
@dataclass(frozen=True)
class SizeBand:
    """One backend's share of TP all-reduces: messages up to `max_bytes` (None: any)."""

    backend: str
    max_bytes: int | None
    note: str = ""


@dataclass
class Dispatch:
    """Which backend serves which TP all-reduce sizes, and why the requested one does not.

    `requested`: `requested_backend(env)`; `serving`: the backend of decode/verify-sized
    all-reduces; `bands`: ascending size bands; `fallbacks`: why `requested` is not used
    (SGLang's own words where it logs them); `max_numel`/`rows`: the PCIe-IPC bound;
    `expect_lines`: what SGLang logs per rank when the backend comes up."""

    requested: str
    serving: str
    tp_size: int
    bands: list[SizeBand] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    max_numel: int | None = None
    rows: int | None = None
    hidden: int | None = None
    expect_lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rows_rule: str | None = None  # how SGLang arrives at `rows` (rows_rule)

    @property
    def max_bytes(self) -> int | None:
        """The size bound of the serving backend (None: unbounded or unknown)."""
        for band in self.bands:
            if band.backend == self.serving:
                return band.max_bytes
        return None

    def describe(self) -> str:
        """`all-reduces up to 2.2 MiB (decode and verify): FlashInfer PCIe-IPC; above: NCCL`."""
        if self.tp_size <= 1:
            return "TP 1: no all-reduces"
        parts: list[str] = []
        for i, band in enumerate(self.bands):
            name = BACKEND_NAMES.get(band.backend, band.backend)
            note = f" ({band.note})" if band.note else ""
            last = i == len(self.bands) - 1
            if band.backend == FUSION:
                parts.append(f"fused layer boundaries{note}: {name}")
            elif band.max_bytes is None and not last:  # bound in rows: hidden size unknown
                rows = f"{self.rows} rows" if self.rows else "the widest decode"
                parts.append(f"all-reduces up to {rows} x hidden{note}: {name}")
            elif band.max_bytes is None:
                prefix = "above" if i else "all all-reduces"
                parts.append(f"{prefix}{note}: {name}")
            else:
                parts.append(f"all-reduces up to {human_bytes(band.max_bytes)}{note}: {name}")
        text = "; ".join(parts)
        if self.fallbacks:
            text += f" ({BACKEND_NAMES.get(self.requested, self.requested)} not used: "
            text += "; ".join(self.fallbacks) + ")"
        return text

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["max_bytes"] = self.max_bytes
        d["description"] = self.describe()
        return d


def human_bytes(n: int) -> str:
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


def deterministic_collectives(env: Mapping[str, str], args: ServerArgs) -> bool:
    """`GroupCoordinator._deterministic_collectives_enabled`: SGLANG_USE_1STAGE_ALLREDUCE
    when set, else deterministic inference (the flag; SGLang overwrites the variable)."""
    one_stage = env.get(ONE_STAGE_VAR)
    if one_stage is not None:
        return bool(env_bool(one_stage))
    return deterministic_inference(args)


# ----------------------------------------------------------------- the workspace bound
def default_decode_max_bs(gpu_mem_mib: int | None, tp_size: int) -> int:
    """`memory_hook.handle_gpu_memory_settings`: the decode graphs' max_bs by GPU memory
    (MiB, None: unknown) and TP size, when --cuda-graph-max-bs-decode is not given."""
    if gpu_mem_mib is None:
        return 160
    small_tp = tp_size < 4
    for limit_gib, few, many in ((20, 8, 8), (35, 48, 160), (60, 32, 160), (90, 256, 512),
                                 (160, 256, 512)):  # fmt: skip
        if gpu_mem_mib < limit_gib * 1024:
            return few if small_tp else many
    return 512


def decode_batch_sizes(args: ServerArgs, gpu_mem_mib: int | None = None) -> list[int]:
    """The decode batch list SGLang resolves (`cuda_graph_config[decode].bs`), built whether
    or not a decode graph is captured: `--cuda-graph-bs-decode` as given, else
    `cuda_graph_hook.generate_decode_cuda_graph_batch_sizes` up to max_bs (a default max_bs
    is first capped at --max-running-requests)."""
    if args.decode_bs:
        return list(args.decode_bs)
    max_bs = args.decode_max_bs
    if max_bs is None:
        max_bs = default_decode_max_bs(gpu_mem_mib, args.tp_size)
        if args.max_running_requests is not None and max_bs > args.max_running_requests:
            max_bs = args.max_running_requests
    if args.disable_cuda_graph_padding:
        bs = list(range(1, max_bs + 1))
    elif not args.speculative:
        bs = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16),
              *range(512, max_bs + 1, 32)]  # fmt: skip
    else:
        bs = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8),
              *range(272, max_bs + 1, 16)]  # fmt: skip
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


def capture_batch_sizes(
    args: ServerArgs, request_pool: int | None, gpu_mem_mib: int | None = None
) -> list[int]:
    """`base_cuda_graph_runner.get_batch_sizes_to_capture` (alignment 1: no attention DP):
    the decode list clamped to the request pool (`req_to_token_pool.size`; None: not known
    before the load, no clamp)."""
    bs = decode_batch_sizes(args, gpu_mem_mib)
    if request_pool is not None:
        if max(bs) > request_pool:
            bs = [*bs, request_pool]
        bs = [b for b in bs if b <= request_pool]
    return sorted(set(bs))


def widest_decode_rows(
    args: ServerArgs, request_pool: int | None = None, gpu_mem_mib: int | None = None
) -> int:
    """`base_runner._widest_decode_rows`: max(captured decode batch) x tokens per request
    (the draft tokens of a speculative verify, else 1): the rows PCIe-IPC's workspace holds."""
    return max(capture_batch_sizes(args, request_pool, gpu_mem_mib)) * max(1, args.draft_tokens)


def pcie_ipc_rows(
    args: ServerArgs, request_pool: int | None = None, gpu_mem_mib: int | None = None
) -> tuple[int, str]:
    """(rows of the widest decode reduction by SGLang's rule, a short note)."""
    rows = widest_decode_rows(args, request_pool, gpu_mem_mib)
    tokens = max(1, args.draft_tokens)
    return rows, f"decode max_bs {rows // tokens} x {tokens} draft tokens"


def rows_rule(
    args: ServerArgs, request_pool: int | None = None, gpu_mem_mib: int | None = None
) -> str:
    """Where the rows come from, in SGLang's terms (for `profile show --effective`, doctor)."""
    if args.decode_bs:
        src = f"--cuda-graph-bs-decode {' '.join(map(str, args.decode_bs))}"
    elif args.decode_max_bs is not None:
        src = f"{args.decode_max_bs_from or '--cuda-graph-max-bs-decode'} {args.decode_max_bs}"
    elif gpu_mem_mib is None:
        src = "SGLang's default max_bs when the GPU memory is unknown (160)"
    else:
        src = (
            f"SGLang's default max_bs for {gpu_mem_mib // 1024} GiB GPUs at TP {args.tp_size} "
            f"({default_decode_max_bs(gpu_mem_mib, args.tp_size)})"
        )
    pool = (
        f"capped at the request pool ({request_pool})"
        if request_pool is not None
        else "at most: SGLang caps it at the request pool it sizes at load"
    )
    graph = "" if args.decode_graph else "; the same without a decode CUDA graph"
    return (
        f"largest decode batch ({src}; {pool}) x draft tokens per request x hidden{graph} "
        "(base_runner._widest_decode_rows)"
    )


def dispatch(
    *,
    env: Mapping[str, str],
    args: ServerArgs,
    has_nvlink: bool | None = False,
    p2p: bool | None = True,
    hidden: int | None = None,
    flashinfer_pcie_ipc: bool | None = True,
    request_pool: int | None = None,
    gpu_mem_mib: int | None = None,
    gpu_sm: int | None = None,
) -> Dispatch:
    """SGLang 0.5.23's choice for the TP group, as a pure function of topology, TP size,
    server args and environment. `hidden`: the model's hidden size (None: bounds are given
    in rows); `flashinfer_pcie_ipc`: FlashInfer with `pcie_ipc_comm` importable;
    `request_pool`/`gpu_mem_mib`: what SGLang sizes the decode batch list from (None:
    unknown here); `gpu_sm`: the GPUs' compute capability x10 (90: H100/H200), for the
    fusion all-reduce's auto-enable."""
    tp = args.tp_size
    requested = requested_backend(env)
    d = Dispatch(requested=requested, serving=NCCL, tp_size=tp, hidden=hidden)
    if tp <= 1:
        d.serving = "none"
        if requested == PCIE_IPC:
            d.fallbacks.append("world size 1: SGLang builds no all-reduce backend")
        return d
    bands: list[SizeBand] = []
    # FlashInfer's fusion all-reduce (all-reduce + residual + RMSNorm in the layer
    # boundary) is asked before the GroupCoordinator's own backends
    fusion = fusion_backend(args, gpu_sm)
    if fusion is not None:
        backend, why = fusion
        bands.append(SizeBand(FUSION, None, f"{backend}; {why}; up to "
                              f"{FUSE_ALLREDUCE_MAX_TOKENS} tokens of fused layers"))  # fmt: skip
        d.notes.append(
            f"FlashInfer fusion all-reduce ({backend}: {why}) serves the fused layer "
            "boundaries first; the bands below serve the all-reduces it does not take"
        )
    if args.dp_attention:
        d.notes.append(
            "--enable-dp-attention: attention all-reduces run in the attention_tp group, "
            "which never gets PCIe-IPC or custom all-reduce (pcie_ipc_ar._ELIGIBLE_GROUP_NAMES)"
        )
    if args.ep_size > 1:
        d.notes.append(
            f"--ep-size {args.ep_size}: MoE reductions run in the moe_tp/EP groups, which never "
            "get PCIe-IPC (only the 'tp' group is eligible)"
        )
    # custom all-reduce (custom_all_reduce_utils.can_use_custom_all_reduce_with_nvlink)
    custom_ok = (
        not args.disable_custom_all_reduce
        and tp in CUSTOM_WORLD_SIZES
        and (has_nvlink is True or (tp == 2 and p2p is not False))
    )
    if custom_ok:
        if has_nvlink and env_bool(env.get(CUSTOM_V2_VAR)) is not False:
            kb = env_int(env.get(CUSTOM_V2_MAX_KB_VAR)) or CUSTOM_V2_MAX_KB
            bands.append(SizeBand(CUSTOM, kb * 1024))
        else:
            bands.append(SizeBand(CUSTOM, CUSTOM_MAX_BYTES))
    pcie = requested == PCIE_IPC
    if pcie:
        why = _pcie_ipc_blocked(env, args, flashinfer_pcie_ipc)
        if why:
            d.fallbacks.append(why)
            pcie = False
    if pcie and args.enable_symm_mem:
        d.fallbacks.append(
            "--enable-symm-mem: NCCL symmetric memory takes every all-reduce that custom "
            "all-reduce does not, before PCIe-IPC is asked"
        )
        pcie = False
    if pcie:
        override = env_int(env.get(MAX_NUMEL_VAR))
        if override:
            d.max_numel = override
            d.rows = override // hidden if hidden else None
            note = f"{MAX_NUMEL_VAR}={override} elements"
        else:
            d.rows, note = pcie_ipc_rows(args, request_pool, gpu_mem_mib)
            d.rows_rule = rows_rule(args, request_pool, gpu_mem_mib)
            d.max_numel = d.rows * hidden if (d.rows and hidden) else None
            note = f"decode and verify: {note}"
        if args.enable_mscclpp:  # asked before PCIe-IPC for the sizes it has tuned
            note += "; MSCCL++ first where it has a tuned config (--enable-mscclpp)"
        max_bytes = d.max_numel * BF16_BYTES if d.max_numel else None
        if custom_ok and bands and max_bytes is not None and max_bytes <= bands[0].max_bytes:
            d.fallbacks.append(
                "custom all-reduce is asked first and covers every size PCIe-IPC would serve"
            )
        else:
            bands.append(SizeBand(PCIE_IPC, max_bytes, note))
        d.expect_lines = [ENABLED_TEXT, BUILT_TEXT]
    extra = []
    if args.enable_mscclpp:
        extra.append("MSCCL++ for its tuned sizes")
    if args.enable_torch_symm_mem:
        extra.append("torch symmetric memory for bf16 within its buffer")
    if args.enable_symm_mem:
        extra.append("symmetric memory")
    if args.enable_nccl_nvls:
        extra.append("NVLS when NVLink allows")
    bands.append(SizeBand(NCCL, None, ", ".join(extra)))
    d.bands = bands
    d.serving = next((b.backend for b in bands if b.backend != FUSION), NCCL)
    return d


def fusion_backend(args: ServerArgs, gpu_sm: int | None) -> tuple[str, str] | None:
    """(backend, why) of FlashInfer's fusion all-reduce, as `arg_groups/overrides.py`
    resolves it: the flag, else auto-enabled on SM90/SM100 for the architectures in
    `_FLASHINFER_ALLREDUCE_FUSION_ARCHS` at TP > 1 without attention DP, on one node (or
    SM100), without an MoE all-to-all backend; deterministic inference and
    --enforce-disable-flashinfer-allreduce-fusion turn it off. None: not used."""
    if args.fusion_disabled or deterministic_inference(args):
        return None
    if args.fusion_backend:
        return args.fusion_backend, "--flashinfer-allreduce-fusion-backend"
    if (
        args.architecture in FUSION_ARCHS
        and gpu_sm in (90, 100)
        and args.tp_size > 1
        and not args.dp_attention
        and (args.nnodes == 1 or gpu_sm == 100)
        and args.moe_a2a_backend == "none"
    ):
        return "auto", f"auto-enabled for {args.architecture} on SM{gpu_sm}"
    return None


def deterministic_inference(args: ServerArgs) -> bool:
    """--enable-deterministic-inference, or --rl-on-policy-target, which turns it on
    (`arg_groups/attention_hook.py`: 'Enable deterministic inference because of
    rl_on_policy_target.')."""
    return args.deterministic or args.rl_on_policy_target


def _pcie_ipc_blocked(
    env: Mapping[str, str], args: ServerArgs, flashinfer_pcie_ipc: bool | None
) -> str | None:
    """Why SGLang will not serve with PCIe-IPC although the variable asks for it, in the
    order SGLang checks (eligible_group, then the communicator, then each tensor)."""
    if deterministic_collectives(env, args):
        if ONE_STAGE_VAR in env:
            src = f"{ONE_STAGE_VAR}={env[ONE_STAGE_VAR]}"
        elif args.deterministic:
            src = "--enable-deterministic-inference"
        else:
            src = "--rl-on-policy-target (turns deterministic inference on)"
        return src + f": SGLang logs '{DETERMINISTIC_TEXT}'"
    if args.nnodes > 1:
        return (
            f"the TP group spans {args.nnodes} nodes: FlashInfer's PCIe-IPC all-reduce is "
            "intra-node only (its workspace raises on a group across nodes)"
        )
    if args.tp_size not in PCIE_IPC_WORLD_SIZES:
        return (
            f"world size {args.tp_size}: the kernels build IPC channels for "
            f"{'/'.join(map(str, PCIE_IPC_WORLD_SIZES))} ranks only"
        )
    if flashinfer_pcie_ipc is False:
        return f"FlashInfer without pcie_ipc_comm: SGLang logs '{NO_COMM_TEXT}'"
    dtype, why = args.dtype_resolved
    if dtype not in ("auto", "bfloat16"):
        return (
            f"{why}: every reduction is {dtype}, and SGLang logs '{DTYPE_TEXT} ... reductions "
            "stay on NCCL.' (the workspace is built with a bf16 probe, so every rank still "
            "logs 'workspace built')"
        )
    return None


# ----------------------------------------------------------------- log lines
_ENABLED_RE = re.compile(r"FlashInfer PCIe-IPC all-reduce enabled \(world=(\d+)")
_BUILT_RE = re.compile(
    r"FlashInfer PCIe-IPC workspace built \(world=(\d+), max_numel=(\d+), hidden=(\d+)\)"
)
_FAILED_RE = re.compile(r"FlashInfer PCIe-IPC workspace \(max_numel=(\d+)\) failed: (.*?); red")
_AUTOTUNED_RE = re.compile(r"FlashInfer PCIe-IPC all-reduce autotuned (\d+) shape")


def parse_line(line: str) -> dict[str, Any] | None:
    """An all-reduce backend line of SGLang 0.5.23 -> `{"kind": "allreduce", "event": ...}`
    (events: enabled, built, autotuned, fallback); None for any other line. `tp_rank` is
    added by the caller's prefix parser."""
    if "PCIe-IPC" not in line and "pcie_ipc" not in line:
        return None
    rec: dict[str, Any] = {"kind": "allreduce", "backend": PCIE_IPC}
    m = _BUILT_RE.search(line)
    if m:
        world, numel, hidden = (int(g) for g in m.groups())
        rec.update(event="built", world=world, max_numel=numel, hidden=hidden)
        rec["max_bytes"] = numel * BF16_BYTES
        return rec
    m = _ENABLED_RE.search(line)
    if m:
        rec.update(event="enabled", world=int(m.group(1)))
        return rec
    m = _AUTOTUNED_RE.search(line)
    if m:
        rec.update(event="autotuned", shapes=int(m.group(1)))
        return rec
    for text, why in (
        (NO_COMM_TEXT, "no_pcie_ipc_comm"),
        (DETERMINISTIC_TEXT, "deterministic"),
        (DTYPE_TEXT, "dtype"),
        (SETUP_FAILED_TEXT, "setup_failed"),
    ):
        if text in line:
            rec.update(event="fallback", why=why, message=_message(line, text))
            return rec
    m = _FAILED_RE.search(line)
    if m:
        rec.update(event="fallback", why="workspace_failed", message=_message(line, m.group(0)))
        rec["max_numel"] = int(m.group(1))
        return rec
    if (
        AUTOTUNE_FAILED_TEXT in line
        or "keeps the seed policy" in line
        or ("keeping the seed policy" in line or "seed policy instead" in line)
    ):
        rec.update(event="seed_policy", message=_message(line, "FlashInfer PCIe-IPC"))
        return rec
    return None


def _message(line: str, anchor: str) -> str:
    """The message part of a log line (from the first known word on)."""
    for start in ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "Deterministic", "Setup", "FlashInfer"):
        i = line.find(start)
        if i >= 0:
            return line[i:].strip()
    i = line.find(anchor)
    return line[i if i >= 0 else 0 :].strip()
