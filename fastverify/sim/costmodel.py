"""The sim engine's cost model: how long a forward pass, a verify pass and a decode step take.

A SIMULATION, never a measurement. Its constants come from four places, each named beside
the constant and in docs/guides/sim.md ("The cost model"), and tests/unit/sim/test_calibration.py
reads each measured one back from its file:

- the project's own GPU records: benchmarks/results/rehearse-2gpu.json (kimi-k2.5 shapes on
  2 x H200, ring-ll over NVLink): how compute grows from a 1-token decode to a 4-token
  verify (the MoE reads more experts), what the drafter costs next to the target, and what
  an all-reduce costs beyond its own kernel inside a CUDA-graph replay (launch gaps);
- NCCL's own latency table (src/graph/tuning.cc, `ncclTunerConstantsDefaults`) as the
  relative basis of how NCCL settings change an all-reduce, and SGLang's published PCIe
  figures (srt/distributed/device_communicators/pcie_ipc_ar.py) for FlashInfer's PCIe-IPC
  kernels, for where PCIe's small-message regime ends and for what NCCL costs beyond it
  (fastverify/sglang/allreduce.py PUBLISHED_US, the one copy of that table);
- one field report: 8 PCIe Gen5 GPUs, a 61-layer MoE model (hidden 7168, bf16), TP 8, two
  all-reduces per layer = 122 per forward; with ring-ll and CUDA graphs at batch 1 a decode
  step of 12.2 ms (82 tok/s), a 4-token verify pass of ~30 ms, a spec cycle of ~30 ms
  (break-even accept length 2.46). Two numbers are fitted to it: the decode compute and
  the marginal bandwidth of a small all-reduce on that fabric;
- SGLang 0.5.17 itself (one H100, 8B shape, tests/fixtures/sglang-0.5.17-h100-spec8b/): what
  its verify path adds to a cycle over a decode (VERIFY_OVERHEAD_S).

One forward over t tokens (bs x tokens per sequence) through L layers costs:
    compute(t) = fixed + experts x d(t) / top_k     d(t) = experts read for t tokens,
                                                    E[distinct of 384 at top-8 each]
  + 2L all-reduces, each:
      backend's own cost   NCCL: latency(algo, proto) x hop factor  (2(n-1) hops)
                                 + CHANNEL_US x channels
                                 + wire bytes in the small-message regime / SMALL_MSG_BW
                                 + beyond it: the published NCCL curve's growth past
                                   384 KiB / protocol efficiency
                                 + buffer-slot pipeline steps (NCCL_BUFFSIZE)
                           PCIe-IPC: SGLang's published kernel time at that size
      + LAUNCH_GAP_US      the same for every backend: the gap around an all-reduce inside
                           a graph replay, measured (no waiting for peers is modelled)
  + one graph launch (CUDA graphs) or host launch costs per kernel (eager);
a cycle of EAGLE-3 (any steps, 0 included) adds `verify_overhead_seconds(bs)` beside its
forwards; a pass over contexts longer than the calibration's adds `context_seconds` (the
scheduler knows its requests' contexts; `predict` is the pass at CONTEXT_REF).
Transport: P2P when NCCL_P2P_LEVEL allows the box's SYS path and NCCL_P2P_DISABLE != 1,
else SHM through host memory (per-hop latency x SHM_HOP_FACTOR, bandwidth x SHM_BW_FACTOR),
else (NCCL_SHM_DISABLE=1 too) NCCL's socket transport (x NET_HOP_FACTOR, x NET_BW_FACTOR).
Algorithm/protocol: when several are allowed the model picks the cheapest for each
message size, as NCCL's tuner does; LL128 is only considered when NCCL_PROTO asks for it
(NCCL does not enable it over PCIe). NCCL_ALGO resolving to Tree for all-reduce with CUDA
graphs on fails during capture (`Prediction.error`), which is the field's observation.

The model is deterministic: `predict` is a pure function of its arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from fastverify.interpolate import loglog
from fastverify.sglang import eagle, spans
from fastverify.sglang.allreduce import PUBLISHED_US, PUBLISHED_WORLD
from fastverify.sim import ncclenv

# --- model shape (Kimi-K2.5-like MoE, bf16; examples/model-configs/kimi-k2.5.json) ---
N_LAYERS = 61
ALLREDUCES_PER_LAYER = 2
HIDDEN = 7168
BYTES_PER_ELEM = 2
COMPUTE_KERNELS_PER_LAYER = 6  # kernels other than all-reduces (for eager launch cost)
DRAFT_LAYERS = 1  # EAGLE-3 draft head: one decoder layer, two all-reduces
ROUTED_EXPERTS = 384  # text_config.n_routed_experts
EXPERTS_PER_TOKEN = 8  # text_config.num_experts_per_tok

# --- measured on the project's own GPUs: benchmarks/results/rehearse-2gpu.json, the
# ring-ll / nvlink profile (tests/unit/sim/test_calibration.py reads each back) ---
# verify compute (4 tokens) / decode compute (1 token): compute_ms / (decode_ms -
# exposed_comm_ms) = 29.80 / (16.85 - 1.53)
VERIFY_DECODE_COMPUTE_RATIO = 1.946
# drafter forwards next to the decode compute: draft_ms (1 token) and draft_extend_ms
# (4 tokens), each / (decode_ms - exposed_comm_ms)
DRAFT_DECODE_RATIO = 0.0382
DRAFT_EXTEND_DECODE_RATIO = 0.0447
# what an all-reduce costs beyond its own kernel inside a graph replay (launch gaps; the
# two ranks waited for each other for nothing measurable): (exposed_comm_ms -
# allreduce_ms_per_verify) / allreduce_per_verify = (1.529 - 1.015) ms / 123
LAUNCH_GAP_US = 4.18

# --- fitted to the field report (docs/guides/sim.md "The cost model"): the decode step is
# 12.2 ms (82 tok/s) exactly; the marginal bandwidth by least squares on the verify pass
# (~30 ms) and the spec cycle (~30 ms = break-even 2.46 x 12.2 ms) ---
COMPUTE_DECODE_S = 1.271e-3  # one target forward over 1 token, CUDA graphs on
SMALL_MSG_BW_BYTES_PER_US = 568.0  # wire bytes of a small all-reduce on the field's fabric
# SGLang's published NCCL figures on an 8-GPU PCIe host (pcie_ipc_ar.py; the one table is
# fastverify/sglang/allreduce.py PUBLISHED_US): they grow at 0.40-0.88 GB/s of wire bytes up
# to 384 KiB (the small-message regime, fitted to the field above) and then 43x from 384 KiB
# (1169.3 us) to 100 MiB (50400 us). Beyond 384 KiB a message costs what that published
# curve adds over its 384 KiB figure (log-log between the points, as for PCIe-IPC: 4x the
# bytes ~2.5x the time), unless the link itself (PCIE_BW x protocol efficiency x transport)
# is slower still.
SMALL_MSG_BYTES = PUBLISHED_US[-2][0]  # 384 KiB

# --- measured on SGLang 0.5.17 itself (one H100, TP 1, Llama-3.1-8B shape with an EAGLE-3
# head, dummy weights): the steps-0 pass without its draft extend
# (SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1,
# tests/fixtures/sglang-0.5.17-h100-spec8b/spec-costs-steps0-skip.json) less the baseline
# decode step (spec-costs-8b.json baseline_ms) is what SGLang's TARGET_VERIFY path adds over
# a DECODE at one draft token: 0.66, 0.85, 0.92, 1.39, 2.45, 4.78 ms at batch 1, 2, 4, 8,
# 16, 32 (1.11-1.66x the decode). Least squares over the six: 0.450 ms + 0.1325 ms per
# request (within 0.14 ms of each). Every verify pays it: steps 0 and k >= 1 both run
# `EAGLEWorkerV2.verify` (srt/speculative/eagle_worker_v2.py, 0.5.17 and 0.5.23) ---
VERIFY_OVERHEAD_S = 0.450e-3
VERIFY_OVERHEAD_PER_REQUEST_S = 0.1325e-3

# --- measured on SGLang 0.5.17 itself (one H100, TP 1, 8B shape, dummy weights): what a
# longer context adds to a pass. `spec costs` at 128-token prompts
# (tests/fixtures/sglang-0.5.17-h100-spec8b/spec-costs-8b.json) and at 1024
# (tests/fixtures/sglang-0.5.17-h100-spec8b-in1024/spec-costs-8b-in1024.json), 128 output
# tokens: a request's mean context in decode is CONTEXT_REF = 128 + 64 tokens against 1088.
# Per 896 more tokens, a baseline decode step costs 0.39-0.43 ms more at batch 1-8, 0.60 at
# 16 and 0.88 at 32 (least squares: 0.349 ms + 0.0162 ms per request); an EAGLE-3 pass at
# any step count (0 included: the verify and the draft extend) costs 1.83-2.01 ms more at
# batch 1-4, then 0.44-0.47 ms per request (3.5-3.7 at 8, 6.9-7.1 at 16, 14.7-15.2 at 32):
# the larger of a per-pass and a per-request term. The other constants hold at CONTEXT_REF;
# a context beyond it adds these, a shorter one nothing. ---
CONTEXT_REF = 192
CONTEXT_SPAN = 896  # the tokens the figures below were measured over
DECODE_CONTEXT_S = (0.349e-3, 0.0162e-3)  # per CONTEXT_SPAN: per pass, per request
SPEC_CONTEXT_S = (1.95e-3, 0.455e-3)  # per CONTEXT_SPAN: the larger of per pass, per request

# --- not calibrated (no figure for them in any source; kept from the first model) ---
PREFILL_PER_TOKEN_S = 0.025e-3  # per prompt token in a prefill forward (batched GEMMs)
SCHED_OVERHEAD_S = 0.15e-3  # scheduler CPU time per batch

# --- NCCL latency table (us), src/graph/tuning.cc: (base, per hop) per (algorithm, protocol)
LAT_US = {
    ("ring", "ll"): (6.6, 1.0),
    ("ring", "ll128"): (14.0, 2.5),
    ("ring", "simple"): (8.4, 5.7),
    ("tree", "ll"): (6.8, 1.0),
    ("tree", "ll128"): (14.0, 1.9),
    ("tree", "simple"): (8.4, 4.0),
}
PCIE_BW_BYTES_PER_US = 22_000.0  # ~22 GB/s PCIe Gen5 x16 peer-to-peer, large messages
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
PCIE_IPC_POINTS_US = tuple((nbytes, ipc_us) for nbytes, ipc_us, _nccl_us in PUBLISHED_US)
# NCCL's figures beside them on that host (default NCCL settings), the large-message curve
PUBLISHED_NCCL_POINTS_US = tuple((nbytes, nccl_us) for nbytes, _ipc_us, nccl_us in PUBLISHED_US)
PCIE_IPC_LAUNCH_US = 6.0  # per eager launch (a custom kernel: no NCCL host path)
# SGLang's published end-to-end gain with PCIe-IPC (pcie_ipc_ar.py, TP 8, 8k context, a
# decode-sized workspace): TPOT 21.14 -> 13.62 ms, output 35.02 -> 48.05 tok/s
PUBLISHED_TPOT_MS = (21.14, 13.62)
PUBLISHED_OUTPUT_TOK_S = (35.02, 48.05)


def experts_read(tokens: int) -> float:
    """Expected distinct routed experts a layer reads for `tokens` tokens routed uniformly,
    top-8 of 384 each (rehearse-2gpu.json build.distinct_experts: 8 at 1 token, 29-32 at 4)."""
    keep = 1.0 - EXPERTS_PER_TOKEN / ROUTED_EXPERTS
    return ROUTED_EXPERTS * (1.0 - keep ** max(1, tokens))


# The decode compute splits into a fixed part and the routed experts' part so that 4 tokens
# cost VERIFY_DECODE_COMPUTE_RATIO x 1 token: fixed + experts x d(t)/8.
_EXPERT_GROWTH = experts_read(4) / EXPERTS_PER_TOKEN
_EXPERT_SHARE = (VERIFY_DECODE_COMPUTE_RATIO - 1.0) / (_EXPERT_GROWTH - 1.0)
COMPUTE_EXPERTS_S = COMPUTE_DECODE_S * _EXPERT_SHARE  # the routed experts of one token
COMPUTE_FIXED_S = COMPUTE_DECODE_S - COMPUTE_EXPERTS_S  # attention, dense, shared, lm head


def compute_seconds_for(tokens: int) -> float:
    """A target forward's compute over `tokens` tokens (decode or verify; graphs on)."""
    return COMPUTE_FIXED_S + COMPUTE_EXPERTS_S * experts_read(tokens) / EXPERTS_PER_TOKEN


