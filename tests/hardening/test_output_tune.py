"""What a tuned TP 8 daemon shows: tune's plots, refusals, decision, verify line, CI, break-even."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.harness import DaemonHarness
from tests.support.plot_extra import without_matplotlib

# the module fixture runs a whole tune: the hang guard (not a
# performance bound) gives a loaded host room
pytestmark = pytest.mark.timeout(900)

MEASURE = ["--accept-length", "2.0", "--repeats", "2", "--duration", "1", "--output-len", "48",
           "--input-len", "64"]  # fmt: skip
TUNE = ["--profiles", "nccl-default,ring-ll,pcie-ipc", *MEASURE]
# the --force run replaces the tune above: what it is asserted on (its plots skipped, its
# report and decision, its trial's break-even) needs one profile, its EAGLE-3 trial included
FORCED = ["--profiles", "pcie-ipc", "--finalists", "1", *MEASURE]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tour")
    with DaemonHarness(tmp, tp_size=8, sim_load_seconds=1.0,
                       config={"daemon": {"trace_period_s": 0}}) as d:  # fmt: skip
        yield d


@pytest.fixture(scope="module")
def tuned(daemon: DaemonHarness) -> dict[str, Any]:
    out = daemon.tmp / "tune-out"
    proc = daemon.ctl("tune", *TUNE, "-o", str(out), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return {"proc": proc, "out": out}


def test_tune_plots_the_resume_circle_and_force_without_matplotlib(
    daemon: DaemonHarness, tuned: dict[str, Any], tmp_path: Path
) -> None:
    """One tune directory, in order: its plots; the two refusals (each says what to do: a
    new directory or --force, never the other refusal); --force on an install without
    matplotlib, which says the plots were skipped and how to get them."""
    out, proc = tuned["out"], tuned["proc"]
    report = (out / "report.md").read_text()
    for png in ("funnel.png", "trial.png", "decision.png"):
        assert (out / png).stat().st_size > 1000, png
        assert f"]({png})" in report, png
    assert "plots: decision.png, funnel.png, trial.png" in proc.stdout, proc.stdout
    assert "plots skipped" not in proc.stdout + report

    # the circle is broken: both messages name the ways out
    again = daemon.ctl("tune", *TUNE, "-o", str(out))
    assert again.returncode == 2, again.stderr
    assert "already holds a finished tune" in again.stderr, again.stderr
    assert "-o NEWDIR" in again.stderr and "--force" in again.stderr
    assert "--resume" not in again.stderr  # not the circle's first half
    resume = daemon.ctl("tune", "--resume", "-o", str(out))
    assert resume.returncode == 2, resume.stderr
    assert "nothing to resume: the last tune of this host finished" in resume.stderr
    assert f"-o {out} --force" in resume.stderr and "-o NEWDIR" in resume.stderr
    assert (out / "funnel.png").exists()  # neither refusal touched anything

    # --force, on an install without the plot extra
    proc = daemon.ctl("tune", *FORCED, "-o", str(out), "--force", timeout=900,
                      env=without_matplotlib(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    note = "plots skipped: matplotlib is not installed"
    assert note in proc.stdout and "fastverify[plot]" in proc.stdout, proc.stdout
    report = (out / "report.md").read_text()
    assert note in report and "fastverify[plot]" in report
    assert ".png" not in report
    # --force replaced the first tune's files: no stale PNG beside a report without them
    assert not list(out.glob("*.png")), list(out.glob("*.png"))
    doc = json.loads((out / "decision.json").read_text())
    assert doc["plots"]["files"] == {} and doc["plots"]["skipped"].startswith(note)


def _decision_info(metrics_url: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(metrics_url, timeout=10).text
    out: dict[str, list[dict[str, str]]] = {"decision": [], "profile": []}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "fastverify_decision_info" and smp.value == 1.0:
                out["decision"].append(smp.labels)
            if smp.name == "fastverify_profile_info" and smp.value == 1.0:
                out["profile"].append(smp.labels)
    return out["decision"], out["profile"]


def test_the_decision_says_whether_it_serves_after_a_manual_switch(
    daemon: DaemonHarness, tuned: dict[str, Any]
) -> None:
    dec = daemon.status()["decision"]
    daemon.ctl("profile", "set", dec["profile"], "--mode", dec["mode"])  # whatever ran before
    st = daemon.status()
    dec = st["decision"]
    assert dec["serving"] is True and (dec["profile"], dec["mode"]) == (st["profile"], st["mode"])
    text = daemon.ctl("status")
    assert f"decision:   {dec['profile']}/{dec['mode']} backend {dec['backend']}" in text.stdout
    assert "): serving" in text.stdout, text.stdout
    other = "ring-ll" if dec["profile"] != "ring-ll" else "nccl-default"
    r = daemon.ctl("profile", "set", other, "--mode", "baseline")
    assert r.returncode == 0, r.stderr
    assert (f"note: tune's decision {dec['profile']}/{dec['mode']} no longer serves "
            f"({other}/baseline does)") in r.stderr, r.stderr  # fmt: skip
    st = daemon.status()
    assert st["decision"]["serving"] is False and st["profile"] == other
    text = daemon.ctl("status").stdout
    assert "NOT serving" in text and f"({other}/baseline serves;" in text, text
    decision, profile = _decision_info(daemon.metrics_url)
    assert [d["serving"] for d in decision] == ["false"], decision
    assert [p["profile"] for p in profile] == [other], profile
    # back to the decision: it serves again, everywhere
    back = daemon.ctl("profile", "set", dec["profile"], "--mode", dec["mode"])
    assert back.returncode == 0 and "no longer serves" not in back.stderr, back.stderr
    assert daemon.status()["decision"]["serving"] is True
    decision, _ = _decision_info(daemon.metrics_url)
    assert [d["serving"] for d in decision] == ["true"], decision


def test_the_pcie_ipc_verify_line_names_its_sglang_variable(
    daemon: DaemonHarness, tuned: dict[str, Any]
) -> None:
    r = daemon.ctl("profile", "set", "pcie-ipc", "--mode", "baseline", "--restart")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout + r.stderr
    line = next(x for x in out.splitlines() if "verify: " in x and "process(es)" in x)
    assert line.endswith(
        "verify: 8 process(es) hold SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 and exactly no NCCL "
        "variables (plus, added by SGLang 0.5.23 by its own rules: NCCL_CUMEM_ENABLE=0, "
        "NCCL_GRAPH_REGISTER=0, NCCL_NVLS_ENABLE=0)"
    ), line


def test_a_ci_from_two_runs_says_too_few_runs(daemon: DaemonHarness, tuned: dict[str, Any]):
    """tune with --repeats 2 (the tour's): its decision's CI and the report's tables say the
    interval comes from too few runs."""
    doc = json.loads((tuned["out"] / "decision.json").read_text())
    why = doc["decision"]["why"]
    if "95% CI" in why:
        assert "from 2 run(s): too few runs to trust it (--repeats 3 or more)" in why, why
    report = (tuned["out"] / "report.md").read_text()
    assert "come from 2 run(s) each: too few runs to trust them" in report


def test_the_break_even_is_one_computation_and_says_its_concurrency(
    daemon: DaemonHarness, tuned: dict[str, Any]
) -> None:
    """The trial's break-even in tune's report and the exporter's gauge come from
    one function, and the report says which concurrency its figure is for."""
    from fastverify.experiments.common import stats
    from fastverify.exporters import baseline
    from fastverify.speculation import breakeven

    assert baseline.breakeven_accept_length is breakeven.breakeven_accept_length
    assert stats.break_even_accept_length(2.0, 400.0, 300.0) == pytest.approx(
        breakeven.breakeven_accept_length(2.0 / 400.0, 300.0)
    )
    report = (tuned["out"] / "report.md").read_text()
    assert "Break-even (`break_even_accept_length`) is for 1 concurrent request(s)" in report
    assert 'fastverify_spec_breakeven_accept_length{concurrency="1"}' in report
    # the trial's figure is that function of the trial's own rows
    done = [json.loads(x) for x in (daemon.state_dir / "tune" / "journal.jsonl").read_text()
            .splitlines() if '"stage_finished"' in x and '"trial"' in x]  # fmt: skip
    rows = done[-1]["data"]["rows"]
    step = {r["profile"]: r["decode_step_ms"] for r in rows if r["mode"] == "baseline"}
    spec = [r for r in rows if r.get("break_even_accept_length")]
    assert spec, rows
    for r in spec:  # the baseline's per-request rate is 1 / its decode step
        want = breakeven.breakeven_accept_length(r["spec_cycle_ms"] / 1000.0,
                                                 1000.0 / step[r["profile"]])  # fmt: skip
        assert r["break_even_accept_length"] == pytest.approx(want, rel=1e-6), r
