"""`fastverifyctl sweep` end to end: a real fastverifyd on the sim engine (tp 8), the real CLI.

One short sweep (module fixture) is checked from several sides: the ranking against the
sim's documented cost model, the failed profile with the daemon's reason, the EAGLE-3
phase against each profile's own baseline, the results file, the baselines the exporter
receives, --apply-best, the plot; then --resume and the refusal to overwrite. Own sweeps:
an interrupted one, another client's switch, the progress count, the lease refusing a
switch, and the note when matplotlib (the plot extra) is missing.
"""

from __future__ import annotations

import itertools
import json
import os
import re
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
from tests.support.harness import DaemonHarness, _scrubbed_env, ctrl_c_reaches_it
from tests.support.plot_extra import without_matplotlib

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


def test_sweep_progress_is_one_count_that_reaches_its_total(tmp_path: Path) -> None:
    cfg = {"daemon": {"default_profile": "ring-ll"}}
    with DaemonHarness(tmp_path, sim_load_seconds=0.2, metrics=False, config=cfg) as d:
        r = d.ctl(
            "sweep", "ring-ll", "tree-ll", "ring-simple", "--repeats", "2", "--duration", "0.5",
            "--output-len", "16", "--warmup", "0", "--then-eagle3", "2", "--no-plot",
            "--output", str(tmp_path / "sw"), timeout=600,
        )  # fmt: skip
        assert r.returncode == 1, r.stdout + r.stderr  # tree-ll fails (CUDA-graph capture)
        labels = [
            m.group(1, 2)
            for ln in r.stderr.splitlines()
            if (m := re.match(r"^\[(\d+)/(\d+)(?: \w+)?\] ", ln))
        ]
        assert labels, r.stderr
        assert all(int(a) <= int(b) for a, b in labels), labels
        done = [int(a) for a, _ in labels]
        assert done == sorted(done), r.stderr  # never goes back
        # 3 profiles + 2 EAGLE-3, 2 repeats each = 10 planned; tree-ll's 2 are dropped
        assert labels[0] == ("0", "10"), labels
        assert labels[-1] == ("8", "8"), labels
        assert not re.search(r"^sweep: \d+/\d+ measurements", r.stderr, re.M), r.stderr
        failed_line = [ln for ln in r.stderr.splitlines() if "tree-ll/baseline: FAILED" in ln]
        assert len(failed_line) == 1 and failed_line[0].count("cuda_graph_capture") == 1, r.stderr
        failures = [ln for ln in r.stdout.splitlines() if "tree-ll/baseline failed" in ln]
        assert failures and all(ln.count("failed") == 1 for ln in failures), r.stdout
        assert all(ln.count("cuda_graph_capture") == 1 for ln in failures), r.stdout


