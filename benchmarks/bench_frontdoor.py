"""The front door on the sim engine: what it costs, and what it saves during switches.

Measured in one run (figures, never asserts; benchmarks/results/frontdoor.json):

1. Overhead, side by side: one sim engine, reached directly and through a front door
   (`python -m fastverify.frontdoor`) in front of the same engine. `fastverifyctl bench`'s
   closed loop (streaming `/generate`, `fastverify.experiments.bench.load.run_bench`) at
   c = 1, 8, 64, the two paths interleaved and their order swapped each round. Goal: output
   tok/s >= 0.97x direct, TTFT p50 <= +2 ms.
2. Switches under load, front door off vs hold vs standby: fastverifyd on the sim with the
   weight cache on (all three modes alike), closed-loop clients at c = 8 and 64 (half
   streaming chat completions, half non-streaming completions) while fastverifyctl
   switches 5 times (ring-ll, tree-ll which rolls back, nccl-default, ring-ll,
   nccl-default). Per mode: failed, cut, refused (503) requests, TTFT p50/p99 of streams
   that started during a switch and outside one, output tok/s, and each switch's own
   figures. Goals beside each figure: hold and standby 0 failed, 0 cut; standby's p99 TTFT
   during a switch <= 2x its p99 outside. A client pauses 50 ms after a failed request (a
   closed loop against a refused port would otherwise only count how fast it can fail).

    python benchmarks/bench_frontdoor.py [--seconds 6] [--rounds 2] [--clients 8,64]
        [--modes off,hold,standby] [--skip-overhead: keep the file's overhead figures]

The sim stands in for SGLang (docs/guides/sim.md); on 2 shared cores the engine, the front
door and the clients compete for the same CPUs, which the side-by-side order evens out.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import statistics
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
from fastverify.daemon import procs  # noqa: E402
from fastverify.engines.sim_adapter import SIM_MODEL  # noqa: E402
from fastverify.experiments.bench.load import run_bench  # noqa: E402
from fastverify.experiments.bench.records import BenchConfig  # noqa: E402
from fastverify.percentiles import percentile  # noqa: E402

SWITCHES = ["ring-ll", "tree-ll", "nccl-default", "ring-ll", "nccl-default"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not become healthy")


# --------------------------------------------------------------------------- overhead
def overhead(work: Path, seconds: float, rounds: int, levels: list[int]) -> dict:
    eport, dport = free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    sim = procs.spawn(
        [sys.executable, "-m", "fastverify.sim", "--model-path", SIM_MODEL, "--tp-size", "2",
         "--port", str(eport)], env, work / "sim.log",
    )  # fmt: skip
    door = procs.spawn(
        [sys.executable, "-m", "fastverify.frontdoor", "--listen", f"127.0.0.1:{dport}",
         "--engine-port", str(eport), "--control", str(work / "fd.sock")], env, work / "fd.log",
    )  # fmt: skip
    direct, front = f"http://127.0.0.1:{eport}", f"http://127.0.0.1:{dport}"
    out: dict = {}
    try:
        wait_health(direct)
        wait_health(front)
        out["small_request_round_trip"] = lat = added_latency(eport, dport, 500)
        print(
            f"GET /get_model_info p50: direct {lat['direct_p50_ms']} ms, through the front "
            f"door {lat['frontdoor_p50_ms']} ms (+{lat['added_p50_ms']} ms)"
        )
        import psutil

        door_proc = psutil.Process(door.pid)
        for c in levels:
            runs: dict[str, list] = {"direct": [], "frontdoor": []}
            cpu_s = wall_s = 0.0
            for r in range(rounds):
                order = [("direct", direct), ("frontdoor", front)]
                for name, url in order if r % 2 == 0 else order[::-1]:
                    cfg = BenchConfig(url=url, concurrency=c, duration=seconds, input_len=64,
                                      output_len=64, warmup=1)  # fmt: skip
                    t0, cpu0 = time.monotonic(), sum(door_proc.cpu_times()[:2])
                    res = run_bench(cfg)
                    if name == "frontdoor":  # the front door's own CPU while it relayed
                        cpu_s += sum(door_proc.cpu_times()[:2]) - cpu0
                        wall_s += time.monotonic() - t0
                    runs[name].append((res.output_tokens_per_second, res.ttft_ms["p50"],
                                       res.failed))  # fmt: skip
                    print(
                        f"c={c:<3} {name:<9} round {r}: {res.output_tokens_per_second:9.1f}"
                        f" tok/s  TTFT p50 {res.ttft_ms['p50']:7.2f} ms  failed {res.failed}"
                    )
            d_tps = statistics.median(x[0] for x in runs["direct"])
            f_tps = statistics.median(x[0] for x in runs["frontdoor"])
            d_ttft = statistics.median(x[1] for x in runs["direct"])
            f_ttft = statistics.median(x[1] for x in runs["frontdoor"])
            out[str(c)] = {
                "direct_tok_s": round(d_tps, 1),
                "frontdoor_tok_s": round(f_tps, 1),
                "tok_s_ratio": round(f_tps / d_tps, 4),
                "goal_tok_s_ratio": 0.97,
                "direct_ttft_p50_ms": round(d_ttft, 2),
                "frontdoor_ttft_p50_ms": round(f_ttft, 2),
                "ttft_p50_delta_ms": round(f_ttft - d_ttft, 2),
                "goal_ttft_p50_delta_ms": 2.0,
                "failed": sum(x[2] for x in runs["direct"] + runs["frontdoor"]),
                "frontdoor_cpu_share_of_one_core": round(cpu_s / wall_s, 4),
                "runs": runs,
            }
    finally:
        for p in (door, sim):
            procs.stop_group(p.pid, 10, proc=p)
    return out


def added_latency(direct_port: int, door_port: int, n: int) -> dict:
    """Round trips of one small request (GET /get_model_info, keep-alive), direct and
    through the front door, interleaved: the front door's own latency without the sim's
    scheduling noise in it."""
    conns = {p: http.client.HTTPConnection("127.0.0.1", p, timeout=30) for p in
             (direct_port, door_port)}  # fmt: skip
    times: dict[int, list[float]] = {direct_port: [], door_port: []}
    for i in range(n):
        for p in (direct_port, door_port) if i % 2 == 0 else (door_port, direct_port):
            t0 = time.perf_counter()
            conns[p].request("GET", "/get_model_info")
            conns[p].getresponse().read()
            times[p].append(time.perf_counter() - t0)
    d = statistics.median(times[direct_port]) * 1e3
    f = statistics.median(times[door_port]) * 1e3
    return {"n": n, "direct_p50_ms": round(d, 3), "frontdoor_p50_ms": round(f, 3),
            "added_p50_ms": round(f - d, 3)}  # fmt: skip


# --------------------------------------------------------------------------- switches
CHAT = json.dumps({"model": "sim", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 32, "stream": True}).encode()  # fmt: skip
COMPLETION = json.dumps({"model": "sim", "prompt": "hi", "max_tokens": 32}).encode()


def one(port: int, streaming: bool) -> tuple[str, float | None, int]:
    """(outcome, TTFT s, output tokens) for one request: ok / cut / failed / refused."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.monotonic()
    try:
        path = "/v1/chat/completions" if streaming else "/v1/completions"
        try:
            conn.request("POST", path, CHAT if streaming else COMPLETION,
                         {"Content-Type": "application/json"})  # fmt: skip
            resp = conn.getresponse()
        except OSError:
            return "failed", None, 0
        if resp.status == 503 and resp.getheader("Retry-After"):
            resp.read()
            return "refused", None, 0
        if resp.status != 200:
            resp.read()
            return "failed", None, 0
        if not streaming:
            try:
                body = json.loads(resp.read())
            except (OSError, http.client.HTTPException, ValueError):
                return "cut", None, 0
            tokens = int((body.get("usage") or {}).get("completion_tokens") or 0)
            return "ok", time.monotonic() - t0, tokens
        ttft, tokens = None, 0
        try:
            while line := resp.readline():
                if line.startswith(b"data: {"):
                    tokens += 1  # one chunk per token
                    if ttft is None:
                        ttft = time.monotonic() - t0
                if line.strip() == b"data: [DONE]":
                    return "ok", ttft, tokens
        except (OSError, http.client.HTTPException):
            pass
        return "cut", ttft, tokens
    finally:
        conn.close()


