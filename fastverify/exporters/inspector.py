"""NCCL inspector plugin output (`libnccl-profiler-inspector.so`, NCCL 2.28+) -> all-reduce
counts, sizes, GPU-timed latency and bus bandwidth.

Format (REFERENCE.md): JSON lines `<dump dir>/<host>-pid<pid>.log`, one per collective:
`{"header": {"rank": 2, "n_ranks": 8, ...}, "metadata": {...}, "coll_perf": {"coll":
"AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": ..., "coll_exec_time_us": ...,
"coll_timing_source": "kernel_gpu", "coll_algobw_gbs": ..., "coll_busbw_gbs": ...}}`.
Newer dumps may carry `coll_algo`/`coll_proto`, and may write the header once in a marker
line that the following records inherit; both are handled. The plugin times kernels on
the GPU, so unlike host-side NCCL logs it sees CUDA-graph replays.

`summarize(records)` counts all-reduces of one reference rank (the lowest rank seen: every
rank reports each collective), and averages exec time, bus bandwidth and size over it.
`InspectorFollower(hub, dir)` tails every `*.log` in the directory and feeds
`hub.on_inspector(summary)` once per interval with the records that arrived.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from fastverify.exporters.hub import MetricsHub
from fastverify.follow import FileFollower


def parse_records(
    lines: Iterable[str | bytes], context: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Decode inspector JSON lines into flat records; `context` carries the last header."""
    ctx = context if context is not None else {}
    out = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn line of a file being written, or a foreign line
        if not isinstance(obj, dict):
            continue
        header = obj.get("header")
        if isinstance(header, dict):
            ctx["header"] = header
        perf = obj.get("coll_perf")
        if not isinstance(perf, dict):
            continue
        hdr = header if isinstance(header, dict) else ctx.get("header", {})
        out.append(
            {
                "rank": hdr.get("rank", obj.get("rank")),
                "n_ranks": hdr.get("n_ranks", obj.get("n_ranks")),
                "coll": perf.get("coll", ""),
                "sn": perf.get("coll_sn"),
                "bytes": perf.get("coll_msg_size_bytes"),
                "exec_us": perf.get("coll_exec_time_us"),
                "busbw_gbs": perf.get("coll_busbw_gbs"),
                "algobw_gbs": perf.get("coll_algobw_gbs"),
                "timing_source": perf.get("coll_timing_source"),
                "algo": perf.get("coll_algo"),
                "proto": perf.get("coll_proto"),
            }
        )
    return out


def summarize(
    records: Iterable[dict[str, Any]], reference_rank: int | None = None
) -> dict[str, Any]:
    """All-reduce figures of one rank (lowest seen unless given); empty input -> zero calls."""
    ars = [r for r in records if r["coll"] == "AllReduce"]
    ranks = sorted({r["rank"] for r in ars if isinstance(r["rank"], int)})
    if reference_rank is None:
        reference_rank = ranks[0] if ranks else None
    mine = [r for r in ars if r["rank"] == reference_rank] if ranks else ars
    n = len(mine)
    summary: dict[str, Any] = {"allreduce_calls": n, "rank": reference_rank, "ranks": ranks}
    if n:
        execs = [float(r["exec_us"]) for r in mine if r["exec_us"] is not None]
        bws = [float(r["busbw_gbs"]) for r in mine if r["busbw_gbs"] is not None]
        sizes = [float(r["bytes"]) for r in mine if r["bytes"] is not None]
        if execs:
            summary["mean_exec_seconds"] = sum(execs) / len(execs) / 1e6
        if bws:
            summary["mean_busbw_bytes_per_second"] = sum(bws) / len(bws) * 1e9
        if sizes:
            summary["mean_message_bytes"] = sum(sizes) / len(sizes)
        algos = {(r["algo"], r["proto"]) for r in mine if r["algo"]}
        if algos:
            summary["algo_proto"] = sorted(f"{a}/{p}" for a, p in algos)
    return summary


class InspectorFollower:
    """Tail `<dir>/*.log` and feed the hub a summary per interval (only when records came)."""

    def __init__(self, hub: MetricsHub, directory: str | Path, interval_s: float = 2.0) -> None:
        self.hub = hub
        self.directory = Path(directory)
        self.interval_s = interval_s
        self._followers: dict[Path, tuple[FileFollower, dict[str, Any]]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> dict[str, Any] | None:
        records: list[dict[str, Any]] = []
        if self.directory.is_dir():
            for path in sorted(self.directory.glob("*.log")):
                if path not in self._followers:
                    self._followers[path] = (FileFollower(path), {})
                follower, ctx = self._followers[path]
                records += parse_records(follower.read_lines(), ctx)
        if not records:
            return None
        summary = summarize(records)
        self.hub.on_inspector(summary)
        return summary

    def start(self) -> InspectorFollower:
        self._thread = threading.Thread(target=self._run, name="fastverify-inspector", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for follower, _ in self._followers.values():
            follower.close()
