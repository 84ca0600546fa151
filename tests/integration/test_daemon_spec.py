"""Speculation through fastverifyd on the sim: bench records the accept curve (real weights
only), `spec plan` refuses without one and plans with one, `mode set adaptive` serves the
plan with SGLang's flags, and an adaptive start SGLang disables fails and rolls back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from fastverify.sglang import adaptive
from tests.support.harness import DaemonHarness

REPO = Path(__file__).resolve().parents[2]


def _config(*extra: str) -> dict:
    return {"server": {"mode": "eagle3", "extra_args": ["--sim-accept-length", "3.2", *extra]}}


def test_acceptance_plan_and_adaptive_mode(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir(parents=True, exist_ok=True)
    with DaemonHarness(tmp_path, config=_config(), tp_size=2) as d:
        # no acceptance yet: the plan refuses, naming the command that records one
        r = d.ctl("spec", "plan")
        assert r.returncode == 1 and "fastverifyctl" in r.stderr and "bench" in r.stderr, r.stderr
        # no plan yet: adaptive is refused before anything running is touched
        pid = d.status()["engine"]["pid"]
        r = d.ctl("mode", "set", "adaptive")
        assert r.returncode != 0 and "spec plan" in (r.stdout + r.stderr)
        assert d.status()["engine"]["pid"] == pid

        # a trial bench (dummy weights) is labelled and never used; while the trial holds
        # the engine, the plan refuses: its costs are not the profile's serving costs
        r = d.ctl("bench", "--load-format", "dummy", "-n", "4", "-c", "2", "--output-len", "40",
                  "--warmup", "0")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "not usable: dummy weights" in r.stderr
        r = d.ctl("spec", "plan")
        assert r.returncode == 4 and "trial on dummy weights" in r.stderr, r.stderr

        # real weights: random token ids are synthetic; the shipped prompt set is not
        r = d.ctl("profile", "set", d.status()["profile"], "--mode", "eagle3", "--restart")
        assert r.returncode == 0, r.stderr
        r = d.ctl("bench", "-n", "8", "-c", "4", "--output-len", "60", "--warmup", "0")
        assert r.returncode == 0 and "synthetic prompts" in r.stderr, r.stderr
        r = d.ctl("spec", "plan")
        assert r.returncode == 1 and "only synthetic acceptance" in r.stderr, r.stderr
        assert "--allow-synthetic" in r.stderr
        assert d.ctl("spec", "plan", "--allow-synthetic", "--max-batch", "4",
                     "--concurrency", "1").returncode == 0  # fmt: skip
        r = d.ctl("bench", "-n", "16", "-c", "4", "--output-len", "100", "--warmup", "0",
                  "--dataset", "fastverify-docs", "--temperature", "0.7")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "acceptance recorded" in r.stderr and "synthetic" not in r.stderr
        curves = d.client.get("/v1/acceptance")["curves"]
        real = [c for c in curves.values() if c["usable"] and not c["synthetic"]]
        assert len(real) == 1 and len(curves) == 3  # every bench kept, none overwritten
        rec = real[0]
        assert (rec["steps"], rec["topk"], rec["weights"]) == (3, 1, "real")
        assert rec["dataset"]["name"] == "fastverify-docs" and rec["dataset"]["prompts"] == 48
        assert rec["sampling"] == {"temperature": 0.7, "top_p": 1.0}
        assert len(rec["requests"]) == 16 and rec["model"] and rec["drafter"]

        # a lower acceptance close to the recorded one: batch 1 surely drafts (the one tier
        # the status checks below serve)
        lower = ("--lower-accept-length", "3.0")
        r = d.ctl("spec", "plan", "--max-batch", "16", "--concurrency", "1,4", *lower, "--json")
        assert r.returncode == 0, r.stderr
        plan = json.loads(r.stdout)
        assert plan["acceptance"]["dataset"]["name"] == "fastverify-docs"
        assert plan["for"]["profile"] == d.status()["profile"]
        assert plan["for"]["costs_from"].startswith("engine ")
        assert abs(plan["accept_curve"]["3"] - 3.2) < 0.15
        cfg_path = Path(plan["adaptive_config"])
        assert cfg_path.parent == d.state_dir
        cfg = adaptive.load_config(cfg_path)
        assert cfg == plan["adaptive_config_json"] and set(cfg) == set(plan["tiers"])
        assert plan["drafts"] and plan["tiers"]["1"]["steps"] > 0
        for c, pred in plan["predictions"].items():
            lo, hi = pred["adaptive_ci"]
            assert lo <= pred["adaptive"]["tokens_per_second"] <= hi, c
            assert pred["adaptive"]["ttft_ms"]["p50"] > 0
        assert plan["memory"]["fits"] and plan["memory"]["draft_weights_gb"] == 1.1
        # (a small plan: the refusal is of the output path, whatever was planned)
        bad = d.ctl("spec", "plan", "--max-batch", "4", "--concurrency", "1", "--output",
                    "/proc/nope/cfg.json")  # fmt: skip
        assert bad.returncode == 1 and "--output /proc/nope/cfg.json: cannot write" in bad.stderr
        human = d.ctl("spec", "plan", "--max-batch", "8", "--concurrency", "1")
        assert human.returncode == 0 and "speculation plan" in human.stdout
        assert "end to end" in human.stdout
        # a tier that never drafts says so beside its figure (an adaptive server's 0-step
        # cycle against a baseline server's step), never as if drafting paid
        never = [x for x in human.stdout.splitlines() if "\t[0]\t" in x]
        assert never and all(" (no drafting)\t" in x for x in never), human.stdout
        assert f"fastverifyctl --socket {d.socket} mode set adaptive" in human.stdout
        # the same acceptance with the H200 grid's costs (one GPU, TP 8 shard) as the source
        grid = REPO / "benchmarks/results/rehearse-grid-kimi-k2.5-shard-of-tp8-h200-drafter.json"
        r = d.ctl("spec", "plan", "--costs", str(grid), "--allreduce-backend", "pcie_ipc",
                  "--concurrency", "1", "--json")  # fmt: skip
        assert r.returncode == 0, r.stderr
        on_gpu = json.loads(r.stdout)
        assert on_gpu["costs"]["source"].startswith("rehearse-grid ")
        assert "pcie_ipc" in on_gpu["costs"]["source"]
        assert on_gpu["unpriced_batch_sizes"] == []  # the grid says nothing of its captures
        r = d.ctl("spec", "plan", "--costs", str(grid), "--allreduce-backend", "nope")
        assert r.returncode == 1 and "the grid has: nccl, pcie_ipc" in r.stderr
        # the plan mode adaptive serves is the last one stored: store the engine's again
        r = d.ctl("spec", "plan", "--max-batch", "16", "--concurrency", "1", *lower)
        assert r.returncode == 0, r.stderr

        r = d.ctl("mode", "set", "adaptive")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert st["mode"] == "adaptive"
        argv = d.client.get("/v1/server/argv")["argv"]
        assert adaptive.FLAG_ADAPTIVE in argv and str(cfg_path) in argv
        # per-request metrics into the state dir: what live acceptance is read from
        i = argv.index("--export-metrics-to-file-dir")
        assert "--export-metrics-to-file" in argv and argv[i + 1] == str(
            d.state_dir / "request-metrics")  # fmt: skip
        i = argv.index("--speculative-num-steps")
        assert int(argv[i + 1]) == max(adaptive.candidate_steps(cfg))
        rec = d.client.get("/v1/history")[-1]
        assert (rec["mode"], rec["result"]) == ("adaptive", "ok")
        assert rec["speculation"]["candidates"]["1"] == cfg["1"]["candidate_steps"]

        # status and /metrics: the active steps, the time at each, live acceptance from the
        # finished requests' histograms, and the plan-stale verdict
        r = d.ctl("bench", "-n", "12", "-c", "1", "--output-len", "60", "--warmup", "0")
        assert r.returncode == 0, r.stderr
        assert "not usable: an adaptive server" in r.stderr  # mixed step counts: never used

        def spec_status() -> dict | None:
            sp = d.status().get("speculation") or {}
            return sp if sp.get("live_acceptance") and sp["seconds_at_steps"] else None

        # the steps SGLang may move between (a health check beside the bench is a batch of 2)
        allowed = {str(n) for n in adaptive.candidate_steps(cfg)}
        sp = d.wait_for(spec_status, 30, "live acceptance in status")
        assert str(sp["active_steps"]) in allowed and set(sp["seconds_at_steps"]) <= allowed
        assert set(sp["live_acceptance"]) <= allowed and sp["plan_stale"] is False
        assert "draft steps:" in d.ctl("status").stdout
        text = httpx.get(d.metrics_url).text
        steps = "[" + "".join(sorted(allowed)) + "]"
        assert re.search(
            r'fastverify_spec_active_steps\{[^}]*mode="adaptive"[^}]*\} ' + steps, text
        )
        assert re.search(r'fastverify_spec_steps_seconds_total\{[^}]*steps="' + steps + '"', text)
        assert re.search(r'fastverify_spec_plan_stale\{[^}]*mode="adaptive"[^}]*\} 0', text)
        assert re.search(r'fastverify_spec_live_accept_length\{[^}]*k="1"', text)
        assert "fastverify_spec_recorded_accept_length{" in text
        # the files SGLang wrote hold prompts: the state dir keeps them private
        assert (d.state_dir / "request-metrics").stat().st_mode & 0o777 == 0o700
        # spec validate serves the stored plan and compares, per phase
        r = d.ctl("spec", "validate", "-d", "8", "--json")
        assert r.returncode in (0, 1), r.stderr
        # its warm-up and window say so as they start: no silent wait
        assert "spec validate: warm-up" in r.stderr and "spec validate: measuring" in r.stderr
        (row,) = json.loads(r.stdout)["rows"]
        assert 0.75 < row["tokens_per_second"]["ratio"] < 1.3, row
        assert row["prefill_ttft_p50_s"]["predicted"] > 0 and row["decode_itl_mean_s"]["served"]
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


def test_validate_says_a_never_drafting_plan_is_what_baseline_serves(tmp_path: Path) -> None:
    """A stored plan that drafts at no batch size cannot be served as mode adaptive (`mode set
    adaptive` refuses it): `spec validate` says so instead of sending the user there."""
    with DaemonHarness(tmp_path, config=_config(), tp_size=2) as d:
        plan = {"drafts": False, "accept_requests": [[3, 1, 0, 0]], "tiers": {}}
        d.client.store_spec_plan(plan, {"1": {"candidate_steps": [0]}})
        before = d.status()
        r = d.ctl("spec", "validate", "-d", "2", "--json")
        assert r.returncode == 1, r.stdout + r.stderr
        answer = json.loads(r.stdout)
        assert answer["reason"] == "never_drafts", answer
        assert "mode baseline" in answer["error"]
        assert d.status()["engine"]["pid"] == before["engine"]["pid"]
