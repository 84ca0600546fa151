"""One simulated forward as kineto records it, and the trace file's header and metadata.

Schema follows the real torch.profiler output in the shared fixtures
(torch-trace-cudagraph-3-verify-passes.json.gz): `ts`/`dur` in microseconds since
`baseTimeNanoseconds`. Per forward:
- CPU `user_annotation` (pid = the rank's OS pid, tid = pid) named like SGLang's
  ModelRunner ranges (the name traces.py passes in);
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
time, and the GPU idles for the model's launch gap after it.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastverify.sglang import allreduce, spans
from fastverify.sim import costmodel

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


ANNOTATIONS = ("user_annotation", "gpu_user_annotation")  # the CPU and GPU step ranges


class Ids:
    def __init__(self) -> None:
        self.correlation = 1
        self.external = 1

    def next_corr(self) -> int:
        self.correlation += 1
        return self.correlation

    def next_ext(self) -> int:
        self.external += 1
        return self.external


def kernel_args(rank: int, corr: int, ar: bool) -> dict[str, Any]:
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


def forward_events(
    name: str,
    fwd: costmodel.Forward,
    layers: int,
    rank: int,
    pid: int,
    cpu_us: float,
    gpu_us: float,
    cuda_graph: bool,
    ids: Ids,
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
                "args": kernel_args(rank, corr, is_ar),
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


def _meta(name: str, ts: float, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args}


def trace_metadata(rank: int, pid: int, tp_size: int, ts: float) -> list[dict[str, Any]]:
    """The process and thread names and sort order kineto writes: the rank's process, every
    device, the rank's stream and its Python thread."""

    def process(p: int, labels: str, sort_index: int) -> list[dict[str, Any]]:
        return [
            _meta("process_name", ts, p, 0, {"name": "python3"}),
            _meta("process_labels", ts, p, 0, {"labels": labels}),
            _meta("process_sort_index", ts, p, 0, {"sort_index": sort_index}),
        ]

    meta = process(pid, "CPU", pid)
    for dev in range(tp_size):
        meta += process(dev, f"GPU {dev}", 5000000 + dev)
    meta += [
        _meta("thread_name", ts, rank, STREAM, {"name": f"stream {STREAM} "}),
        _meta("thread_sort_index", ts, rank, STREAM, {"sort_index": STREAM}),
        _meta("thread_name", ts, pid, pid, {"name": f"thread {pid} (python3)"}),
        _meta("thread_sort_index", ts, pid, pid, {"sort_index": pid}),
    ]
    return meta


def trace_header(rank: int, tp_size: int, base_ns: int, trace_name: str) -> dict[str, Any]:
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


def is_draft(name: str) -> bool:
    """A drafter forward (0.5.23 `step[DRAFT ...]`)."""
    step = spans.parse_step_span(name)
    return step is not None and step.is_draft
