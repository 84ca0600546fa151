"""Switch overhead of fastverifyd on the sim engine: what the daemon adds to an engine restart.

Measured in one run, same argv, environment and readiness criterion (SGLang's ready line
plus GET /health == 200, polled every 10 ms):

1. engine alone: spawn `python -m fastverify.sim ...` directly, time to ready, then
   SIGTERM its process group and time until the group is gone (the engine's own stop);
2. through the daemon: `POST /v1/profile` alternating ring-ll <-> ring-simple, wall time
   seen by the client (validation, stop, GPU-release wait, spawn, readiness, /proc
   verification, state + journal fsyncs, answer).

Two figures, both as a fraction of the engine's time-to-ready (goal: <= 5 %):
- the daemon's own work: switch wall time minus the engine's ready and stop times as the
  daemon's phase clock measured them (validation, spawn, verification, persistence, answer);
- the paired difference: median switch wall time minus the medians of the engine-alone
  ready and stop times. The sim's stop time jitters by up to 0.5 s (its HTTP server polls
  for shutdown every 0.5 s), which dominates this one; read it with that in mind. Prints figures
and writes benchmarks/results/switch.json; no asserts (wall time is never a test).

    python benchmarks/bench_switch.py [--load-seconds 2] [--switches 8] [--tp-size 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fastverify.client import ControlClient  # noqa: E402
from fastverify.config import ServerConfig  # noqa: E402
from fastverify.daemon import procs  # noqa: E402
from fastverify.engines.sim_adapter import SimEngine  # noqa: E402
from fastverify.profiles.effective import effective_env  # noqa: E402
from fastverify.profiles.store import ProfileStore  # noqa: E402

READY = "The server is fired up and ready to roll!"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def engine_alone(argv: list[str], env: dict[str, str], log: Path, url: str) -> tuple[float, float]:
    t0 = time.monotonic()
    proc = procs.spawn(argv, env, log)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"sim exited {proc.returncode}: {log.read_text()[-2000:]}")
        if READY in log.read_text(errors="replace") and healthy(url):
            ready = time.monotonic() - t0
            break
        time.sleep(0.01)
    res = procs.stop_group(proc.pid, grace_s=30, proc=proc)
    return ready, res.duration_s


def summary(xs: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(xs),
        "median": statistics.median(xs),
        "min": min(xs),
        "max": max(xs),
        "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0,
        "n": len(xs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load-seconds", type=float, default=2.0)
    ap.add_argument("--switches", type=int, default=8)
    ap.add_argument("--tp-size", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "switch.json")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fv-bench-"))
    port = free_port()
    engine = SimEngine(sys.executable, args.load_seconds)
    store = ProfileStore(user_dirs=[])
    names = ["ring-ll", "ring-simple"]

    daemon_log = open(work / "daemon.log", "wb")  # noqa: SIM115 - closed below
    cfg = work / "fastverifyd.toml"
    cfg.write_text(f"[server]\nport = {port}\ntp_size = {args.tp_size}\n")
    sock = work / "c.sock"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "fastverify.daemon.main", "--config", str(cfg), "--engine", "sim",
         "--state-dir", str(work / "state"), "--socket", str(sock), "--metrics-listen", "",
         "--sim-load-seconds", str(args.load_seconds)],
        env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL,
        stderr=daemon_log, start_new_session=True,
    )  # fmt: skip
    client = ControlClient(sock, timeout=600)
    ready_s, stop_s, switch_s, daemon_ready_s = [], [], [], []
    phases: dict[str, list[float]] = {}
    alone_port = free_port()
    alone_url = f"http://127.0.0.1:{alone_port}"
    alone_server = ServerConfig(tp_size=args.tp_size, port=alone_port)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if client.get("/v1/status")["state"] == "READY":
                    break
            except Exception:
                pass
            time.sleep(0.05)
        # Interleaved, so both see the same machine: the engine alone (own port), then a
        # switch through the daemon to the same profile.
        for i in range(args.switches):
            prof = store.load(names[i % 2])
            argv = engine.build_argv(alone_server, "baseline", prof.requires)
            extra = dict(engine.extra_env(), **{procs.ENGINE_ID_VAR: "bench"})
            r, s = engine_alone(
                argv, effective_env(prof, extra=extra), work / f"a{i}.log", alone_url
            )
            ready_s.append(r)
            stop_s.append(s)
            t0 = time.monotonic()
            res = client.post("/v1/profile", {"name": names[i % 2]})
            switch_s.append(time.monotonic() - t0)
            daemon_ready_s.append(res["engine_ready_s"])
            for name, secs in (res.get("phases") or {}).items():
                phases.setdefault(name, []).append(secs)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
        daemon_log.close()
        shutil.rmtree(work, ignore_errors=True)

    ready, stop, sw = summary(ready_s), summary(stop_s), summary(switch_s)
    overhead = sw["median"] - ready["median"] - stop["median"]
    ph = {k: statistics.median(v) for k, v in phases.items()}
    # The daemon's own work, by its phase clock: everything but waiting for the engine.
    own = statistics.median(
        w - e - st
        for w, e, st in zip(switch_s, phases["engine_ready"], phases["stop"], strict=True)
    )
    result = {
        "what": "fastverifyd switch overhead on the sim engine (not a hardware measurement)",
        "load_seconds": args.load_seconds,
        "tp_size": args.tp_size,
        "engine_time_to_ready_s": ready,
        "engine_stop_s": stop,
        "switch_wall_s": sw,
        "daemon_measured_ready_s": summary(daemon_ready_s),
        "daemon_phases_median_s": ph,
        "daemon_own_work_s": own,
        "readiness_detection_lag_s": statistics.median(daemon_ready_s) - ready["median"],
        "daemon_own_work_fraction_of_engine_start": own / ready["median"],
        "overhead_s": overhead,
        "overhead_fraction_of_engine_start": overhead / ready["median"],
        "goal_fraction": 0.05,
        "host": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"engine time-to-ready (alone): median {ready['median'] * 1e3:8.1f} ms  (n={ready['n']})")
    print(f"engine stop (alone):          median {stop['median'] * 1e3:8.1f} ms")
    print(f"switch through fastverifyd:   median {sw['median'] * 1e3:8.1f} ms")
    print(
        f"daemon's own work:            {own * 1e3:8.1f} ms = {own / ready['median'] * 100:.1f}%"
        " of engine start (goal <= 5%; switch minus the engine's ready and stop, phase clock)"
    )
    lag = result["readiness_detection_lag_s"]
    print(
        f"readiness detection lag:      {lag * 1e3:8.1f} ms"
        " (daemon-measured ready minus engine-alone ready, medians)"
    )
    print(
        f"paired difference:            {overhead * 1e3:8.1f} ms = "
        f"{result['overhead_fraction_of_engine_start'] * 100:.1f}%"
        " (switch minus alone ready+stop medians; dominated by the sim's stop jitter)"
    )
    print(
        "daemon phases (median):      "
        + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in result["daemon_phases_median_s"].items())
    )
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
