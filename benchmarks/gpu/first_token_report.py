"""Where a served window's first tokens spend their time, from SGLang's own stamps of each
request (`spec_sglang.py --steps first_token`, or any step whose bench windows kept their
timelines): per window, the mean first token in SGLang's stages (bench's `ttft_split_ms`),
the prefill forwards that took the prompts in (`prefill_forwards`), and how a wave of
requests sent together (every client's next request after a batch finished together) went
through the server one at a time:

- `send_gap_ms`: the client's own spacing of the wave's sends;
- `received_gap_ms`, `dispatched_gap_ms`, `arrival_gap_ms`: the spacing of the same requests
  where SGLang's tokenizer manager took them in (`request_received_ts`), handed them on
  (`api_server_dispatch_finish_ts`) and where they reached the scheduler's waiting queue
  (`wait_queue_entry_time`): the first stage whose spacing is wide is where they queue;
- `first_arrival_ms`: the wave's first request at the scheduler after the wave's first send;
- `finish_gap_ms`: the spacing of the tokenizer manager's ends (`request_finished_ts`) of
  the wave that finished just before (what it did before it took the new wave in).

Each figure is the median over the window's waves of at least MIN_WAVE requests, each
wave's own the median of its gaps. And `front_end_ms`: the front end in front of the
scheduler the serving model queues requests in (`fastverify.speculation.front_end`, as
`spec costs` measures it), from the window's first round (every client's first request,
sent together after the warm-up) and the one-client window's prompts alone.

    python benchmarks/gpu/first_token_report.py RAW_DIR [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fastverify.experiments.engine_costs.run import handed_on_ms, server_view
from fastverify.sglang import request_stamps
from fastverify.speculation import front_end

WAVE_GAP_S = 0.005  # sends this close to the one before belong to one wave
MIN_WAVE = 4
PREVIOUS_S = 0.05  # the wave before: last chunks at most this long before the first send
WAVE_KEYS = ("send_gap_ms", "received_gap_ms", "dispatched_gap_ms", "arrival_gap_ms",
             "first_arrival_ms", "finish_gap_ms")  # fmt: skip
GAPS = {
    "received_gap_ms": "request_received_ts",
    "dispatched_gap_ms": request_stamps.DISPATCHED,
    "arrival_gap_ms": request_stamps.WAIT_QUEUE_ENTRY,
}


def _median_gap(times: list[float]) -> float | None:
    ts = sorted(times)
    return statistics.median(b - a for a, b in pairwise(ts)) * 1e3 if len(ts) > 1 else None


def waves(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The window's requests in waves of sends (WAVE_GAP_S), in send order."""
    out: list[list[dict[str, Any]]] = []
    for r in sorted(rows, key=lambda r: r["start_s"]):
        if out and r["start_s"] - out[-1][-1]["start_s"] <= WAVE_GAP_S:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def wave_figures(wave: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, float]:
    """One wave's figures (module docstring), those its stamps give."""
    first_send = wave[0]["start_s"]
    server = [r["server_s"] for r in wave if "server_s" in r]
    fig: dict[str, float | None] = {"send_gap_ms": _median_gap([r["start_s"] for r in wave])}
    for name, key in GAPS.items():
        fig[name] = _median_gap([s[key] for s in server if key in s])
    arrivals = [s[request_stamps.WAIT_QUEUE_ENTRY] for s in server
                if request_stamps.WAIT_QUEUE_ENTRY in s]  # fmt: skip
    if arrivals:
        fig["first_arrival_ms"] = (min(arrivals) - first_send) * 1e3
    before = [r["server_s"][request_stamps.FINISHED] for r in rows
              if r.get("chunks") and request_stamps.FINISHED in r.get("server_s", {})
              and first_send - PREVIOUS_S <= r["chunks"][-1][0] <= wave[-1]["start_s"]]  # fmt: skip
    fig["finish_gap_ms"] = _median_gap(before)
    return {k: v for k, v in fig.items() if v is not None}


