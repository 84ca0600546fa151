"""Kineto chrome traces of simulated forward passes, as SGLang's profiler writes them per rank.

Schema follows the real torch.profiler output in the shared fixtures
(torch-trace-cudagraph-3-verify-passes.json.gz): top-level `schemaVersion`,
`deviceProperties`, `distributedInfo`, `displayTimeUnit`, `baseTimeNanoseconds`,
`traceEvents`; `ts`/`dur` in microseconds since `baseTimeNanoseconds`. Per forward:
- CPU `user_annotation` (pid = the rank's OS pid, tid = pid) named like SGLang's
  ModelRunner ranges as SGLang 0.5.23 names them: `step[VERIFY bs=N]`, `step[DECODE bs=N]`,
  every drafter forward `step[DRAFT bs=N]` (fastverify.sglang.spans); formerly
  `draft step[DECODE bs=N]` / `draft step[DRAFT_EXTEND bs=N]`;
- `cuda_runtime` `cudaGraphLaunch` (CUDA graphs) or one `cudaLaunchKernel` per kernel
  (eager), linked to kernels with `ac2g` flow events (`s` on the CPU, `f` on the GPU);
- GPU `gpu_user_annotation` with the same name (pid = device index, tid = stream 7)
  spanning the forward, and every `kernel` inside it: 6 compute kernels and 2
  `ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)` per layer
  (61 layers -> 122 all-reduces per target forward; 1 layer -> 2 per draft forward);
  with SGLang's PCIe-IPC backend on, the all-reduces within its size bound are the kernels
  FlashInfer's seed policy launches, as kineto demangles them (at 8 ranks `void
  flashinfer::comm::pcie_ipc::ipc_topo_rsag8_push_param_kernel<__nv_bfloat16, false>(...)`
  below 32 KiB, `ipc_topo_rsag8_ring_push_param_kernel` from 32 KiB up).
Kernel durations come from the cost model: an all-reduce kernel lasts the backend's own
time, and the GPU idles for the model's launch gap after it. Events are streamed to the file, so
`write_trace` can make very large traces for benchmarks with bounded memory.
"""

from __future__ import annotations

import gzip
import os
import socket
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fastverify.engines.sim import costmodel
from fastverify.sglang import allreduce, eagle, spans

try:
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)
except ImportError:  # pragma: no cover - orjson is a declared dependency
    import json

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


STREAM = 7
DEVICE_NAME = "fastverify sim (SIMULATED GPU, not real hardware)"
ALLREDUCE_KERNEL = {
    "ring": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "tree": "ncclDevKernel_AllReduce_Sum_bf16_TREE_LL(ncclDevKernelArgsStorage<4096ul>)",
}
# (name, share of the layer's compute time); the all-reduces sit after o_proj and after MoE.
ATTN_KERNELS = (
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_NNT", 0.17),
    (
        "void flashinfer::BatchDecodeWithPagedKVCacheKernel<flashinfer::PosEncodingMode(0), 2u, "
        "4u, 8u, 16u, 1u, 8u, flashinfer::DefaultAttention<false, false, false, false>, "
        "flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >"
        "(flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>)",
        0.16,
    ),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_NNT", 0.12),
)
MLP_KERNELS = (
    (
        "void sgl_kernel::FusedAddRMSNormKernel<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
        "__nv_bfloat16 const*, unsigned int, unsigned int, float)",
        0.05,
    ),
    ("fused_moe_kernel", 0.42),
    (
        "void moe_sum_reduce_kernel<__nv_bfloat16, 8>(__nv_bfloat16 const*, __nv_bfloat16*, "
        "long, long, float)",
        0.08,
    ),
)


@dataclass(frozen=True)
class Cycle:
    """One scheduler cycle to draw: when its CPU side started, its batch size and, under
    adaptive, the step count it ran (0: SGLang's steps-0 pass; None: the configured shape)."""

    start_ns: int
    batch_size: int
    steps: int | None = None


class _Ids:
    def __init__(self) -> None:
        self.correlation = 1
        self.external = 1

    def next_corr(self) -> int:
        self.correlation += 1
        return self.correlation

    def next_ext(self) -> int:
        self.external += 1
        return self.external


