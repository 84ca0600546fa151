"""SGLang 0.5.23's all-reduce dispatch: which backend serves which TP all-reduce sizes.

The one home of these facts (tests/contract/ pins each to the installed sglang 0.5.23 and
flashinfer-python 0.7.2). Sources, under `sglang/srt/`:

- `distributed/parallel_state.py` (`GroupCoordinator.__init__`, `all_reduce`,
  `_resolve_outplace_all_reduce_method`): per tensor, in this order: NCCL with symmetric
  memory (`--enable-symm-mem`) unless custom all-reduce or MSCCL++ takes it; then custom
  all-reduce (`ca`); then FlashInfer PCIe-IPC (`pcie_ipc`); then MSCCL++, torch
  symmetric memory; everything else pynccl (`ncclAllReduce`).
- `distributed/device_communicators/custom_all_reduce*.py`: custom all-reduce only in one
  node, world size 2/4/6/8, and full NVLink, or exactly 2 GPUs over PCIe with P2P ("not
  supported on more than two PCIe-only GPUs"); v2 (default on CUDA) needs full NVLink and
  caps at `SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB` (16 MiB); the legacy class at 8 MiB.
  `--disable-custom-all-reduce` turns it off.
- `distributed/device_communicators/pcie_ipc_ar.py`: `SGLANG_ENABLE_PCIE_IPC_ALLREDUCE`
  (EnvBool, default False), the `tp` group only, world size > 1 and in (2, 4, 8), never
  with deterministic collectives (`SGLANG_USE_1STAGE_ALLREDUCE` when set, else
  `--enable-deterministic-inference`), bf16 tensors only, up to `max_numel` elements:
  `SGLANG_PCIE_IPC_MAX_NUMEL` when set (non-zero), else the widest decode reduction,
  `max_bs x draft tokens x hidden` (64 rows when no decode CUDA graph is captured).

FlashInfer 0.7.2 (`flashinfer/comm/pcie_ipc_tuning.py`, `jit/env.py`,
`data/include/flashinfer/comm/pcie_ipc_all_reduce.cuh`): tactics persist at
`$FLASHINFER_AUTOTUNE_DIR/pcie_ipc_all_reduce_ws{N}.json` (default
`$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<arch>/autotune`); the JIT
workspace lives under `$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`; the all-reduce
kernels are `flashinfer::comm::pcie_ipc::{KERNELS}`.

`requested_backend(env)` and `possible_backends(...)` are the labels other modules
(experiments, `tune`) put on a candidate; `dispatch(...)` is the whole picture.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fastverify.sglang.envnames import (  # noqa: F401  (the dispatch's names, re-exported)
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
BACKEND_NAMES = {
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


def is_pcie_ipc_kernel(name: str) -> bool:
    """A FlashInfer PCIe-IPC all-reduce kernel as kineto names it (demangled:
    `void flashinfer::comm::pcie_ipc::ipc_topo_rsag8_push_param_kernel<__nv_bfloat16,
    true>(...)`). Its all-gather / reduce-scatter kernels (sub-namespaces) are not."""
    return KERNEL_NAMESPACE in name and _KERNEL_RE.search(name) is not None


def kernel_name(world: int, staged: bool = False) -> str:
    """The demangled name of the kernel FlashInfer's dispatch table launches for bf16 at
    `world` ranks (`pcie_ipc_all_reduce.cuh`), for the sim's traces."""
    if world == 2:
        inner = f"ipc_tp2_remote_push_kernel<__nv_bfloat16, {str(staged).lower()}, false>"
        data = "IpcTp2RemotePushData"
    elif world == 4:
        inner = (
            "ipc_rsag_push_param_kernel<__nv_bfloat16, 4, false>"
            if staged
            else "push_oneshot_param_kernel<__nv_bfloat16, 4, false, false>"
        )
        data = "PushOneshotParamData"
    else:
        inner = (
            "ipc_topo_rsag8_block_param_kernel<__nv_bfloat16, false>"
            if staged
            else "ipc_topo_rsag8_push_param_kernel<__nv_bfloat16, false>"
        )
        data = "PushOneshotParamData"
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
    decode_graph: bool = True  # a decode CUDA graph is captured
    draft_tokens: int = 1  # rows per request in a decode/verify pass

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> ServerArgs:
        from fastverify.sglang.launch import LaunchArgs

        la = LaunchArgs.from_argv(list(argv))

        def on(*names: str) -> bool:
            return la.flag(*names) is not None

        max_bs = la.flag("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
        spec = la.speculative
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
        )


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
            if band.max_bytes is None and not last:  # bound in rows: hidden size unknown
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
    return args.deterministic


def pcie_ipc_rows(args: ServerArgs) -> tuple[int | None, str]:
    """Rows of the widest decode reduction (None: SGLang's choice of max_bs, unknown here)."""
    if not args.decode_graph:
        return FALLBACK_DECODE_WIDTH, "no decode CUDA graph: SGLang's fixed fallback width"
    if args.decode_max_bs is None:
        return None, "decode max_bs x draft tokens"
    return args.decode_max_bs * max(1, args.draft_tokens), (
        f"decode max_bs {args.decode_max_bs} x {max(1, args.draft_tokens)} draft tokens"
    )


def dispatch(
    *,
    env: Mapping[str, str],
    args: ServerArgs,
    has_nvlink: bool | None = False,
    p2p: bool | None = True,
    hidden: int | None = None,
    flashinfer_pcie_ipc: bool | None = True,
) -> Dispatch:
    """SGLang 0.5.23's choice for the TP group, as a pure function of topology, TP size,
    server args and environment. `hidden`: the model's hidden size (None: bounds are given
    in rows); `flashinfer_pcie_ipc`: FlashInfer with `pcie_ipc_comm` importable."""
    tp = args.tp_size
    requested = requested_backend(env)
    d = Dispatch(requested=requested, serving=NCCL, tp_size=tp, hidden=hidden)
    if tp <= 1:
        d.serving = "none"
        if requested == PCIE_IPC:
            d.fallbacks.append("world size 1: SGLang builds no all-reduce backend")
        return d
    bands: list[SizeBand] = []
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
            d.rows, note = pcie_ipc_rows(args)
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
    d.serving = bands[0].backend
    return d


def _pcie_ipc_blocked(
    env: Mapping[str, str], args: ServerArgs, flashinfer_pcie_ipc: bool | None
) -> str | None:
    """Why SGLang will not serve with PCIe-IPC although the variable asks for it, in the
    order SGLang checks (eligible_group, then the communicator, then each tensor)."""
    if deterministic_collectives(env, args):
        return (
            f"{ONE_STAGE_VAR}={env[ONE_STAGE_VAR]}"
            if ONE_STAGE_VAR in env
            else "--enable-deterministic-inference"
        ) + f": SGLang logs '{DETERMINISTIC_TEXT}'"
    if args.tp_size not in PCIE_IPC_WORLD_SIZES:
        return (
            f"world size {args.tp_size}: the kernels build IPC channels for "
            f"{'/'.join(map(str, PCIE_IPC_WORLD_SIZES))} ranks only"
        )
    if flashinfer_pcie_ipc is False:
        return f"FlashInfer without pcie_ipc_comm: SGLang logs '{NO_COMM_TEXT}'"
    if args.dtype not in ("auto", "bfloat16"):
        return f"--dtype {args.dtype}: SGLang logs '{DTYPE_TEXT} ... reductions stay on NCCL.'"
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
