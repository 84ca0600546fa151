"""Kineto chrome traces of simulated scheduler cycles, as SGLang's profiler writes them per rank.

Schema follows the real torch.profiler output in the shared fixtures
(torch-trace-cudagraph-3-verify-passes.json.gz): top-level `schemaVersion`,
`deviceProperties`, `distributedInfo`, `displayTimeUnit`, `baseTimeNanoseconds`,
`traceEvents`. This module owns the cycles (one template per batch shape, re-stamped per
cycle), the step spans' names as each SGLang release names them (`SpanNaming`: 0.5.23
`step[VERIFY bs=N]`, `step[DECODE bs=N]`, every drafter forward `step[DRAFT bs=N]`,
fastverify.sglang.spans) and the file; one forward's events, the header and the metadata
are trace_events.py's. Events are streamed to the file, so `write_trace` can make very
large traces for benchmarks with bounded memory.
"""

from __future__ import annotations

import gzip
import os
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fastverify.sglang import eagle, spans
from fastverify.sim import costmodel, trace_events

try:
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)
except ImportError:  # pragma: no cover - orjson is a declared dependency
    import json

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Cycle:
    """One scheduler cycle to draw: when its CPU side started, its batch size and, under
    adaptive, the step count it ran (0: SGLang's steps-0 pass; None: the configured shape)."""

    start_ns: int
    batch_size: int
    steps: int | None = None


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
        ids = trace_events.Ids()
        ids.correlation = ids.external = 0
        events: list[dict[str, Any]] = []
        cpu = gpu = 0.0
        verified = False
        for name, fwd in pred.forwards:
            draft = trace_events.is_draft(name)
            layers = costmodel.DRAFT_LAYERS if draft else costmodel.N_LAYERS
            played = naming.name(name, after_verify=verified) if naming else name
            verified = verified or not draft
            evs, cpu, gpu = trace_events.forward_events(
                played or name, fwd, layers, rank, pid, cpu, gpu, cuda_graph, ids, pred.tp_size
            )
            if played is None:  # a release without step spans: kernels only
                evs = [e for e in evs if e.get("cat") not in trace_events.ANNOTATIONS]
            cpu += 5.0
            events.extend(evs)
        events = _merge_stage_ranges(events)
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


STAGE_RANGES = ("draft", "draft_extend")


def _merge_stage_ranges(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One `draft` range over a cycle's consecutive draft forwards (per annotation kind),
    as spec_stage_span opens one around the drafter's loop."""
    out: list[dict[str, Any]] = []
    last: dict[str, dict[str, Any]] = {}  # annotation kind -> the open stage range
    for e in events:
        cat, name = e.get("cat"), e.get("name")
        if cat in trace_events.ANNOTATIONS:
            if name in STAGE_RANGES and cat in last and last[cat]["name"] == name:
                first = last[cat]
                first["dur"] = round(e["ts"] + e["dur"] - first["ts"], 3)
                continue
            last[cat] = e if name in STAGE_RANGES else {"name": None}
        out.append(e)
    return out


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


class SpanNaming:
    """The step spans of the SGLang release the sim plays (its facts' `spans`):

    - 0.5.20 and later (`utils/profile_utils.py`): `step[VERIFY ...]`, `step[DRAFT ...]`
      (the cost model's own names);
    - 0.5.11 .. 0.5.19 (`step[{mode.name} bs={bs}]`, model_runner / profile_utils): the
      forward mode's name: `step[TARGET_VERIFY ...]`; the drafter's forwards
      `step[DECODE ...]` and its extend `step[DRAFT_EXTEND_V2 ...]` up to 0.5.13, from
      0.5.14 one `draft` and one `draft_extend` range per cycle (spec_stage_span, the facts'
      `stage_spans`); checked in each wheel by tests/contract/test_sglang_facts_contract.py
      and against the real 0.5.17 trace by tests/integration/test_sim_fidelity_0517.py;
    - 0.5.10 and earlier: no step spans (None: the forward's kernels only)."""

    def __init__(self, sglang_version: str) -> None:
        from fastverify.sglang.facts import resolve

        facts = resolve(sglang_version)
        self.spans = bool(facts.has("step_spans"))
        self.verify = facts.verify_stage or spans.VERIFY
        self.draft = facts.spans.get("draft_stage")
        # 0.5.14 .. 0.5.19: the drafter's graph replays open no step span; its stages are
        # spec_stage_span("draft") / ("draft_extend") ranges (one each per cycle, as the
        # real 0.5.17 trace on the H200 shows: tests/fixtures/sglang-0.5.17-h200/)
        stages = set(facts.spans.get("stage_spans") or ())
        self.draft_by_stage = self.draft is None and {"draft", "draft_extend"} <= stages

    def name(self, name: str, after_verify: bool = False) -> str | None:
        if not self.spans:
            return None
        step = spans.parse_step_span(name)
        if step is None or (self.verify == spans.VERIFY and self.draft == spans.DRAFT):
            return name
        if step.is_verify:
            stage = self.verify
        elif step.is_draft and self.draft_by_stage:
            return "draft_extend" if after_verify else "draft"
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
    header = trace_events.trace_header(rank, tp_size, base_ns, str(path))
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    opener: IO[bytes] | gzip.GzipFile
    raw = open(tmp, "wb")  # noqa: SIM115 - closed below
    opener = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3) if path.suffix == ".gz" else raw
    try:
        head = _dumps({k: v for k, v in header.items() if k != "traceName"})
        opener.write(head[:-1] + b',"traceEvents":[')
        naming = SpanNaming(sglang_version) if sglang_version else None
        batches = _cycle_batches(cycles, pred, rank, pid, cuda_graph, base_ns, naming)
        meta_ts = (first_ns - base_ns) / 1000.0 - 1000.0
        meta = trace_events.trace_metadata(rank, pid, tp_size, round(meta_ts, 3))
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
    bound = pcie_ipc_max_bytes
    pred = costmodel.predict(
        env, mode, tp_size, batch_size, cuda_graph, accept_length, pcie_ipc_max_bytes=bound
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
