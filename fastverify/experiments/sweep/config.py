"""What `fastverifyctl sweep` takes (`SweepConfig`, checked by `validate`), the files it
writes in its output directory and how it fails (`SweepError`, `SweepBusy`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastverify.config import LOAD_FORMATS, TRIAL_LOAD_FORMAT
from fastverify.experiments.bench.load import BenchConfig

RESULTS_FILE = "results.jsonl"
PLOT_FILE = "sweep.png"


class SweepError(RuntimeError):
    """The sweep cannot start or continue (existing results without --resume, no daemon)."""


class SweepBusy(SweepError):
    """Another experiment holds the daemon's lease."""


@dataclass(frozen=True)
class SweepConfig:
    profiles: tuple[str, ...]
    output_dir: Path
    mode: str = "baseline"
    repeats: int = 3
    bench: BenchConfig = field(default_factory=lambda: BenchConfig(duration=20.0))
    resume: bool = False
    then_eagle3: int = 0
    apply_best: bool = False
    reference: str | None = None
    switch_timeout_s: float = 1800.0
    plot: bool = True
    alpha: float = 0.05
    # trial mode (fastverify.experiments.sweep.trial)
    load_format: str = "auto"  # "dummy": timing trial on random weights
    accept_length: float | None = None  # real accept length the trial break-even is judged by
    then_confirm: int = 0  # reload the best N with real weights and measure them
    traces: bool = True  # capture a profile window per profile in a trial
    real_traces: bool = False  # and per real-weights profile too (tune's trial from the cache)
    trace_steps: int = 5
    restore: bool = True  # put back what served before (False: leave the last one; `tune`)

    @property
    def trial(self) -> bool:
        return self.load_format == TRIAL_LOAD_FORMAT

    def validate(self) -> None:
        if not self.profiles:
            raise ValueError("name at least one profile")
        if len(set(self.profiles)) != len(self.profiles):
            raise ValueError("a profile is named twice")
        if self.mode not in ("baseline", "eagle3", "adaptive"):
            raise ValueError(f"--mode must be baseline, eagle3 or adaptive, got {self.mode!r}")
        if self.repeats < 1:
            raise ValueError("--repeats must be at least 1")
        if self.then_eagle3 < 0:
            raise ValueError("--then-eagle3 must be 0 or more")
        if self.then_eagle3 and self.mode != "baseline":
            raise ValueError("--then-eagle3 follows a baseline sweep (use --mode baseline)")
        if self.reference and self.reference not in self.profiles:
            raise ValueError(f"--reference {self.reference!r} is not among the swept profiles")
        self._validate_trial()
        self.bench.validate()

    def _validate_trial(self) -> None:
        if self.load_format not in LOAD_FORMATS:
            raise ValueError(
                f"--load-format {self.load_format!r}: expected one of {', '.join(LOAD_FORMATS)}"
            )
        if self.then_confirm < 0:
            raise ValueError("--then-confirm must be 0 or more")
        if self.then_confirm and not self.trial:
            raise ValueError("--then-confirm follows a trial (add --load-format dummy)")
        if self.accept_length is not None and self.accept_length < 1.0:
            raise ValueError("--accept-length counts the bonus token: 1.0 or more")
        if self.trace_steps < 1:
            raise ValueError("--trace-steps must be at least 1")

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["output_dir"] = str(self.output_dir)
        return d
