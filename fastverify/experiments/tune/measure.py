"""The sweeps tune runs through the daemon (trial on dummy weights or the cached real
ones, confirmation with real weights): one `fastverify.experiments.sweep.run.Sweep` per
step, each in its own results directory under the tune's output, always with `resume` so an
interrupted tune continues where the sweep's results file stops, and never restoring the
profile served before (the decision stage puts the winner in place)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastverify.experiments.tune.context import Ctx


def sweep(ctx: Ctx, sub: str, profiles: list[str], **kw: Any) -> dict[str, Any]:
    """Run one sweep over `profiles` into `<output>/<sub>/`; returns its report."""
    from fastverify.experiments.bench.load import BenchConfig
    from fastverify.experiments.sweep.config import SweepConfig
    from fastverify.experiments.sweep.run import Sweep

    c = ctx.cfg
    bench = BenchConfig(
        url="",
        concurrency=c.concurrency,
        duration=c.duration_s,
        input_len=c.input_len,
        output_len=c.output_len,
    )
    cfg = SweepConfig(
        profiles=tuple(profiles),
        output_dir=Path(ctx.out) / sub,
        repeats=c.repeats,
        bench=bench,
        resume=True,
        plot=False,
        switch_timeout_s=c.switch_timeout_s,
        trace_steps=c.trace_steps,
        restore=False,
        **kw,
    )
    report = Sweep(ctx.client, cfg, on_event=ctx.emit).run()
    record_times(ctx, Path(report["results_file"]), c.duration_s)
    return report


def record_times(ctx: Ctx, results_file: Path, duration_s: float) -> None:
    """This host's per-unit times from a sweep's results file, for the next plan: one
    profile window (`trace`) and a measurement's time beyond its window (`bench_overhead`)."""
    from statistics import median

    from fastverify.experiments.sweep.results import load_records

    recs = load_records(results_file)
    for key, values in (
        ("trace", [r["wall_s"] for r in recs if r.get("type") == "trace"]),
        (
            "bench_overhead",
            [r["wall_s"] - duration_s for r in recs if r.get("type") == "measurement"],
        ),
    ):
        values = [v for v in values if isinstance(v, int | float) and v >= 0]
        if values:
            ctx.journal.record_time(key, median(values))
