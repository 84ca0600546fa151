"""Sweep statistics and the results file, on hand-built records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastverify.client import Calls
from fastverify.experiments.sweep import config, results
from fastverify.experiments.sweep import run as sweep


def _m(profile: str, mode: str, tps: float, per_req: float | None = None,
       accept: float | None = None) -> dict:  # fmt: skip
    return {"type": "measurement", "profile": profile, "mode": mode, "tokens_per_second": tps,
            "per_request_tokens_per_second": per_req or tps, "accept_length": accept}  # fmt: skip


RECORDS = [
    {"type": "sweep", "config": {}},
    _m("a", "baseline", 80.0), _m("a", "baseline", 82.0), _m("a", "baseline", 84.0),
    _m("b", "baseline", 90.0), _m("b", "baseline", 91.0), _m("b", "baseline", 92.0),
    _m("c", "baseline", 81.0), _m("c", "baseline", 84.0), _m("c", "baseline", 84.0),
    {"type": "failure", "profile": "t", "mode": "baseline", "stage": "switch",
     "reason": "cuda_graph_capture", "message": "rolled back"},
    _m("b", "eagle3", 70.0, 70.0, 2.0), _m("b", "eagle3", 72.0, 72.0, 2.0),
    _m("b", "eagle3", 71.0, 71.0, 2.0),
]  # fmt: skip


def test_summarize_ci_speedup_and_significance() -> None:
    rows = {(r["profile"], r["mode"]): r for r in results.summarize(RECORDS)}
    a, b, c = rows["a", "baseline"], rows["b", "baseline"], rows["c", "baseline"]
    # a: mean 82, s = 2, n = 3: half-width 4.303 * 2 / sqrt(3) = 4.969
    assert a["tokens_per_second_mean"] == 82.0
    assert a["ci95"] == pytest.approx([82.0 - 4.969, 82.0 + 4.969], abs=1e-3)
    assert a["vs_reference"] == "reference" and a["speedup_vs_reference"] == 1.0
    assert b["rank"] == 1 and b["vs_best"] == "best"
    assert b["speedup_vs_reference"] == pytest.approx(91.0 / 82.0)
    assert b["vs_reference"] == "faster"
    assert c["vs_reference"] == "not significant"  # 83 vs 82 with this spread
    assert c["vs_best"] == "slower"
    t = rows["t", "baseline"]
    assert t["status"] == "failed" and t["reason"] == "cuda_graph_capture"
    assert t["tokens_per_second_mean"] is None and "rank" not in t


def test_summarize_eagle3_against_own_baseline() -> None:
    e = {(r["profile"], r["mode"]): r for r in results.summarize(RECORDS)}["b", "eagle3"]
    assert e["baseline_tokens_per_second"] == 91.0
    assert e["real_speedup"] == pytest.approx(71.0 / 91.0)
    assert e["speedup_significance"] == "slower"
    # break-even = accept * baseline / spec = 2.0 * 91 / 71
    assert e["break_even_accept_length"] == pytest.approx(2.0 * 91.0 / 71.0)


def test_reference_option_and_best_row() -> None:
    rows = results.summarize(RECORDS, reference="b")
    a = next(r for r in rows if r["profile"] == "a" and r["mode"] == "baseline")
    assert a["reference"] == "b" and a["vs_reference"] == "slower"
    assert results.best_row(rows)["profile"] == "b"
    assert results.best_row(rows)["mode"] == "baseline"


def test_single_run_has_no_interval_and_no_verdict() -> None:
    rows = results.summarize([_m("x", "baseline", 50.0), _m("y", "baseline", 60.0)])
    assert rows[0]["ci95"] is None and rows[1]["vs_reference"] == "too few runs"


def test_two_runs_per_side_give_no_verdict() -> None:
    # `88.2-88.2`, n=2 was ranked "faster" on a zero-width interval
    recs = [_m("x", "baseline", 88.2), _m("x", "baseline", 88.2),
            _m("y", "baseline", 76.0), _m("y", "baseline", 76.0),
            _m("x", "eagle3", 60.0), _m("x", "eagle3", 60.0)]  # fmt: skip
    rows = {(r["profile"], r["mode"]): r for r in results.summarize(recs)}
    x, y, e = rows["x", "baseline"], rows["y", "baseline"], rows["x", "eagle3"]
    assert x["ci95"] == [88.2, 88.2] and x["n"] == 2
    assert y["vs_reference"] == "too few runs" and y["vs_best"] == "too few runs"
    assert e["speedup_significance"] == "too few runs"
    assert x["rank"] == 1 and y["rank"] == 2  # ranked by the mean, without a verdict
    # a third run on each side gives the test what it needs
    recs += [_m("x", "baseline", 88.3), _m("y", "baseline", 76.1)]
    rows = {(r["profile"], r["mode"]): r for r in results.summarize(recs)}
    assert rows["y", "baseline"]["vs_reference"] == "slower"
    assert rows["y", "baseline"]["vs_best"] == "slower"


def test_the_sweep_table_says_why_a_row_has_no_verdict() -> None:
    from fastverify.cli.sweep_cmd import _sweep_rows, verdict_note

    recs = [_m("x", "baseline", 88.2), _m("x", "baseline", 88.2),
            _m("y", "baseline", 76.0), _m("y", "baseline", 76.0)]  # fmt: skip
    rows = results.summarize(recs)
    table = {r[1]: r for r in _sweep_rows(rows)}
    assert table["y"][7] == "too few runs"  # the "vs reference" column
    assert table["x"][4] == "[88.2, 88.2]"
    note = verdict_note(rows)
    assert note is not None and "at least 3 runs per side (here n=2" in note
    assert "--repeats 3" in note
    assert verdict_note(results.summarize(RECORDS)) is None


def test_results_file_append_and_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    results.append_record(path, {"type": "measurement", "x": 1})
    results.append_record(path, {"type": "failure", "x": 2})
    with open(path, "a") as fh:
        fh.write('{"type": "measurement", "x": 3')  # a crash mid-write
    recs = results.load_records(path)
    assert [r["x"] for r in recs] == [1, 2]
    assert all(json.loads(line) for line in path.read_text().splitlines()[:2])


def test_config_validation(tmp_path: Path) -> None:
    ok = config.SweepConfig(profiles=("a",), output_dir=tmp_path)
    ok.validate()
    bad = [
        dict(profiles=()), dict(profiles=("a", "a")), dict(profiles=("a",), repeats=0),
        dict(profiles=("a",), mode="eagle3", then_eagle3=1),
        dict(profiles=("a",), reference="z"),
    ]  # fmt: skip
    for kw in bad:
        with pytest.raises(ValueError):
            config.SweepConfig(output_dir=tmp_path, **kw).validate()


def test_plot_writes_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib (the plot extra) is not installed")
    rows = results.summarize(RECORDS)
    out = results.plot(rows, tmp_path / "p.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5_000


class _FakeDaemon(Calls):
    """Answers /v1/status and the name check (/v1/server/argv); enough for a sweep whose
    work is all on file. The typed calls reach it by path, their fields checked first."""

    def request(self, method: str, path: str, body: object = None, **_: object) -> dict:
        if method == "GET":
            if path.startswith("/v1/server/argv?"):
                return {"argv": ["python", "-m", "sglang.launch_server"]}
            assert path == "/v1/status"
            return {"profile": "a", "mode": "baseline", "engine": {"url": "http://127.0.0.1:9"}}
        if path == "/v1/lease":  # the sweep holds the daemon while it runs
            return {"id": "l1", "experiment": "sweep"}
        assert path in ("/v1/baselines", "/v1/lease/release"), path
        return {}


def test_resume_with_other_bench_settings_warns(tmp_path: Path) -> None:
    from fastverify.experiments.bench.load import BenchConfig

    path = tmp_path / config.RESULTS_FILE
    results.append_record(
        path, {"type": "sweep", "config": {"bench": {"duration": 20.0, "output_len": 256}}}
    )
    for rep in range(2):
        results.append_record(path, {**_m("a", "baseline", 80.0 + rep), "repeat": rep})
    cfg = config.SweepConfig(
        profiles=("a",),
        output_dir=tmp_path,
        repeats=2,
        resume=True,
        bench=BenchConfig(duration=5.0, output_len=256),
        plot=False,
    )
    report = sweep.Sweep(_FakeDaemon(), cfg).run()
    assert any("duration 20.0 -> 5.0" in w for w in report["warnings"])
    assert report["results"][0]["n"] == 2  # nothing re-measured


def test_a_window_that_times_out_is_said_and_its_wait_narrated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a profile window waits, a line every PROGRESS_EVERY_S; the daemon's 502
    `timed_out` comes back as TIMED OUT, and the tune's trial table says so in `reason`."""
    import threading

    from fastverify.client import ApiError
    from fastverify.experiments.bench.load import BenchConfig
    from fastverify.experiments.common import daemon_ops
    from fastverify.experiments.tune.trial import row_view

    monkeypatch.setattr(daemon_ops, "PROGRESS_EVERY_S", 0.02)
    lines: list[str] = []
    waited = threading.Event()

    class Daemon(Calls):
        def request(self, method: str, path: str, body: object, timeout: object) -> dict:
            assert (method, path, body) == ("POST", "/v1/trace/capture", {"steps": 5})
            waited.wait(5)  # the window runs until two progress lines were printed
            raise ApiError(502, {"error": "trace capture failed: no complete trace after 120s",
                                 "reason": "timed_out"})  # fmt: skip

    def emit(line: str) -> None:
        lines.append(line)
        if sum("waiting for" in x for x in lines) >= 2:
            waited.set()

    load = BenchConfig(url="http://127.0.0.1:9", concurrency=2, input_len=1024)
    analysis, error, _ = daemon_ops.capture_under_load(Daemon(), load, 5, emit)
    assert analysis is None and error is not None and error.startswith("TIMED OUT ("), error
    assert lines[0].startswith("  trace window: 5 step(s) under a steady load of 2 request(s)")
    assert "trace window: waiting for 5 step(s) for " in lines[1]
    row = row_view({"profile": "p", "mode": "baseline", "status": "ok", "trace_error": error})
    assert row["reason"] == f"trace window: {error}"