def test_a_switch_during_a_sweep_is_refused_naming_it_and_a_forced_one_is_never_ranked(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sweep"
    with DaemonHarness(tmp_path, sim_load_seconds=0.3,
                       config={"daemon": {"trace_period_s": 0}}) as d:  # fmt: skip
        sweep = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), "sweep",
             "ring-ll", "nccl-default", "ring-simple", "--repeats", "3", "--then-eagle3", "1",
             "--duration", "2", "--output-len", "32", "--input-len", "32", "--json",
             "--output", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**_scrubbed_env(), "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        try:

            def measured(profile: str) -> int:
                path = out / "results.jsonl"
                lines = path.read_text().splitlines() if path.exists() else []
                recs = [json.loads(x) for x in lines if x.strip().endswith("}")]
                kept = [r for r in recs if r.get("type") == "measurement"]
                return sum(1 for r in kept if r["profile"] == profile)

            d.wait_for(lambda: measured("ring-ll") >= 1, 120, "ring-ll's first run")
            # status shows the sweep holding the daemon
            st = d.status()
            assert st["lease"]["experiment"] == "sweep" and st["lease"]["pid"] == sweep.pid
            text = d.ctl("status").stdout
            assert f"experiment: sweep running (pid {sweep.pid}" in text, text
            # another client's switch: 409 (exit 4) naming the sweep, nothing switched
            r = d.ctl("profile", "set", "tree-ll")
            assert r.returncode == 4, r.stdout + r.stderr
            assert (
                f"sweep (uid {os.getuid()}, pid {sweep.pid}, since" in r.stderr
                and "--force" in r.stderr
            )
            assert d.status()["profile"] == "ring-ll"
            # --force switches anyway: ring-ll's runs are cut short
            f = d.ctl("profile", "set", "nccl-default", "--force")
            assert f.returncode == 0, f.stderr
            stdout, stderr = sweep.communicate(timeout=600)
        finally:
            if sweep.poll() is None:
                sweep.kill()
                sweep.wait()
        assert sweep.returncode == 1, stderr[-3000:]  # a profile was cut short
        report = json.loads(stdout)
        rows = {(r["profile"], r["mode"]): r for r in report["results"]}
        cut = rows[("ring-ll", "baseline")]
        assert cut["status"] == "incomplete" and cut["n"] < 3, cut
        assert "rank" not in cut and cut["reason"] == "served_changed"
        ranked = sorted((r for r in rows.values() if r.get("rank") and r["mode"] == "baseline"),
                        key=lambda r: r["rank"])  # fmt: skip
        assert [r["profile"] for r in ranked] == sorted(
            ["nccl-default", "ring-simple"], key=lambda p: -rows[(p, "baseline")][
                "tokens_per_second_mean"])  # fmt: skip
        # the EAGLE-3 phase took the best complete profile, never the cut one
        assert ("ring-ll", "eagle3") not in rows
        assert (ranked[0]["profile"], "eagle3") in rows
        assert report["best"]["profile"] != "ring-ll" or report["best"]["mode"] != "baseline"
        assert d.status()["lease"] is None  # released at the end
        # what a person reads: the table marks it, the note does not ask for --repeats 3
        table = subprocess.run(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), "sweep",
             "ring-ll", "nccl-default", "ring-simple", "--repeats", "3", "--then-eagle3", "1",
             "--resume", "--output", str(out)],
            capture_output=True, text=True, cwd=REPO, timeout=600,
            env={**_scrubbed_env(), "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert table.returncode == 1, table.stderr[-2000:]
        line = next(x for x in table.stdout.splitlines() if "ring-ll" in x and "baseline" in x)
        assert "CUT SHORT" in line and "cut short after" in line, line
        assert "pass --repeats 3" not in table.stdout
        assert "ring-ll/baseline failed (served_changed)" in table.stdout, table.stdout


def test_sweep_without_matplotlib_says_its_plot_was_skipped(tmp_path: Path) -> None:
    """sweep.png: an install without the plot extra says so, and how to get it."""
    out = tmp_path / "sw"
    with DaemonHarness(tmp_path, sim_load_seconds=0.3,
                       config={"daemon": {"trace_period_s": 0}}) as d:  # fmt: skip
        args = ("sweep", "ring-ll", "--repeats", "1", "--duration", "1", "--output-len", "16",
                "--input-len", "16", "--output", str(out))  # fmt: skip
        r = d.ctl(*args, env=without_matplotlib(tmp_path), timeout=300)
        j = d.ctl(*args[:-2], "--output", str(tmp_path / "sw2"), "--json",
                  env=without_matplotlib(tmp_path), timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "warning: plots skipped: matplotlib is not installed" in r.stderr, r.stderr[-2000:]
    assert "fastverify[plot]" in r.stderr and "plot: " not in r.stdout
    assert not (out / "sweep.png").exists()
    doc = json.loads(j.stdout)
    assert doc["plot"] is None and doc["plot_skipped"].startswith("plots skipped: matplotlib")


def test_ctrl_c_of_a_sweep_puts_back_what_served(tmp_path: Path) -> None:
    """Ctrl-C after the sweep has switched away: what served before it is put back (as
    `spec costs` does), the measurements kept for --resume, exit 130."""
    out = tmp_path / "int"
    with DaemonHarness(tmp_path, config={"daemon": {"trace_period_s": 0}}, metrics=False) as d:
        before = d.status()["profile"]
        args = ["sweep", "ring-ll", "ring-simple", "--repeats", "2", "--duration", "1.0",
                "--output-len", "32", "--output", str(out), "--no-plot"]  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), *args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=ctrl_c_reaches_it,
        )  # fmt: skip
        results = out / "results.jsonl"

        def first_measured() -> bool:
            assert proc.poll() is None, proc.communicate()
            return results.exists() and '"measurement"' in results.read_text()

        d.wait_for(first_measured, 600, "the sweep's first measurement")
        assert d.status()["profile"] != before or d.status()["switch_in_flight"]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 130, err
        assert f"interrupted: {before}/" in err and "put back" in err, err
        assert "Traceback" not in err, err
        st = d.wait_state("READY", 60)
        assert st["profile"] == before and st["lease"] is None, st
