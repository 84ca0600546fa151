"""What a decode step and a draft+verify cycle cost, per batch size and step count.

`Costs.cycle(bs, k)`: seconds per step of a batch of `bs` requests at k draft steps; k = 0 is
the plain decode step (no drafting: what SGLang's adaptive worker runs at steps 0 and what
the baseline runs). Every table says where it came from (`source`):

- "engine": the serving engine's own cost table. The sim publishes it in its server info
  (`sim.cost_model.by_steps`, seconds, `fastverify.engines.sim.costtable`: its cost model
  at each step count with num_draft_tokens = steps + 1, as adaptive runs them): a SIMULATION.
- "rehearse-grid": a `rehearse` grid measured on a GPU (schema in `from_rehearse_grid`):
  target compute per forward at bs x tokens-per-request plus the all-reduce time per
  forward (preflight's measurement or the backend's published table, labelled by the
  grid). The grid has no drafter: draft forwards count as 0 (an optimistic bound for
  speculation, said in `source`).
- "engine-trials": `fastverifyctl spec costs` on the serving engine (schema in
  `from_engine_trials`): the engine restarted on dummy weights at each step count, its own
  decode step and draft+verify cycle read from bench windows at each batch size; its
  `source` names the model, profile, all-reduce backend, SGLang version and date.

`from_file(path, backend)` reads either file kind by its "kind".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.sglang import eagle


class CostsError(ValueError):
    """A cost source that cannot be read (which file/field, what is wrong)."""


@dataclass(frozen=True)
class Costs:
    """cycle seconds by (batch size, steps); k = 0 = a decode step without drafting."""

    table: dict[int, dict[int, float]]
    source: str
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(self.table)

    def steps(self, bs: int) -> list[int]:
        return sorted(self.table[bs])

    def cycle(self, bs: int, k: int) -> float:
        return self.table[bs][k]

    def nearest(self, bs: int) -> int:
        """The table's batch size closest to `bs` (log scale) that is not larger, else the
        smallest one."""
        below = [b for b in self.batch_sizes if b <= bs]
        return max(below) if below else self.batch_sizes[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "cycle_ms": {
                str(bs): {str(k): round(s * 1e3, 4) for k, s in sorted(row.items())}
                for bs, row in sorted(self.table.items())
            },
            **({"notes": self.notes} if self.notes else {}),
        }


ENGINE_SOURCE = "engine: fastverify sim cost model (SIMULATION)"


def from_table(table: Mapping[str, Mapping[str, float]], source: str) -> Costs:
    try:
        parsed = {int(b): {int(k): float(s) for k, s in row.items()} for b, row in table.items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise CostsError(
            f"{source}: cost table is not {{bs: {{steps: seconds}}}} ({exc})"
        ) from None
    for bs, row in parsed.items():
        if 0 not in row:
            raise CostsError(f"{source}: batch size {bs} has no decode step (steps 0)")
        if any(s <= 0 for s in row.values()):
            raise CostsError(f"{source}: batch size {bs} has a non-positive cost")
    if not parsed:
        raise CostsError(f"{source}: empty cost table")
    return Costs(parsed, source)


def from_engine_info(info: Mapping[str, Any]) -> Costs:
    """The engine's own table from its server info (the sim publishes one)."""
    table = ((info.get("sim") or {}).get("cost_model") or {}).get("by_steps")
    if not table:
        raise CostsError(
            "the serving engine publishes no cost table (only the sim does): measure one on "
            "it with `fastverifyctl spec costs --output FILE` and give it with --costs FILE "
            "(or a `rehearse` grid measured on a GPU)"
        )
    return from_table(table, ENGINE_SOURCE)


def _read_json(path: str | Path) -> tuple[Path, Any]:
    p = Path(path)
    try:
        return p, json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CostsError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise CostsError(f"{p}: line {exc.lineno}: not JSON ({exc.msg})") from None


FILE_KINDS = ("rehearse-grid", "engine-trials")


def from_file(path: str | Path, backend: str | None = None) -> Costs:
    """A cost file by its "kind": a `rehearse` grid or `spec costs` engine trials.
    `backend` picks a grid's all-reduce table (engine trials measured one backend)."""
    p, data = _read_json(path)
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "engine-trials":
        if backend is not None:
            raise CostsError(
                f"{p}: --allreduce-backend picks a table of a rehearse grid; engine trials "
                f"measured one backend ({data.get('allreduce_backend')})"
            )
        return from_engine_trials(p)
    if kind == "rehearse-grid":
        return from_rehearse_grid(p, backend)
    raise CostsError(
        f'{p}: "kind" is {kind!r}, expected one of {", ".join(map(repr, FILE_KINDS))} (a '
        "`rehearse` grid, or the --output of fastverifyctl spec costs)"
    )


