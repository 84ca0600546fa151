"""`fastverifyctl tune` at TP 1 on the sim: one GPU has no all-reduce, so profiles that differ
only in NCCL's variables (and the all-reduce backend) cannot differ. Tune measures one of
them, says which it stood for in its output, its report and its decision, and never ranks
them against each other; a profile that changes the one-GPU server (CUDA graphs off) is
still measured beside it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.harness import DaemonHarness
from tests.support.tune import CONFIG, MEASURE

NCCL_ONLY = ("ring-ll", "ring-simple", "pcie-ipc")  # NCCL variables / all-reduce backend only


def test_tune_at_tp1_does_not_rank_profiles_that_cannot_differ(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, tp_size=1, sim_load_seconds=0.5, config=CONFIG) as d:
        out = tmp_path / "tune-out"
        names = ",".join((*NCCL_ONLY, "tree-ll-eager"))
        proc = d.ctl("tune", "--accept-length", "2.0", "--json", *MEASURE, "--profiles", names,
                     "--output", str(out), timeout=900)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        res = json.loads(proc.stdout)
        report = (out / "report.md").read_text()
        decision = d.client.get("/v1/decision")
        history = d.client.get("/v1/history")
    said = "TP 1: one GPU has no all-reduce, so NCCL profiles (and all-reduce backends) cannot "
    assert said in proc.stderr and said in report and said in res["decision"]["why"]
    assert said in decision["why"]
    kept = NCCL_ONLY[0]  # the first named: the harness serves none of them
    stood = f"{kept} stood for {', '.join(NCCL_ONLY[1:])}"
    assert stood in res["decision"]["why"] and stood in report
    # the loads: only the profile that stood for the others and the eager one
    loaded = {h.get("profile") for h in history if h.get("kind") == "switch"}
    assert kept in loaded and not loaded & set(NCCL_ONLY[1:]), loaded
    # and the plan the trial started under counted those two, not the four named (two
    # baselines, two EAGLE-3 trials: finalists 2), as the trial then loaded them
    trial = next(s for s in res["stages"] if s["name"] == "trial")
    assert trial["planned_loads"]["dummy"] == 4, trial
    assert trial["loads"]["dummy"] == 4, trial
