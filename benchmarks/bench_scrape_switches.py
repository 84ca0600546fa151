"""/metrics latency under 50 concurrent scrapers, while fastverifyd switches profiles and while
it only serves: the same daemon (sim engine), the same 50 scraper threads, measured side by
side in one run. The hardening test (tests/hardening/test_hardening_concurrency.py) holds
that no scrape fails during switches; the latency is a figure, here.

Figures: scrapes, p50, p99 and max latency of each phase, and the ratio switching / idle of
p50 and p99 (a busy 2-core machine stretches both phases alike). Writes
benchmarks/results/scrape_switches.json and prints a table; no asserts.

    python benchmarks/bench_scrape_switches.py [--scrapers 50] [--rounds 2] [--load-seconds 0.3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fastverify.client import ControlClient  # noqa: E402

PROFILES = ("ring-ll", "tree-ll", "ring-simple", "nccl-default")  # tree-ll rolls back


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_while(url: str, scrapers: int, body) -> tuple[list[float], list[str]]:
    """Latencies (s) and errors of `scrapers` threads scraping `url` until body() returns."""
    stop = threading.Event()
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def scrape() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    r.read()
                dt = time.perf_counter() - t0
                with lock:
                    lat.append(dt)
            except Exception as exc:
                with lock:
                    errors.append(repr(exc))

    threads = [threading.Thread(target=scrape) for _ in range(scrapers)]
    for t in threads:
        t.start()
    try:
        body()
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    return lat, errors


def figures(lat: list[float]) -> dict[str, float]:
    xs = sorted(lat)
    if not xs:
        return {"scrapes": 0}
    return {
        "scrapes": len(xs),
        "p50_ms": round(xs[len(xs) // 2] * 1e3, 2),
        "p99_ms": round(xs[int(0.99 * (len(xs) - 1))] * 1e3, 2),
        "max_ms": round(xs[-1] * 1e3, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapers", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the four profiles")
    ap.add_argument("--load-seconds", type=float, default=0.3)
    ap.add_argument(
        "--out", type=Path, default=REPO / "benchmarks" / "results" / "scrape_switches.json"
    )
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fv-bench-", dir="/tmp"))
    metrics_port, sock = free_port(), work / "c.sock"
    cfg = work / "fastverifyd.toml"
    cfg.write_text(
        f"[server]\nport = {free_port()}\ntp_size = 2\n"
        f'[daemon]\nprofile_dirs = ["{work / "profiles"}"]\n'
    )
    log = open(work / "daemon.log", "wb")  # noqa: SIM115 - closed below
    daemon = subprocess.Popen(
        [sys.executable, "-m", "fastverify.daemon.main", "--config", str(cfg), "--engine", "sim",
         "--state-dir", str(work / "state"), "--socket", str(sock),
         "--metrics-listen", f"127.0.0.1:{metrics_port}",
         "--sim-load-seconds", str(args.load_seconds)],
        env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    client = ControlClient(sock, timeout=600)
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    switch_wall: list[float] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if client.get("/v1/status")["state"] == "READY":
                    break
            except Exception:
                pass
            time.sleep(0.05)

        def switches() -> None:
            for _ in range(args.rounds):
                for name in PROFILES:
                    t0 = time.monotonic()
                    with contextlib.suppress(Exception):  # tree-ll's rollback: an error
                        client.post("/v1/profile", {"name": name})
                    switch_wall.append(time.monotonic() - t0)

        busy, busy_err = scrape_while(url, args.scrapers, switches)
        # idle for as long as the switches took
        idle, idle_err = scrape_while(url, args.scrapers, lambda: time.sleep(sum(switch_wall)))
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
        log.close()
        shutil.rmtree(work, ignore_errors=True)

    during, alone = figures(busy), figures(idle)
    result = {
        "what": "/metrics latency, 50 scrapers, during profile switches vs idle (sim engine)",
        "scrapers": args.scrapers,
        "switches": len(switch_wall),
        "switching": {**during, "errors": len(busy_err)},
        "idle": {**alone, "errors": len(idle_err)},
        "ratio_p50": round(during["p50_ms"] / alone["p50_ms"], 2) if alone.get("p50_ms") else None,
        "ratio_p99": round(during["p99_ms"] / alone["p99_ms"], 2) if alone.get("p99_ms") else None,
        "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'phase':<10} {'scrapes':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>7}")
    for name, f, err in (("switching", during, busy_err), ("idle", alone, idle_err)):
        print(f"{name:<10} {f['scrapes']:>8} {f.get('p50_ms', 0):>8} {f.get('p99_ms', 0):>8} "
              f"{f.get('max_ms', 0):>8} {len(err):>7}")  # fmt: skip
    print(f"switching / idle: p50 x{result['ratio_p50']}, p99 x{result['ratio_p99']}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
