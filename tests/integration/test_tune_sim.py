"""`fastverifyctl tune` end to end on the sim, through a real fastverifyd and the real CLI.

- the whole funnel with `--accept-length 2.0 --json`: the plan first, the GPU stages
  skipped with their reasons (no GPU here), tree-ll failing CUDA-graph capture in its
  trial, two real-weights loads at most, the decision applied and served, in history, on
  /metrics (also after a daemon restart) and in DIR/decision.json;
- (its decision beside an exhaustive real-weights sweep of every shipped profile in both
  modes, a measurement: benchmarks/bench_tune.py);
- resume after SIGKILL of the tune process in the middle of its trial (waits on the
  journal file), skipping the finished stages; after the daemon was killed (exit 3); after
  Ctrl-C (exit 130);
- preflight and rehearse inside tune on CPU ranks (the hidden gloo backend);
- a budget too small for the plan: one finalist, one trial, and `--no-apply` puts back
  what served before.

The sim's cost model (`allreduce_sim.served_prediction`) is the reference for the ranking.
"""

from __future__ import annotations

import contextlib
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

from fastverify.client import ApiError
from fastverify.engines.sim import allreduce_sim
from fastverify.experiments.tune import decide
from fastverify.profiles.effective import effective_env
from fastverify.profiles.store import ProfileStore
from fastverify.sglang.allreduce import requested_backend
from tests.support.harness import REPO, DaemonHarness, ctrl_c_reaches_it

PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.env"))
TP = 8
# 16-token prompts: within PCIe's small-message regime, so a 48-token request fits a 1 s
# window (a 64-token prefill moves 896 KiB per all-reduce: 0.39 s on ring-ll in the sim)
MEASURE = ["--repeats", "2", "--duration", "1", "--output-len", "48", "--input-len", "16"]
# a mode's margin in the model beyond which the measured decision must follow it: on 2 busy
# cores the sim's EAGLE-3 suffers more than its baseline (side by side, pcie-ipc at c=1:
# EAGLE-3 / baseline 1.10 on a quiet machine, 1.056 at load average 11)
MODE_MARGIN = 0.15
CONFIG = {"daemon": {"trace_period_s": 0}}


def _predicted_tps(profile: str, mode: str, accept: float | None = None) -> float:
    prof = ProfileStore().load(profile)
    graphs = prof.requires.get("cuda-graph", "on") != "off"
    p = allreduce_sim.served_prediction(effective_env(prof), mode, TP, 1, graphs, accept)
    return 0.0 if p.error else p.tokens_per_second


def _decision_samples(metrics: str) -> list[dict[str, str]]:
    return [s.labels for f in text_string_to_metric_families(metrics) for s in f.samples
            if s.name == "fastverify_decision_info" and s.value == 1.0]  # fmt: skip


def _journal(d: DaemonHarness) -> list[dict[str, Any]]:
    path = d.state_dir / "tune" / "journal.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tune")
    with DaemonHarness(tmp, tp_size=TP, sim_load_seconds=2.0, config=CONFIG) as d:
        yield d


@pytest.fixture(scope="module")
def tuned(daemon: DaemonHarness) -> dict[str, Any]:
    d = daemon
    out = d.tmp / "tune-out"
    before = d.status()
    proc = d.ctl("tune", "--accept-length", "2.0", "--json", *MEASURE, "--output", str(out),
                 timeout=1200)  # fmt: skip
    return {
        "proc": proc,
        "before": before,
        "result": json.loads(proc.stdout) if proc.stdout.strip() else None,
        "status": d.status(),
        "history": d.client.get("/v1/history"),
        "metrics": httpx.get(d.metrics_url, timeout=10).text,
        "out": out,
        "journal": _journal(d),
    }