def draft_compute_seconds(tokens: int) -> float:
    """One drafter forward over `tokens` tokens: the measured 1-token and 4-token ratios to
    the decode compute, linear in tokens between and beyond them."""
    per_token = (DRAFT_EXTEND_DECODE_RATIO - DRAFT_DECODE_RATIO) / 3.0
    return COMPUTE_DECODE_S * (DRAFT_DECODE_RATIO + per_token * (max(1, tokens) - 1))


TREE_CAPTURE_ERROR = "NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"


@dataclass(frozen=True)
class AllReduceCost:
    """One all-reduce of `nbytes`: chosen algorithm/protocol and its time in seconds."""

    nbytes: int
    algo: str  # "ring" | "tree" | "pcie_ipc" (FlashInfer's kernels, not NCCL)
    proto: str  # "ll" | "ll128" | "simple"
    nchannels: int
    seconds: float  # end to end: the backend's own time + extra_seconds
    extra_seconds: float = 0.0  # beyond the backend's own time (launch gaps), any backend

    @property
    def own_seconds(self) -> float:
        """The backend's own time (the kernel)."""
        return self.seconds - self.extra_seconds

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


def pcie_ipc_seconds(nbytes: int, tp_size: int) -> float:
    """One FlashInfer PCIe-IPC all-reduce, from the published 8-rank figures; other world
    sizes scale by their hop count."""
    return loglog(PCIE_IPC_POINTS_US, nbytes) * (2 * (tp_size - 1)) / 14.0 * 1e-6


