"""FlashInfer 0.7.2's PCIe-IPC all-reduce kernels as kineto names them: the one-shot and
two-shot kernels, the copy-engine tactics' kernels and their roles, and the kernel the seed
policy launches for a size."""

from __future__ import annotations

import re

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
