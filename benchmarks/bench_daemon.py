"""Daemon footprint and what observing costs the server, on the sim engine (figures only).

1. Footprint at idle, over 10 s of a READY daemon (exporter on, default trace period):
   RSS/USS and CPU of fastverifyd alone, of the sim engine group (server + TP workers),
   and of both together. Then 50 concurrent /metrics scrapers while the daemon switches
   4 times (one a rollback): latency p50/p99/max and errors.
2. Served tokens/s with and without observation, side by side in one run: the same
   closed-loop load (`fastverify.experiments.bench.load`, streaming /generate) against
   A. fastverifyd without the exporter (metrics off, no trace windows),
   B. fastverifyd with the exporter (engine polled every second, /metrics scraped every
      second like an eager Prometheus),
   C. B plus profile windows (torch-style traces of every TP rank every 5 s, analysed).
   Order A B C C B A (linear drift cancels); each run a fresh daemon. Goal: B/A and C/A
   >= 0.99.

The sim's timings come from its cost model, not hardware; what this measures is whether
the daemon and exporter take CPU away from a server sharing the host.
Writes benchmarks/results/daemon.json.

    python benchmarks/bench_daemon.py [--seconds 15] [--concurrency 8] [--idle-seconds 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results" / "daemon.json"
GOAL_RATIO = 0.99


def group(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def mem(procs: list[psutil.Process]) -> tuple[int, int]:
    rss = uss = 0
    for p in procs:
        info = p.memory_full_info()
        rss += info.rss
        uss += info.uss
    return rss, uss


def cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        t = p.cpu_times()
        total += t.user + t.system + t.children_user + t.children_system
    return total


def footprint(tmp: Path, seconds: float) -> dict:
    from tests.support.harness import DaemonHarness

    with DaemonHarness(tmp / "idle", sim_load_seconds=0.3) as d:
        time.sleep(2.0)  # let start-up settle
        daemon = [psutil.Process(d.pid)]
        engine = group(d.engine_pid())
        c0d, c0e, t0 = cpu(daemon), cpu(engine), time.monotonic()
        time.sleep(seconds)
        c1d, c1e, t1 = cpu(daemon), cpu(engine), time.monotonic()
        rss_d, uss_d = mem(daemon)
        rss_e, uss_e = mem(engine)
        threads = daemon[0].num_threads()
    wall = t1 - t0
    mib = 1024 * 1024
    return {
        "seconds": round(wall, 2),
        "daemon": {
            "rss_mib": round(rss_d / mib, 1),
            "uss_mib": round(uss_d / mib, 1),
            "cpu_percent": round(100 * (c1d - c0d) / wall, 3),
            "threads": threads,
        },
        "engine_group": {
            "processes": len(engine),
            "rss_mib": round(rss_e / mib, 1),
            "uss_mib": round(uss_e / mib, 1),
            "cpu_percent": round(100 * (c1e - c0e) / wall, 3),
        },
        "daemon_plus_engine": {
            "rss_mib": round((rss_d + rss_e) / mib, 1),
            "uss_mib": round((uss_d + uss_e) / mib, 1),
            "cpu_percent": round(100 * (c1d - c0d + c1e - c0e) / wall, 3),
        },
    }


def scrapers_during_switches(tmp: Path, scrapers: int = 50) -> dict:
    """`scrapers` threads scraping /metrics back to back while the daemon switches 4 times."""
    from tests.support.harness import DaemonHarness

    with DaemonHarness(tmp / "scrape", sim_load_seconds=0.3) as d:
        stop = threading.Event()
        lat: list[float] = []
        errors = [0]

        def scrape() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(d.metrics_url, timeout=10) as r:
                        r.read()
                    lat.append(time.perf_counter() - t0)
                except OSError:
                    errors[0] += 1

        threads = [threading.Thread(target=scrape, daemon=True) for _ in range(scrapers)]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        for name in ("ring-ll", "tree-ll", "ring-simple", "nccl-default"):  # tree-ll rolls back
            d.ctl("profile", "set", name, "-q")
        wall = time.monotonic() - t0
        stop.set()
        for t in threads:
            t.join(15)
    lat.sort()
    ms = [x * 1000 for x in lat]
    return {
        "scrapers": scrapers,
        "switches": 4,
        "seconds": round(wall, 2),
        "scrapes": len(ms),
        "errors": errors[0],
        "per_second": round(len(ms) / wall, 1),
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 2),
        "max_ms": round(ms[-1], 2),
    }


EAGLE3 = {"server": {"mode": "eagle3"}}  # verify passes are what the trace windows analyse
CONFIGS = {
    "A_no_exporter": {"metrics": False, "config": {**EAGLE3}},
    "B_exporter": {"metrics": True, "config": {**EAGLE3, "daemon": {"trace_period_s": 0}}},
    "C_exporter_and_trace_windows": {
        "metrics": True,
        "config": {**EAGLE3, "daemon": {"trace_period_s": 5, "trace_steps": 5}},
    },
}


def served(tmp: Path, key: str, seconds: float, concurrency: int) -> dict:
    from fastverify.experiments.bench.load import BenchConfig, run_bench
    from tests.support.harness import DaemonHarness

    spec = CONFIGS[key]
    with DaemonHarness(
        tmp / f"{key}-{time.monotonic_ns()}",
        sim_load_seconds=0.3,
        metrics=spec["metrics"],
        config=spec["config"],
    ) as d:
        stop = threading.Event()
        scrapes = [0]

        def scrape() -> None:
            while not stop.wait(1.0):
                with urllib.request.urlopen(d.metrics_url, timeout=5) as r:
                    r.read()
                scrapes[0] += 1

        scraper = threading.Thread(target=scrape, daemon=True) if spec["metrics"] else None
        if scraper:
            scraper.start()
        cfg = BenchConfig(
            url=d.server_url,
            concurrency=concurrency,
            duration=seconds,
            input_len=64,
            output_len=128,
            seed=1,
            warmup=0,
        )
        run_bench(dataclasses.replace(cfg, duration=1.5))  # warm the fresh engine, discarded
        res = run_bench(cfg)
        stop.set()
        windows = None
        if spec["metrics"]:
            with urllib.request.urlopen(d.metrics_url, timeout=5) as r:
                text = r.read().decode()
            found = re.findall(
                r'^fastverify_trace_windows_total\{result="(\w+)"\} (\S+)$', text, re.M
            )
            windows = {k: float(v) for k, v in found}
    return {
        "tokens_per_second": res.output_tokens_per_second,
        "completed": res.completed,
        "failed": res.failed,
        "scrapes": scrapes[0],
        "trace_windows": windows,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="load per run")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fv-bench-daemon-") as tmpd:
        tmp = Path(tmpd)
        idle = footprint(tmp, args.idle_seconds)
        scrape = scrapers_during_switches(tmp)
        order = ["A_no_exporter", "B_exporter", "C_exporter_and_trace_windows"]
        runs: dict[str, list[dict]] = {k: [] for k in order}
        for key in [*order, *reversed(order)]:
            runs[key].append(served(tmp, key, args.seconds, args.concurrency))
            print(f"{key:32} {runs[key][-1]['tokens_per_second']:10.1f} tok/s", flush=True)
    tps = {k: statistics.mean(r["tokens_per_second"] for r in v) for k, v in runs.items()}
    base = tps["A_no_exporter"]
    result = {
        "what": "fastverifyd footprint and served tok/s with/without observation (sim engine)",
        "goal": f"tok/s with exporter (and trace windows) >= {GOAL_RATIO:.0%} of without",
        "goal_ratio": GOAL_RATIO,
        "idle": idle,
        "scrapers_during_switches": scrape,
        "load": {
            "seconds_per_run": args.seconds,
            "concurrency": args.concurrency,
            "order": "A B C C B A",
        },
        "served": {
            k: {"mean_tokens_per_second": round(tps[k], 2), "runs": v} for k, v in runs.items()
        },
        "ratio_exporter": round(tps["B_exporter"] / base, 4),
        "ratio_exporter_and_traces": round(tps["C_exporter_and_trace_windows"] / base, 4),
        "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    i = idle
    print(
        f"\nidle {i['seconds']} s: daemon RSS {i['daemon']['rss_mib']} MiB, "
        f"CPU {i['daemon']['cpu_percent']}%; engine group RSS {i['engine_group']['rss_mib']} MiB, "
        f"CPU {i['engine_group']['cpu_percent']}%"
    )
    print(
        f"served tok/s: A {base:.1f}, B {tps['B_exporter']:.1f} "
        f"({result['ratio_exporter']:.3f}), C {tps['C_exporter_and_trace_windows']:.1f} "
        f"({result['ratio_exporter_and_traces']:.3f}); goal >= {GOAL_RATIO}"
    )
    print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