def _data_us(wire: float, nbytes: int, bw_factor: float, proto_eff: float) -> float:
    """Time on the wire: the share of a message within PCIe's small-message regime at the
    field's fitted bandwidth (any protocol, / the transport's bandwidth factor); beyond it
    what SGLang's published 8-rank NCCL curve adds over its SMALL_MSG_BYTES figure (log-log
    between its points, as for PCIe-IPC; scaled by wire bytes per message byte for other
    world sizes), unless the link for the transport (PCIE_BW x factor) is slower still: beyond
    384 KiB the host's fabric bounds P2P and SHM alike. Either is / the protocol's efficiency
    (LL moves 8 bytes per 4 of payload; the published curve is NCCL's own choice, Simple,
    at large sizes)."""
    small = wire * min(1.0, SMALL_MSG_BYTES / nbytes) if nbytes > 0 else 0.0
    us = small / (SMALL_MSG_BW_BYTES_PER_US * bw_factor)
    if nbytes > SMALL_MSG_BYTES:
        pts = PUBLISHED_NCCL_POINTS_US
        per_published = wire / nbytes / (2 * (PUBLISHED_WORLD - 1) / PUBLISHED_WORLD)
        growth = (loglog(pts, nbytes) - loglog(pts, SMALL_MSG_BYTES)) * per_published
        us += max(growth, (wire - small) / (PCIE_BW_BYTES_PER_US * bw_factor)) / proto_eff
    return us


