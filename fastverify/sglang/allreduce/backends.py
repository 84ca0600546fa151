"""Which backend serves which TP all-reduce sizes (`dispatch`), and the labels other modules
put on a candidate (`requested_backend`, `possible_backends`, `serving_backend`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fastverify.sglang.allreduce.args import ServerArgs
from fastverify.sglang.allreduce.bound import pcie_ipc_rows, rows_rule
from fastverify.sglang.allreduce.constants import (
    BACKEND_NAMES,
    BF16_BYTES,
    CUSTOM,
    CUSTOM_MAX_BYTES,
    CUSTOM_V2_MAX_KB,
    CUSTOM_WORLD_SIZES,
    FUSE_ALLREDUCE_MAX_TOKENS,
    FUSION,
    FUSION_ARCHS,
    NCCL,
    PCIE_IPC,
    PCIE_IPC_WORLD_SIZES,
)
from fastverify.sglang.allreduce.logs import (
    BUILT_TEXT,
    DETERMINISTIC_TEXT,
    DTYPE_TEXT,
    ENABLED_TEXT,
    NO_COMM_TEXT,
)
from fastverify.sglang.envvars import (
    CUSTOM_V2_MAX_KB_VAR,
    CUSTOM_V2_VAR,
    ENABLE_VAR,
    MAX_NUMEL_VAR,
    ONE_STAGE_VAR,
    env_bool,
    env_int,
)


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
        blocked = _pcie_ipc_blocked(env, args, flashinfer_pcie_ipc)
        if blocked:
            d.fallbacks.append(blocked)
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
        first = bands[0].max_bytes if bands else None
        if custom_ok and first is not None and max_bytes is not None and max_bytes <= first:
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
