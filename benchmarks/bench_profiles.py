"""Benchmark: wall time of `fastverifyctl profile list` / `profile validate` (all shipped
profiles) as real subprocesses, and validator time per file in-process.

Prints a figure table and writes benchmarks/results/profiles.json. Figures only: no
asserts on wall time. Usage: python benchmarks/bench_profiles.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "profiles"
RESULTS = REPO / "benchmarks" / "results" / "profiles.json"


def ctl() -> list[str]:
    # the console script of this interpreter (not a pyenv/asdf shim in front of it)
    local = Path(sys.executable).parent / "fastverifyctl"
    exe = str(local) if local.is_file() else shutil.which("fastverifyctl")
    return [exe] if exe else [sys.executable, "-m", "fastverify.ctl"]


def time_cmd(argv: list[str], runs: int, env: dict[str, str]) -> dict[str, float]:
    samples = []
    for _ in range(runs + 1):  # first run warms the page cache; dropped
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, env=env, check=False)
        samples.append((time.perf_counter() - start) * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()}")
    samples = samples[1:]
    return summary(samples)


def summary(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "runs": len(s),
        "median_ms": round(statistics.median(s), 2),
        "p90_ms": round(s[min(len(s) - 1, int(0.9 * len(s)))], 2),
        "min_ms": round(s[0], 2),
    }


def validator_per_file(runs: int) -> dict[str, dict[str, float]]:
    sys.path.insert(0, str(REPO))
    from fastverify.profiles.envfile import parse_bytes
    from fastverify.profiles.store import ProfileStore
    from fastverify.profiles.validate import Topology, validate

    out = {}
    topo = Topology(has_nvlink=False, source="bench")
    store = ProfileStore([], SHIPPED, topology=topo)
    for f in sorted(SHIPPED.glob("*.env")):
        data = f.read_bytes()
        parse_only, full_load = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            validate(parse_bytes(data, str(f)), topology=topo)
            t1 = time.perf_counter()
            store.load(f.stem)  # parse + extends chain + validate
            t2 = time.perf_counter()
            parse_only.append((t1 - t0) * 1000)
            full_load.append((t2 - t1) * 1000)
        out[f.name] = {
            "parse_validate_median_ms": round(statistics.median(parse_only), 4),
            "load_with_extends_median_ms": round(statistics.median(full_load), 4),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="subprocess runs per command")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "FASTVERIFY_PROFILE_DIRS": str(Path(tmp) / "user"),
            "FASTVERIFY_SOCKET": str(Path(tmp) / "no-daemon.sock"),
            "FASTVERIFY_CONFIG": str(Path(tmp) / "none.toml"),
        }
        names = sorted(p.stem for p in SHIPPED.glob("*.env"))
        base = ctl()
        figures = {
            "profile list": time_cmd([*base, "profile", "list"], args.runs, env),
            "profile list --json": time_cmd([*base, "profile", "list", "--json"], args.runs, env),
            f"profile validate ({len(names)} shipped)": time_cmd(
                [*base, "profile", "validate", "--topology", "pcie", *names], args.runs, env
            ),
            "python -c pass (interpreter floor)": time_cmd(
                [sys.executable, "-c", "pass"], args.runs, env
            ),
        }
    per_file = validator_per_file(200)
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        },
        "command": " ".join(base),
        "cli_wall": figures,
        "validator_per_file": per_file,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'command':45} {'median ms':>10} {'p90 ms':>10} {'min ms':>10}")
    for name, s in figures.items():
        print(f"{name:45} {s['median_ms']:>10.1f} {s['p90_ms']:>10.1f} {s['min_ms']:>10.1f}")
    print()
    print(f"{'profile file':25} {'parse+validate ms':>18} {'load (extends) ms':>18}")
    for name, s in per_file.items():
        print(
            f"{name:25} {s['parse_validate_median_ms']:>18.3f} "
            f"{s['load_with_extends_median_ms']:>18.3f}"
        )
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