def from_engine_trials(path: str | Path) -> Costs:
    """A `spec costs` file: {"kind": "engine-trials", "source": str, "model", "profile",
    "allreduce_backend", "sglang_version", "measured_at", "cycle_ms": {bs: {steps: ms}},
    "verify_ms": {bs: {steps: ms}}, "trials": [...], "command"}. `cycle_ms[bs]["0"]` is the
    decode step, `cycle_ms[bs][k]` the draft+verify cycle at k steps."""
    p, data = _read_json(path)
    if not isinstance(data, dict) or data.get("kind") != "engine-trials":
        raise CostsError(f'{p}: not engine trials (needs "kind": "engine-trials")')
    cycle = data.get("cycle_ms")
    if not isinstance(cycle, dict) or not cycle:
        raise CostsError(f'{p}: field "cycle_ms" must be {{bs: {{steps: ms}}}}')
    source = data.get("source")
    if not isinstance(source, str) or not source.strip():
        raise CostsError(f'{p}: field "source" must say where the costs came from')
    try:
        table = {bs: {k: float(ms) / 1e3 for k, ms in row.items()} for bs, row in cycle.items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise CostsError(f'{p}: field "cycle_ms" must be {{bs: {{steps: ms}}}} ({exc})') from None
    costs = from_table(table, f"{p.name}: {source}")
    notes = {"file": str(p), "command": data.get("command")}
    if data.get("verify_ms"):
        notes["verify_ms"] = data["verify_ms"]
    return Costs(costs.table, costs.source, notes)


def from_rehearse_grid(path: str | Path, backend: str | None = None) -> Costs:
    """A `rehearse` grid file:
    {"kind": "rehearse-grid", "model", "shard_of_tp", "ranks_run", "gpu", "batch_sizes",
     "tokens_per_seq", "forward_ms": {bs: {tokens: ms}}, "verify_decode_ratio": {...},
     "allreduce": {"source": str, "per_forward_ms": {bs: {tokens: ms}}}, "sources", "command"}.
    A cycle at k steps = the target forward over k + 1 tokens per request, k - 1 draft steps
    and the draft extend over k + 1 tokens (SGLang's cycle: `fastverify.sglang.eagle`), each
    with its all-reduces; k = 0 = the target forward over 1 token. A grid without `drafter`
    (recorded before the grid timed it) counts the drafter as 0, and says so. `backend`: one
    of the grid's `allreduce.by_backend` tables (e.g. "pcie_ipc") instead of its default."""
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
    for bs, row in fwd.items():
        if not isinstance(row, dict) or "1" not in row:
            raise CostsError(f'{p}: forward_ms["{bs}"] needs tokens "1" (the decode step)')
        ar_row = ar.get(bs) or {}
        out = {}
        for tokens, ms in row.items():
            k = int(tokens) - 1
            ms_total = float(ms) + float(ar_row.get(tokens, 0.0))
            if drafter and k > 0:
                try:
                    step = drafter["step_ms"][bs] + d_share * float(ar_row.get("1", 0.0))
                    ext = drafter["extend_ms"][bs][tokens]
                except (KeyError, TypeError):
                    raise CostsError(
                        f'{p}: "drafter" has no step_ms["{bs}"] / extend_ms["{bs}"]["{tokens}"]'
                    ) from None
                ext += d_share * float(ar_row.get(tokens, 0.0))
                ms_total += eagle.draft_forwards_per_cycle(k) * step + ext
            out[str(k)] = ms_total / 1e3
        table[str(bs)] = out
    ar_src = ar_doc.get("source") or "none (compute only)"
    drafter_src = (
        f"drafter measured ({drafter.get('model')}"
        f"{', estimated shapes' if drafter.get('estimated') else ''}: k - 1 draft steps + the "
        "extend per cycle)"
        if drafter
        else "drafter not measured (draft forwards counted as 0: optimistic for speculation)"
    )
    source = (
        f"rehearse-grid {p.name}: {data.get('model')} shard of TP {data.get('shard_of_tp')} on "
        f"{data.get('gpu')}; all-reduce: {ar_src}; {drafter_src}"
    )
    costs = from_table(table, source)
    return Costs(costs.table, source, {"file": str(p), "command": data.get("command")})
