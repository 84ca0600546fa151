"""Before/after figures of a change to the daemon's GET listeners (fastverify.httpserver),
side by side in one run: the package of a git revision (`--before`, default the merge base
with main) and this tree's, each served from its own child process and measured by this one.

1. /metrics: bench_exporter.py's scrape client against bench_exporter.py's realistic hub
   (1 scraper p50/p99, 50 and 4 connections), as benchmarks/results/exporter.json has it;
   and the server's own microseconds per request, in-process (no sockets, no scheduler).
2. Health probes: GET /readyz as the kubelet sends it (a new connection each, `Connection:
   close`), p50/p99 and probes per second; and the bytes of every probe's body (READY,
   STARTING, an unknown path), which must be the same before and after.

Rounds alternate before/after so that a busy machine weighs on both alike; the table shows
each figure's median over the rounds (the in-process handler cost: the least disturbed
round, its minimum). Figures, never asserts.

    python benchmarks/bench_listeners.py [--before REV] [--seconds 1.5] [--rounds 5] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
PROBE = (
    b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.31\r\n"
    b"Connection: close\r\n\r\n"
)


# ------------------------------------------------------------------ servers (child processes)
def serve(kind: str, port: int) -> None:
    import fastverify

    if kind == "metrics":
        from bench_exporter import _populate

        from fastverify.exporters.http import MetricsServer
        from fastverify.exporters.hub import MetricsHub

        hub = MetricsHub()
        _populate(hub)
        MetricsServer(hub, f"127.0.0.1:{port}").start()
    else:
        from fastverify.daemon.health import Health, HealthServer

        state = {"state": kind.upper(), "profile": "ring-ll", "mode": "eagle3", "engine": {},
                 "declarative": None}  # fmt: skip
        HealthServer(f"127.0.0.1:{port}", Health(lambda: state)).start()
    print("ready", fastverify.__file__, flush=True)
    while True:
        time.sleep(3600)


def handle_cost(repeats: int = 7, n: int = 20000) -> None:
    """CPU microseconds of the server's own work per /metrics request (parse, route, answer into
    a socket that takes the bytes), in-process, the best of `repeats`: the figure that a
    busy machine's scheduling does not blur."""
    from bench_exporter import HEADERS, _populate

    from fastverify.exporters.http import MetricsServer
    from fastverify.exporters.hub import MetricsHub

    class Sink:
        def sendall(self, data: bytes) -> None:
            pass

    hub = MetricsHub()
    _populate(hub)
    server = MetricsServer(hub, "127.0.0.1:0")
    head = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + HEADERS.rstrip(b"\r\n")
    sink = Sink()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()  # CPU time: a descheduled process does not count it
        for _ in range(n):
            server._handle(sink, head)  # type: ignore[arg-type]
        best = min(best, time.process_time() - t0)
    print(json.dumps({"us_per_request": best / n * 1e6}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Child:
    """A server child of one tree; `with` starts it and stops it."""

    def __init__(self, tree: Path, kind: str) -> None:
        self.tree, self.kind, self.port = tree, kind, _free_port()

    def __enter__(self) -> Child:
        env = {**os.environ, "PYTHONPATH": str(self.tree)}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", self.kind, str(self.port)],
            stdout=subprocess.PIPE, text=True, env=env, cwd=HERE,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if line[:1] != ["ready"] or not line[1].startswith(str(self.tree)):
            raise RuntimeError(f"{self.kind} server of {self.tree} did not start: {line}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# ------------------------------------------------------------------ clients
def _get(port: int, path: bytes) -> tuple[bytes, bytes]:
    """(status line, body) of one probe on a new connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(PROBE % path)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], body


def probes(port: int, seconds: float) -> dict[str, float]:
    for _ in range(20):  # warm up
        _get(port, b"/readyz")
    lat: list[float] = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        t = time.perf_counter()
        status, _ = _get(port, b"/readyz")
        lat.append(time.perf_counter() - t)
        if not status.endswith(b"200 OK"):
            raise RuntimeError(status)
    dt = time.perf_counter() - t0
    lat.sort()
    p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
    return {"probes": len(lat), "per_second": len(lat) / dt, "p50_ms": p50 * 1e3,
            "p99_ms": p99 * 1e3}  # fmt: skip


def scrapes(port: int, seconds: float) -> dict[str, dict[str, float]]:
    sys.path.insert(0, str(HERE))
    from bench_exporter import _measure

    asyncio.run(_measure(port, 1, 0.5, False))
    return {
        "one_scraper": asyncio.run(_measure(port, 1, seconds, True)),
        "fifty_connections": asyncio.run(_measure(port, 50, seconds, False)),
        "four_connections": asyncio.run(_measure(port, 4, seconds, False)),
    }


def bodies(tree: Path) -> dict[str, str]:
    out = {}
    for state in ("ready", "starting"):
        with Child(tree, state) as c:
            for path in (b"/livez", b"/readyz", b"/startupz", b"/nope"):
                status, body = _get(c.port, path)
                out[f"{state} {path.decode()}"] = f"{status.split(b' ', 1)[1].decode()} {body!r}"
    return out


# ------------------------------------------------------------------ main
def export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "fastverify"],
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run(before_rev: str, seconds: float, rounds: int) -> dict:
    res: dict = {"before": before_rev, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="fv-bench-listeners-") as tmp:
        trees = {"before": export(before_rev, Path(tmp)), "after": REPO}
        for _ in range(rounds):
            one: dict = {}
            for name, tree in trees.items():
                with Child(tree, "metrics") as c:
                    metrics = scrapes(c.port, seconds)
                with Child(tree, "ready") as c:
                    health = probes(c.port, seconds)
                cost = subprocess.run(
                    [sys.executable, __file__, "--handle-cost"], capture_output=True, text=True,
                    check=True, cwd=HERE, env={**os.environ, "PYTHONPATH": str(tree)},
                )  # fmt: skip
                one[name] = {"metrics": metrics, "health": health,
                             "handler": json.loads(cost.stdout)}  # fmt: skip
            res["rounds"].append(one)
        b, a = bodies(trees["before"]), bodies(trees["after"])
        res["health_bodies"] = {"before": b, "after": a, "identical": a == b}
    return res


def table(res: dict) -> str:
    rows = [("", "before", "after", "after / before")]
    res["summary"] = {}

    def add(label: str, key: tuple[str, ...], fmt: str, pick: Any = statistics.median) -> None:
        sides: dict[str, list[float]] = {"before": [], "after": []}
        for r in res["rounds"]:
            for side, vals in sides.items():
                v = r[side]
                for k in key:
                    v = v[k]
                vals.append(v)
        b, a = (pick(sides[s]) for s in ("before", "after"))
        label = f"{label} ({pick.__name__} of {len(res['rounds'])})"
        res["summary"][label] = {"before": b, "after": a, "ratio": a / b}
        rows.append((label, fmt.format(b), fmt.format(a), f"{a / b:.2f}"))

    add("/metrics 1 scraper p50 ms", ("metrics", "one_scraper", "p50_ms"), "{:.3f}")
    add("/metrics 1 scraper p99 ms", ("metrics", "one_scraper", "p99_ms"), "{:.3f}")
    add("/metrics 50 connections /s", ("metrics", "fifty_connections", "per_second"), "{:.0f}")
    add("/metrics 4 connections /s", ("metrics", "four_connections", "per_second"), "{:.0f}")
    add("/metrics handler us, in-process", ("handler", "us_per_request"), "{:.2f}", min)
    add("/readyz probe p50 ms", ("health", "p50_ms"), "{:.3f}")
    add("/readyz probe p99 ms", ("health", "p99_ms"), "{:.3f}")
    add("/readyz probes /s", ("health", "per_second"), "{:.0f}")
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(f"health bodies identical before/after: {res['health_bodies']['identical']}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="git revision of the 'before' package (default: "
                    "the merge base with main)")  # fmt: skip
    ap.add_argument("--seconds", type=float, default=1.5, help="per measurement")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "listeners.json")
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--handle-cost", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.handle_cost:
        handle_cost()
        return 0
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0
    before = args.before or subprocess.run(
        ["git", "-C", str(REPO), "merge-base", "HEAD", "main"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    res = run(before, args.seconds, args.rounds)
    res["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                      "platform": platform.platform()}  # fmt: skip
    res["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = table(res)  # adds the summary
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(text)
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
