"""Live acceptance from SGLang's per-request metrics files, and whether the plan went stale.

SGLang 0.5.23 with `--export-metrics-to-file --export-metrics-to-file-dir DIR`
(`observability/request_metrics_exporter.py`, `FileRequestMetricsExporter`) appends one JSON
object per finished request to `DIR/sglang-request-metrics-YYYYMMDD_HH.log`:
`{"request_parameters": "<json>", **meta_info}`, the meta_info holding
`spec_correct_drafts_histogram` and `spec_verify_ct` on a speculative server. The daemon
starts its speculative servers with them (into its state dir) and `RequestMetricsFollower`
tails the files every few seconds: it keeps only the histogram, the verify count and the
latency of each record (the request parameters hold the prompts: never kept, never logged),
and deletes an hour's file once SGLang has moved on to the next.

`Drift` (held by the hub): a finished request is attributed to the step count SGLang's
`sglang:spec_num_steps` gauge showed for at least ATTRIBUTE_SHARE of its life (one that
lived through longer switches is left out: its passes ran at several step counts; a brief
one, a health check's extra request moving the batch into another tier for a pass or two,
leaves a few other passes in its histogram), so live L(k) per active step count comes from
the requests' own histograms, never from SGLang's accept-length or
accept-rate gauges (under adaptive those mix step counts, and the decode log's rate divides
by whatever step count is active at logging time). With the stored plan, `stale()` says
whether live acceptance fell below a drafting tier's break-even or below the lower
acceptance the plan was made to survive, with the command that re-plans.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fastverify.sglang import adaptive

log = logging.getLogger("fastverify.exporter")

FILE_RE = re.compile(r"^sglang-request-metrics-(\d{8}_\d{2})\.log$")
KEEP_REQUESTS = 256  # per step count, newest
MIN_REQUESTS = 16  # before live acceptance is compared with anything
SLACK_S = 1.0  # the gauge is polled: a lifetime is widened by this before it is checked
ATTRIBUTE_SHARE = 0.9
REPLAN = (
    "fastverifyctl mode set eagle3 && fastverifyctl bench --dataset FILE (your prompts) && "
    "fastverifyctl spec plan && fastverifyctl mode set adaptive"
)


def parse_line(line: str) -> dict[str, Any] | None:
    """The speculative part of one record: histogram, verify count, latency; None when the
    line is not a speculative request's record."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(rec, dict):
        return None
    hist = rec.get(adaptive.HISTOGRAM_KEY)
    if not isinstance(hist, list) or not all(isinstance(n, int) and n >= 0 for n in hist):
        return None
    if not sum(hist):
        return None
    latency = rec.get("e2e_latency")
    return {
        "histogram": [int(n) for n in hist],
        "verify_ct": rec.get(adaptive.VERIFY_CT_KEY),
        "e2e_latency": float(latency) if isinstance(latency, int | float) else None,
    }


