"""benchmarks/gpu/first_token_report.py: a wave of requests sent together, read from the
stamps of a bench timeline (rows as `bench --timeline` writes them)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "first_token_report.py"
spec = importlib.util.spec_from_file_location("first_token_report", SCRIPT)
assert spec is not None and spec.loader is not None
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def row(send: float, received: float, arrival: float, last_chunk: float, finished: float) -> dict:
    forward = arrival + 0.001
    return {
        "start_s": send,
        "first_token_s": forward + 0.02,
        "chunks": [[forward + 0.02, 1], [last_chunk, 1]],
        "server_s": {
            "request_received_ts": received,
            "api_server_dispatch_finish_ts": received + 0.0005,
            "wait_queue_entry_time": arrival,
            "forward_entry_time": forward,
            "prefill_finished_time": forward + 0.019,
            "request_finished_ts": finished,
        },
    }


def test_a_wave_shows_where_its_requests_were_taken_one_at_a_time(tmp_path: Path) -> None:
    # four requests finished (the tokenizer manager ending them 2 ms apart), their clients
    # sent the next four 0.5 ms apart, the tokenizer manager took them in 3 ms apart
    before = [row(0.0, 0.001 + 0.003 * i, 0.002 + 0.003 * i, 0.500 + 0.002 * i, 0.499 + 0.002 * i)
              for i in range(4)]  # fmt: skip
    wave = [row(0.510 + 0.0005 * i, 0.520 + 0.003 * i, 0.521 + 0.003 * i, 1.0, 0.99)
            for i in range(4)]  # fmt: skip
    rows = before + wave
    assert [len(w) for w in report.waves(rows)] == [4, 4]
    fig = report.wave_figures(report.waves(rows)[1], rows)
    assert fig["send_gap_ms"] == pytest.approx(0.5)
    assert fig["received_gap_ms"] == pytest.approx(3.0)
    assert fig["arrival_gap_ms"] == pytest.approx(3.0)
    assert fig["first_arrival_ms"] == pytest.approx(11.0)
    assert fig["finish_gap_ms"] == pytest.approx(2.0)  # the wave before, ended 2 ms apart

    # the window's report reads the timeline beside the bench file, by its name
    (tmp_path / "timeline-baseline-c4-in128.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    bench = tmp_path / "bench-baseline-c4-in128.json"
    bench.write_text(json.dumps({"ttft_ms": {"mean": 21.0}, "ttft_split_ms": None}))
    w = report.window_report(bench)
    assert w is not None and w["waves"] == 2
    assert w["received_gap_ms"] == pytest.approx(3.0, abs=1e-3)
    assert report.window_report(tmp_path / "bench-baseline-c8-in128.json") is None  # no timeline


def test_the_front_end_of_a_window_from_its_first_round_and_a_prompt_alone(
    tmp_path: Path,
) -> None:
    # alone: handed on 3 ms after the send; four sent together: the first handed on after
    # 3 + 3 x 2 ms (the others' shares), then 0.5 ms apart
    alone = [row(float(i), float(i) + 0.0025, float(i) + 0.004, float(i) + 0.1, float(i) + 0.1)
             for i in range(3)]  # fmt: skip
    (tmp_path / "timeline-baseline-c1-in128.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in alone)
    )
    together = [row(10.0, 10.0085 + 0.0005 * i, 10.02, 11.0, 11.0) for i in range(4)]
    later = [row(11.01, 11.02, 11.03, 12.0, 12.0) for _ in range(4)]  # not the first round
    (tmp_path / "timeline-baseline-c4-in128.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in together + later)
    )
    for c in (1, 4):
        (tmp_path / f"bench-baseline-c{c}-in128.json").write_text(
            json.dumps({"ttft_ms": {"mean": 20.0}})
        )
    out = tmp_path / "report.json"
    assert report.main([str(tmp_path), "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert "front_end_ms" not in got["baseline-c1-in128"]
    fe = got["baseline-c4-in128"]["front_end_ms"]
    assert fe["share_ms"] == pytest.approx(2.0, abs=1e-3)
    assert fe["serial_ms"] == pytest.approx(0.5, abs=1e-3)