def _kernel_args(rank: int, corr: int, ar: bool) -> dict[str, Any]:
    return {
        "queued": 0,
        "device": rank,
        "context": 1,
        "stream": STREAM,
        "correlation": corr,
        "registers per thread": 96 if ar else 168,
        "shared memory": 0 if ar else 164292,
        "blocks per SM": 0.121212 if ar else 0.606061,
        "warps per SM": 1.939394 if ar else 7.272727,
        "grid": [16, 1, 1] if ar else [4, 20, 1],
        "block": [512, 1, 1] if ar else [384, 1, 1],
        "est. achieved occupancy %": 3 if ar else 0,
    }


def _forward_events(
    name: str,
    fwd: costmodel.Forward,
    layers: int,
    rank: int,
    pid: int,
    cpu_us: float,
    gpu_us: float,
    cuda_graph: bool,
    ids: _Ids,
    tp_size: int = 8,
) -> tuple[list[dict[str, Any]], float, float]:
    """Events of one forward; returns (events, cpu end us, gpu end us)."""
    events: list[dict[str, Any]] = []
    ext = ids.next_ext()
    per_layer = fwd.compute_seconds * 1e6 / max(1, layers)
    ar_us = fwd.allreduce.own_seconds * 1e6  # the kernel; the launch gap idles after it
    ar_idle = fwd.allreduce.extra_seconds * 1e6
    if fwd.allreduce.algo == "pcie_ipc":  # FlashInfer's seed-policy kernel for this size
        ar_name = allreduce.kernel_name(tp_size, fwd.allreduce.nbytes)
    else:
        ar_name = ALLREDUCE_KERNEL.get(fwd.allreduce.algo, ALLREDUCE_KERNEL["ring"])
    n_ar_per_layer = fwd.allreduce_count // max(1, layers)
    launch_gap = costmodel.EAGER_LAUNCH_US if not cuda_graph else 0.0
    ar_gap = costmodel.EAGER_NCCL_HOST_US if not cuda_graph else 0.0

    cpu_t = cpu_us + 2.0
    gpu_start = max(gpu_us, cpu_t + 8.0)
    graph_corr = 0
    if cuda_graph:
        graph_corr = ids.next_corr()
        launch_dur = costmodel.GRAPH_LAUNCH_US
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaGraphLaunch",
                "pid": pid,
                "tid": pid,
                "ts": round(cpu_t, 3),
                "dur": launch_dur,
                "args": {"cbid": 311, "correlation": graph_corr},
            }
        )
        events.append(
            {
                "ph": "s",
                "id": graph_corr,
                "pid": pid,
                "tid": pid,
                "ts": round(cpu_t, 3),
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        cpu_t += launch_dur
    t = gpu_start
    kernels: list[tuple[str, float, bool]] = []
    for _ in range(layers):
        for kname, share in ATTN_KERNELS:
            kernels.append((kname, per_layer * share, False))
        if n_ar_per_layer >= 1:
            kernels.append((ar_name, ar_us, True))
        for kname, share in MLP_KERNELS:
            kernels.append((kname, per_layer * share, False))
        if n_ar_per_layer >= 2:
            kernels.append((ar_name, ar_us, True))
    for kname, dur, is_ar in kernels:
        if cuda_graph:
            corr = graph_corr
        else:
            corr = ids.next_corr()
            t += ar_gap if is_ar else launch_gap
            cpu_launch = t - 4.0
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": pid,
                    "tid": pid,
                    "ts": round(cpu_launch, 3),
                    "dur": 3.1,
                    "args": {"cbid": 211, "correlation": corr},
                }
            )
            events.append(
                {
                    "ph": "s",
                    "id": corr,
                    "pid": pid,
                    "tid": pid,
                    "ts": round(cpu_launch, 3),
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
            cpu_t = cpu_launch + 3.1
        ts = round(t, 3)
        dur_r = round(dur, 3)
        events.append(
            {
                "ph": "f",
                "id": corr,
                "pid": rank,
                "tid": STREAM,
                "ts": ts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kname,
                "pid": rank,
                "tid": STREAM,
                "ts": ts,
                "dur": dur_r,
                "args": _kernel_args(rank, corr, is_ar),
            }
        )
        t = round(ts + dur_r + (ar_idle if is_ar else 0.0), 3)
    gpu_end = t
    events.insert(
        0,
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": name,
            "pid": pid,
            "tid": pid,
            "ts": round(cpu_us, 3),
            "dur": round(cpu_t - cpu_us + 1.0, 3),
            "args": {"External id": ext, "Record function id": 0, "Ev Idx": ext - 1},
        },
    )
    events.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": name,
            "pid": rank,
            "tid": STREAM,
            "ts": round(gpu_start, 3),
            "dur": round(gpu_end - gpu_start, 3),
            "args": {"External id": ext},
        }
    )
    return events, cpu_t, gpu_end


