"""Speculation through fastverifyd on the sim: bench records the accept curve (real weights
only), `spec plan` refuses without one and plans with one, `mode set adaptive` serves the
plan with SGLang's flags, and an adaptive start SGLang disables fails and rolls back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from fastverify.sglang import adaptive
from tests.harness import DaemonHarness

REPO = Path(__file__).resolve().parents[2]


def _config(*extra: str) -> dict:
    return {"server": {"mode": "eagle3", "extra_args": ["--sim-accept-length", "3.2", *extra]}}


def test_acceptance_plan_and_adaptive_mode(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir(parents=True, exist_ok=True)
    with DaemonHarness(tmp_path, config=_config(), tp_size=2) as d:
        # no acceptance yet: the plan refuses, naming the command that records one
        r = d.ctl("spec", "plan")
        assert r.returncode == 1 and "fastverifyctl bench" in r.stderr, r.stderr
        # no plan yet: adaptive is refused before anything running is touched
        pid = d.status()["engine"]["pid"]
        r = d.ctl("mode", "set", "adaptive")
        assert r.returncode != 0 and "spec plan" in (r.stdout + r.stderr)
        assert d.status()["engine"]["pid"] == pid

        # a trial bench (dummy weights) is labelled and never used
        r = d.ctl("bench", "--load-format", "dummy", "-n", "4", "-c", "2", "--output-len", "40",
                  "--warmup", "0")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "not usable: dummy weights" in r.stderr
        assert d.ctl("spec", "plan").returncode == 1

        # real weights: the curve is recorded per profile/mode/steps
        r = d.ctl("profile", "set", d.status()["profile"], "--mode", "eagle3", "--restart")
        assert r.returncode == 0, r.stderr
        assert not d.status().get("trial")
        r = d.ctl("bench", "-n", "8", "-c", "4", "--output-len", "120", "--warmup", "0")
        assert r.returncode == 0, r.stderr
        assert "acceptance recorded" in r.stderr and "real weights" in r.stderr
        curves = d.client.get("/v1/acceptance")["curves"]
        real = [c for c in curves.values() if c["usable"]]
        assert len(real) == 1 and real[0]["steps"] == 3 and real[0]["weights"] == "real"

        r = d.ctl("spec", "plan", "--json")
        assert r.returncode == 0, r.stderr
        plan = json.loads(r.stdout)
        assert set(plan["tiers"]) == {"1", "2", "4", "8", "16", "32", "64"}
        assert abs(plan["accept_curve"]["3"] - 3.2) < 0.05
        cfg_path = Path(plan["adaptive_config"])
        assert cfg_path.parent == d.state_dir
        cfg = adaptive.load_config(cfg_path)
        assert {str(b) for b in adaptive.tiers(cfg)} == set(plan["tiers"])
        for bs, tier in plan["tiers"].items():
            assert max(cfg[bs]["candidate_steps"]) == tier["steps"]
            assert tier["ci"][0] <= tier["speedup"] <= tier["ci"][1]
        bad = d.ctl("spec", "plan", "--output", "/proc/nope/cfg.json")
        assert bad.returncode == 1 and "--output /proc/nope/cfg.json: cannot write" in bad.stderr
        assert d.ctl("spec", "plan", "--batch-sizes", "0,4").returncode == 2
        out = tmp_path / "adaptive.json"
        assert d.ctl("spec", "plan", "--output", str(out)).returncode == 0
        assert adaptive.load_config(out) == cfg
        human = d.ctl("spec", "plan")
        assert human.returncode == 0 and "speculation plan" in human.stdout
        # the same acceptance with the H200 grid's costs (one GPU, TP 8 shard) as the source
        grid = REPO / "benchmarks/results/rehearse-grid-kimi-k2.5-shard-of-tp8-h200-drafter.json"
        r = d.ctl("spec", "plan", "--costs", str(grid), "--allreduce-backend", "pcie_ipc",
                  "--json")  # fmt: skip
        assert r.returncode == 0, r.stderr
        on_gpu = json.loads(r.stdout)
        assert on_gpu["costs"]["source"].startswith("rehearse-grid ")
        assert "pcie_ipc" in on_gpu["costs"]["source"]
        assert "drafter measured (kimi-k2.5-eagle3" in on_gpu["costs"]["source"]
        r = d.ctl("spec", "plan", "--costs", str(grid), "--allreduce-backend", "nope")
        assert r.returncode == 1 and "the grid has: nccl, pcie_ipc" in r.stderr
        # the plan mode adaptive serves is the last one stored: store the engine's again
        assert d.ctl("spec", "plan").returncode == 0

        assert plan["launch_steps"] == 3  # at 3.2 of 4 tokens, 3 steps pay at batch 1
        r = d.ctl("mode", "set", "adaptive")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert st["mode"] == "adaptive"
        argv = d.client.get("/v1/server/argv")["argv"]
        assert adaptive.FLAG_ADAPTIVE in argv and str(cfg_path) in argv
        i = argv.index("--speculative-num-steps")
        assert int(argv[i + 1]) == plan["launch_steps"]
        rec = d.client.get("/v1/history")[-1]
        assert (rec["mode"], rec["result"]) == ("adaptive", "ok")
        assert rec["speculation"]["launch_steps"] == plan["launch_steps"]
        assert rec["speculation"]["candidates"]["1"] == cfg["1"]["candidate_steps"]

        # status and /metrics: the active steps and the time at each, the recorded curve
        r = d.ctl("bench", "-n", "4", "-c", "1", "--output-len", "60", "--warmup", "0")
        assert r.returncode == 0, r.stderr
        assert "not usable: an adaptive server" in r.stderr  # mixed step counts: never used

        def spec_status() -> dict | None:
            sp = d.status().get("speculation") or {}
            return sp if sp.get("active_steps") is not None and sp["seconds_at_steps"] else None

        # the steps SGLang may move between at batch 1: the plan's tier-1 candidates
        allowed = {str(n) for n in cfg["1"]["candidate_steps"]}
        sp = d.wait_for(spec_status, 30, "the active draft steps in status")
        assert str(sp["active_steps"]) in allowed and set(sp["seconds_at_steps"]) <= allowed
        assert "draft steps:" in d.ctl("status").stdout
        text = httpx.get(d.metrics_url).text
        steps = "[" + "".join(sorted(allowed)) + "]"
        assert re.search(
            r'fastverify_spec_active_steps\{[^}]*mode="adaptive"[^}]*\} ' + steps, text
        )
        assert re.search(r'fastverify_spec_steps_seconds_total\{[^}]*steps="' + steps + '"', text)
        real = re.findall(  # labels in name order: drafts, mode, profile, steps, usable, weights
            r'fastverify_spec_accepted_drafts_ratio\{drafts="\d",mode="eagle3",profile="[^"]*",'
            r'steps="3",usable="true",weights="real"\} (\S+)', text)  # fmt: skip
        assert len(real) == 4 and abs(sum(map(float, real)) - 1) < 1e-6
        assert "fastverify_spec_recorded_accept_length{" in text
        # profile set --mode adaptive serves the same plan on another profile
        r = d.ctl("profile", "set", "ring-simple", "--mode", "adaptive")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert (st["profile"], st["mode"]) == ("ring-simple", "adaptive")
        assert str(cfg_path) in d.client.get("/v1/server/argv")["argv"]


def test_adaptive_disabled_by_sglang_fails_and_rolls_back(tmp_path: Path) -> None:
    # topk 4 from extra_args (SGLang takes the last value): SGLang serves without adaptive
    cfg = _config("--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8")
    plan = {"1": {"candidate_steps": [0, 3]}}
    with DaemonHarness(tmp_path, config=cfg, tp_size=2) as d:
        (d.state_dir / "adaptive-config.json").write_text(json.dumps(plan))
        before = d.status()
        r = d.ctl("mode", "set", "adaptive")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "adaptive_disabled" in r.stderr and "only topk=1 is supported" in r.stderr
        st = d.status()
        assert (st["state"], st["mode"]) == ("READY", before["mode"])
        assert st["last_failure"]["reason"] == "adaptive_disabled"
        rec = d.client.get("/v1/history")[-1]
        assert rec["result"] == "rolled_back" and rec["reason"] == "adaptive_disabled"
