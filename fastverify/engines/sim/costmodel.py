"""The sim engine's cost model: how long a forward pass, a verify pass and a decode step take.

A SIMULATION, never a measurement. It is calibrated to one field report and uses NCCL's
own latency table (src/graph/tuning.cc, `ncclTunerConstantsDefaults`) as the *relative*
basis for how NCCL settings change all-reduce cost. See docs/sim.md for the user-facing
description.

Calibration target (field report): 8 PCIe Gen5 GPUs, a 61-layer MoE model (hidden 7168,
bf16), tensor parallel 8, two all-reduces per layer = 122 per forward pass. With the
`ring-ll` profile (Ring, LL, P2P_LEVEL=SYS, 16 channels) and CUDA graphs on, at batch 1:
- a baseline decode step takes ~12.2 ms (~82 tok/s);
- an EAGLE-3 verify pass (4 draft tokens) takes ~29 ms, of which ~24 ms are the 122
  all-reduces (~0.2 ms each, end to end) and ~5 ms compute;
- the whole spec cycle (3 draft steps + verify + draft extend) takes ~30 ms, so with an
  accept length of 2.0 EAGLE-3 makes ~65 tok/s and loses to the baseline (break-even
  accept length ~2.5; the field measured ~2.46).

One all-reduce of B bytes over n ranks costs (microseconds):
    t = latency(algo, proto) * hop_factor      NCCL's base latency + per-hop latency,
                                               2(n-1) hops for Ring and for Tree (on one
                                               node NCCL's tree is a chain)
      + bytes_on_wire / bandwidth(proto)       2(n-1)/n * B over PCIe; LL carries 4 data
                                               bytes per 8-byte line (50%), LL128 ~92%,
                                               Simple 100%; SHM halves the bandwidth
      + CHANNEL_US * nchannels                 per-channel cost of a latency-bound
                                               message (more CTAs to launch and sync)
      + (bytes beyond one buffer-slot round) * extra pipeline steps (NCCL_BUFFSIZE)
      * nthreads factor on the data part       fewer threads move LL data slower
      + SYNC_GAP_US + skew(tokens)             calibrated end-to-end term: launch gaps and
                                               waiting for the slowest rank; grows with
                                               tokens per forward and saturates
Transport: P2P when NCCL_P2P_LEVEL allows the box's SYS path and NCCL_P2P_DISABLE != 1,
else SHM through host memory (per-hop latency x SHM_HOP_FACTOR, bandwidth x SHM_BW_FACTOR),
else (NCCL_SHM_DISABLE=1 too) NCCL's socket transport (x NET_HOP_FACTOR, x NET_BW_FACTOR).
Algorithm/protocol: when several are allowed the model picks the cheapest for each
message size, as NCCL's tuner does; LL128 is only considered when NCCL_PROTO asks for it
(NCCL does not enable it over PCIe).

Eager mode (no CUDA graph) adds host launch overhead per kernel (EAGER_LAUNCH_US per
compute kernel, EAGER_NCCL_HOST_US per all-reduce call); with graphs a forward pays
one graph launch (GRAPH_LAUNCH_US). NCCL_ALGO resolving to Tree for all-reduce with CUDA
graphs on fails during capture (`Prediction.error`), which is the field's observation.

Expected ranking of the shipped profiles (EAGLE-3, graphs on where they can run, bs=1):
ring-ll-8ch > ring-ll > nccl-default > tree-ll-eager > ring-simple; tree-ll fails. Each
neighbour pair differs by at least 3% (tests/unit/sim/test_costmodel.py checks this).

The model is deterministic: `predict` is a pure function of its arguments.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from fastverify.engines.sim import ncclenv
from fastverify.sglang import spans

# --- model shape (Kimi-K2.5-like MoE, bf16) ---
N_LAYERS = 61
ALLREDUCES_PER_LAYER = 2
HIDDEN = 7168
BYTES_PER_ELEM = 2
COMPUTE_KERNELS_PER_LAYER = 6  # kernels other than all-reduces (for eager launch cost)
DRAFT_LAYERS = 1  # EAGLE-3 draft head: one decoder layer, two all-reduces

# --- compute (seconds), CUDA graphs on ---
COMPUTE_BASE_S = 3.70e-3  # per target forward, weight-read bound
COMPUTE_PER_TOKEN_S = 0.32e-3  # per token in a decode/verify forward
PREFILL_PER_TOKEN_S = 0.025e-3  # per prompt token in a prefill forward (batched GEMMs)
DRAFT_COMPUTE_S = 0.20e-3  # one draft forward
DRAFT_COMPUTE_PER_TOKEN_S = 0.02e-3
SCHED_OVERHEAD_S = 0.15e-3  # scheduler CPU time per batch

# --- NCCL latency table (us), src/graph/tuning.cc ---
BASE_LAT_US = {
    ("ring", "ll"): 6.6,
    ("ring", "ll128"): 14.0,
    ("ring", "simple"): 8.4,
    ("tree", "ll"): 6.8,
    ("tree", "ll128"): 14.0,
    ("tree", "simple"): 8.4,
}
HOP_LAT_US = {
    ("ring", "ll"): 1.0,
    ("ring", "ll128"): 2.5,
    ("ring", "simple"): 5.7,
    ("tree", "ll"): 1.0,
    ("tree", "ll128"): 1.9,
    ("tree", "simple"): 4.0,
}
PCIE_BW_BYTES_PER_US = 22_000.0  # ~22 GB/s usable PCIe Gen5 x16 peer-to-peer
PROTO_BW_EFF = {"ll": 0.5, "ll128": 0.92, "simple": 1.0}
TREE_BW_EFF = 0.9  # a chain pipelines slightly worse than a ring on one node
SHM_HOP_FACTOR = 1.8
SHM_BW_FACTOR = 0.5
NET_HOP_FACTOR = 6.0  # NCCL's socket transport over loopback: proxy thread + kernel TCP
NET_BW_FACTOR = 0.25
# transport -> (per-hop latency factor, bandwidth factor)
TRANSPORT_FACTORS = {
    "p2p": (1.0, 1.0),
    "shm": (SHM_HOP_FACTOR, SHM_BW_FACTOR),
    "net": (NET_HOP_FACTOR, NET_BW_FACTOR),
}
CHANNEL_US = 1.2
NCCL_STEPS = 8  # buffer slots per channel; BUFFSIZE/NCCL_STEPS bytes per step

# --- end-to-end terms calibrated to the field report (us) ---
SYNC_GAP_US = 23.5
SKEW_MAX_US = 205.0
SKEW_HALF_TOKENS = 2.0

# --- launch overheads (us) ---
GRAPH_LAUNCH_US = 25.0
EAGER_LAUNCH_US = 6.0
EAGER_NCCL_HOST_US = 12.0

DEFAULT_ACCEPT_LENGTH = 2.0
DEFAULT_NUM_STEPS = 3
DEFAULT_TOPK = 1
DEFAULT_NUM_DRAFT_TOKENS = 4

# FlashInfer PCIe-IPC all-reduce (SGLang 0.5.23 `SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1`): the
# figures published in sglang/srt/distributed/device_communicators/pcie_ipc_ar.py, one
# 8x SM120 host (NUMA halves 0-3/4-7), hidden 6144 bf16, message bytes -> microseconds,
# beside NCCL's 205.1 / 584.9 / 1169.3 / 50400 us there. Interpolated log-log between
# points; other world sizes scale the 8-rank figure by their hop count (2(n-1) / 14).
PCIE_IPC_POINTS_US = (
    (12 * 1024, 5.3),
    (96 * 1024, 15.3),
    (384 * 1024, 34.6),
    (100 * 1024 * 1024, 8500.0),
)
PCIE_IPC_LAUNCH_US = 6.0  # per eager launch (a custom kernel: no NCCL host path)

TREE_CAPTURE_ERROR = "NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"


@dataclass(frozen=True)
class AllReduceCost:
    """One all-reduce of `nbytes`: chosen algorithm/protocol and its time in seconds."""

    nbytes: int
    algo: str  # "ring" | "tree" | "pcie_ipc" (FlashInfer's kernels, not NCCL)
    proto: str  # "ll" | "ll128" | "simple"
    nchannels: int
    seconds: float

    @property
    def algo_name(self) -> str:
        return self.algo.upper()

    @property
    def proto_name(self) -> str:
        return self.proto.upper()


@dataclass(frozen=True)
class Forward:
    """One forward pass: compute + all-reduces + launch overhead, in seconds."""

    tokens: int
    compute_seconds: float
    allreduce: AllReduceCost
    allreduce_count: int
    launch_seconds: float

    @property
    def allreduce_seconds(self) -> float:
        return self.allreduce.seconds * self.allreduce_count

    @property
    def seconds(self) -> float:
        return self.compute_seconds + self.allreduce_seconds + self.launch_seconds


@dataclass(frozen=True)
class Prediction:
    """What the model predicts for one configuration (all times in seconds)."""

    mode: str  # "baseline" | "eagle3"
    tp_size: int
    batch_size: int
    cuda_graph: bool
    accept_length: float  # tokens per request per cycle (1.0 in baseline)
    tokens_per_second: float  # whole batch
    cycle_seconds: float  # one decode step (baseline) or draft+verify+extend (eagle3)
    verify_seconds: float  # the TARGET_VERIFY (eagle3) or DECODE (baseline) forward
    allreduce_count: int  # all-reduces in that forward
    allreduce_seconds: float  # their total time per forward
    allreduce_each_seconds: float
    algo: str
    proto: str
    nchannels: int
    draft_seconds: float  # draft forwards + draft extend per cycle (0 in baseline)
    forwards: tuple[tuple[str, Forward], ...]  # (annotation kind, forward) in cycle order
    error: str | None = None  # set when this configuration cannot run

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tokens_per_second_per_request(self) -> float:
        return self.tokens_per_second / self.batch_size if self.batch_size else 0.0


def _skew_us(tokens: int) -> float:
    extra = max(0, tokens - 1)
    return SKEW_MAX_US * extra / (extra + SKEW_HALF_TOKENS)


def pcie_ipc_seconds(nbytes: int, tp_size: int) -> float:
    """One FlashInfer PCIe-IPC all-reduce, from the published 8-rank figures: the 12 KiB
    time below 12 KiB (latency-bound), log-log interpolation between the points,
    linear in bytes above 100 MiB."""
    pts = PCIE_IPC_POINTS_US
    if nbytes <= pts[0][0]:
        us = pts[0][1]
    elif nbytes >= pts[-1][0]:
        us = pts[-1][1] * nbytes / pts[-1][0]
    else:
        us = pts[-1][1]
        for (b0, t0), (b1, t1) in itertools.pairwise(pts):
            if b0 <= nbytes <= b1:
                f = math.log(nbytes / b0) / math.log(b1 / b0)
                us = t0 * (t1 / t0) ** f
                break
    return us * (2 * (tp_size - 1)) / 14.0 * 1e-6


def allreduce_cost(
    settings: ncclenv.NcclSettings,
    nbytes: int,
    tp_size: int,
    tokens: int,
    *,
    pcie_ipc_max_bytes: int | None = None,
) -> AllReduceCost:
    """Cheapest allowed (algo, proto) for an all-reduce of `nbytes` on `tp_size` GPUs;
    FlashInfer's PCIe-IPC kernels when SGLang hands it this size (`pcie_ipc_max_bytes`:
    the workspace bound SGLang would use, None: PCIe-IPC off)."""
    if tp_size <= 1:
        return AllReduceCost(nbytes, "ring", "ll", 0, 0.0)
    if pcie_ipc_max_bytes is not None and nbytes <= pcie_ipc_max_bytes:
        # the kernel's own time, plus waiting for the slowest rank (any backend waits)
        secs = pcie_ipc_seconds(nbytes, tp_size) + _skew_us(tokens) * 1e-6
        return AllReduceCost(nbytes, "pcie_ipc", "", 0, secs)
    hops = 2 * (tp_size - 1)
    wire = nbytes * 2 * (tp_size - 1) / tp_size
    nch = max(settings.min_nchannels, settings.max_nchannels)
    best: AllReduceCost | None = None
    for algo in sorted(settings.algos):
        for proto in sorted(settings.protos):
            hop_factor, bw_factor = TRANSPORT_FACTORS[settings.transport]
            lat = BASE_LAT_US[(algo, proto)] + hops * HOP_LAT_US[(algo, proto)] * hop_factor
            bw = PCIE_BW_BYTES_PER_US * PROTO_BW_EFF[proto] * bw_factor
            if algo == "tree":
                bw *= TREE_BW_EFF
            data = wire / bw * (512.0 / settings.nthreads) ** 0.5
            step_bytes = max(1, nch * settings.buffsize // NCCL_STEPS)
            extra_steps = max(0, math.ceil(nbytes / step_bytes) - 1)
            steps_us = extra_steps * hops * HOP_LAT_US[(algo, proto)]
            us = lat + data + CHANNEL_US * nch + steps_us + SYNC_GAP_US + _skew_us(tokens)
            cost = AllReduceCost(nbytes, algo, proto, nch, us * 1e-6)
            if best is None or cost.seconds < best.seconds:
                best = cost
    if best is None:  # nothing allowed; callers check settings.errors first
        return AllReduceCost(nbytes, "ring", "ll", nch, float("inf"))
    return best


def forward(
    settings: ncclenv.NcclSettings,
    tp_size: int,
    tokens: int,
    cuda_graph: bool,
    *,
    layers: int = N_LAYERS,
    compute_seconds: float | None = None,
    pcie_ipc_max_bytes: int | None = None,
) -> Forward:
    """Cost of one forward over `tokens` tokens through `layers` TP-sharded layers."""
    if compute_seconds is None:
        compute_seconds = COMPUTE_BASE_S + COMPUTE_PER_TOKEN_S * tokens
    n_ar = layers * ALLREDUCES_PER_LAYER if tp_size > 1 else 0
    ar = allreduce_cost(
        settings,
        tokens * HIDDEN * BYTES_PER_ELEM,
        tp_size,
        tokens,
        pcie_ipc_max_bytes=pcie_ipc_max_bytes,
    )
    if cuda_graph:
        launch = GRAPH_LAUNCH_US * 1e-6
    else:
        host = PCIE_IPC_LAUNCH_US if ar.algo == "pcie_ipc" else EAGER_NCCL_HOST_US
        launch = (layers * COMPUTE_KERNELS_PER_LAYER * EAGER_LAUNCH_US + n_ar * host) * 1e-6
    return Forward(tokens, compute_seconds, ar, n_ar, launch)


def prefill_seconds(
    env: Mapping[str, str],
    tp_size: int,
    prompt_tokens: int,
    mode: str,
    *,
    pcie_ipc_max_bytes: int | None = None,
) -> float:
    """Time of one prefill forward over `prompt_tokens` tokens (eagle3 adds a draft extend).

    Prefill runs without CUDA graphs in SGLang (graphs cover decode), so no launch term.
    """
    settings = ncclenv.resolve(env)
    tokens = max(1, prompt_tokens)
    fwd = forward(
        settings,
        tp_size,
        tokens,
        False,
        compute_seconds=COMPUTE_BASE_S + PREFILL_PER_TOKEN_S * tokens,
        pcie_ipc_max_bytes=pcie_ipc_max_bytes,
    )
    total = fwd.compute_seconds + fwd.allreduce_seconds + SCHED_OVERHEAD_S
    if mode == "eagle3":
        draft = forward(
            settings,
            tp_size,
            tokens,
            False,
            layers=DRAFT_LAYERS,
            compute_seconds=DRAFT_COMPUTE_S + PREFILL_PER_TOKEN_S * tokens / 8,
            pcie_ipc_max_bytes=pcie_ipc_max_bytes,
        )
        total += draft.compute_seconds + draft.allreduce_seconds
    return total


def predict(
    env: Mapping[str, str],
    mode: str,
    tp_size: int,
    batch_size: int,
    cuda_graph: bool,
    accept_length: float | None = None,
    *,
    num_steps: int = DEFAULT_NUM_STEPS,
    topk: int = DEFAULT_TOPK,
    num_draft_tokens: int = DEFAULT_NUM_DRAFT_TOKENS,
    pcie_ipc_max_bytes: int | None = None,
) -> Prediction:
    """Predict decode throughput and cycle anatomy for `env`'s NCCL settings.

    mode: "baseline" (one DECODE forward per step, 1 token per request) or "eagle3"
    (num_steps draft forwards, one TARGET_VERIFY forward over batch x num_draft_tokens
    tokens, one draft extend; accept_length tokens per request per cycle, clamped to
    1..num_draft_tokens). `pcie_ipc_max_bytes`: all-reduces up to this size run on
    FlashInfer's PCIe-IPC kernels (SGLang's bound; None: every all-reduce is NCCL).
    Returns a Prediction whose `error` is set when the configuration cannot run
    (invalid NCCL values, Tree with CUDA graphs).
    """
    if mode not in ("baseline", "eagle3"):
        raise ValueError(f"mode must be 'baseline' or 'eagle3', got {mode!r}")
    if tp_size < 1 or batch_size < 1:
        raise ValueError("tp_size and batch_size must be >= 1")
    settings = ncclenv.resolve(env)
    error: str | None = None
    if settings.errors:
        error = "; ".join(settings.errors)
    elif cuda_graph and tp_size > 1 and settings.tree_only:
        error = f"Capture cuda graph failed: {TREE_CAPTURE_ERROR}"

    bs = batch_size
    forwards: list[tuple[str, Forward]] = []
    if mode == "baseline":
        accept = 1.0
        main = forward(settings, tp_size, bs, cuda_graph, pcie_ipc_max_bytes=pcie_ipc_max_bytes)
        forwards.append((f"step[DECODE bs={bs}]", main))
        draft_s = 0.0
    else:
        accept = DEFAULT_ACCEPT_LENGTH if accept_length is None else float(accept_length)
        accept = min(max(accept, 1.0), float(num_draft_tokens))
        draft_tokens = bs * max(1, topk)
        for _ in range(max(0, num_steps)):
            d = forward(
                settings,
                tp_size,
                draft_tokens,
                cuda_graph,
                layers=DRAFT_LAYERS,
                compute_seconds=DRAFT_COMPUTE_S + DRAFT_COMPUTE_PER_TOKEN_S * draft_tokens,
                pcie_ipc_max_bytes=pcie_ipc_max_bytes,
            )
            forwards.append((spans.step_span_name(spans.DRAFT, bs), d))
        main = forward(
            settings,
            tp_size,
            bs * num_draft_tokens,
            cuda_graph,
            pcie_ipc_max_bytes=pcie_ipc_max_bytes,
        )
        forwards.append((spans.step_span_name(spans.VERIFY, bs), main))
        ext_tokens = bs * num_draft_tokens
        ext = forward(
            settings,
            tp_size,
            ext_tokens,
            cuda_graph,
            layers=DRAFT_LAYERS,
            compute_seconds=DRAFT_COMPUTE_S + DRAFT_COMPUTE_PER_TOKEN_S * ext_tokens,
            pcie_ipc_max_bytes=pcie_ipc_max_bytes,
        )
        forwards.append((spans.step_span_name(spans.DRAFT, bs), ext))
        draft_s = sum(f.seconds for kind, f in forwards if _is_draft(kind))
    cycle = sum(f.seconds for _, f in forwards) + SCHED_OVERHEAD_S
    tps = 0.0 if error else bs * accept / cycle
    return Prediction(
        mode=mode,
        tp_size=tp_size,
        batch_size=bs,
        cuda_graph=cuda_graph,
        accept_length=accept,
        tokens_per_second=tps,
        cycle_seconds=cycle,
        verify_seconds=main.seconds,
        allreduce_count=main.allreduce_count,
        allreduce_seconds=main.allreduce_seconds,
        allreduce_each_seconds=main.allreduce.seconds,
        algo=main.allreduce.algo,
        proto=main.allreduce.proto,
        nchannels=main.allreduce.nchannels,
        draft_seconds=draft_s,
        forwards=tuple(forwards),
        error=error,
    )


def _is_draft(name: str) -> bool:
    """A drafter forward (0.5.23 `step[DRAFT ...]`)."""
    step = spans.parse_step_span(name)
    return step is not None and step.is_draft
