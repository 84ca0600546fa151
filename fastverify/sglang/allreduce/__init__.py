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

Modules: `constants` (names, backends, bounds, published figures), `kernels` (FlashInfer's
kernels as traces name them), `logs` (the log lines), `args` (the server arguments read),
`bound` (the PCIe-IPC workspace bound), `backends` (the dispatch). The names below are the
package's API; the variables it reads are `fastverify.sglang.envvars`'.
"""

from fastverify.sglang.allreduce.args import (
    ServerArgs,
    model_config,
)
from fastverify.sglang.allreduce.backends import (
    Dispatch,
    SizeBand,
    deterministic_collectives,
    deterministic_inference,
    dispatch,
    fusion_backend,
    human_bytes,
    possible_backends,
    requested_backend,
    serving_backend,
)
from fastverify.sglang.allreduce.bound import (
    capture_batch_sizes,
    decode_batch_sizes,
    default_decode_max_bs,
    pcie_ipc_rows,
    rows_rule,
    widest_decode_rows,
)
from fastverify.sglang.allreduce.constants import (
    AUTOTUNE_DIR_VAR,
    BACKEND_NAMES,
    BF16_BYTES,
    CACHE_FILE,
    CUSTOM,
    CUSTOM_MAX_BYTES,
    CUSTOM_V2_MAX_KB,
    CUSTOM_WORLD_SIZES,
    DTYPES,
    FALLBACK_DECODE_WIDTH,
    FUSE_ALLREDUCE_MAX_TOKENS,
    FUSION,
    FUSION_ARCHS,
    MSCCLPP,
    NCCL,
    PCIE_IPC,
    PCIE_IPC_GROUPS,
    PCIE_IPC_WORLD_SIZES,
    PUBLISHED_US,
    PUBLISHED_WHERE,
    PUBLISHED_WORLD,
    TORCH_SYMM_MEM,
    WORKSPACE_BASE_VAR,
)
from fastverify.sglang.allreduce.kernels import (
    CE_KERNELS,
    CE_MEMOP_WAIT_KERNEL,
    CE_ROLES,
    KERNEL_NAMESPACE,
    KERNELS,
    SEED_STAGE_BYTES,
    ce_role,
    is_pcie_ipc_kernel,
    kernel_name,
)
from fastverify.sglang.allreduce.logs import (
    AUTOTUNE_FAILED_TEXT,
    AUTOTUNE_OFF_TEXT,
    AUTOTUNED_FORMAT,
    AUTOTUNED_TEXT,
    BUILD_FAILED_FORMAT,
    BUILD_FAILED_TAIL,
    BUILD_FAILED_TEXT,
    BUILT_FORMAT,
    BUILT_TEXT,
    CUSTOM_PCIE_TEXT,
    DETERMINISTIC_FORMAT,
    DETERMINISTIC_TEXT,
    DTYPE_FORMAT,
    DTYPE_TEXT,
    ENABLED_FORMAT,
    ENABLED_TEXT,
    FIXED_WIDTH_TEXT,
    NO_COMM_FORMAT,
    NO_COMM_TEXT,
    SETUP_FAILED_TEXT,
    parse_line,
)
from fastverify.sglang.envvars import (
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

__all__ = [
    "ALLREDUCE_VARS",
    "AUTOTUNED_FORMAT",
    "AUTOTUNED_TEXT",
    "AUTOTUNE_DIR_VAR",
    "AUTOTUNE_FAILED_TEXT",
    "AUTOTUNE_OFF_TEXT",
    "BACKEND_NAMES",
    "BF16_BYTES",
    "BOOL_FALSE",
    "BOOL_TRUE",
    "BUILD_FAILED_FORMAT",
    "BUILD_FAILED_TAIL",
    "BUILD_FAILED_TEXT",
    "BUILT_FORMAT",
    "BUILT_TEXT",
    "CACHE_FILE",
    "CE_KERNELS",
    "CE_MEMOP_WAIT_KERNEL",
    "CE_ROLES",
    "CUSTOM",
    "CUSTOM_MAX_BYTES",
    "CUSTOM_PCIE_TEXT",
    "CUSTOM_V2_MAX_KB",
    "CUSTOM_V2_MAX_KB_VAR",
    "CUSTOM_V2_VAR",
    "CUSTOM_WORLD_SIZES",
    "DETERMINISTIC_FORMAT",
    "DETERMINISTIC_TEXT",
    "DETERMINISTIC_VAR",
    "DTYPES",
    "DTYPE_FORMAT",
    "DTYPE_TEXT",
    "ENABLED_FORMAT",
    "ENABLED_TEXT",
    "ENABLE_VAR",
    "FALLBACK_DECODE_WIDTH",
    "FIXED_WIDTH_TEXT",
    "FUSE_ALLREDUCE_MAX_TOKENS",
    "FUSION",
    "FUSION_ARCHS",
    "KERNELS",
    "KERNEL_NAMESPACE",
    "MAX_NUMEL_VAR",
    "MSCCLPP",
    "NCCL",
    "NO_COMM_FORMAT",
    "NO_COMM_TEXT",
    "ONE_STAGE_VAR",
    "PCIE_IPC",
    "PCIE_IPC_GROUPS",
    "PCIE_IPC_WORLD_SIZES",
    "PUBLISHED_US",
    "PUBLISHED_WHERE",
    "PUBLISHED_WORLD",
    "SEED_STAGE_BYTES",
    "SETUP_FAILED_TEXT",
    "TORCH_SYMM_MEM",
    "WORKSPACE_BASE_VAR",
    "Dispatch",
    "ServerArgs",
    "SizeBand",
    "capture_batch_sizes",
    "ce_role",
    "decode_batch_sizes",
    "default_decode_max_bs",
    "deterministic_collectives",
    "deterministic_inference",
    "dispatch",
    "env_bool",
    "env_int",
    "fusion_backend",
    "human_bytes",
    "is_pcie_ipc_kernel",
    "kernel_name",
    "model_config",
    "parse_line",
    "pcie_ipc_rows",
    "possible_backends",
    "requested_backend",
    "rows_rule",
    "serving_backend",
    "widest_decode_rows",
]