def allreduce_cost(
    settings: ncclenv.NcclSettings,
    nbytes: int,
    tp_size: int,
    *,
    pcie_ipc_max_bytes: int | None = None,
) -> AllReduceCost:
    """Cheapest allowed (algo, proto) for an all-reduce of `nbytes` on `tp_size` GPUs;
    FlashInfer's PCIe-IPC kernels when SGLang hands it this size (`pcie_ipc_max_bytes`:
    the workspace bound SGLang would use, None: PCIe-IPC off). Every backend pays the same
    LAUNCH_GAP_US on top of its own time."""
    if tp_size <= 1:
        return AllReduceCost(nbytes, "ring", "ll", 0, 0.0)
    gap = LAUNCH_GAP_US * 1e-6
    if pcie_ipc_max_bytes is not None and nbytes <= pcie_ipc_max_bytes:
        return AllReduceCost(
            nbytes, "pcie_ipc", "", 0, pcie_ipc_seconds(nbytes, tp_size) + gap, gap
        )
    hops = 2 * (tp_size - 1)
    wire = nbytes * 2 * (tp_size - 1) / tp_size
    nch = max(settings.min_nchannels, settings.max_nchannels)
    best: AllReduceCost | None = None
    for algo in sorted(settings.algos):
        for proto in sorted(settings.protos):
            hop_factor, bw_factor = TRANSPORT_FACTORS[settings.transport]
            base_us, hop_us = LAT_US[(algo, proto)]
            lat = base_us + hops * hop_us * hop_factor
            if algo == "tree":
                bw_factor *= TREE_BW_EFF
            data = _data_us(wire, nbytes, bw_factor, PROTO_BW_EFF[proto])
            data *= (512.0 / settings.nthreads) ** 0.5
            step_bytes = max(1, nch * settings.buffsize // NCCL_STEPS)
            extra_steps = max(0, math.ceil(nbytes / step_bytes) - 1)
            steps_us = extra_steps * hops * hop_us
            us = lat + data + CHANNEL_US * nch + steps_us
            cost = AllReduceCost(nbytes, algo, proto, nch, us * 1e-6 + gap, gap)
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
        compute_seconds = compute_seconds_for(tokens)
    n_ar = layers * ALLREDUCES_PER_LAYER if tp_size > 1 else 0
    ar = allreduce_cost(
        settings,
        tokens * HIDDEN * BYTES_PER_ELEM,
        tp_size,
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
        compute_seconds=compute_seconds_for(tokens) + PREFILL_PER_TOKEN_S * tokens,
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
            compute_seconds=draft_compute_seconds(1) + PREFILL_PER_TOKEN_S * tokens / 8,
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
    skip_draft_extend: bool = False,
) -> Prediction:
    """Predict decode throughput and cycle anatomy for `env`'s NCCL settings.

    mode: "baseline" (one DECODE forward per step, 1 token per request) or "eagle3"
    (num_steps - 1 draft forwards, one TARGET_VERIFY forward over batch x num_draft_tokens
    tokens, one draft extend; accept_length tokens per request per cycle, clamped to
    1..num_draft_tokens). num_steps 0 is SGLang's adaptive worker at steps 0
    (`eagle_worker_v2.py`): no draft forward, the TARGET_VERIFY graph captured at one draft
    token (num_draft_tokens 1), then the draft extend over one token per request "keeping
    draft KV warm", unless `skip_draft_extend` (SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1).
    `pcie_ipc_max_bytes`: all-reduces up to this size run on FlashInfer's PCIe-IPC kernels
    (SGLang's bound; None: every all-reduce is NCCL).
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

    def drafter(tokens: int) -> Forward:
        """One forward of the drafter (DRAFT_LAYERS) over `tokens` tokens."""
        return forward(
            settings,
            tp_size,
            tokens,
            cuda_graph,
            layers=DRAFT_LAYERS,
            compute_seconds=draft_compute_seconds(tokens),
            pcie_ipc_max_bytes=pcie_ipc_max_bytes,
        )

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
        # num_steps - 1 drafter forwards, as SGLang's draft_forward (fastverify.sglang.eagle)
        for _ in range(eagle.draft_forwards_per_cycle(num_steps)):
            forwards.append((spans.step_span_name(spans.DRAFT, bs), drafter(draft_tokens)))
        main = forward(
            settings,
            tp_size,
            bs * num_draft_tokens,
            cuda_graph,
            pcie_ipc_max_bytes=pcie_ipc_max_bytes,
        )
        forwards.append((spans.step_span_name(spans.VERIFY, bs), main))
        if not (num_steps == 0 and skip_draft_extend):  # the draft extend
            forwards.append((spans.step_span_name(spans.DRAFT, bs), drafter(bs * num_draft_tokens)))
        draft_s = sum(f.seconds for kind, f in forwards if _is_draft(kind))
    cycle = sum(f.seconds for _, f in forwards) + SCHED_OVERHEAD_S
    if mode == "eagle3":
        cycle += verify_overhead_seconds(bs)
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


def context_seconds(speculative: bool, batch_size: int, context: float) -> float:
    """What a pass of `batch_size` requests at a mean context of `context` tokens costs over
    the same pass at CONTEXT_REF (the figures above; 0 at or below it)."""
    excess = max(0.0, context - CONTEXT_REF) / CONTEXT_SPAN
    if speculative:
        per_pass, per_request = SPEC_CONTEXT_S
        return excess * max(per_pass, per_request * batch_size)
    per_pass, per_request = DECODE_CONTEXT_S
    return excess * (per_pass + per_request * batch_size)


def verify_overhead_seconds(batch_size: int) -> float:
    """What SGLang's TARGET_VERIFY path adds to a cycle over a DECODE of the same tokens
    (VERIFY_OVERHEAD_S: measured at one draft token on SGLang 0.5.17)."""
    return VERIFY_OVERHEAD_S + VERIFY_OVERHEAD_PER_REQUEST_S * batch_size


def _is_draft(name: str) -> bool:
    """A drafter forward (0.5.23 `step[DRAFT ...]`)."""
    step = spans.parse_step_span(name)
    return step is not None and step.is_draft
