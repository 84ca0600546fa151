"""The trace analyser: verify passes and their all-reduces in kineto (torch.profiler chrome)
traces, for the exporter's profile windows, `fastverifyctl trace`, rehearse and sweep.

What is measured, per rank (one trace file per TP rank, `*-TP-{rank}.trace.json[.gz]`):
- verify spans: GPU-side annotations (`cat: gpu_user_annotation`) whose name contains
  `TARGET_VERIFY` (`span=`); when a trace has no GPU annotation at all, CPU-side
  `user_annotation` ranges are used instead and kernels are attributed to them through the
  launch that enqueued them (kernel `args.correlation` == a `cuda_runtime`/`cuda_driver`
  launch whose start lies inside the CPU range);
- all-reduce kernels: names starting `ncclDevKernel_AllReduce`, `ncclKernel_AllReduce`
  (NCCL) or `cross_device_reduce_` (SGLang's custom all-reduce), after an optional `void `,
  and FlashInfer's PCIe-IPC all-reduce kernels (SGLang 0.5.23 with
  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1) as kineto demangles them, `void
  flashinfer::comm::pcie_ipc::ipc_*_kernel<...>(...)` (`fastverify.sglang.allreduce`);
  each kernel's backend (nccl | custom | pcie_ipc) is reported per verify too; counted
  for a verify span when they start inside it on the same device (the GPU event's `pid`,
  kineto's device index, which equals `args.device`). Kernels of draft, draft extend or
  plain decode forwards are outside every verify span and are not counted.
- result: verify passes, verify ms p50/p90 (linear interpolation between closest ranks),
  all-reduces per verify, their GPU ms per verify and share of the verify time.

Speed and memory: the fast path never materialises the trace. It inflates `.gz` in
bounded chunks, finds candidate events with `bytes.find` on fixed needles (the annotation
categories and the all-reduce kernel name prefixes), cuts out just those events by brace
matching, and parses each with orjson. Anything it cannot cut unambiguously raises
`_Ambiguous`, and the file is re-read by the straightforward parser (`exact_events`), so
the answer is exact either way; tests compare both paths.

Modules: `events` (what is read from a trace, and how it is classified), `reader` (the fast
and the exact readers), `ce_groups` (FlashInfer's copy-engine all-reduces folded back into
one each), `analysis` (the per-rank figures). The names below are the analyser's API.
"""

from fastverify.traces.analysis import (
    PUBLIC_KEYS,
    analyze_extract,
    analyze_file,
    analyze_path,
    extract_for_analysis,
    public_view,
    trace_files,
)
from fastverify.traces.events import (
    ALLREDUCE_PREFIXES,
    DEFAULT_SPAN,
    Extract,
    Kernel,
    Launch,
    Span,
    TraceError,
    allreduce_backend,
    is_allreduce_kernel,
    rank_from_name,
    rank_key,
    span_matches,
)
from fastverify.traces.reader import exact_events, extract, scan_events

__all__ = [
    "ALLREDUCE_PREFIXES",
    "DEFAULT_SPAN",
    "PUBLIC_KEYS",
    "Extract",
    "Kernel",
    "Launch",
    "Span",
    "TraceError",
    "allreduce_backend",
    "analyze_extract",
    "analyze_file",
    "analyze_path",
    "exact_events",
    "extract",
    "extract_for_analysis",
    "is_allreduce_kernel",
    "public_view",
    "rank_from_name",
    "rank_key",
    "scan_events",
    "span_matches",
    "trace_files",
]
