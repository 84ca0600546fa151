"""Stop times that used to be upper-bound asserts in tests: figures, not asserts.

Measured side by side in one run, each `--repeat` times (median and max printed):
1. `procs.stop_group` on a polite process group (`sleep 30`): SIGTERM to gone;
2. `procs.wait_gpu_release` without NVML (should return at once);
3. the sim engine, SIGTERM during a 10 s weight load (tp=3): signal to exit;
4. the sim engine, SIGTERM while decoding (tp=2, clients connected): signal to exit.
A polite stop is expected well under the daemon's default 10 s grace; the sim's HTTP
server polls for shutdown every 0.5 s, which bounds (3)/(4) from below. Writes
benchmarks/results/stop.json.

    python benchmarks/bench_stop.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastverify.daemon import procs  # noqa: E402
from tests.support.sim import SimProcess  # noqa: E402


def _stop_group(tmp: Path) -> float:
    p = procs.spawn(["sleep", "30"], dict(os.environ), tmp / "sleep.log")
    while not procs.group_members(p.pid):
        time.sleep(0.005)
    return procs.stop_group(p.pid, grace_s=10, proc=p).duration_s


def _gpu_release() -> float:
    t0 = time.perf_counter()
    procs.wait_gpu_release([os.getpid()], timeout_s=5)
    return time.perf_counter() - t0


def _sim_sigterm(line: str, **kw: object) -> float:
    sim = SimProcess(**kw)  # type: ignore[arg-type]
    try:
        sim.wait_line(line)
        t0 = time.perf_counter()
        sim.proc.send_signal(signal.SIGTERM)
        sim.wait_exit(30)
        return time.perf_counter() - t0
    finally:
        sim.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-stop-"))
    cases = {
        "stop_group_sigterm_s": lambda: _stop_group(tmp),
        "gpu_release_without_nvml_s": _gpu_release,
        "sim_sigterm_during_load_s": lambda: _sim_sigterm(
            "Load weight begin", tp=3, eagle3=False, load=10.0
        ),
        "sim_sigterm_idle_ready_s": lambda: _sim_sigterm(
            "fired up and ready", tp=2, eagle3=True, load=0.05
        ),
    }
    out: dict[str, dict[str, float]] = {}
    for name, fn in cases.items():
        xs = [fn() for _ in range(args.repeat)]
        out[name] = {"median": statistics.median(xs), "max": max(xs), "n": len(xs)}
        print(f"{name:32s} median {out[name]['median']:.3f} s  max {out[name]['max']:.3f} s")
    dest = ROOT / "benchmarks" / "results" / "stop.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
