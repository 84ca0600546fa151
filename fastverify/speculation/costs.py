"""What a decode pass and a prefill forward cost, per batch size and step count.

`Costs.cycle(bs, k)`: seconds of one pass of `bs` requests through SGLang's EAGLE worker at
k draft steps (topk 1, k + 1 draft tokens, as adaptive runs them); k = 0 is its steps-0
pass (a verify at one draft token plus the draft extend over one token per request:
`fastverify.sglang.eagle`), not a plain decode. `Costs.decode(bs)`: the step of a baseline
server at that concurrency (what "x baseline" divides by). Only measured rows exist: a
batch size the source did not measure is not in `batch_sizes`, and nothing here makes one
up. `prefill(mode, tokens)`: one prefill forward over that many new tokens per mode
("baseline", "eagle": the drafter's extend over every prompt token too), when the source
measured prefill. Every table says where it came from (`source`) and how much a cost moves
from run to run (`spread`, relative standard deviation; 0 for a model).

- "engine": the serving engine's own table. The sim publishes one in its server info
  (`sim.cost_model`: `decode`, `by_steps`, `prefill`, seconds; the batch sizes are the
  release's padded sizes up to its max running requests): a SIMULATION.
- "rehearse-grid": a `rehearse` grid measured on a GPU (schema in `from_rehearse_grid`):
  target compute per forward at bs x tokens-per-request plus the all-reduce time per
  forward. No prefill.
- "engine-trials": `fastverifyctl spec costs` on the serving engine (schema in
  `from_engine_trials`): the engine restarted on dummy weights, the baseline decode step, the
  steps-0 pass (adaptive at 0 steps) and the cycle at each k read from bench windows at each
  batch size, and the time to first token of a one-request window per mode as its prefill.

`from_file(path, backend)` reads either file kind by its "kind".
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastverify.durable import read_json
from fastverify.sglang import eagle
from fastverify.speculation.front_end import FrontEnd

ENGINE_SOURCE = "engine: fastverify sim cost model (SIMULATION)"
FILE_KINDS = ("rehearse-grid", "engine-trials")
# Run-to-run spread of a GPU measurement when the file gives none, from the project's three
# runs of the H200 grid (benchmarks/results/rehearse-grid-kimi-k2.5-shard-of-tp8-h200*.json):
# back to back within 0.2% per cell; on another day (-drafter) up to 2.8%, standard deviation
# 0.68% over the 56 cells. Taken as a 1% standard deviation.
GPU_SPREAD = 0.01
# a prompt this short costs one weight-reading forward, as a decode step does: its first
# token less that is the part that holds no forward (`Costs.prefill_latency`)
SHORT_PREFILL = 32
# a speculative mode's prefill where the costs price only the other's
SPEC_PREFILL = {"eagle": "adaptive", "adaptive": "eagle"}


class CostsError(ValueError):
    """A cost source that cannot be read (which file/field, what is wrong)."""


@dataclass(frozen=True)
class Costs:
    """Seconds by (batch size, steps), the baseline decode by batch size, prefill by mode."""

    table: dict[int, dict[int, float]]
    baseline: dict[int, float]
    source: str
    prefill_table: dict[str, dict[int, float]] = field(default_factory=dict)
    spread: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)
    cuda_graph_bs: tuple[int, ...] = ()  # the captured sizes (a batch pads up to one)
    max_running_requests: int | None = None
    zero_step_measured: bool = True  # False: steps 0 priced as the baseline decode (said)
    memory: Any = None  # speculation.memory.Memory of the server the costs came from
    # the steps-0 pass without its draft extend (SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1)
    zero_skip: dict[int, float] = field(default_factory=dict)
    # the first token of many prompts of `prefill_batch_prompt` tokens sent at once, by mode
    # and total prompt tokens (one forward over many prompts: `prefill_forward`)
    prefill_batch: dict[str, dict[int, float]] = field(default_factory=dict)
    prefill_batch_prompt: int | None = None
    # the serial intake in front of the scheduler (speculation.front_end): with it, the
    # serving model queues prompts sent together there, and the batch point's forward is
    # priced without that queue
    front_end: FrontEnd | None = None

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(b for b in self.table if b in self.baseline)

    def steps(self, bs: int) -> list[int]:
        return sorted(self.table[bs])

    def cycle(self, bs: int, k: int) -> float:
        return self.table[bs][k]

    def decode(self, bs: int) -> float:
        return self.baseline[bs]

    def priced(self, bs: int) -> int | None:
        """The measured row a batch of `bs` running requests runs at: its padded size when it
        is within the captured graphs, else the smallest measured size >= bs (eager sizes
        between the release's listed ones run at most that); None beyond every row."""
        sizes = self.batch_sizes
        if self.cuda_graph_bs:
            j = bisect.bisect_left(self.cuda_graph_bs, bs)
            if j < len(self.cuda_graph_bs):
                bs = self.cuda_graph_bs[j]
        j = bisect.bisect_left(sizes, bs)
        return sizes[j] if j < len(sizes) else None

    def prefill(self, mode: str, tokens: int) -> float | None:
        """The time to first token of one request of `tokens` prompt tokens in `mode`:
        piecewise linear between the measured token counts and, with two or more, affine
        beyond them (the outer segments' slopes); one point scales through the origin. None
        when prefill was not measured for the mode."""
        pts = self.prefill_table.get(mode)
        if not pts and mode in SPEC_PREFILL:  # costs that price one speculative prefill
            pts = self.prefill_table.get(SPEC_PREFILL[mode])
        if not pts:
            return None
        return _piecewise(pts, tokens)

    def batch_prefill(
        self, mode: str, tokens: int, prompts: int, *, queued: bool = True
    ) -> float | None:
        """The last first token of `prompts` prompts of `tokens` in all, sent at once: the
        line from one prompt of the batch point's length to the batch point (affine beyond),
        for prompts of at most that length; None without a batch point for the mode, or for
        one prompt, or longer prompts (`prefill` prices those as one prompt). With
        `queued=False` and a front end, the point less what its last prompt queued there
        (the forward's own share of it)."""
        n = self.prefill_batch_prompt
        pts = self.prefill_batch.get(mode)
        if not pts and mode in SPEC_PREFILL:
            pts = self.prefill_batch.get(SPEC_PREFILL[mode])
        if prompts < 2 or not pts or not n or tokens > prompts * n:
            return None
        one = self.prefill(mode, n)
        if one is not None and not queued and self.front_end is not None:
            # the batch point's last prompt waited on the front end for the others
            lone = self.front_end.lone_s()
            pts = {t: max(one, v - (t // n - 1) * lone) for t, v in pts.items()}
        return None if one is None else _piecewise({n: one, **pts}, tokens)

    def prefill_latency(self, mode: str) -> float:
        """The part of a first token's time that holds no forward (the request's way through
        the server's other processes): the first token of a prompt of at most SHORT_PREFILL
        tokens, else what the line through the two shortest measured points leaves at zero
        tokens, less one weight-reading forward (the baseline decode at batch 1). SGLang
        0.5.17 on an H100, 8B shape: 17.0 ms at 128 tokens, 33.3 ms at 1024, a decode of 6.1
        ms: 8.6 ms of it by the line. A prefill's cost is not a line through its shortest
        points (the sim's rises steeply to 1024 tokens, then evenly: its line put this at 23
        ms where it is ~4), so `spec costs` measures a short prompt too. 0 with one point
        (it cannot be told apart)."""
        # the way through the server's other processes is the same in every mode: the
        # baseline's points give it; a spec mode's extra first-token time (the draft's
        # extend) is engine time
        base = self.prefill_table.get("baseline") or {}
        pts = base if len(base) >= 2 else (self.prefill_table.get(mode) or {})
        if len(pts) < 2 or not self.baseline:
            return 0.0
        xs = sorted(pts)
        if xs[0] <= SHORT_PREFILL:
            intercept = pts[xs[0]]
        else:
            slope = (pts[xs[1]] - pts[xs[0]]) / (xs[1] - xs[0])
            intercept = pts[xs[0]] - slope * xs[0]
        return max(0.0, intercept - self.baseline[min(self.baseline)])

    def prefill_forward(self, mode: str, tokens: int, prompts: int = 1) -> float | None:
        """What one prefill forward over `tokens` new tokens of `prompts` prompts holds the
        engine for: the first token's time (`batch_prefill` where it prices the batch, else
        `prefill` of one prompt that long) less `prefill_latency`. Many short prompts are
        not one long one (each prompt's attention spans itself alone): SGLang 0.5.17 on an
        H100 served 1024-token prompts at 16 and 32 clients 1.19x and 1.34x what the
        one-prompt line predicted."""
        t = self.batch_prefill(mode, tokens, prompts, queued=False)
        if t is None:
            t = self.prefill(mode, tokens)
        return None if t is None else max(0.0, t - self.prefill_latency(mode))

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "spread": self.spread,
            "baseline_ms": {str(b): round(s * 1e3, 4) for b, s in sorted(self.baseline.items())},
            "cycle_ms": {
                str(bs): {str(k): round(s * 1e3, 4) for k, s in sorted(row.items())}
                for bs, row in sorted(self.table.items())
            },
            "prefill_ms": {
                m: {str(t): round(v * 1e3, 4) for t, v in sorted(row.items())}
                for m, row in sorted(self.prefill_table.items())
            },
            "cuda_graph_bs": list(self.cuda_graph_bs),
            "max_running_requests": self.max_running_requests,
            "zero_step_measured": self.zero_step_measured,
            **(
                {
                    "zero_skip_ms": {
                        str(b): round(s * 1e3, 4) for b, s in sorted(self.zero_skip.items())
                    }
                }
                if self.zero_skip
                else {}
            ),
            **(
                {
                    "prefill_batch_ms": {
                        m: {str(t): round(v * 1e3, 4) for t, v in sorted(row.items())}
                        for m, row in sorted(self.prefill_batch.items())
                    },
                    "prefill_batch_prompt": self.prefill_batch_prompt,
                }
                if self.prefill_batch
                else {}
            ),
            **({"front_end_ms": self.front_end.to_dict()} if self.front_end else {}),
            **({"notes": self.notes} if self.notes else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Costs:
        """`to_dict` read back (a stored plan's costs; `spec validate` re-predicts from it)."""
        ms = 1e-3
        costs = from_table(
            {b: {k: v * ms for k, v in row.items()} for b, row in d["cycle_ms"].items()},
            {b: v * ms for b, v in d["baseline_ms"].items()},
            str(d.get("source") or "stored plan"),
            prefill_table={
                m: {int(t): v * ms for t, v in row.items()}
                for m, row in (d.get("prefill_ms") or {}).items()
            },
            spread=float(d.get("spread") or 0.0),
            cuda_graph_bs=tuple(d.get("cuda_graph_bs") or ()),
            max_running_requests=d.get("max_running_requests"),
            zero_step_measured=bool(d.get("zero_step_measured", True)),
            zero_skip={int(b): v * ms for b, v in (d.get("zero_skip_ms") or {}).items()},
            prefill_batch={
                m: {int(t): v * ms for t, v in row.items()}
                for m, row in (d.get("prefill_batch_ms") or {}).items()
            },
            prefill_batch_prompt=d.get("prefill_batch_prompt"),
            front_end=front_end_of(d, str(d.get("source") or "stored plan")),
        )
        return costs


def _piecewise(pts: Mapping[int, float], tokens: int) -> float:
    """Piecewise linear between the points and, with two or more, affine beyond them (the
    outer segments' slopes); one point scales through the origin; never below 0."""
    xs = sorted(pts)
    if len(xs) == 1:
        return pts[xs[0]] * tokens / xs[0]
    j = min(max(bisect.bisect_left(xs, tokens), 1), len(xs) - 1)
    x0, x1 = xs[j - 1], xs[j]
    return max(0.0, pts[x0] + (pts[x1] - pts[x0]) * (tokens - x0) / (x1 - x0))


def _rows(table: Mapping[str, Any], source: str, what: str) -> dict[int, dict[int, float]]:
    try:
        parsed = {int(b): {int(k): float(s) for k, s in row.items()} for b, row in table.items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise CostsError(f"{source}: {what} is not {{bs: {{steps: seconds}}}} ({exc})") from None
    for bs, row in parsed.items():
        if any(s <= 0 for s in row.values()):
            raise CostsError(f"{source}: batch size {bs} has a non-positive cost")
    return parsed


def _flat(table: Mapping[str, Any], source: str, what: str) -> dict[int, float]:
    try:
        parsed = {int(k): float(v) for k, v in table.items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise CostsError(f"{source}: {what} is not {{key: seconds}} ({exc})") from None
    if any(v <= 0 for v in parsed.values()):
        raise CostsError(f"{source}: {what} has a non-positive cost")
    return parsed


def from_table(
    table: Mapping[str, Mapping[str, float]],
    baseline: Mapping[str, float],
    source: str,
    **kw: Any,
) -> Costs:
    """Costs from {bs: {steps: seconds}} (steps 0 = the steps-0 pass) and {bs: seconds}."""
    rows = _rows(table, source, "the cycle table")
    base = _flat(baseline, source, "the baseline decode")
    if not rows:
        raise CostsError(f"{source}: empty cost table")
    for bs, row in rows.items():
        if 0 not in row:
            raise CostsError(f"{source}: batch size {bs} has no steps-0 pass (steps 0)")
    return Costs(rows, base, source, **kw)


def from_engine_info(info: Mapping[str, Any]) -> Costs:
    """The engine's own table from its server info (the sim publishes one)."""
    model = (info.get("sim") or {}).get("cost_model") or {}
    table, base = model.get("by_steps"), model.get("decode")
    if not table or not base:
        raise CostsError(
            "the serving engine publishes no cost table for EAGLE-3 (only the sim does, and "
            "only while it serves EAGLE-3): measure one with `fastverifyctl spec costs "
            "--output FILE` and give it with --costs FILE (or a `rehearse` grid from a GPU)"
        )
    from fastverify.speculation.memory import Memory

    prefill = {m: _flat(t, ENGINE_SOURCE, f"prefill[{m}]")
               for m, t in (model.get("prefill") or {}).items()}  # fmt: skip
    steps = info.get("speculative_num_steps")
    memory = Memory.from_server_info(info, int(steps)) if isinstance(steps, int) else None
    return from_table(
        table, base, ENGINE_SOURCE,
        prefill_table=prefill,
        cuda_graph_bs=tuple(model.get("cuda_graph_bs") or ()),
        max_running_requests=model.get("max_running_requests"),
        notes={"zero_step_skip_extend": model.get("zero_step_skip_extend")},
        memory=memory,
        zero_skip=_flat(model.get("zero_step_without_extend") or {}, ENGINE_SOURCE,
                        "zero_step_without_extend"),
    )  # fmt: skip


def _read_json(path: str | Path) -> tuple[Path, Any]:
    p = Path(path)
    return p, read_json(p, CostsError)


def from_file(
    path: str | Path, backend: str | None = None, zero_skip: str | Path | None = None
) -> Costs:
    """A cost file by its "kind": a `rehearse` grid or `spec costs` engine trials.
    `backend` picks a grid's all-reduce table (engine trials measured one backend).
    `zero_skip`: beside engine trials, the `spec costs` file of the steps-0 pass measured
    again without its draft extend (`with_zero_skip`)."""
    p, data = _read_json(path)
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "engine-trials":
        if backend is not None:
            raise CostsError(
                f"{p}: --allreduce-backend picks a table of a rehearse grid; engine trials "
                f"measured one backend ({data.get('allreduce_backend')})"
            )
        costs = from_engine_trials(p)
        return costs if zero_skip is None else with_zero_skip(costs, p, data, zero_skip)
    if zero_skip is not None and kind == "rehearse-grid":
        raise CostsError(
            f"{zero_skip}: a steps-0 pass without its extend goes beside a `spec costs` file; "
            f"{p} is a rehearse grid, which prices it itself (its steps-0 cycle less the "
            "drafter's one-token extend)"
        )
    if kind == "rehearse-grid":
        return from_rehearse_grid(p, backend)
    raise CostsError(
        f'{p}: "kind" is {kind!r}, expected one of {", ".join(map(repr, FILE_KINDS))} (a '
        "`rehearse` grid, or the --output of fastverifyctl spec costs)"
    )


def from_engine_trials(path: str | Path) -> Costs:
    """A `spec costs` file: {"kind": "engine-trials", "source": str, "model", "profile",
    "allreduce_backend", "sglang_version", "measured_at", "baseline_ms": {bs: ms},
    "cycle_ms": {bs: {steps: ms}}, "verify_ms", "prefill_ms": {mode: {tokens: ms}},
    "spread", "cuda_graph_bs", "prefill_batch_ms", "prefill_batch_prompt", "front_end_ms":
    {"share_ms", "serial_ms", "source"}, "trials": [...], "command"}. `cycle_ms[bs]["0"]` is the
    steps-0 pass (adaptive at 0 steps). A file written before the steps-0 trial existed has
    no "baseline_ms" and its "0" is the baseline decode: steps 0 is then priced as that
    decode, which leaves out the draft extend, and the costs say so."""
    p, data = _read_json(path)
    if not isinstance(data, dict) or data.get("kind") != "engine-trials":
        raise CostsError(f'{p}: not engine trials (needs "kind": "engine-trials")')
    cycle = data.get("cycle_ms")
    if not isinstance(cycle, dict) or not cycle:
        raise CostsError(f'{p}: field "cycle_ms" must be {{bs: {{steps: ms}}}}')
    source = data.get("source")
    if not isinstance(source, str) or not source.strip():
        raise CostsError(f'{p}: field "source" must say where the costs came from')
    label = f"{p.name}: {source}"
    table = _rows(cycle, label, 'field "cycle_ms"')
    base_ms = data.get("baseline_ms")
    measured = isinstance(base_ms, dict) and bool(base_ms)
    if isinstance(base_ms, dict) and base_ms:
        base = _flat(base_ms, label, 'field "baseline_ms"')
    else:  # the older file: "0" was a baseline trial
        base = {b: row[0] for b, row in table.items() if 0 in row}
    prefill = {m: _flat(t, label, f"prefill_ms[{m}]")
               for m, t in (data.get("prefill_ms") or {}).items()}  # fmt: skip
    batch = {m: _flat(t, label, f"prefill_batch_ms[{m}]")
             for m, t in (data.get("prefill_batch_ms") or {}).items()}  # fmt: skip
    batch_prompt = data.get("prefill_batch_prompt")
    if batch and not (isinstance(batch_prompt, int) and batch_prompt > 0):
        raise CostsError(f'{label}: "prefill_batch_ms" needs "prefill_batch_prompt", the '
                         "tokens of each prompt of the batch (a positive integer)")  # fmt: skip
    if "eagle" in prefill and "adaptive" not in prefill:
        # an older file: its "eagle" came from the steps-0 trial, an adaptive server; the
        # fixed EAGLE-3 prefill from its own trials where they hold it
        prefill["adaptive"] = prefill["eagle"]
        bench_len = (data.get("bench") or {}).get("input_len")
        fixed = fixed_eagle_prefill(data.get("trials") or [], bench_len, prefill.get("baseline"))
        if fixed:
            prefill["eagle"] = fixed
    ms = 1e-3
    notes: dict[str, Any] = {"file": str(p), "command": data.get("command")}
    for key in ("profile", "model", "allreduce_backend", "sglang_version", "measured_at",
                "engine", "memory"):  # fmt: skip
        if data.get(key) is not None:
            notes[key] = data[key]
    if data.get("verify_ms"):
        notes["verify_ms"] = data["verify_ms"]
    bench = data.get("bench")
    if not isinstance(bench, dict):
        bench = {}
    if isinstance(bench.get("input_len"), int) and isinstance(bench.get("output_len"), int):
        notes["context_tokens"] = bench["input_len"] + bench["output_len"]
    if not measured:
        notes["zero_step"] = (
            "steps 0 priced as the baseline decode: this file predates the steps-0 trial, "
            "so the draft extend a steps-0 pass runs is left out (+1.4-2.6% per step on the "
            "project's H200 grid); measure again with fastverifyctl spec costs"
        )
    costs = from_table(
        {str(b): {str(k): s * ms for k, s in row.items()} for b, row in table.items()},
        {str(b): s * ms for b, s in base.items()},
        label,
        prefill_table={m: {t: s * ms for t, s in row.items()} for m, row in prefill.items()},
        spread=float(data.get("spread") or GPU_SPREAD),
        notes=notes,
        cuda_graph_bs=tuple(int(b) for b in data.get("cuda_graph_bs") or ()),
        max_running_requests=data.get("max_running_requests"),
        zero_step_measured=measured,
        prefill_batch={m: {t: s * ms for t, s in row.items()} for m, row in batch.items()},
        prefill_batch_prompt=batch_prompt if batch else None,
        front_end=front_end_of(data, label),
    )
    return costs


def front_end_of(data: Mapping[str, Any], label: str) -> FrontEnd | None:
    """The file's `front_end_ms` ({"share_ms", "serial_ms", "source"}), None without one."""
    fe = data.get("front_end_ms")
    if fe is None:
        return None
    try:
        front = FrontEnd.from_dict(fe)
    except (TypeError, ValueError, KeyError) as exc:
        raise CostsError(f'{label}: "front_end_ms" must be {{"share_ms": ms, "serial_ms": ms}} '
                         f"({type(exc).__name__}: {exc})") from None  # fmt: skip
    if front.share_s < 0 or front.serial_s < 0:
        raise CostsError(f'{label}: "front_end_ms" has a negative time')
    return front


def fixed_eagle_prefill(
    trials: Sequence[Mapping[str, Any]], input_len: Any, baseline: Mapping[int, float] | None
) -> dict[int, float]:
    """Fixed EAGLE-3's first-token time by prompt tokens (ms), from `spec costs` trials: the
    median p50 of the batch-1 windows at 1..K steps at the window's prompt length, and at the
    baseline's other measured lengths the baseline's time plus that same difference (the
    draft's extend over the prompt, as measured at the window's length, never negative). {}
    without them. SGLang 0.5.17 (H100, 8B shape, 128-token prompts, 2026-12-07) takes
    20.7-29.0 ms there (median 21.3) where its adaptive server (the steps-0 trial) takes 32.5
    and the baseline 18.8."""
    ttfts = [
        float(t["ttft_ms_p50"])
        for t in trials
        if t.get("status", "ok") == "ok"
        and int(t.get("batch_size") or 0) == 1
        and str(t.get("steps")) not in ("baseline", "0")
        and t.get("ttft_ms_p50")
    ]
    if not ttfts or not isinstance(input_len, int):
        return {}
    at_len = statistics.median(ttfts)
    base = dict(baseline or {})
    if input_len not in base:
        return {input_len: at_len}
    # the target's prefill and the drafter's extend: never under the baseline's (a lower
    # median is noise: H100, 2026-12-06: 21.3 ms against the baseline's 24.4)
    extra = max(0.0, at_len - base[input_len])
    return {n: ms + extra for n, ms in base.items()}


def fixed_eagle_batch(
    fixed: Mapping[int, float],
    baseline: Mapping[int, float],
    baseline_batch: Mapping[int, float],
    input_len: int,
) -> dict[int, float]:
    """Fixed EAGLE-3's batch prefill point (ms by total tokens): the baseline's, moved as
    `fixed_eagle_prefill` moved its one-prompt line (their difference at the window's
    length); {} without the three."""
    if not fixed or not baseline_batch or input_len not in baseline or input_len not in fixed:
        return {}
    moved = fixed[input_len] - baseline[input_len]
    return {n: ms + moved for n, ms in baseline_batch.items()}


def with_prefill_points(data: Mapping[str, Any], points: Mapping[str, Any]) -> dict[str, Any]:
    """A `spec costs` file's data with its prefill taken from prefill points measured apart
    (a `spec costs` file of the baseline and steps-0 trials at batch 1 with their batch
    point, at the same prompt length): for a cost file measured before `spec costs` took a
    batch point. Fixed EAGLE-3's first token and batch point are made from the file's own
    1..K trials, as `spec costs` makes them. A copy; CostsError where the prompt lengths
    differ."""
    n = (data.get("bench") or {}).get("input_len")
    at = (points.get("bench") or {}).get("input_len")
    if n != at:
        raise CostsError(f"prefill points at {at}-token prompts cannot price costs measured "
                         f"at {n}: measure them at {n}")  # fmt: skip
    prefill = {m: dict(t) for m, t in (points.get("prefill_ms") or {}).items()}
    batch = {m: dict(t) for m, t in (points.get("prefill_batch_ms") or {}).items()}
    base = {int(t): ms for t, ms in (prefill.get("baseline") or {}).items()}
    fixed = fixed_eagle_prefill(data.get("trials") or [], n, base)
    if fixed:
        prefill["eagle"] = {str(t): ms for t, ms in fixed.items()}
    base_batch = {int(t): ms for t, ms in (batch.get("baseline") or {}).items()}
    moved = fixed_eagle_batch(fixed, base, base_batch, n) if isinstance(n, int) else {}
    if moved:
        batch["eagle"] = {str(t): ms for t, ms in moved.items()}
    front = {"front_end_ms": points["front_end_ms"]} if points.get("front_end_ms") else {}
    return {**data, "prefill_ms": prefill, "prefill_batch_ms": batch,
            "prefill_batch_prompt": points.get("prefill_batch_prompt"), **front}  # fmt: skip


# what a skip run must share with the cost file it goes beside: (field, what it is)
SAME_RUN_FIELDS = (("engine", "engine"), ("simulated", "simulated"), ("model", "model"),
                   ("sglang_version", "SGLang version"), ("tp_size", "TP size"))  # fmt: skip


def with_zero_skip(costs: Costs, path: Path, data: Mapping[str, Any], skip: str | Path) -> Costs:
    """`costs` (read from the engine trials `data` at `path`) with the steps-0 pass without
    its draft extend from `skip`: a `spec costs` file whose steps-0 column was measured with
    SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 in the engine's environment ([server.env] or
    the profile; `spec costs --trials 0`). The flag changes nothing else a cost file says
    and no file records it, so the two files must be of one engine, model, SGLang, TP size,
    host, bench context and batch sizes, and of two runs; CostsError names what differs."""
    from fastverify.host import fingerprint

    q, other = _read_json(skip)
    if not isinstance(other, dict) or other.get("kind") != "engine-trials":
        raise CostsError(f'{q}: not a `spec costs` file (needs "kind": "engine-trials")')
    if q.resolve() == path.resolve() or (
        other.get("measured_at") and other.get("measured_at") == data.get("measured_at")
    ):
        raise CostsError(f"{q}: the same run as {path}: give the steps-0 pass measured again "
                         "with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1")  # fmt: skip
    differs = [f"{what}: {data.get(key)!r} in {path.name}, {other.get(key)!r} in {q.name}"
               for key, what in SAME_RUN_FIELDS if data.get(key) != other.get(key)]  # fmt: skip
    bench_a, bench_b = data.get("bench") or {}, other.get("bench") or {}
    for key in ("input_len", "output_len"):
        if bench_a.get(key) != bench_b.get(key):
            differs.append(f"bench {key}: {bench_a.get(key)} in {path.name}, "
                           f"{bench_b.get(key)} in {q.name}")  # fmt: skip
    fp_a, fp_b = data.get("fingerprint") or {}, other.get("fingerprint") or {}
    if isinstance(fp_a.get("facts"), dict) and isinstance(fp_b.get("facts"), dict):
        differs += [f"host {c['fact']}: {c['recorded']} in {path.name}, {c['here']} in {q.name}"
                    for c in fingerprint.diff(fp_a["facts"], fp_b["facts"])]  # fmt: skip
    if differs:
        raise CostsError(f"{q} is not the steps-0 pass of {path}'s engine: "
                         + "; ".join(differs))  # fmt: skip
    label = f"{q.name}: {other.get('source') or 'steps 0 without the extend'}"
    rows = _rows(other.get("cycle_ms") or {}, label, 'field "cycle_ms"')
    zero = {b: row[0] for b, row in rows.items() if 0 in row}
    if not zero:
        raise CostsError(f'{q}: no steps-0 column (cycle_ms["BS"]["0"]): measure it with '
                         "fastverifyctl spec costs --trials 0")  # fmt: skip
    want = sorted(costs.table)
    if sorted(zero) != want:
        raise CostsError(
            f"{q}: steps 0 at batch sizes {_csv_ints(sorted(zero))}, {path.name} at "
            f"{_csv_ints(want)}: measure the same ones (spec costs --trials 0 --batch-sizes "
            f"{_csv_ints(want)})"
        )
    notes = dict(costs.notes, zero_skip_from=f"{q} (steps 0 with "
                 "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1)")  # fmt: skip
    return replace(costs, zero_skip={b: v * 1e-3 for b, v in zero.items()}, notes=notes)


def _csv_ints(values: list[int]) -> str:
    return ",".join(map(str, values))


def from_rehearse_grid(path: str | Path, backend: str | None = None) -> Costs:
    """A `rehearse` grid file:
    {"kind": "rehearse-grid", "model", "shard_of_tp", "ranks_run", "gpu", "batch_sizes",
     "tokens_per_seq", "forward_ms": {bs: {tokens: ms}}, "verify_decode_ratio": {...},
     "allreduce": {"source": str, "per_forward_ms": {bs: {tokens: ms}}}, "sources", "command"}.
    A cycle at k steps = the target forward over k + 1 tokens per request, k - 1 draft steps
    and the draft extend over k + 1 tokens (SGLang's cycle: `fastverify.sglang.eagle`), each
    with its all-reduces; steps 0 = the target forward over 1 token plus the draft extend
    over 1 token; the baseline decode = the target forward over 1 token; the steps-0 pass
    without its extend (`zero_skip`) = that steps-0 cycle less the drafter's extend over 1
    token. The grid times one forward over 1 token for both the decode and the verify, so
    a grid prices neither the steps-0 pass nor a verify above a decode by what SGLang's
    TARGET_VERIFY path adds (1.11-1.66x a decode at one draft token on SGLang 0.5.17, H100,
    8B shape: tests/fixtures/sglang-0.5.17-h100-spec8b/spec-costs-steps0-skip.json). A grid
    without `drafter` (recorded before the grid timed it) counts the drafter as 0, and says
    so (and prices no `zero_skip`).
    `backend`: one of the grid's `allreduce.by_backend` tables (e.g. "pcie_ipc")."""
    p, data = _read_json(path)
    if not isinstance(data, dict) or data.get("kind") != "rehearse-grid":
        raise CostsError(f'{p}: not a rehearse grid (needs "kind": "rehearse-grid")')
    fwd = data.get("forward_ms")
    ar_doc = data.get("allreduce") or {}
    count = ar_doc.get("count_per_forward")
    if backend is not None:
        tables = ar_doc.get("by_backend") or {}
        if backend not in tables:
            raise CostsError(
                f"{p}: no all-reduce table for backend {backend!r} (the grid has: "
                f"{', '.join(sorted(tables)) or 'none'})"
            )
        ar_doc = tables[backend]
    ar = ar_doc.get("per_forward_ms") or {}
    if not isinstance(fwd, dict) or not fwd:
        raise CostsError(f'{p}: field "forward_ms" must be {{bs: {{tokens: ms}}}}')
    drafter = data.get("drafter")
    # the drafter's all-reduces: the same messages as the target's, at its own count
    d_share = drafter["count_per_forward"] / count if drafter and count else 0.0
    table: dict[str, dict[str, float]] = {}
    base: dict[str, float] = {}
    zero_skip: dict[int, float] = {}
    for bs, row in fwd.items():
        if not isinstance(row, dict) or "1" not in row:
            raise CostsError(f'{p}: forward_ms["{bs}"] needs tokens "1" (the decode step)')
        ar_row = ar.get(bs) or {}
        out = {}
        for tokens, ms in row.items():
            k = int(tokens) - 1
            target = float(ms) + float(ar_row.get(tokens, 0.0))
            if k == 0:
                base[bs] = target / 1e3
            ms_total = target
            if drafter:
                try:
                    step = drafter["step_ms"][bs] + d_share * float(ar_row.get("1", 0.0))
                    ext = drafter["extend_ms"][bs][tokens]
                except (KeyError, TypeError):
                    raise CostsError(
                        f'{p}: "drafter" has no step_ms["{bs}"] / extend_ms["{bs}"]["{tokens}"]'
                    ) from None
                ext += d_share * float(ar_row.get(tokens, 0.0))
                ms_total += eagle.draft_forwards_per_cycle(k) * step + ext
                if k == 0:  # the steps-0 pass less the drafter's extend over its one token
                    zero_skip[int(bs)] = (ms_total - ext) / 1e3
            out[str(k)] = ms_total / 1e3
        table[str(bs)] = out
    ar_src = ar_doc.get("source") or "none (compute only)"
    drafter_src = (
        f"drafter measured ({drafter.get('model')}"
        f"{', estimated shapes' if drafter.get('estimated') else ''}: k - 1 draft steps + the "
        "extend per cycle, the extend over 1 token at steps 0)"
        if drafter
        else "drafter not measured (draft forwards counted as 0: optimistic for speculation)"
    )
    source = (
        f"rehearse-grid {p.name}: {data.get('model')} shard of TP {data.get('shard_of_tp')} on "
        f"{data.get('gpu')}; all-reduce: {ar_src}; {drafter_src}"
    )
    return from_table(
        table, base, source, spread=GPU_SPREAD,
        notes={"file": str(p), "command": data.get("command"), "model": data.get("model")},
        zero_step_measured=bool(drafter), zero_skip=zero_skip,
    )  # fmt: skip