def _metadata(rank: int, pid: int, tp_size: int, ts: float) -> list[dict[str, Any]]:
    meta: list[dict[str, Any]] = [
        {
            "name": "process_name",
            "ph": "M",
            "ts": ts,
            "pid": pid,
            "tid": 0,
            "args": {"name": "python3"},
        },
        {
            "name": "process_labels",
            "ph": "M",
            "ts": ts,
            "pid": pid,
            "tid": 0,
            "args": {"labels": "CPU"},
        },
        {
            "name": "process_sort_index",
            "ph": "M",
            "ts": ts,
            "pid": pid,
            "tid": 0,
            "args": {"sort_index": pid},
        },
    ]
    for dev in range(tp_size):
        meta += [
            {
                "name": "process_name",
                "ph": "M",
                "ts": ts,
                "pid": dev,
                "tid": 0,
                "args": {"name": "python3"},
            },
            {
                "name": "process_labels",
                "ph": "M",
                "ts": ts,
                "pid": dev,
                "tid": 0,
                "args": {"labels": f"GPU {dev}"},
            },
            {
                "name": "process_sort_index",
                "ph": "M",
                "ts": ts,
                "pid": dev,
                "tid": 0,
                "args": {"sort_index": 5000000 + dev},
            },
        ]
    meta += [
        {
            "name": "thread_name",
            "ph": "M",
            "ts": ts,
            "pid": rank,
            "tid": STREAM,
            "args": {"name": f"stream {STREAM} "},
        },
        {
            "name": "thread_sort_index",
            "ph": "M",
            "ts": ts,
            "pid": rank,
            "tid": STREAM,
            "args": {"sort_index": STREAM},
        },
        {
            "name": "thread_name",
            "ph": "M",
            "ts": ts,
            "pid": pid,
            "tid": pid,
            "args": {"name": f"thread {pid} (python3)"},
        },
        {
            "name": "thread_sort_index",
            "ph": "M",
            "ts": ts,
            "pid": pid,
            "tid": pid,
            "args": {"sort_index": pid},
        },
    ]
    return meta


def _header(rank: int, tp_size: int, base_ns: int, trace_name: str) -> dict[str, Any]:
    dev = {
        "id": 0,
        "name": DEVICE_NAME,
        "totalGlobalMem": 150109880320,
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 132,
        "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 232448,
        "sharedMemPerMultiprocessor": 233472,
    }
    return {
        "schemaVersion": 1,
        "deviceProperties": [dict(dev, id=i) for i in range(tp_size)],
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": tp_size,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": tp_size,
                    "ranks": list(range(tp_size)),
                }
            ],
            "nccl_version": "2.28.9",
        },
        "trace_id": uuid.uuid4().hex.upper(),
        "cuda_driver_version": 13000,
        "cuda_runtime_version": 13000,
        "cupti_version": 130001,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_ns,
        "traceName": trace_name,
    }