class RequestMetricsFollower:
    """Tails `directory` and hands new records to `sink(records, now)` (see above)."""

    def __init__(
        self,
        sink: Callable[[list[dict[str, Any]], float], None],
        directory: str | Path,
        interval_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sink = sink
        self.dir = Path(directory)
        self.interval_s = interval_s
        self.clock = clock
        self._offsets: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> int:
        """Read what was appended since the last poll; returns the records handed on."""
        try:
            names = sorted(n for n in (p.name for p in self.dir.iterdir()) if FILE_RE.match(n))
        except OSError:
            return 0
        out: list[dict[str, Any]] = []
        for name in names:
            path = self.dir / name
            start = self._offsets.get(name, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(start)
                    data = fh.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
            self._offsets[name] = start + end
            for line in data[:end].decode("utf-8", "replace").splitlines():
                rec = parse_line(line)
                if rec is not None:
                    out.append(rec)
            if name != names[-1] and end == len(data):  # SGLang writes a newer hour now
                path.unlink(missing_ok=True)
                self._offsets.pop(name, None)
        if out:
            self.sink(out, self.clock())
        return len(out)

    def start(self) -> RequestMetricsFollower:
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="fastverify-request-metrics")  # fmt: skip
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll_once()
            except Exception as exc:  # the follower never takes the exporter down
                log.warning("request metrics: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


class Drift:
    """Live acceptance per active step count, and the plan it is compared with."""

    def __init__(self) -> None:
        self._steps: list[tuple[float, int]] = []  # (wall time, active steps) samples
        self._by_steps: dict[int, deque[list[int]]] = {}
        self.plan: dict[str, Any] | None = None
        self.mixed = 0  # requests left out: they lived through a step change
        self._changes = 0
        self._live: tuple[int, dict[int, dict[str, Any]]] | None = None  # (changes, live)

    def on_steps(self, now: float, steps: int) -> None:
        if not self._steps or self._steps[-1][1] != steps or now - self._steps[-1][0] > 30:
            self._steps.append((now, steps))
            del self._steps[:-2000]

    def on_requests(self, records: list[dict[str, Any]], now: float) -> None:
        for rec in records:
            steps = self._steps_over(now - (rec.get("e2e_latency") or 0.0) - SLACK_S, now)
            if steps is None:
                self.mixed += 1
                continue
            q = self._by_steps.setdefault(steps, deque(maxlen=KEEP_REQUESTS))
            q.append(rec["histogram"])
            self._changes += 1

    def reset(self) -> None:
        """A new engine: what the old one ran says nothing about it."""
        self._steps.clear()
        self._by_steps.clear()
        self.mixed = 0
        self._changes += 1

    def _steps_over(self, start: float, end: float) -> int | None:
        """The step count active over at least ATTRIBUTE_SHARE of [start, end], or None
        (unknown before the first sample, or mixed)."""
        times = [t for t, _ in self._steps]
        i = bisect.bisect_right(times, start) - 1
        if i < 0 or end <= start:
            return None
        at: dict[int, float] = {}
        for j in range(i, len(self._steps)):
            t0 = max(start, self._steps[j][0])
            t1 = min(end, self._steps[j + 1][0] if j + 1 < len(self._steps) else end)
            if t1 > t0:
                at[self._steps[j][1]] = at.get(self._steps[j][1], 0.0) + t1 - t0
        steps, held = max(at.items(), key=lambda kv: kv[1], default=(None, 0.0))
        return steps if held >= ATTRIBUTE_SHARE * (end - start) else None

    def live(self) -> dict[int, dict[str, Any]]:
        """{active steps: {"requests", "passes", "accept_length": {k: L}, "interval": {k: [lo,
        hi]}}} from the attributed requests (k <= steps: topk 1 drafts are a chain)."""
        from fastverify.speculation.acceptance import Acceptance

        if self._live is not None and self._live[0] == self._changes:
            return self._live[1]
        out: dict[int, dict[str, Any]] = {}
        for steps, q in sorted(self._by_steps.items()):
            if steps < 1 or not q:
                continue
            acc = Acceptance.from_requests(list(q), steps)
            out[steps] = {
                "requests": len(q),
                "passes": acc.verifies,
                "accept_length": {k: round(acc.length(k), 4) for k in range(1, steps + 1)},
                "interval": {k: [round(v, 4) for v in acc.interval(k, draws=200)]
                             for k in range(1, steps + 1)} if len(q) >= MIN_REQUESTS else {},
            }  # fmt: skip
        self._live = (self._changes, out)
        return out

    def stale(self, live: Mapping[int, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Whether the plan went stale (see the module docstring)."""
        live = self.live() if live is None else live
        plan = self.plan or {}
        if not plan.get("tiers"):
            return {"stale": False, "plan": False, "why": "no speculation plan stored",
                    "checks": []}  # fmt: skip
        low = (plan.get("lower_acceptance") or {}).get("accept_length")
        K = int(plan.get("accept_steps") or 0)
        checks = []
        for key, tier in sorted(plan["tiers"].items(), key=lambda kv: int(kv[0])):
            k = int(tier.get("steps") or 0)
            be = (tier.get("break_even_accept_length") or {}).get(str(k))
            if k < 1 or be is None:
                continue
            got = _interval_at(live, k)
            if got is None:
                continue
            (lo, hi), n = got
            if hi < float(be):
                checks.append(
                    f"tier {key} drafts {k} steps: live L({k}) [{lo:.2f}, {hi:.2f}] from {n} "
                    f"requests is below its break-even {float(be):.2f}"
                )
        if low is not None and K:
            got = _interval_at(live, K)
            if got is not None and got[0][1] < float(low):
                (lo, hi), n = got
                checks.append(
                    f"live L({K}) [{lo:.2f}, {hi:.2f}] from {n} requests is below the lower "
                    f"acceptance the plan was made to survive ({float(low):.2f})"
                )
        if checks:
            return {"stale": True, "plan": True, "why": "; ".join(checks), "replan": REPLAN,
                    "checks": checks}  # fmt: skip
        return {"stale": False, "plan": True, "why": "live acceptance is where the plan expects "
                "it (or too few requests to tell yet)", "checks": []}  # fmt: skip


def _interval_at(live: Mapping[int, Mapping[str, Any]], k: int) -> tuple[list[float], int] | None:
    """The 95% interval of live L(k) from the step count with the most requests >= k."""
    rows = [(r["requests"], r) for s, r in live.items() if s >= k and r.get("interval")]
    if not rows:
        return None
    n, row = max(rows, key=lambda x: x[0])
    return row["interval"][k], n
