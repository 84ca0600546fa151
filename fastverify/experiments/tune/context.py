"""What every tune stage gets (`Ctx`) and returns (`StageResult`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.experiments.tune.journal import Journal


@dataclass(frozen=True)
class TuneConfig:
    model_config: str | None = None
    draft_config: str | None = None
    accept_length: float | None = None
    profiles: tuple[str, ...] = ()  # () = all (shipped + user)
    finalists: int = 2
    budget_min: float | None = None
    apply: bool = True
    output_dir: str = ""
    repeats: int = 3
    duration_s: float = 20.0
    concurrency: int = 1
    input_len: int = 128
    output_len: int = 256
    trace_steps: int = 5
    switch_timeout_s: float = 1800.0
    env: tuple[str, ...] = ()  # KEY=VALUE on top of every profile in preflight/rehearse/derive
    backend: str = "nccl"  # "gloo": preflight/rehearse on CPU ranks, for tests (hidden flag)

    def describe(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True)
class StageResult:
    status: str  # "done" | "skipped" | "failed"
    reason: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def none_measured(
        cls, why: str, rows: Sequence[Mapping[str, Any]], data: dict[str, Any]
    ) -> StageResult:
        """A measuring stage none of whose rows succeeded: `why: profile: reason; ...`."""
        reasons = "; ".join(f"{r['profile']}: {r.get('reason')}" for r in rows)
        return cls("failed", f"{why}: {reasons}", data)


@dataclass
class Ctx:
    cfg: TuneConfig
    client: Any  # fastverify.client.ControlClient
    journal: Journal
    out: Path  # the output directory (report, decision.json, sweep results)
    emit: Callable[[str], None]
    plan: dict[str, Any] = field(default_factory=dict)
    serving_before: dict[str, Any] = field(default_factory=dict)  # {profile, mode} at start
    results: dict[str, StageResult] = field(default_factory=dict)  # finished stages
    stage: str | None = None  # the stage running now (for progress and its ETA)
    stage_t0: float = 0.0  # when it started (time.monotonic)
    stage_since: float = 0.0  # the same, as time.time() (the daemon's history is in it)
    running: tuple[str, dict[str, Any]] | None = None  # (stage, its plan) until it returns
    eagle3_confirm: bool = False  # confirm decided on a real EAGLE-3 load (the plan counts it)
    extra_confirm_loads: int = 0  # further real loads confirm decided on (mode adaptive)
    replan: Callable[[], None] = lambda: None  # re-estimate now (the pipeline sets it)

    def data(self, name: str) -> dict[str, Any]:
        r = self.results.get(name)
        return r.data if r is not None else {}

    def status_of(self, name: str) -> str | None:
        r = self.results.get(name)
        return r.status if r is not None else None
