"""`fastverifyctl tune`'s plan against its budget and its GPU stages' wiring, on the sim through
a real fastverifyd: a budget too small for the plan (one finalist, one trial, `--no-apply`
puts back what served before); preflight and rehearse inside tune on CPU ranks (the hidden
gloo backend)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.harness import REPO, DaemonHarness
from tests.support.tune import CONFIG, MEASURE, TP, read_journal


def test_a_small_budget_lowers_finalists_and_no_apply_restores(tmp_path: Path) -> None:
    names = "nccl-default,ring-ll,ring-ll-8ch,ring-simple"
    with DaemonHarness(tmp_path, tp_size=TP, sim_load_seconds=1.0, config=CONFIG) as d:
        before = d.status()
        proc = d.ctl("tune", "--profiles", names, "--finalists", "3", "--budget", "0.2",
                     "--no-apply", "--accept-length", "2.0", "--json", "--output",
                     str(tmp_path / "out"), *MEASURE, timeout=900)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        res = json.loads(proc.stdout)
        journal = read_journal(d)
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
        journal = read_journal(d)
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
    preflight = json.loads((tmp_path / "out" / "preflight.json").read_text())
    assert preflight["fingerprint"] == json.loads(proc.stdout)["fingerprint"]  # this host's
    assert (tmp_path / "out" / "rehearse.json").exists()
