"""`fastverifyctl sweep` end to end: a real fastverifyd on the sim engine (tp 8), the real CLI.

One short sweep (module fixture) is checked from several sides: the ranking against the
sim's documented cost model, the failed profile with the daemon's reason, the EAGLE-3
phase against each profile's own baseline, the results file, the baselines the exporter
receives, --apply-best, the plot; then --resume and the refusal to overwrite.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastverify.cli.sweep_cmd import acceptance_lines
from fastverify.profiles.effective import effective_env
from fastverify.profiles.store import ProfileStore
from fastverify.sim import allreduce_sim, costmodel
from tests.support.harness import DaemonHarness, ctrl_c_reaches_it

PROFILES = ["nccl-default", "ring-ll", "ring-ll-8ch", "ring-simple", "tree-ll"]
REPO = Path(__file__).resolve().parents[2]
TP = 8
REPEATS = 2
# Predicted differences below this are treated as within the noise of 1.5 s measurements.
NOISE = 0.08


def _predicted(profile: str, mode: str) -> costmodel.Prediction:
    prof = ProfileStore().load(profile)
    graphs = prof.requires.get("cuda-graph", "on") != "off"
    return allreduce_sim.served_prediction(effective_env(prof), mode, TP, 1, graphs)


def _predicted_rate(profile: str) -> float:
    """What the sweep's bench measures for a baseline profile: its 64-token prompts'
    prefills included (on a PCIe box they are not free: ~0.39 s on ring-ll)."""
    prof = ProfileStore().load(profile)
    graphs = prof.requires.get("cuda-graph", "on") != "off"
    return allreduce_sim.served_stream_rate(
        effective_env(prof), "baseline", TP, graphs, input_tokens=64, output_tokens=48
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("sweep")
    out = tmp / "out"
    # Profile windows (trace capture) slow the sim while they run: off, so runs compare.
    with DaemonHarness(tmp, tp_size=TP, config={"daemon": {"trace_period_s": 0}}) as d:
        args = [
            "sweep", *PROFILES, "--repeats", str(REPEATS), "--duration", "1.5",
            "--output-len", "48", "--input-len", "64", "--then-eagle3", "2",
            "--apply-best", "--output", str(out), "--json",
        ]  # fmt: skip
        first = d.ctl(*args, timeout=240)
        status_after = d.status()
        baselines = d.client.get("/v1/baselines")
        metrics = httpx.get(d.metrics_url, timeout=10).text
        lines_before = (out / "results.jsonl").read_text().splitlines()
        resumed = d.ctl(*[a for a in args if a != "--apply-best"], "--resume", timeout=120)
        again = d.ctl(*args, timeout=60)
        yield {
            "first": first, "report": json.loads(first.stdout), "status": status_after,
            "baselines": baselines, "metrics": metrics, "out": out, "lines_before": lines_before,
            "resumed": resumed, "again": again,
        }  # fmt: skip


def _rows(report: dict[str, Any], mode: str) -> dict[str, dict[str, Any]]:
    return {r["profile"]: r for r in report["results"] if r["mode"] == mode}


def test_failed_profile_is_recorded_with_the_daemons_reason(swept: Any) -> None:
    assert swept["first"].returncode == 1, swept["first"].stderr  # a profile failed
    tree = _rows(swept["report"], "baseline")["tree-ll"]
    assert _predicted("tree-ll", "baseline").error  # the model says it cannot run
    assert tree["status"] == "failed"
    assert tree["reason"] and "cuda_graph" in tree["reason"]
    assert "rolled back" in tree["message"]
    # The sweep went on: every other profile was measured REPEATS times.
    for name in PROFILES[:-1]:
        assert _rows(swept["report"], "baseline")[name]["n"] == REPEATS


def test_baseline_ranking_matches_the_cost_model(swept: Any) -> None:
    rows = _rows(swept["report"], "baseline")
    ok = [p for p in PROFILES if rows[p]["status"] == "ok"]
    predicted = {p: _predicted_rate(p) for p in ok}
    measured = {p: rows[p]["tokens_per_second_mean"] for p in ok}
    checked = 0
    for a, b in itertools.permutations(ok, 2):
        if predicted[a] > predicted[b] * (1 + NOISE):
            checked += 1
            assert measured[a] > measured[b], (
                f"{a} predicted {predicted[a]:.1f} > {b} {predicted[b]:.1f} tok/s, "
                f"measured {measured[a]:.1f} vs {measured[b]:.1f}"
            )
    assert checked >= 4
    best = max(ok, key=lambda p: predicted[p])
    assert rows[best]["rank"] == 1
    # Every mean lies inside its own CI, and the CI comes from REPEATS runs.
    for p in ok:
        lo, hi = rows[p]["ci95"]
        assert lo <= rows[p]["tokens_per_second_mean"] <= hi
        assert len(rows[p]["samples"]) == REPEATS
    ref = rows["nccl-default"]
    assert ref["vs_reference"] == "reference" and ref["speedup_vs_reference"] == 1.0


def test_eagle3_phase_against_each_profiles_own_baseline(swept: Any) -> None:
    base, eagle = _rows(swept["report"], "baseline"), _rows(swept["report"], "eagle3")
    top2 = sorted(
        (p for p in base if base[p]["status"] == "ok"),
        key=lambda p: -base[p]["tokens_per_second_mean"],
    )[:2]
    assert sorted(eagle) == sorted(top2)
    for p, row in eagle.items():
        pred_b, pred_e = _predicted(p, "baseline"), _predicted(p, "eagle3")
        assert row["accept_length_mean"] == pytest.approx(pred_e.accept_length, abs=0.25)
        # The sim (like the field report) makes EAGLE-3 lose on this box.
        assert pred_e.tokens_per_second < pred_b.tokens_per_second
        assert row["real_speedup"] < 1.0
        assert row["baseline_tokens_per_second"] == base[p]["tokens_per_second_mean"]
        expected_be = (
            row["accept_length_mean"] * base[p]["per_request_tokens_per_second_mean"]
            / row["per_request_tokens_per_second_mean"]
        )  # fmt: skip
        assert row["break_even_accept_length"] == pytest.approx(expected_be)
        assert row["break_even_accept_length"] > row["accept_length_mean"]
        # the runs' accepted-drafts histograms, summed: the curve ends at the accept length
        hist, curve = row["accept_histogram"], row["accept_curve"]
        assert len(hist) == 4 and sum(hist) > 0
        assert curve["3"] == pytest.approx(row["accept_length_mean"], abs=0.25)
        assert curve["1"] < curve["2"] < curve["3"]
        (line,) = [ln for ln in acceptance_lines([row]) if f" {p}/eagle3: " in ln]
        assert f"({sum(hist)} passes); L(k) 1:{curve['1']:.2f}" in line


def test_results_file_baselines_apply_best_and_plot(swept: Any) -> None:
    out: Path = swept["out"]
    records = [json.loads(line) for line in swept["lines_before"]]
    kinds = [r["type"] for r in records]
    assert kinds[0] == "sweep"
    assert kinds.count("measurement") == 4 * REPEATS + 2 * REPEATS
    assert kinds.count("failure") == 1
    # Baselines went to the daemon with the sweep's own figures.
    base = _rows(swept["report"], "baseline")
    for p in ("nccl-default", "ring-ll", "ring-ll-8ch", "ring-simple"):
        got = swept["baselines"][p]
        assert got["tokens_per_second"] == pytest.approx(base[p]["tokens_per_second_mean"])
        assert got["per_request_tokens_per_second"] == pytest.approx(
            base[p]["per_request_tokens_per_second_mean"]
        )
        assert got["concurrency"] == 1  # the bench's: verdicts compare only that batch size
    assert "tree-ll" not in swept["baselines"]
    # ... and reached the exporter, which publishes them for its break-even gauges.
    families = {f.name: f for f in text_string_to_metric_families(swept["metrics"])}
    family = families["fastverify_baseline_tokens_per_second"]
    published = {s.labels["profile"]: s.value for s in family.samples}
    assert published["ring-ll"] == pytest.approx(base["ring-ll"]["tokens_per_second_mean"])
    best = swept["report"]["best"]
    assert (swept["status"]["profile"], swept["status"]["mode"]) == (best["profile"], best["mode"])
    png = out / "sweep.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert swept["report"]["plot"] == str(png)


def test_resume_skips_what_is_done_and_no_silent_overwrite(swept: Any) -> None:
    resumed = swept["resumed"]
    assert resumed.returncode == 1, resumed.stderr
    lines_after = (swept["out"] / "results.jsonl").read_text().splitlines()
    new = [json.loads(line) for line in lines_after[len(swept["lines_before"]) :]]
    assert [r["type"] for r in new] == ["sweep"]  # only the restart marker
    assert new[0]["resumed"] is True
    assert "skipped (failed earlier)" in resumed.stderr
    assert json.loads(resumed.stdout)["results"] == swept["report"]["results"]
    again = swept["again"]
    assert again.returncode == 2
    assert "--resume" in again.stderr


def test_interrupted_sweep_loses_nothing_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "int"
    with DaemonHarness(tmp_path, config={"daemon": {"trace_period_s": 0}}) as d:
        args = ["sweep", "nccl-default", "ring-ll", "--repeats", "2", "--duration", "1.0",
                "--output-len", "32", "--output", str(out), "--no-plot", "--json"]  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), *args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=ctrl_c_reaches_it,
        )  # fmt: skip
        results = out / "results.jsonl"

        def first_measured() -> bool:
            assert proc.poll() is None, proc.communicate()
            return results.exists() and '"measurement"' in results.read_text()

        # The event: the first measurement is on disk. Then the daemon is stopped, so the
        # sweep cannot finish however slow this test is to interrupt it (its next switch,
        # its engine lookup and its closing calls all wait for the daemon).
        d.wait_for(first_measured, 600, "the sweep's first measurement")
        os.kill(d.pid, signal.SIGSTOP)
        try:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=300)
        finally:
            os.kill(d.pid, signal.SIGCONT)
        assert proc.returncode == 130, err
        assert "--resume" in err
        kept = [json.loads(line) for line in results.read_text().splitlines()]
        measured = [r for r in kept if r["type"] == "measurement"]
        assert 1 <= len(measured) <= 4
        resumed = d.ctl(*args, "--resume", timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        final = [json.loads(line) for line in results.read_text().splitlines()]
        # The measurements taken before the interrupt are kept as they were, not redone.
        assert final[: len(kept)] == kept
        per_profile = {
            p: sum(1 for r in final if r["type"] == "measurement" and r["profile"] == p)
            for p in ("nccl-default", "ring-ll")
        }
        assert per_profile == {"nccl-default": 2, "ring-ll": 2}


def test_a_switch_by_another_client_drops_the_run_it_spoiled(tmp_path: Path) -> None:
    # Another client switches the daemon while the sweep measures ring-ll: what the sweep
    # measures after that is the other profile's server, so it must not be recorded (or
    # shown) as ring-ll's; the sweep says what happened and goes on.
    out = tmp_path / "spoiled"
    with DaemonHarness(tmp_path, config={"daemon": {"trace_period_s": 0}}) as d:
        # 8 s runs: the one the switch hits gets tokens again from the new server after it
        args = ["sweep", "ring-ll", "--repeats", "3", "--duration", "8", "--output-len", "32",
                "--output", str(out), "--no-plot", "--json"]  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), *args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        results = out / "results.jsonl"

        def first_measured() -> bool:
            assert proc.poll() is None, proc.communicate()
            return results.exists() and '"measurement"' in results.read_text()

        d.wait_for(first_measured, 600, "the sweep's first measurement of ring-ll")
        # the sweep holds the daemon's lease: without force the switch is refused (409)
        other = d.client.post(
            "/v1/profile",
            {"name": "nccl-default", "mode": "baseline", "wait": True, "force": True},
            timeout=120,
        )
        assert other["result"] == "ok", other
        stdout, err = proc.communicate(timeout=600)
        recs = [json.loads(line) for line in results.read_text().splitlines()]
    measured = [r for r in recs if r["type"] == "measurement" and r["profile"] == "ring-ll"]
    spoiled = [r for r in recs if r["type"] == "failure" and r.get("reason") == "served_changed"]
    assert len(spoiled) == 1 and spoiled[0]["profile"] == "ring-ll", recs
    assert 1 <= len(measured) < 3
    assert any(f"{w} nccl-default/baseline during run" in err
               for w in ("switched to", "began a switch to")), err  # fmt: skip
    assert "the run is dropped" in err, err
    # the report shows only the runs before the switch, with why the rest is missing
    row = next(r for r in json.loads(stdout)["results"] if r["profile"] == "ring-ll")
    assert row["n"] == len(measured) and row["status"] == "incomplete", row
    assert row["note"] == f"cut short after {len(measured)} run(s): served_changed", row
    assert "rank" not in row  # never ranked as if complete