def test_tune_runs_end_to_end_and_prints_the_exact_json(tuned: dict[str, Any]) -> None:
    proc, res = tuned["proc"], tuned["result"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(res) == {"decision", "stages", "loads", "wall_s", "report", "plots", "warnings",
                        "fingerprint", "evidence"}  # fmt: skip
    assert res["warnings"] == []
    assert res["plots"]["skipped"] is None  # matplotlib is in the dev install
    assert set(res["plots"]["files"].values()) == {"funnel.png", "trial.png", "decision.png"}
    assert set(res["decision"]) == {"profile", "mode", "backend", "applied", "why", "engine"}
    assert [s["name"] for s in res["stages"]] == ["inventory", "candidates", "derive_tuner",
                                                  "preflight", "rehearse", "trial", "confirm",
                                                  "decide"]  # fmt: skip
    for s in res["stages"]:
        assert set(s) == {"name", "status", "wall_s", "reason"}
        assert s["status"] in ("done", "skipped", "failed")
    assert set(res["loads"]) == {"real", "dummy"}
    # the same document is DIR/decision.json; the report is beside it with its plots
    assert json.loads((tuned["out"] / "decision.json").read_text()) == res
    report = Path(res["report"]).read_text()
    for needle in ("## Funnel", "## Plan", "What would change it", "95% CI", "tree-ll"):
        assert needle in report
    assert (tuned["out"] / "funnel.png").stat().st_size > 1000
    assert (tuned["out"] / "decision.png").stat().st_size > 1000
    # the plan came first, before any stage, with its estimates and where they came from
    err = proc.stderr
    assert err.index("plan (estimates") < err.index("[1/8] inventory: started")
    assert "default" in err and "ETA" in err


def test_no_gpu_stages_are_skipped_with_their_reason(tuned: dict[str, Any]) -> None:
    stages = {s["name"]: s for s in tuned["result"]["stages"]}
    for name in ("derive_tuner", "preflight", "rehearse"):
        assert stages[name]["status"] == "skipped"
        assert "no GPU visible" in stages[name]["reason"]
    for name in ("inventory", "candidates", "trial", "confirm", "decide"):
        assert stages[name]["status"] == "done", stages[name]


def test_tree_ll_fails_capture_in_its_trial_and_is_dropped(tuned: dict[str, Any]) -> None:
    done = {r["name"]: r for r in tuned["journal"] if r.get("event") == "stage_finished"}
    trial_rows = done["trial"]["data"]["rows"]
    tree = next(r for r in trial_rows if r["profile"] == "tree-ll" and r["mode"] == "baseline")
    assert tree["status"] == "failed" and "cuda_graph" in tree["reason"]
    assert {r["profile"] for r in trial_rows if r["mode"] == "baseline"} == set(PROFILES)
    assert "tree-ll" not in done["confirm"]["data"]["finalists"]
    # the trial's all-reduces per step are the sim's 122 in every profile window
    ok = [r for r in trial_rows if r["status"] == "ok" and r["mode"] == "baseline"]
    assert ok and all(r["allreduce_per_step"] == 122 for r in ok)


def test_decision_is_applied_served_recorded_and_exported(tuned: dict[str, Any]) -> None:
    dec, st = tuned["result"]["decision"], tuned["status"]
    # the cost model's best profile at accept length 2.0, all-reduce backend included (on the
    # sim's PCIe-only 8 GPUs: pcie-ipc, 4x any NCCL profile)
    pred = {(p, m): _predicted_tps(p, m, 2.0) for p in PROFILES for m in ("baseline", "eagle3")}
    best = max(pred, key=pred.__getitem__)
    assert dec["profile"] == best[0]
    # the mode: the fastest option measured with real weights (or the serving one tied with
    # it), and the model's mode wherever its margin is beyond what a busy machine moves a
    # measurement by (pcie-ipc's EAGLE-3 is 1.09x its baseline in the model: inside it)
    (decided,) = [r for r in tuned["journal"]
                  if r.get("event") == "stage_finished" and r.get("name") == "decide"]  # fmt: skip
    measured = [o for o in decided["data"]["options"] if o["evidence"] == "measured"]
    fastest = max(measured, key=lambda o: o["tokens_per_second"])
    win = decided["data"]["winner"]
    assert (win["profile"], win["mode"]) == (dec["profile"], dec["mode"])
    if (win["profile"], win["mode"]) != (fastest["profile"], fastest["mode"]):
        assert win.get("kept_because"), (win, fastest)
        assert win["tokens_per_second"] >= fastest["tokens_per_second"] * (1 - decide.TIE)
    other = "eagle3" if best[1] == "baseline" else "baseline"
    if pred[best] > pred[(best[0], other)] * (1 + MODE_MARGIN):
        assert dec["mode"] == best[1]
    backend = requested_backend(ProfileStore().load(best[0]).env)
    assert dec["applied"] is True and dec["backend"] == backend
    assert (st["state"], st["profile"], st["mode"], st["trial"]) == (
        "READY", dec["profile"], dec["mode"], False)  # fmt: skip
    # the accept length it decided with: the command line's 2.00, or, when the trial left
    # the mode open and a real EAGLE-3 load measured one, that
    (confirm,) = [r for r in tuned["journal"]
                  if r.get("event") == "stage_finished" and r.get("name") == "confirm"]  # fmt: skip
    measured = (confirm["data"].get("eagle3") or {}).get("accept_length_mean")
    accept = f"accept length {measured:.2f} (measured" if measured else "2.00"
    assert accept in dec["why"] and "95% CI" in dec["why"], dec["why"]
    rec = [h for h in tuned["history"] if h["kind"] == "decision"]
    assert len(rec) == 1 and rec[0]["result"] == "applied"
    assert (rec[0]["profile"], rec[0]["mode"], rec[0]["backend"]) == (
        dec["profile"], dec["mode"], backend)  # fmt: skip
    assert _decision_samples(tuned["metrics"]) == [
        {
            "profile": dec["profile"],
            "mode": dec["mode"],
            "backend": backend,
            "applied": "true",
            "serving": "true",
        }
    ]


def test_the_inventory_offers_the_backend_the_decision_serves(tuned: dict[str, Any]) -> None:
    # the first thing a user reads ("backends possible: ...") must not rule out the backend
    # the decision then serves: the sim has its own simulated FlashInfer with pcie_ipc_comm,
    # whatever this machine's interpreter lacks
    line = next(x for x in tuned["proc"].stderr.splitlines() if "backends possible: " in x)
    possible = line.split("backends possible: ", 1)[1].split(" (ETA")[0].split(", ")
    assert tuned["result"]["decision"]["backend"] in possible, line
    done = {r["name"]: r for r in tuned["journal"] if r.get("event") == "stage_finished"}
    rows = {b["backend"]: b for b in done["inventory"]["data"]["backends"]}
    assert rows["pcie_ipc"]["possible"] is True, rows["pcie_ipc"]


def _secs(mmss: str) -> int:
    parts = [int(x) for x in mmss.split(":")]
    return parts[-1] + 60 * parts[-2] + (3600 * parts[-3] if len(parts) > 2 else 0)


def test_the_eta_follows_the_loads_the_trial_measured(tuned: dict[str, Any]) -> None:
    # no dummy load is recorded yet, but the daemon's start (a real load) is: the plan
    # bounds a dummy load by it, never the 90 s default; once the
    # trial measured the sim's ~2 s loads, the ETA must use them: by the trial's last line
    # what is left is the confirm + decide (their planned estimates)
    err = tuned["proc"].stderr.splitlines()
    assert not any("(dummy load: default)" in x for x in err)
    assert any("(dummy load: recorded real: median of" in x for x in err), err[:12]
    plan_est = {x.split()[0]: _secs(x.split()[1]) for x in err
                if x.startswith("  confirm ") or x.startswith("  decide ")}  # fmt: skip
    last_trial = [x for x in err if x.startswith("[6/8] trial: [") and "(ETA " in x][-1]
    eta = _secs(last_trial.rsplit("(ETA ", 1)[1].split()[0].rstrip(")"))
    assert eta <= plan_est["confirm"] + plan_est["decide"] + 90, last_trial


def test_at_most_two_real_loads(tuned: dict[str, Any]) -> None:
    """Two finalists; one real EAGLE-3 load only when the trial left the mode open, one real
    adaptive load only when the speculation plan predicted adaptive above everything
    measured; applying costs a load only when what confirm measured last did not win."""
    loads = tuned["result"]["loads"]
    (confirm,) = [r for r in tuned["journal"]
                  if r.get("event") == "stage_finished" and r.get("name") == "confirm"]  # fmt: skip
    eagle3_loaded = confirm["data"]["eagle3"] is not None
    adaptive_loaded = confirm["data"].get("adaptive") is not None
    confirmed = 2 + eagle3_loaded + adaptive_loaded
    (decided,) = [r for r in tuned["journal"]
                  if r.get("event") == "stage_finished" and r.get("name") == "decide"]  # fmt: skip
    applied = (decided["data"].get("apply_result") or {}).get("result")
    assert applied in ("ok", "unchanged"), decided["data"].get("apply_result")
    assert loads["real"] == confirmed + (applied == "ok")
    assert loads["real"] <= 2 + eagle3_loaded + 2 * adaptive_loaded
    since = next(r["ts"] for r in tuned["journal"] if r.get("event") == "start")
    real = [h for h in tuned["history"] if h["kind"] == "switch" and h["started_at"] >= since
            and h.get("weights") == "real"]  # fmt: skip
    assert len(real) == loads["real"]
    dummy = [h for h in tuned["history"] if h["kind"] == "switch" and h["started_at"] >= since
             and h.get("weights") == "dummy"]  # fmt: skip
    # every shipped profile + 2 EAGLE-3 trials; tree-ll's failed start and rollback are two
    assert len(dummy) == len(PROFILES) + 2
    assert loads["dummy"] == len(PROFILES) + 2 + 1


def test_a_bad_decision_is_refused_and_changes_nothing(
    daemon: DaemonHarness, tuned: dict[str, Any]
) -> None:
    before = daemon.client.get("/v1/decision")
    bad = {"profile": "no-such", "mode": "eagle3", "backend": "NCCL!", "applied": True,
           "why": "x"}  # fmt: skip
    with pytest.raises(ApiError) as err:
        daemon.client.post("/v1/decision", bad)
    assert err.value.status == 422
    assert set(err.value.body["fields"]) == {"profile", "backend"}
    with pytest.raises(ApiError) as err:  # the mode is checked as the config's server.mode
        daemon.client.post("/v1/decision", dict(bad, profile="nccl-default", backend="nccl",
                                                mode="turbo"))  # fmt: skip
    assert err.value.status == 422 and "mode" in str(err.value)
    assert daemon.client.get("/v1/decision") == before
    assert before["profile"] == tuned["result"]["decision"]["profile"]


def test_the_decision_survives_a_daemon_restart(
    daemon: DaemonHarness, tuned: dict[str, Any]
) -> None:
    daemon.kill9()  # the engine keeps serving; the new daemon adopts it
    daemon.restart_daemon()
    metrics = httpx.get(daemon.metrics_url, timeout=10).text
    dec = tuned["result"]["decision"]
    assert _decision_samples(metrics) == [
        {"profile": dec["profile"], "mode": dec["mode"], "backend": dec["backend"],
         "applied": "true", "serving": "true"}
    ]  # fmt: skip


# ------------------------------------------------------------------ resume, budget


def _popen_tune(d: DaemonHarness, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FASTVERIFY_", "NCCL_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), "tune", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=ctrl_c_reaches_it,  # test_ctrl_c_then_resume interrupts it
    )  # fmt: skip