class _Template:
    """One cycle's events at time 0 with ids from 0, re-stamped for every cycle.

    Cycles of the same batch size have identical anatomy, so the events are built once
    and only their timestamps and ids are rewritten per cycle (about 5x faster than
    building fresh dicts, which matters for multi-hundred-MB benchmark traces).
    """

    def __init__(
        self,
        pred: costmodel.Prediction,
        rank: int,
        pid: int,
        cuda_graph: bool,
        naming: SpanNaming | None = None,
    ):
        ids = _Ids()
        ids.correlation = ids.external = 0
        events: list[dict[str, Any]] = []
        cpu = gpu = 0.0
        verified = False
        for name, fwd in pred.forwards:
            draft = _is_draft(name)
            layers = costmodel.DRAFT_LAYERS if draft else costmodel.N_LAYERS
            played = naming.name(name, after_verify=verified) if naming else name
            verified = verified or not draft
            evs, cpu, gpu = _forward_events(
                played or name, fwd, layers, rank, pid, cpu, gpu, cuda_graph, ids, pred.tp_size
            )
            if played is None:  # a release without step spans: kernels only
                evs = [e for e in evs if e.get("cat") not in _ANNOTATIONS]
            cpu += 5.0
            events.extend(evs)
        self.events = events
        self.rel_ts = [e["ts"] for e in events]
        self.n_corr = ids.correlation
        self.n_ext = ids.external
        self.span = max(cpu, gpu)
        # (event, field kind, template value): 0 flow id, 1 args.correlation, 2 External id
        self.ids: list[tuple[dict[str, Any], int, int]] = []
        for e in events:
            if e.get("cat") == "ac2g":
                self.ids.append((e, 0, e["id"]))
            elif "correlation" in e.get("args", {}):
                self.ids.append((e, 1, e["args"]["correlation"]))
            elif "External id" in e.get("args", {}):
                self.ids.append((e, 2, e["args"]["External id"]))

    def stamp(self, start_us: float, index: int) -> list[dict[str, Any]]:
        for e, rel in zip(self.events, self.rel_ts, strict=True):
            e["ts"] = round(start_us + rel, 3)
        corr_off = 1 + index * self.n_corr
        ext_off = 1 + index * self.n_ext
        for e, kind, base in self.ids:
            if kind == 0:
                e["id"] = base + corr_off
            elif kind == 1:
                e["args"]["correlation"] = base + corr_off
            else:
                e["args"]["External id"] = base + ext_off
                if "Ev Idx" in e["args"]:
                    e["args"]["Ev Idx"] = base + ext_off - 1
        return self.events


