"""`fastverifyctl tune` with and without the daemon's weight cache, side by side in one run,
on the sim -> benchmarks/results/tune-weight-cache-sim.json.

Two fastverifyd in turn, the same sim server (TP 8, `--sim-load-seconds S`: a disk start
spends 85% of S reading the weights, docs/guides/sim.md), one with `weight_cache = "off"`, one with
`"on"`. Each runs the same `fastverifyctl tune --accept-length 2.0 --json` (the suite's short
measurement windows, tests/support/tune.py). Without the cache the trial runs on dummy
weights and confirm reloads the finalists from disk; with it the trial's baselines load the
cache's real weights and confirm reloads none.

Figures (no asserts: wall time is never a test): per setting, the plan's ETA (printed first)
beside the tune's actual wall time, per stage too, and the loads the daemon recorded during
the tune by where their weights came from (cache, disk, dummy).

    python benchmarks/bench_tune_weight_cache.py [--load-seconds 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.harness import DaemonHarness  # noqa: E402
from tests.support.tune import CONFIG, MEASURE, TP, read_journal  # noqa: E402

LOAD_KINDS = ("start", "switch", "mode", "restart", "crash_restart")


def _loads(history: list[dict[str, Any]], since: float) -> dict[str, Any]:
    """The tune's engine starts by where their weights came from (cache, disk, dummy; a
    start that failed before loading any: failed), each with its mode and seconds."""
    out: dict[str, list[dict[str, Any]]] = {"cache": [], "disk": [], "dummy": [], "failed": []}
    for r in history:
        if r.get("kind") not in LOAD_KINDS or (r.get("started_at") or 0) < since:
            continue
        source = (r.get("weight_load") or {}).get("source")
        where = "dummy" if r.get("weights") == "dummy" else source or "failed"
        keep = ("profile", "mode", "result", "duration_s")
        out[where].append({k: r.get(k) for k in keep})
    return {k: {"n": len(v), "loads": v} for k, v in out.items()}


def _stage(s: dict[str, Any], actual: dict[str, float]) -> dict[str, Any]:
    """A plan stage's estimate beside the stage's actual wall time."""
    keep = {k: s[k] for k in ("name", "units", "source")}
    return dict(keep, estimate_s=round(s["estimate_s"], 1), actual_s=actual.get(s["name"]))


def run(setting: str, load_s: float, work: Path) -> dict[str, Any]:
    cfg = {
        **CONFIG,
        "server": {"weight_cache": setting},
        "daemon": {**CONFIG["daemon"], "readiness_timeout_s": 1800},
    }
    d = DaemonHarness(work / setting, tp_size=TP, sim_load_seconds=load_s, config=cfg, start=False)
    try:
        d.start(wait_ready=True, timeout=1800)
        before = d.status()
        t0 = time.time()
        t = time.monotonic()
        proc = d.ctl("tune", "--accept-length", "2.0", "--json", *MEASURE, "--output",
                     str(work / setting / "tune-out"), timeout=3600)  # fmt: skip
        wall = time.monotonic() - t
        res = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
        journal = read_journal(d)
        after = d.status()
        history = d.client.get("/v1/history")
    finally:
        d.close()
    plan = next((r["plan"] for r in journal if r.get("event") == "plan"), {})
    actual = {s["name"]: s["wall_s"] for s in res.get("stages", [])}
    pids = [(s.get("weight_cache") or {}).get("pid") for s in (before, after)]
    return {
        "weight_cache": setting,
        "exit_code": proc.returncode,
        "decision": res.get("decision"),
        "plan_eta_s": round(plan.get("total_s", 0.0), 1),
        "wall_s": round(wall, 1),
        "plan_printed": [x for x in proc.stderr.splitlines() if x.startswith("  ")][:12],
        "stages": [_stage(s, actual) for s in plan.get("stages", [])],
        "plan_loads": plan.get("loads"),
        "loads": _loads(history, t0),
        "cache_pid_before_after": pids,
        "stderr_tail": proc.stderr.splitlines()[-5:] if proc.returncode else [],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load-seconds", type=float, default=30.0)
    ap.add_argument(
        "--out", type=Path, default=REPO / "benchmarks/results/tune-weight-cache-sim.json"
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fv-bench-tune-wc-"))
    t0 = time.monotonic()
    without = run("off", args.load_seconds, work)
    with_cache = run("on", args.load_seconds, work)
    report = {
        "benchmark": "tune-weight-cache",
        "command": f"python {Path(__file__).relative_to(REPO)} --load-seconds "
        f"{args.load_seconds:g}",
        "engine": "sim (a SIMULATION: its loads are the sim's calibration, docs/guides/sim.md)",
        "sim_load_seconds": args.load_seconds,
        "tp_size": TP,
        "measure": MEASURE,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                 "python": sys.version.split()[0], "load_average": os.getloadavg()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.monotonic() - t0, 1),
        "figures": {
            "plan_eta_s": {"off": without["plan_eta_s"], "on": with_cache["plan_eta_s"]},
            "tune_wall_s": {"off": without["wall_s"], "on": with_cache["wall_s"]},
            "ratio_on_over_off": round(with_cache["wall_s"] / without["wall_s"], 3)
            if without["wall_s"] else None,
            "loads_off": {k: v["n"] for k, v in without["loads"].items()},
            "loads_on": {k: v["n"] for k, v in with_cache["loads"].items()},
            "decisions": {"off": without["decision"], "on": with_cache["decision"]},
            "cache_pid_kept": len(set(with_cache["cache_pid_before_after"])) == 1
            and None not in with_cache["cache_pid_before_after"],
        },
        "off": without,
        "on": with_cache,
    }  # fmt: skip
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"written": str(args.out), **report["figures"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
