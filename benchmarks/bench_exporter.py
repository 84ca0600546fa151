"""Exporter benchmarks: figures, never asserts. Writes benchmarks/results/exporter.json and
prints a table.

1. /metrics: fastverify's exporter (hub in a realistic state) vs a plain prometheus-client
   exporter (`start_http_server`) holding the same number of series, each in its own
   process, measured in the same run by a separate client process: latency p50/p99 with one
   scraper (sequential scrapes, as Prometheus sends them: gzip accepted, keep-alive when
   the server allows it), and throughput with 50 concurrent connections.
2. Log lines per second through `sglang.loglines.parse_line` on a realistic mix (real NCCL INFO
   lines from the H200 fixtures, decode/prefill lines of both generations, access lines).
3. Trace MB/s (uncompressed bytes per second, one core) of `traces.analyze_file` on a large
   sim-written per-rank trace (gzipped and plain), vs the naive baseline (stdlib
   `json.load` + a Python loop over every event) and the straightforward orjson parser;
   each run in a fresh process so its peak RSS is its own.

    python benchmarks/bench_exporter.py [--quick] [--trace-steps 400] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures" / "nccl-2.28.9-h200-1rank"
HEADERS = (
    b"Accept: text/plain;version=0.0.4;q=1,*/*;q=0.1\r\n"
    b"Accept-Encoding: gzip\r\nUser-Agent: Prometheus/2.42.0\r\n"
)


# ------------------------------------------------------------------ servers (child processes)
def _populate(hub) -> None:
    """A realistic hub: EAGLE-3 on 8 ranks, decode lines, windows, baselines, NCCL facts."""
    hub.set_engine(
        True,
        "ring-ll",
        "eagle3",
        {
            "NCCL_ALGO": "Ring",
            "NCCL_PROTO": "LL",
            "NCCL_P2P_LEVEL": "SYS",
            "NCCL_MAX_NCHANNELS": "16",
            "NCCL_BUFFSIZE": "16777216",
            "NCCL_NTHREADS": "512",
        },
        "sglang",
        "http://127.0.0.1:30000",
    )
    hub.on_log_line(
        "[2025-06-13 10:30:17 TP0] Decode batch, #running-req: 8, #token: 2048, token usage: "
        "0.10, accept len: 2.01, accept rate: 0.34, cuda graph: True, gen throughput (token/s): "
        "520.31, #queue-req: 0"
    )
    for line in (FIX / "nccl-info-ring-ll.log").read_text().splitlines():
        hub.on_log_line(line)
    for size in range(10, 30):
        hub.on_log_line(
            f"h:1:1 [0] NCCL INFO AllReduce: {1 << size} Bytes -> Algo RING proto "
            f"LL channel{{Lo..Hi}}={{0..15}}"
        )
    ranks = [{"rank": r, "verify_passes": 5, "verify_ms_p50": 30.1, "verify_ms_p90": 31.0,
              "allreduce_per_verify": 122.0, "allreduce_ms_per_verify": 24.6,
              "allreduce_share": 0.82, "verify_ms_samples": [29.0, 30.1, 30.5, 31.0, 30.0],
              "allreduce_calls": 700} for r in range(8)]  # fmt: skip
    hub.on_trace_analysis({"ranks": ranks})
    for p in ("ring-ll", "ring-simple", "tree-ll", "nccl-default"):
        hub.set_baseline(p, 82.0, 82.0, time.time() - 60)
    for reason in ("crash", "switch", "mode"):
        hub.on_restart(reason)
    hub.on_switch("ok")
    hub.set_engine_start_seconds(612.0)


def serve(kind: str, port: int, n_series: int) -> None:
    if kind == "ours":
        from fastverify.exporters.http import MetricsServer
        from fastverify.exporters.hub import MetricsHub

        hub = MetricsHub()
        _populate(hub)
        MetricsServer(hub, f"127.0.0.1:{port}").start()
    else:
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        reg = CollectorRegistry()
        g = Gauge("plain_series", "a plain gauge", ["profile", "mode", "i"], registry=reg)
        for i in range(n_series):
            g.labels("ring-ll", "eagle3", str(i)).set(i * 1.5)
        start_http_server(port, addr="127.0.0.1", registry=reg)
    print("ready", flush=True)
    while True:
        time.sleep(3600)


def count_series() -> tuple[int, int]:
    """Samples in our exposition (the plain exporter gets as many series), and its bytes."""
    from prometheus_client.parser import text_string_to_metric_families

    from fastverify.exporters.http import Renderer
    from fastverify.exporters.hub import MetricsHub

    hub = MetricsHub()
    _populate(hub)
    text = Renderer(hub).render()
    n = sum(len(f.samples) for f in text_string_to_metric_families(text.decode()))
    return n, len(text)


# ------------------------------------------------------------------ scrape client
async def _scrape(reader, writer) -> tuple[bool, int]:
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + HEADERS + b"\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    length, close = 0, False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        k = k.strip().lower()
        if k == b"content-length":
            length = int(v)
        elif k == b"connection" and v.strip().lower() == b"close":
            close = True
    if not head.startswith(b"HTTP/1.1 200") and not head.startswith(b"HTTP/1.0 200"):
        raise RuntimeError(head[:80])
    if head.startswith(b"HTTP/1.0"):
        close = True
    body = await reader.readexactly(length) if length else await reader.read()
    return close, len(body)


async def _worker(port: int, lat: list[float] | None, counter: list[int]) -> None:
    reader = writer = None
    try:
        while True:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t0 = time.perf_counter()
            close, _ = await _scrape(reader, writer)
            if lat is not None:
                lat.append(time.perf_counter() - t0)
            counter[0] += 1
            if close:
                writer.close()
                reader = writer = None
    finally:
        if writer is not None:
            writer.close()


async def _measure(port: int, conns: int, seconds: float, record: bool) -> dict:
    """Scrapes completed by `conns` closed-loop connections in `seconds` (then cancelled)."""
    lat: list[float] = []
    counter = [0]
    tasks = [asyncio.create_task(_worker(port, lat if record else None, counter))
             for _ in range(conns)]  # fmt: skip
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    done = counter[0]
    dt = time.perf_counter() - t0
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    out = {"connections": conns, "scrapes": done, "per_second": done / dt}
    if record and lat:
        lat.sort()
        out["p50_ms"] = lat[len(lat) // 2] * 1e3
        out["p99_ms"] = lat[int(len(lat) * 0.99)] * 1e3
    return out


def client(port: int, seconds: float) -> None:
    """Child process: warm up, one scraper for latency, then 50 (and 4) connections."""
    asyncio.run(_measure(port, 1, 0.5, False))
    one = asyncio.run(_measure(port, 1, seconds, True))
    many = asyncio.run(_measure(port, 50, seconds, False))
    few = asyncio.run(_measure(port, 4, seconds, False))
    print(json.dumps({"one_scraper": one, "fifty_connections": many, "four_connections": few}))


def bench_metrics(seconds: float) -> dict:
    n_series, n_bytes = count_series()
    results: dict = {"series": n_series, "exposition_bytes": n_bytes}
    for kind in ("plain", "ours"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, str(port), str(n_series)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            run = subprocess.run(
                [sys.executable, __file__, "--client", str(port), str(seconds)],
                capture_output=True,
                text=True,
                timeout=seconds * 4 + 60,
            )
            if run.returncode != 0:
                raise RuntimeError(run.stderr[-2000:])
            results[kind] = json.loads(run.stdout)
        finally:
            server.terminate()
            server.wait(10)
    results["throughput_ratio"] = (
        results["ours"]["fifty_connections"]["per_second"]
        / results["plain"]["fifty_connections"]["per_second"]
    )
    return results


# ------------------------------------------------------------------ log lines
def log_corpus(n: int) -> list[str]:
    nccl = (FIX / "nccl-info-ring-ll.log").read_text().splitlines()
    nccl += (FIX / "nccl-info-tree-ll-coll.log").read_text().splitlines()
    decode_new = (
        "[2025-06-13 10:30:17 TP0] Decode batch, #running-req: 8, #token: 2048, "
        "token usage: 0.10, accept len: 2.01, accept rate: 0.34, cuda graph: True, "
        "gen throughput (token/s): 520.31, #queue-req: 0"
    )
    decode_old = (
        "[2025-06-13 10:30:17 TP0] Decode batch. #running-req: 8, #token: 2048, "
        "token usage: 0.10, gen throughput (token/s): 520.31, #queue-req: 0, "
    )
    prefill = (
        "[2025-06-13 10:30:16 TP0] Prefill batch. #new-seq: 1, #new-token: 6, "
        "#cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0"
    )
    access = '[2025-06-13 10:30:16] INFO:     127.0.0.1:51234 - "POST /generate HTTP/1.1" 200 OK'
    mix = nccl + [decode_new, decode_old, prefill, access, access, access] * 8
    return [mix[i % len(mix)] for i in range(n)]


def bench_logs(n: int) -> dict:
    from fastverify.sglang.loglines import parse_line

    lines = log_corpus(n)
    decode = [line for line in lines if "Decode batch" in line] * 4
    out = {}
    for name, corpus in (("mixed", lines), ("decode_only", decode)):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for line in corpus:
                parse_line(line)
            best = min(best, time.perf_counter() - t0)
        out[name] = {"lines": len(corpus), "lines_per_second": len(corpus) / best}
    return out


# ------------------------------------------------------------------ traces
def make_trace(directory: Path, steps: int) -> tuple[Path, Path]:
    from fastverify.sim import traces as sim_traces

    gz = directory / "bench-TP-0.trace.json.gz"
    sim_traces.write_trace(gz, steps=steps, rank=0, tp_size=8, mode="eagle3")
    plain = directory / "bench-TP-0.trace.json"
    with gzip.open(gz, "rb") as src, open(plain, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    return gz, plain


def trace_child(method: str, path: str) -> None:
    t0 = time.perf_counter()
    if method == "fast":
        from fastverify import traces

        r = traces.analyze_file(path)
        result = (r["verify_passes"], r["allreduce_per_verify"])
    elif method == "exact":
        from fastverify import traces

        ex = traces.exact_events(path)
        r = traces.analyze_extract(ex, 0)
        result = (r["verify_passes"], r["allreduce_per_verify"])
    else:  # naive: stdlib json.load + a Python loop over every event; same analysis after
        from fastverify import traces

        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as fh:
            doc = json.load(fh)
        ex = traces.Extract()
        for ev in doc["traceEvents"]:
            if ev.get("ph") != "X":
                continue
            cat = ev.get("cat")
            if cat == "gpu_user_annotation":
                ex.spans.append(traces.Span(ev["pid"], ev["ts"], ev["dur"], ev["name"], True))
            elif cat == "user_annotation":
                ex.spans.append(traces.Span(None, ev["ts"], ev["dur"], ev["name"], False))
            elif cat == "kernel" and traces.is_allreduce_kernel(ev["name"]):
                ex.kernels.append(traces.Kernel(ev["pid"], ev["ts"], ev["dur"], ev["name"]))
        r = traces.analyze_extract(ex, 0)
        result = (r["verify_passes"], r["allreduce_per_verify"])
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": dt, "max_rss_bytes": rss, "result": result}))


def bench_traces(steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="fv-bench-") as tmp:
        gz, plain = make_trace(Path(tmp), steps)
        size = plain.stat().st_size
        out: dict = {"uncompressed_bytes": size, "gzip_bytes": gz.stat().st_size}
        runs = [("fast", gz), ("fast", plain), ("exact", plain), ("naive", plain)]
        for method, path in runs:
            best = None
            for _ in range(2 if method == "fast" else 1):
                run = subprocess.run(
                    [sys.executable, __file__, "--trace", method, str(path)],
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                if run.returncode != 0:
                    raise RuntimeError(run.stderr[-2000:])
                r = json.loads(run.stdout)
                if best is None or r["seconds"] < best["seconds"]:
                    best = r
            assert best is not None
            best["mb_per_second"] = size / best["seconds"] / 1e6
            out[f"{method}_{'gz' if path.suffix == '.gz' else 'json'}"] = best
        return out


# ------------------------------------------------------------------ main
def table(res: dict) -> str:
    m = res["metrics"]
    rows = [("series in the exposition", f"{m['series']} ({m['exposition_bytes']} bytes)")]
    for kind in ("ours", "plain"):
        one, many = m[kind]["one_scraper"], m[kind]["fifty_connections"]
        rows.append(
            (
                f"/metrics {kind}: 1 scraper p50 / p99",
                f"{one['p50_ms']:.2f} / {one['p99_ms']:.2f} ms",
            )
        )
        rows.append((f"/metrics {kind}: 50 connections", f"{many['per_second']:.0f} scrapes/s"))
        few = m[kind]["four_connections"]
        rows.append((f"/metrics {kind}: 4 connections", f"{few['per_second']:.0f} scrapes/s"))
    rows.append(("throughput ours / plain", f"{m['throughput_ratio'] * 100:.0f}%"))
    for name, r in res["logs"].items():
        rows.append((f"log lines ({name})", f"{r['lines_per_second'] / 1e3:.0f}k lines/s"))
    t = res["traces"]
    rows.append(
        (
            "trace size",
            f"{t['uncompressed_bytes'] / 1e6:.0f} MB ({t['gzip_bytes'] / 1e6:.1f} MB gzipped)",
        )
    )
    for key in ("fast_gz", "fast_json", "exact_json", "naive_json"):
        r = t[key]
        rows.append(
            (
                f"trace {key}",
                f"{r['mb_per_second']:.0f} MB/s, peak RSS {r['max_rss_bytes'] / 2**20:.0f} MiB",
            )
        )
    width = max(len(a) for a, _ in rows)
    return "\n".join(f"{a:<{width}}  {b}" for a, b in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs, smaller trace")
    ap.add_argument(
        "--trace-steps", type=int, default=400, help="cycles in the trace (~0.27 MB each)"
    )
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "exporter.json")
    ap.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--client", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--trace", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), int(args.serve[2]))
        return 0
    if args.client:
        client(int(args.client[0]), float(args.client[1]))
        return 0
    if args.trace:
        trace_child(*args.trace)
        return 0
    seconds = 2.0 if args.quick else 5.0
    steps = 60 if args.quick else args.trace_steps
    res = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "metrics": bench_metrics(seconds),
        "logs": bench_logs(200_000 if args.quick else 1_000_000),
        "traces": bench_traces(steps),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(table(res))
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
