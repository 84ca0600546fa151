"""SGLang 0.5.23's all-reduce constants: FlashInfer's variables and cache file, the
backends and their names, the bounds of each (world sizes, sizes), the architectures that
fuse their all-reduce, and SGLang's published PCIe-IPC timings."""

from __future__ import annotations

# FlashInfer's own (flashinfer/comm/pcie_ipc_tuning.py, flashinfer/jit/env.py)
AUTOTUNE_DIR_VAR = "FLASHINFER_AUTOTUNE_DIR"
WORKSPACE_BASE_VAR = "FLASHINFER_WORKSPACE_BASE"
CACHE_FILE = "pcie_ipc_all_reduce_ws{world}.json"

# defaults and bounds
PCIE_IPC_WORLD_SIZES = (2, 4, 8)  # pcie_ipc_ar._SUPPORTED_WORLD_SIZES
PCIE_IPC_GROUPS = ("tp",)  # pcie_ipc_ar._ELIGIBLE_GROUP_NAMES
FALLBACK_DECODE_WIDTH = 64  # pcie_ipc_ar._FALLBACK_DECODE_WIDTH (rows)
CUSTOM_WORLD_SIZES = (2, 4, 6, 8)  # CustomAllreduce._SUPPORTED_WORLD_SIZES
CUSTOM_MAX_BYTES = 8192 * 1024  # CustomAllreduce._MAX_CAR_SIZE on CUDA (legacy class)
CUSTOM_V2_MAX_KB = 16 * 1024  # envs.SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB default
BF16_BYTES = 2
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")  # --dtype choices

# the backends
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