def test_resume_after_kill_9_in_the_middle_of_the_trial(tmp_path: Path) -> None:
    names = "nccl-default,ring-ll,ring-ll-8ch"
    out = tmp_path / "out"
    with DaemonHarness(tmp_path, tp_size=TP, sim_load_seconds=1.0, config=CONFIG) as d:
        proc = _popen_tune(d, "--profiles", names, "--finalists", "1", "--accept-length",
                           "2.0", "--output", str(out), *MEASURE)  # fmt: skip
        results = out / "trial" / "results.jsonl"

        def mid_trial() -> bool:
            started = any(r.get("event") == "stage_started" and r["name"] == "trial"
                          for r in _journal(d))  # fmt: skip
            return started and results.exists() and '"measurement"' in results.read_text()

        try:
            d.wait_for(mid_trial, timeout=600, what="the tune's trial to measure once")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        kept = results.read_text().splitlines()
        again = d.ctl("tune", "--resume", "--json", timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        res = json.loads(again.stdout)
        journal = _journal(d)
        st = d.status()
    started = [r["name"] for r in journal if r.get("event") == "stage_started"]
    # finished stages ran once; the interrupted trial ran again and the rest once
    assert started.count("inventory") == 1 and started.count("candidates") == 1
    assert started.count("trial") == 2 and started.count("confirm") == 1
    assert "inventory: finished earlier, not run again" in again.stderr
    assert "resuming the tune" in again.stderr
    # the trial's sweep continued its results file: what was measured before is kept and
    # no (profile, mode) has more than the asked repeats
    after = (out / "trial" / "results.jsonl").read_text().splitlines()
    assert after[: len(kept)] == kept
    meas: dict[tuple[str, str], int] = {}
    for line in after:
        rec = json.loads(line)
        if rec.get("type") == "measurement":
            key = (rec["profile"], rec["mode"])
            meas[key] = meas.get(key, 0) + 1
    assert meas and max(meas.values()) == 2
    assert [s["status"] for s in res["stages"]].count("failed") == 0
    dec = res["decision"]
    assert dec["applied"] and (st["profile"], st["mode"]) == (dec["profile"], dec["mode"])
    assert dec["profile"] == max(names.split(","), key=lambda p: _predicted_tps(p, "baseline"))
    assert any(r.get("event") == "end" for r in journal)


def test_a_small_budget_lowers_finalists_and_no_apply_restores(tmp_path: Path) -> None:
    names = "nccl-default,ring-ll,ring-ll-8ch,ring-simple"
    with DaemonHarness(tmp_path, tp_size=TP, sim_load_seconds=1.0, config=CONFIG) as d:
        before = d.status()
        proc = d.ctl("tune", "--profiles", names, "--finalists", "3", "--budget", "0.2",
                     "--no-apply", "--accept-length", "2.0", "--json", "--output",
                     str(tmp_path / "out"), *MEASURE, timeout=900)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        res = json.loads(proc.stdout)
        journal = _journal(d)
        st = d.status()
        history = d.client.get("/v1/history")
    planned = next(r["plan"] for r in journal if r.get("event") == "plan")
    assert planned["finalists_asked"] == 3 and planned["finalists"] == 1
    assert planned["trial_candidates"] == 1 and planned["over_budget"]
    assert "finalists 3 -> 1" in proc.stderr and "over" in proc.stderr
    done = {r["name"]: r for r in journal if r.get("event") == "stage_finished"}
    assert len(done["confirm"]["data"]["finalists"]) == 1
    assert len({r["profile"] for r in done["trial"]["data"]["rows"]}) == 1
    assert res["loads"]["real"] <= 2  # the finalist, and putting back what served before
    dec = res["decision"]
    assert dec["applied"] is False and dec["profile"] in names.split(",")
    assert (st["profile"], st["mode"], st["trial"]) == (before["profile"], before["mode"], False)
    assert [h["result"] for h in history if h["kind"] == "decision"] == ["recorded"]


def test_resume_after_the_daemon_was_killed_mid_trial(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with DaemonHarness(tmp_path, tp_size=TP, sim_load_seconds=1.0, config=CONFIG) as d:
        proc = _popen_tune(d, "--profiles", "ring-ll,ring-ll-8ch", "--finalists", "1",
                           "--accept-length", "2.0", "--output", str(out), *MEASURE)  # fmt: skip
        results = out / "trial" / "results.jsonl"
        try:
            d.wait_for(lambda: results.exists() and '"measurement"' in results.read_text(),
                       timeout=600, what="the tune's trial to measure once")  # fmt: skip
            d.kill9()  # the daemon dies; its engine keeps running
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 3, err[-2000:]  # daemon unreachable: the journal is kept
        assert "--resume" in err
        d.restart_daemon()  # adopts the engine
        again = d.ctl("tune", "--resume", "--json", timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        res = json.loads(again.stdout)
        st = d.status()
    assert res["decision"]["applied"]
    assert (st["profile"], st["mode"]) == (res["decision"]["profile"], res["decision"]["mode"])
    assert res["decision"]["profile"] == "ring-ll-8ch"  # the cost model's faster of the two


def test_preflight_and_rehearse_run_inside_tune_on_cpu_ranks(tmp_path: Path) -> None:
    """The GPU stages' wiring, on the hidden gloo backend (two CPU ranks, as `preflight
    --backend gloo` and `rehearse --backend gloo` test theirs): preflight keeps the
    profiles, rehearse ranks them and the trial is set beside the rehearsal."""
    pytest.importorskip("torch")
    model = REPO / "examples" / "model-configs" / "tiny-dense.json"
    with DaemonHarness(tmp_path, tp_size=2, sim_load_seconds=0.5, config=CONFIG) as d:
        proc = d.ctl("tune", "--backend", "gloo", "--model-config", str(model), "--profiles",
                     "nccl-default,ring-ll", "--finalists", "1", "--accept-length", "2.0",
                     "--json", "--output", str(tmp_path / "out"), *MEASURE,
                     timeout=900)  # fmt: skip
        journal = _journal(d)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stages = {s["name"]: s for s in json.loads(proc.stdout)["stages"]}
    assert stages["preflight"]["status"] == "done" and stages["rehearse"]["status"] == "done"
    assert "gloo" in stages["derive_tuner"]["reason"]
    done = {r["name"]: r["data"] for r in journal if r.get("event") == "stage_finished"}
    assert {r["profile"] for r in done["preflight"]["table"]} == {"nccl-default", "ring-ll"}
    verdicts = {r["profile"]: r["verdict"] for r in done["preflight"]["table"]}
    assert sorted(done["preflight"]["survivors"]) == ["nccl-default", "ring-ll"], verdicts
    assert all("speed not compared" in v for v in verdicts.values()), verdicts
    assert sorted(done["rehearse"]["ranked"]) == ["nccl-default", "ring-ll"], done["rehearse"]
    # tiny-dense: 3 layers at TP 2 -> 2 x 3 + 1 all-reduces per verify in the rehearsal
    assert all(r["allreduce_per_verify"] == 7 for r in done["rehearse"]["table"])
    assert done["trial"]["compared_with_rehearsal"] is True
    # the sim's 122 per step against the tiny model's 7: named as a disagreement
    assert any("all-reduces per step" in x for x in done["trial"]["disagreements"])
    assert (tmp_path / "out" / "preflight.json").exists()
    assert (tmp_path / "out" / "rehearse.json").exists()


def test_ctrl_c_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with DaemonHarness(tmp_path, tp_size=TP, sim_load_seconds=1.0, config=CONFIG) as d:
        proc = _popen_tune(d, "--profiles", "nccl-default,ring-ll-8ch", "--finalists", "1",
                           "--accept-length", "2.0", "--output", str(out), *MEASURE)  # fmt: skip
        results = out / "trial" / "results.jsonl"
        try:
            d.wait_for(lambda: results.exists() and '"measurement"' in results.read_text(),
                       timeout=600, what="the tune's trial to measure once")  # fmt: skip
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 130, err[-2000:]
        assert "fastverifyctl tune --resume" in err
        again = d.ctl("tune", "--resume", "--json", timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        res = json.loads(again.stdout)
    assert res["decision"]["profile"] == "ring-ll-8ch" and res["decision"]["applied"]
    assert [s["status"] for s in res["stages"]].count("failed") == 0