def _cycle_batches(
    cycles: Iterable[Cycle],
    predict_for_bs: Any,
    rank: int,
    pid: int,
    cuda_graph: bool,
    base_ns: int,
    naming: SpanNaming | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """Each cycle's events as one list (reused: serialize before advancing).

    A cycle starts at its recorded time, or when the previous cycle's GPU work ends if
    that is later.
    """
    templates: dict[tuple[int, int | None], _Template] = {}
    prev_end = float("-inf")
    for index, cyc in enumerate(cycles):
        key = (cyc.batch_size, cyc.steps)
        tpl = templates.get(key)
        if tpl is None:
            pred = predict_for_bs(*key) if cyc.steps is not None else predict_for_bs(key[0])
            tpl = templates[key] = _Template(pred, rank, pid, cuda_graph, naming)
        start = max((cyc.start_ns - base_ns) / 1000.0, prev_end)
        yield tpl.stamp(start, index)
        prev_end = start + tpl.span


def iter_cycle_events(
    cycles: Iterable[Cycle],
    predict_for_bs: Any,
    rank: int,
    pid: int,
    cuda_graph: bool,
    base_ns: int,
) -> Iterator[dict[str, Any]]:
    """Events of every cycle, in time order per cycle (CPU range, launches, kernels, GPU
    range), as fresh dicts."""
    for batch in _cycle_batches(cycles, predict_for_bs, rank, pid, cuda_graph, base_ns):
        for ev in batch:
            yield {k: (dict(v) if isinstance(v, dict) else v) for k, v in ev.items()}


_ANNOTATIONS = ("user_annotation", "gpu_user_annotation")


class SpanNaming:
    """The step spans of the SGLang release the sim plays (its facts' `spans`):

    - 0.5.20 and later (`utils/profile_utils.py`): `step[VERIFY ...]`, `step[DRAFT ...]`
      (the cost model's own names);
    - 0.5.11 .. 0.5.19 (`step[{mode.name} bs={bs}]`, model_runner / profile_utils): the
      forward mode's name: `step[TARGET_VERIFY ...]`, draft steps `step[DECODE ...]`
      (`speculative/eagle_draft_cuda_graph_runner.py` captures DECODE mode), the draft
      extend `step[DRAFT_EXTEND_V2 ...]` (`speculative/*.py`); checked in each wheel by
      tests/contract/test_sglang_facts_contract.py;
    - 0.5.10 and earlier: no step spans (None: the forward's kernels only)."""

    def __init__(self, sglang_version: str) -> None:
        from fastverify.sglang.facts import resolve

        facts = resolve(sglang_version)
        self.spans = bool(facts.has("step_spans"))
        self.verify = facts.verify_stage or spans.VERIFY
        self.draft = facts.spans.get("draft_stage")

    def name(self, name: str, after_verify: bool = False) -> str | None:
        if not self.spans:
            return None
        step = spans.parse_step_span(name)
        if step is None or (self.verify == spans.VERIFY and self.draft == spans.DRAFT):
            return name
        if step.is_verify:
            stage = self.verify
        elif step.is_draft:
            stage = "DRAFT_EXTEND_V2" if after_verify else "DECODE"
        else:
            return name
        return spans.step_span_name(stage, step.bs, step.toks)


def write_rank_trace(
    path: str | os.PathLike[str],
    *,
    rank: int,
    tp_size: int,
    cycles: Sequence[Cycle],
    env: Mapping[str, str],
    mode: str,
    cuda_graph: bool,
    accept_length: float | None = None,
    num_steps: int = costmodel.DEFAULT_NUM_STEPS,
    topk: int = costmodel.DEFAULT_TOPK,
    num_draft_tokens: int = costmodel.DEFAULT_NUM_DRAFT_TOKENS,
    pid: int | None = None,
    activities: Sequence[str] = ("CPU", "GPU"),
    pcie_ipc_max_bytes: int | None = None,
    sglang_version: str | None = None,
) -> Path:
    """Write one rank's trace of `cycles` (gzip when the name ends in .gz); return the path.
    All-reduces up to `pcie_ipc_max_bytes` carry FlashInfer's PCIe-IPC kernel names; step
    spans are named as `sglang_version` names them (SpanNaming; None: the cost model's)."""
    path = Path(path)
    pid = os.getpid() if pid is None else pid
    cache: dict[tuple[int, int | None], costmodel.Prediction] = {}
    skip_extend = eagle.skip_zero_step_extend(env)

    def pred(bs: int, steps: int | None = None) -> costmodel.Prediction:
        if (bs, steps) not in cache:
            k, topk_k, ndt = num_steps, topk, num_draft_tokens
            if steps is not None and mode == "eagle3":  # adaptive: topk 1, k + 1 tokens
                k, topk_k, ndt = steps, 1, steps + 1
            cache[(bs, steps)] = costmodel.predict(
                env,
                mode,
                tp_size,
                bs,
                cuda_graph,
                accept_length,
                num_steps=k,
                topk=topk_k,
                num_draft_tokens=ndt,
                pcie_ipc_max_bytes=pcie_ipc_max_bytes,
                skip_draft_extend=skip_extend,
            )
        return cache[(bs, steps)]

    first_ns = cycles[0].start_ns if cycles else 0
    base_ns = (first_ns // 10**12) * 10**12
    header = _header(rank, tp_size, base_ns, str(path))
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    opener: IO[bytes]
    raw = open(tmp, "wb")  # noqa: SIM115 - closed below
    opener = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3) if path.suffix == ".gz" else raw
    try:
        head = _dumps({k: v for k, v in header.items() if k != "traceName"})
        opener.write(head[:-1] + b',"traceEvents":[')
        naming = SpanNaming(sglang_version) if sglang_version else None
        batches = _cycle_batches(cycles, pred, rank, pid, cuda_graph, base_ns, naming)
        meta_ts = (first_ns - base_ns) / 1000.0 - 1000.0
        meta = _metadata(rank, pid, tp_size, round(meta_ts, 3))
        sep = b""
        buf: list[bytes] = []
        for batch in _chain(batches, [meta]):
            kept = _filter_activities(batch, activities, pid)
            if not kept:
                continue
            buf.append(sep + _dumps(kept)[1:-1])  # one orjson call per cycle
            sep = b","
            if len(buf) >= 16:
                opener.write(b"".join(buf))
                buf.clear()
        opener.write(b"".join(buf))
        opener.write(b'],"traceName":' + _dumps(header["traceName"]) + b"}")
    finally:
        if opener is not raw:
            opener.close()
        raw.close()
    os.replace(tmp, path)
    return path


def _filter_activities(
    events: list[dict[str, Any]], activities: Sequence[str], pid: int
) -> list[dict[str, Any]]:
    """Keep CPU events (pid = process) and/or GPU events (pid = device) as requested."""
    cpu = "CPU" in activities
    gpu = "GPU" in activities
    if cpu and gpu:
        return events
    return [
        ev
        for ev in events
        if ev.get("cat") != "ac2g"
        and ((ev.get("pid") == pid and cpu) or (ev.get("pid") != pid and gpu))
    ]


def _chain(*parts: Iterable[list[dict[str, Any]]]) -> Iterator[list[dict[str, Any]]]:
    for part in parts:
        yield from part


def write_trace(
    path: str | os.PathLike[str],
    *,
    steps: int = 10,
    mode: str = "eagle3",
    tp_size: int = 8,
    rank: int = 0,
    batch_size: int = 1,
    env: Mapping[str, str] | None = None,
    cuda_graph: bool = True,
    accept_length: float | None = None,
    start_ns: int = 1_790_000_000_000_000_000,
    pid: int = 4242,
    pcie_ipc_max_bytes: int | None = None,
    sglang_version: str | None = None,
) -> Path:
    """Make a synthetic per-rank trace of `steps` back-to-back cycles (for benchmarks/tests);
    step spans named as `sglang_version` names them (SpanNaming).

    `env` holds NCCL_* settings (default: the ring-ll profile's). Cycle spacing is the
    model's cycle time, so the file looks like `steps` consecutive decode steps.
    """
    env = (
        dict(env)
        if env is not None
        else {
            "NCCL_ALGO": "Ring",
            "NCCL_PROTO": "LL",
            "NCCL_P2P_LEVEL": "SYS",
            "NCCL_MAX_NCHANNELS": "16",
            "NCCL_BUFFSIZE": "16777216",
            "NCCL_NTHREADS": "512",
        }
    )
    pred = costmodel.predict(
        env,
        mode,
        tp_size,
        batch_size,
        cuda_graph,
        accept_length,
        pcie_ipc_max_bytes=pcie_ipc_max_bytes,
    )
    step_ns = int(pred.cycle_seconds * 1e9)
    cycles = [Cycle(start_ns + i * step_ns, batch_size) for i in range(steps)]
    return write_rank_trace(
        path,
        rank=rank,
        tp_size=tp_size,
        cycles=cycles,
        env=env,
        mode=mode,
        cuda_graph=cuda_graph,
        accept_length=accept_length,
        pid=pid,
        pcie_ipc_max_bytes=pcie_ipc_max_bytes,
        sglang_version=sglang_version,
    )


def trace_filename(profile_id: str, rank: int, prefix: str | None = None) -> str:
    """SGLang's per-rank name: `[{prefix}-]{profile_id}-TP-{rank}.trace.json.gz`."""
    stem = f"{profile_id}-TP-{rank}.trace.json.gz"
    return f"{prefix}-{stem}" if prefix else stem


def hostname() -> str:
    return socket.gethostname()


def _is_draft(name: str) -> bool:
    """A drafter forward (0.5.23 `step[DRAFT ...]`)."""
    step = spans.parse_step_span(name)
    return step is not None and step.is_draft
