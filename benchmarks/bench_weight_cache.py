"""A profile switch with and without the weight cache, side by side in one run, on the sim.

Two fastverifyd in turn, the same sim server (TP 2, `--sim-load-seconds S`: a disk start
spends 85% of S reading the weights, docs/guides/sim.md), one with `weight_cache = "off"`, one with
`"auto"`. Each runs the same sequence through the real `fastverifyctl`: 5 baseline `profile
set` (ring-ll, ring-simple, nccl-default, ring-ll-8ch, ring-ll), a rollback (tree-ll fails its
CUDA-graph capture and rolls back), a crash restart (the server SIGKILLed), timing each to
READY as the client sees it, with the start's split (weights, cuda_graph, rest: SGLang's
own lines) and, with the cache, its launcher's pid after every step.

Figures (no asserts: wall time is never a test): the median switch with / without (goal:
<= 1/5), the rollback and crash-restart times, whether the cache pid stayed the same. Writes
benchmarks/results/weight-cache-sim.json.

    python benchmarks/bench_weight_cache.py [--load-seconds 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.harness import DaemonHarness  # noqa: E402

SWITCHES = ("ring-ll", "ring-simple", "nccl-default", "ring-ll-8ch", "ring-ll")


def _switch(d: DaemonHarness, name: str) -> dict[str, Any]:
    t = time.monotonic()
    r = d.ctl("profile", "set", name, "--json", timeout=1800)
    wall = time.monotonic() - t
    res = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"raw": r.stdout}
    load = res.get("weight_load") or {}
    return {
        "profile": name,
        "result": res.get("result"),
        "wall_s": round(wall, 3),
        "engine_ready_s": res.get("engine_ready_s"),
        "weights": load.get("source"),
        "phases": load.get("phases"),
        "text": load.get("text"),
    }


def _cache_pid(d: DaemonHarness) -> int | None:
    wc = d.status().get("weight_cache") or {}
    return wc.get("pid") if wc.get("state") == "ready" else None


def run(setting: str, load_s: float, work: Path) -> dict[str, Any]:
    cfg = {
        "server": {"weight_cache": setting},
        "daemon": {"readiness_timeout_s": 1800, "restart_backoff_s": [0.1, 0.5]},
    }
    d = DaemonHarness(work / setting, sim_load_seconds=load_s, config=cfg, start=False)
    out: dict[str, Any] = {"weight_cache": setting, "switches": [], "cache_pids": []}
    try:
        t = time.monotonic()
        d.start(wait_ready=True, timeout=1800)
        st = d.status()
        out["first_start"] = {
            "daemon_start_to_ready_s": round(time.monotonic() - t, 3),
            "weights": (st["engine"].get("weight_load") or {}).get("source"),
            "cache_ready_s": (st.get("weight_cache") or {}).get("ready_s"),
        }
        out["cache_pids"].append(_cache_pid(d))
        for name in SWITCHES:
            out["switches"].append(_switch(d, name))
            out["cache_pids"].append(_cache_pid(d))
        out["rollback"] = _switch(d, "tree-ll")
        d.wait_state("READY", timeout=1800)
        out["cache_pids"].append(_cache_pid(d))
        pid = d.status()["engine"]["pid"]
        t = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        d.wait_for(lambda: d.status()["restarts"]["total"] >= 1, 1800, "the crash restart")
        st = d.wait_state("READY", timeout=1800)
        out["crash_restart"] = {
            "to_ready_s": round(time.monotonic() - t, 3),
            "weights": (st["engine"].get("weight_load") or {}).get("source"),
        }
        out["cache_pids"].append(_cache_pid(d))
    finally:
        d.close()
    walls = [s["wall_s"] for s in out["switches"]]
    out["switch_wall_s"] = {
        "median": statistics.median(walls),
        "min": min(walls),
        "max": max(walls),
    }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load-seconds", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/weight-cache-sim.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fv-bench-wc-"))
    t0 = time.monotonic()
    without = run("off", args.load_seconds, work)
    with_cache = run("auto", args.load_seconds, work)
    pids = with_cache["cache_pids"]
    ratio = with_cache["switch_wall_s"]["median"] / without["switch_wall_s"]["median"]
    report = {
        "benchmark": "weight-cache",
        "engine": "sim (a SIMULATION: the load split is the sim's calibration, docs/guides/sim.md)",
        "sim_load_seconds": args.load_seconds,
        "tp_size": 2,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                 "python": sys.version.split()[0]},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.monotonic() - t0, 1),
        "figures": {
            "switch_median_s_without": without["switch_wall_s"]["median"],
            "switch_median_s_with": with_cache["switch_wall_s"]["median"],
            "ratio_with_over_without": round(ratio, 3),
            "goal": "<= 0.2",
            "rollback_s": {"without": without["rollback"]["wall_s"],
                           "with": with_cache["rollback"]["wall_s"]},
            "crash_restart_s": {"without": without["crash_restart"]["to_ready_s"],
                                "with": with_cache["crash_restart"]["to_ready_s"]},
            "cache_pid_kept": len(set(pids)) == 1 and None not in pids,
            "cache_pids": pids,
            "starts_from_the_cache": sum(s["weights"] == "cache" for s in with_cache["switches"]),
        },
        "without": without,
        "with": with_cache,
        "command": "python benchmarks/bench_weight_cache.py --load-seconds "
        f"{args.load_seconds:g}",
    }  # fmt: skip
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["figures"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