def under_switches(work: Path, mode: str, clients: int, load_seconds: float) -> dict:
    port, engine_port, standby_port = free_port(), free_port(), free_port()
    tag = f"{mode}-c{clients}"
    state = work / f"state-{tag}"
    cfg = work / f"fastverifyd-{tag}.toml"
    cfg.write_text(f'[server]\nport = {port}\ntp_size = 2\nweight_cache = "auto"\n\n'
                   f'[frontdoor]\nmode = "{mode}"\nengine_port = {engine_port}\n'
                   f"standby_port = {standby_port}\n")  # fmt: skip
    sock = work / f"c-{tag}.sock"
    log = open(work / f"daemon-{tag}.log", "wb")  # noqa: SIM115 - closed below
    daemon = subprocess.Popen(
        [sys.executable, "-m", "fastverify.daemon.main", "--config", str(cfg), "--engine",
         "sim", "--state-dir", str(state), "--socket", str(sock), "--metrics-listen", "",
         "--sim-load-seconds", str(load_seconds)],
        env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=log, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    ctl = ControlClient(sock, timeout=600)
    records: list[tuple[float, bool, str, float | None, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(streaming: bool) -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            outcome, ttft, tokens = one(port, streaming)
            with lock:
                records.append((t0, streaming, outcome, ttft, tokens))
            if outcome != "ok":
                stop.wait(0.05)

    windows: list[tuple[float, float]] = []
    results = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if ctl.get("/v1/status")["state"] == "READY":
                    break
            except Exception:
                pass
            time.sleep(0.1)
        wait_health(f"http://127.0.0.1:{port}")
        threads = [threading.Thread(target=client, args=(i % 2 == 0,), daemon=True)
                   for i in range(clients)]  # fmt: skip
        for t in threads:
            t.start()
        began = time.monotonic()
        time.sleep(3)  # load outside any switch
        for name in SWITCHES:
            t0 = time.monotonic()
            try:
                res = ctl.post("/v1/profile", {"name": name})
            except Exception as exc:  # a failed profile answers 502 with its result
                res = getattr(exc, "body", {"result": "error", "message": str(exc)})
            windows.append((t0, time.monotonic()))
            results.append({"profile": name, "result": res.get("result"),
                            "switch": res.get("switch")})  # fmt: skip
            sw = res.get("switch") or {}
            print(f"{tag:<11} switch to {name:<13} {res.get('result'):<12} mode "
                  f"{sw.get('mode')} down {sw.get('downtime_s')} s held {sw.get('held')} "
                  f"cut {sw.get('cut')} refused {sw.get('refused')}")  # fmt: skip
            time.sleep(3)  # load outside any switch
        stop.set()
        for t in threads:
            t.join(300)
        ended = time.monotonic()
    finally:
        stop.set()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
        log.close()

    def during(t: float) -> bool:
        return any(a <= t <= b for a, b in windows)

    def pct(xs: list[float], q: float) -> float | None:
        return round(percentile(sorted(xs), q) * 1e3, 1) if xs else None

    counts = {k: sum(1 for r in records if r[2] == k) for k in ("ok", "failed", "cut", "refused")}
    ttft_in = [r[3] for r in records if r[1] and r[2] == "ok" and r[3] and during(r[0])]
    ttft_out = [r[3] for r in records if r[1] and r[2] == "ok" and r[3] and not during(r[0])]
    p99_in, p99_out = pct(ttft_in, 99), pct(ttft_out, 99)
    out: dict = {
        "clients": clients,
        "requests": len(records),
        **counts,
        "ttft_ms_during_switches": {"p50": pct(ttft_in, 50), "p99": p99_in, "n": len(ttft_in)},
        "ttft_ms_outside_switches": {"p50": pct(ttft_out, 50), "p99": p99_out, "n": len(ttft_out)},
        "output_tok_s": round(sum(r[4] for r in records) / (ended - began), 1),
        "switch_wall_s": [round(b - a, 3) for a, b in windows],
        "switch_modes": [(r["switch"] or {}).get("mode") for r in results],
        "switches": results,
    }
    if mode != "off":
        out["goal_0_failed_0_cut"] = counts["failed"] == 0 and counts["cut"] == 0
    if mode == "standby" and p99_in and p99_out:
        out["ttft_p99_during_over_outside"] = round(p99_in / p99_out, 3)
        out["goal_ttft_p99_during_over_outside"] = 2.0
        out["goal_ttft_p99_met"] = p99_in <= 2 * p99_out
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0, help="window per overhead run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--levels", default="1,8,64")
    ap.add_argument("--clients", default="8,64")
    ap.add_argument("--modes", default="off,hold,standby")
    ap.add_argument("--load-seconds", type=float, default=1.0)
    keep = "measure the switches only; the file's overhead figures are kept"
    ap.add_argument("--skip-overhead", action="store_true", help=keep)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/frontdoor.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fv-fd-"))
    result: dict = {
        "what": "the front door on the sim engine (not a hardware measurement)",
        "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if not args.skip_overhead:
        levels = [int(x) for x in args.levels.split(",")]
        result["overhead"] = overhead(work, args.seconds, args.rounds, levels)
    elif args.out.exists():  # an earlier run's, said as such
        earlier = json.loads(args.out.read_text())
        if "overhead" in earlier:
            result["overhead"] = earlier["overhead"]
            result["overhead_measured_at"] = earlier.get("overhead_measured_at",
                                                         earlier.get("measured_at"))  # fmt: skip
    modes = args.modes.split(",")
    result["switches_under_load"] = {
        f"c{c}": {mode: under_switches(work, mode, c, args.load_seconds) for mode in modes}
        for c in (int(x) for x in args.clients.split(","))
    }
    result["goal"] = {"hold": "0 failed, 0 cut",
                      "standby": "0 failed, 0 cut; TTFT p99 during a switch <= 2x outside",
                      "tok_s_ratio": ">= 0.97", "ttft_p50_delta_ms": "<= 2"}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for level, by_mode in result["switches_under_load"].items():
        for mode, r in by_mode.items():
            print(
                f"{level} {mode:<7}: {r['requests']} requests, {r['failed']} failed, {r['cut']} "
                f"cut, {r['refused']} refused, {r['output_tok_s']} tok/s; TTFT p50/p99 during "
                f"{r['ttft_ms_during_switches']}, outside {r['ttft_ms_outside_switches']}"
            )
    for c, r in (result.get("overhead") or {}).items():
        if not c.isdigit():
            continue
        print(
            f"c={c}: tok/s x{r['tok_s_ratio']} (goal >= 0.97), TTFT p50 "
            f"{r['ttft_p50_delta_ms']:+.2f} ms (goal <= +2)"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