def timeline_rows(bench: Path) -> list[dict[str, Any]] | None:
    """The timeline beside a bench file (by its name), None where it kept none."""
    timeline = bench.with_name(bench.name.replace("bench-", "timeline-", 1)).with_suffix(".jsonl")
    if not timeline.exists():
        return None
    return [json.loads(line) for line in timeline.read_text().splitlines() if line.strip()]


def front_end_of(rows: list[dict[str, Any]], clients: int, alone: float) -> dict[str, Any] | None:
    """The front end from the window's first round of `clients` requests."""
    first = sorted(rows, key=lambda r: r["start_s"])[:clients]
    view = server_view(first) if clients > 1 else None
    fe = front_end.from_rounds([view], alone, "first round") if view else None
    return None if fe is None else {k: v for k, v in fe.to_dict().items() if k != "source"}


def window_report(bench: Path, alone: float | None = None) -> dict[str, Any] | None:
    """One bench window's figures; None where it kept no timeline. With `alone` (ms from a
    prompt's send to its hand-off, sent alone), its front end too."""
    rows = timeline_rows(bench)
    if rows is None:
        return None
    result = json.loads(bench.read_text())
    figs = [wave_figures(w, rows) for w in waves(rows) if len(w) >= MIN_WAVE]
    keys = sorted({k for f in figs for k in f})
    clients = _window_order(bench)[2]
    front = front_end_of(rows, clients, alone) if alone is not None else None
    return {
        "ttft_ms_mean": round(result["ttft_ms"]["mean"], 2),
        "ttft_split_ms": _rounded(result.get("ttft_split_ms")),
        "prefill_forwards": _rounded(result.get("prefill_forwards")),
        "waves": len(figs),
        **{k: round(statistics.median(f[k] for f in figs if k in f), 3) for k in keys},
        **({"front_end_ms": front} if front else {}),
    }


def _rounded(d: dict[str, float] | None) -> dict[str, float] | None:
    return None if d is None else {k: round(v, 2) for k, v in d.items()}


def _lines(report: dict[str, dict[str, Any]]) -> list[str]:
    """One block per window, for people (the JSON has the same)."""
    out = []
    for name, w in report.items():
        split = " ".join(f"{k} {v:.1f}" for k, v in (w["ttft_split_ms"] or {}).items())
        fw = w["prefill_forwards"] or {}
        out.append(f"{name}: mean first token {w['ttft_ms_mean']:.1f} ms = {split or '-'}")
        if fw:
            out.append(f"  prefill forwards {fw['count']}, {fw['prompts_mean']:.1f} prompts "
                       f"each, {fw['ms_mean']:.1f} ms mean")  # fmt: skip
        if w["waves"]:
            gaps = " ".join(f"{k} {w[k]:.2f}" for k in (*WAVE_KEYS,) if k in w)
            out.append(f"  {w['waves']} waves (medians, ms): {gaps}")
        if fe := w.get("front_end_ms"):
            out.append(f"  front end (first round): {fe['share_ms']:.2f} ms a request shared, "
                       f"then {fe['serial_ms']:.2f} ms apart")  # fmt: skip
    return out


def _window_order(p: Path) -> tuple[str, int, int]:
    """bench-MODE-cC-inN.json by mode, then prompt length, then concurrency."""
    m = re.fullmatch(r"bench-(.+)-c(\d+)-in(\d+)\.json", p.name)
    return (m[1], int(m[3]), int(m[2])) if m else (p.name, 0, 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path, help="a run's raw outputs (bench-*.json, timeline-*.jsonl)")
    ap.add_argument("--out", type=Path, help="write the report here as JSON")
    args = ap.parse_args(argv)
    benches = sorted(args.raw.glob("bench-*.json"), key=_window_order)
    # a prompt alone: the one-client window of the same mode and length
    alone: dict[tuple[str, int], float | None] = {}
    for p in benches:
        mode, n, clients = _window_order(p)
        if clients == 1 and (rows := timeline_rows(p)):
            alone[(mode, n)] = handed_on_ms(rows)
    report = {p.stem.removeprefix("bench-"): w for p in benches
              if (w := window_report(p, alone.get(_window_order(p)[:2]))) is not None}  # fmt: skip
    if not report:
        print(f"{args.raw}: no bench window with a timeline", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print("\n".join(_lines(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
