"""What `fastverifyctl tune` says must be true: through a real fastverifyd on the sim and the
real CLI, one small tune (pcie-ipc only, TP 8, where the sim's EAGLE-3 pays) and the render
of its decision.

- a decision is a measured option: a stored speculation plan that predicts mode adaptive far
  above everything measured is measured with real weights before it can win;
- the decision, its file and the daemon's record name the engine (the sim: simulated), the
  headline and the report say "simulated", and `render kubernetes --from-decision` refuses
  it without --force;
- the accept length the confirmation measured is saved with its baseline (at the tune's
  concurrency: the daemon refused it before, and the error was swallowed);
- intervals read `[lo, hi]`; a window that completed fewer than 5 requests is flagged;
- a misspelt profile is a usage error (exit 2, "did you mean") even while another
  experiment holds the daemon's lease.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import DaemonHarness, run_ctl

TP = 8
# 1 s windows of 128-token answers: ~3 requests each on pcie-ipc, fewer than 5 (flagged)
MEASURE = ["--repeats", "2", "--duration", "1", "--output-len", "128", "--input-len", "16"]
CONFIG = {"daemon": {"trace_period_s": 0}}
# a speculation plan for pcie-ipc that predicts x5 at one request: adaptive would "win"
PLAN = {
    "plan": {"profile": "pcie-ipc", "tiers": {"1": {"steps": 3, "per_batch_size": {
        "1": {"speedup": 5.0}}}}},
    "adaptive_config": {"1": {"candidate_steps": [0, 3]}},
}  # fmt: skip


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tune-truth")
    out = tmp / "out"
    with DaemonHarness(tmp, tp_size=TP, sim_load_seconds=0.3, config=CONFIG) as d:
        d.client.post("/v1/spec/plan", PLAN)
        proc = d.ctl("tune", "--profiles", "pcie-ipc", "--finalists", "1", "--accept-length",
                     "2.0", "--output", str(out), *MEASURE, timeout=900)  # fmt: skip
        yield {
            "d": d,
            "proc": proc,
            "out": out,
            "result": json.loads((out / "decision.json").read_text()),
            "status": d.status(),
            "baselines": d.client.get("/v1/baselines"),
            "decision": d.client.get("/v1/decision"),
        }


def test_a_prediction_is_measured_before_it_can_win(tuned: Any) -> None:
    """The plan predicts adaptive at x5 of the baseline, above everything measured: confirm
    measures it with real weights, and the decision is the fastest measured option."""
    proc, res = tuned["proc"], tuned["result"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the speculation plan predicts pcie-ipc/adaptive at " in proc.stderr
    assert "measuring it with real weights (+1 real load, in the ETA from now on)" in proc.stderr
    journal = [json.loads(x) for x in (tuned["d"].state_dir / "tune" / "journal.jsonl")
               .read_text().splitlines()]  # fmt: skip
    (decide,) = [r for r in journal if r.get("event") == "stage_finished"
                 and r.get("name") == "decide"]  # fmt: skip
    opts = decide["data"]["options"]
    assert {(o["mode"], o["evidence"]) for o in opts} == {
        ("baseline", "measured"), ("eagle3", "measured"), ("adaptive", "measured")
    }, opts  # fmt: skip
    fastest = max(opts, key=lambda o: o["tokens_per_second"])
    win, dec = decide["data"]["winner"], res["decision"]
    assert win["evidence"] == "measured" and (dec["profile"], dec["mode"]) == (
        win["profile"], win["mode"])  # fmt: skip
    # the fastest, or tied with it (Welch) and already serving: no load for noise
    assert win["mode"] == fastest["mode"] or win.get("kept_because"), (win, fastest)
    assert (tuned["status"]["profile"], tuned["status"]["mode"]) == (dec["profile"], dec["mode"])
    report = Path(res["report"]).read_text()
    assert "| pcie-ipc | adaptive | measured |" in report, report


def test_the_conditional_eagle3_load_joins_the_eta_when_it_is_decided(tuned: Any) -> None:
    err = tuned["proc"].stderr
    assert "+1 real EAGLE-3 load only if the trial puts EAGLE-3 within 10%" in err  # the plan
    line = next(x for x in err.splitlines() if "confirm: leader pcie-ipc; EAGLE-3: " in x)
    assert "close or ahead" in line and "+1 real EAGLE-3 load, in the ETA from now on" in line


def test_the_engine_is_recorded_and_simulated_is_said(tuned: Any) -> None:
    res, proc = tuned["result"], tuned["proc"]
    engine = res["decision"]["engine"]
    assert engine["kind"] == "sim" and engine["simulated"] is True, engine
    assert re.fullmatch(r"0\.5\.\d+.*", engine["version"]), engine
    assert tuned["decision"]["engine"] == engine  # the daemon's own record says it too
    headline = next(x for x in proc.stdout.splitlines() if x.startswith("decision: "))
    assert "(simulated: the sim engine playing SGLang " in headline, headline
    why = next(x for x in proc.stdout.splitlines() if x.startswith("why: "))
    assert "real weights, SIMULATED by the sim engine" in why, why
    report = Path(res["report"]).read_text()
    assert "SIMULATED: the sim engine playing SGLang" in report.splitlines()[2]
    sweep_start = json.loads((tuned["out"] / "confirm" / "results.jsonl").read_text()
                             .splitlines()[0])  # fmt: skip
    assert sweep_start["type"] == "sweep" and sweep_start["engine"] == engine


def test_render_refuses_a_simulated_decision_without_force(tuned: Any, tmp_path: Path) -> None:
    args = ("render", "kubernetes", "--image", "registry.example.com/fv:1", "--from-decision",
            str(tuned["out"] / "decision.json"))  # fmt: skip
    refused = run_ctl(*args, "--output-dir", str(tmp_path / "a"))
    assert refused.returncode == 2, refused.stderr
    assert "on the sim engine (simulated" in refused.stderr and "--force" in refused.stderr
    assert not (tmp_path / "a").exists()
    forced = run_ctl(*args, "--force", "--output-dir", str(tmp_path / "b"))
    assert forced.returncode == 0, forced.stderr
    assert "rendering it because of --force" in forced.stderr


def test_the_measured_accept_length_is_saved_with_its_baseline(tuned: Any) -> None:
    rec = tuned["baselines"].get("pcie-ipc")
    assert rec is not None, tuned["baselines"]
    measured = next(x for x in tuned["proc"].stderr.splitlines()
                    if "decide: accept length " in x)  # fmt: skip
    assert f"accept length {rec['accept_length']:.2f} of pcie-ipc saved" in measured
    assert rec["concurrency"] == 1
    assert "warning:" not in tuned["proc"].stdout


def test_intervals_are_bracketed_and_quantised_windows_flagged(tuned: Any) -> None:
    why = next(x for x in tuned["proc"].stdout.splitlines() if x.startswith("why: "))
    assert re.search(r"95% CI \[(0 \(from -)?\d+\.\d\)?, \d+\.\d\]", why), why
    report = Path(tuned["result"]["report"]).read_text()
    assert not re.search(r"\| -?\d+\.\d--?\d+\.\d \|", report)  # no "lo-hi" left
    assert "- QUANTISED pcie-ipc/baseline: a window completed only " in report, report


def test_a_misspelt_profile_is_usage_even_under_a_lease(tuned: Any) -> None:
    d = tuned["d"]
    lease = d.client.post("/v1/lease", {"experiment": "sweep", "description": "another"})
    try:
        proc = d.ctl("tune", "--profiles", "pcie-ipcc", "--output", str(d.tmp / "typo"))
    finally:
        d.client.post("/v1/lease/release", {"id": lease["id"]})
    assert proc.returncode == 2, proc.stderr
    assert "unknown profile(s): pcie-ipcc (did you mean pcie-ipc?)" in proc.stderr
    assert "holds the daemon" not in proc.stderr


def test_the_report_gives_one_accept_length_per_line_and_best_once(tuned: Any) -> None:
    report = Path(tuned["result"]["report"]).read_text()
    confirm = report.split("### Confirm (real weights)", 1)[1].split("### ", 1)[0]
    table = [x for x in confirm.splitlines() if x.startswith("| pcie-ipc |")]
    assert len(table) == 3 and sum(" | best | " in x for x in table) == 1, table
    accepts = confirm.split("Accept lengths:", 1)[1].strip().splitlines()
    assert accepts[0].startswith("- 2.00: command line (--accept-length) (known before"), accepts
    assert accepts[1].endswith("measured with real weights (pcie-ipc) (the decision uses it)")
