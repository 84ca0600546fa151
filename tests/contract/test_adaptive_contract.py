"""Adaptive speculative decoding facts (fastverify.sglang.adaptive, .adaptive_slot) and the
configs `spec plan` writes, against SGLang 0.5.23's own code (tests/contract/adaptive_probe.py
runs `AdaptiveSpeculativeParams`, `_load_adaptive_config` and `adaptive_unsupported_reason`
from the wheel). One probe run answers the whole module.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fastverify.engines.sim import costmodel
from fastverify.engines.sim.costtable import engine_costs as sim_costs
from fastverify.sglang import adaptive, eagle, metrics
from fastverify.sglang.adaptive_slot import AdaptiveController
from fastverify.speculation import plan as spec_plan
from fastverify.speculation.curve import AcceptCurve, chain_histogram

HERE = Path(__file__).resolve().parent
N_SEQUENCES = 1000


def random_run(rng: random.Random) -> dict[str, Any]:
    """A random config (1-4 tiers, candidates with and without 0, random hysteresis, EMA
    and ceiling settings, sometimes CUDA-graph padding) and 60-400 verify passes whose
    accepted drafts drift, so that the controller moves up and down."""
    cfg: dict[str, Any] = {}
    if rng.random() < 0.3:
        cfg["ema_alpha"] = rng.choice([0.1, 0.2, 0.5])
        cfg["update_interval"] = rng.choice([1, 3, 5])
        cfg["warmup_batches"] = rng.choice([0, 2, 10])
    for key in rng.sample([1, 2, 4, 8, 16, 32, 64], rng.randint(1, 4)):
        entry: dict[str, Any] = {
            "candidate_steps": sorted(rng.sample(range(0, 8), rng.randint(1, 4)))
        }
        if rng.random() < 0.7:
            entry["up_hysteresis"] = rng.choice([0.0, 0.25, -0.25, 0.6])
            entry["down_hysteresis"] = rng.choice([0.0, -0.25, 0.3, 1.1])
        if rng.random() < 0.3:
            entry["ceiling_coeff"] = rng.choice([0.5, 1.0, 1.5])
        cfg[str(key)] = entry
    graph_bs = [1, 2, 4, 8, 16, 24, 32] if rng.random() < 0.4 else None
    feed = []
    level = rng.uniform(0, 5)
    for _ in range(rng.randint(60, 400)):
        if rng.random() < 0.05:
            level = rng.uniform(0, 6)
        bs = rng.choice([1, 1, 2, 3, 5, 8, 12, 20, 33, 40, 64, 100])
        drafts = [max(0, min(7, round(rng.gauss(level, 1.0)))) for _ in range(min(bs, 6))]
        feed.append([bs, drafts])
    return {"initial": rng.choice([0, 1, 3, 5, 7]), "config": cfg, "cuda_graph_bs": graph_bs,
            "feed": feed}  # fmt: skip


def ours(run: dict[str, Any]) -> list[int]:
    ctl = AdaptiveController(run["initial"], run["config"], run["cuda_graph_bs"])
    seq = []
    for bs, drafts in run["feed"]:
        ctl.observe(drafts, bs)
        seq.append(ctl.steps_for(bs))
    return seq


def plans(tmp: Path) -> list[Path]:
    """Configs `spec plan` writes over acceptances from hopeless to near-perfect, two
    profiles, TP 8 and TP 2, one bad tier list."""
    paths = []
    for i, (L, profile, tp) in enumerate(
        [(1.3, "ring-ll", 8), (2.0, "ring-ll", 8), (2.8, "ring-ll", 8), (3.6, "ring-ll", 8),
         (2.5, "nccl-default", 2), (3.9, "ring-simple", 8)]
    ):  # fmt: skip
        curve = AcceptCurve.from_histogram(chain_histogram(L, 3, verifies=2000))
        costs = sim_costs(
            {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"} if "ll" in profile else {},
            tp_size=tp,
            batch_sizes=[1, 2, 4, 8, 16, 32, 64],
            max_steps=7,
        )
        p = spec_plan.make_plan(curve, costs)
        path = tmp / f"plan{i}.json"
        spec_plan.write_adaptive_config(p, path)
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def probe(sglang_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    rng = random.Random(29)
    runs = [random_run(rng) for _ in range(N_SEQUENCES)]
    tmp = tmp_path_factory.mktemp("adaptive")
    written = plans(tmp)
    bad = tmp / "bad.json"
    bad.write_text(json.dumps({"1": {"candidate_steps": [1, -2]}}))
    no_tier = tmp / "no-tier.json"
    no_tier.write_text(json.dumps({"ema_alpha": 0.2}))
    reasons = [{}, {"speculative_eagle_topk": 4}, {"speculative_algorithm": "NGRAM"},
               {"attn_dp_size": 2}, {"enable_multi_layer_eagle": True},
               {"enable_two_batch_overlap": True}, {"enable_pdmux": True}]  # fmt: skip
    request = {
        "runs": runs,
        "configs": [str(p) for p in [*written, bad, no_tier]],
        "reasons": reasons,
        "draft_forwards": list(range(1, 8)),
    }
    proc = subprocess.run(
        [str(sglang_python), str(HERE / "adaptive_probe.py")],
        input=json.dumps(request), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"adaptive probe failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["request"] = request
    out["written"] = written
    return out


def test_controller_gives_sglangs_step_sequences_on_1000_random_runs(probe: dict) -> None:
    runs = probe["request"]["runs"]
    assert len(probe["runs"]) == N_SEQUENCES
    moves = 0
    for i, (run, theirs) in enumerate(zip(runs, probe["runs"], strict=True)):
        mine = ours(run)
        assert mine == theirs, f"run {i} differs first at pass {_first_diff(mine, theirs)}"
        moves += sum(a != b for a, b in itertools.pairwise(theirs))
    # the sequences exercise the controller: thousands of step changes, through 0 and up
    assert moves > 2000
    assert any(0 in seq and max(seq) >= 3 for seq in probe["runs"])


def _first_diff(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))


def test_default_config_and_slot_defaults_are_sglangs(probe: dict) -> None:
    assert probe["default_config"] == adaptive.DEFAULT_ADAPTIVE_CONFIG
    assert probe["slot_defaults"] == adaptive.SLOT_DEFAULTS


def test_every_config_the_plan_writes_loads_in_sglang(probe: dict) -> None:
    results = probe["configs"]
    for path, res in zip(probe["written"], results, strict=False):
        assert res["ok"], f"{path}: {res.get('error')}"
        cfg = json.loads(path.read_text())
        assert res["candidates"] == adaptive.candidate_steps(cfg)
    bad, no_tier = results[-2], results[-1]
    assert not bad["ok"] and "candidate_steps" in bad["error"]
    assert not no_tier["ok"] and "at least one" in no_tier["error"]
    # fastverify refuses the same two files before SGLang would
    for path in probe["request"]["configs"][-2:]:
        with pytest.raises(adaptive.AdaptiveConfigError):
            adaptive.load_config(path)


def test_unsupported_reasons_are_sglangs(probe: dict) -> None:
    cases = probe["request"]["reasons"]
    for fields, theirs in zip(cases, probe["reasons"], strict=True):
        mine = adaptive.unsupported_reason(
            fields.get("speculative_algorithm", "EAGLE3"),
            fields.get("speculative_eagle_topk", 1),
            attention_dp=fields.get("attn_dp_size", 1) > 1,
            multi_layer_eagle=fields.get("enable_multi_layer_eagle", False),
            two_batch_overlap=fields.get("enable_two_batch_overlap", False),
            pdmux=fields.get("enable_pdmux", False),
        )
        assert mine == theirs, fields
    assert probe["reasons"][0] is None


def test_histogram_key_and_step_gauges_are_sglangs(probe: dict) -> None:
    """A finished request's meta_info carries the histogram under fastverify's key (and the
    verify count); the collector declares the two step gauges as gauges."""
    src = probe["meta_info_source"]
    assert f'meta_info["{adaptive.HISTOGRAM_KEY}"]' in src
    assert f'meta_info["{adaptive.VERIFY_CT_KEY}"]' in src
    collector = probe["collector_source"]
    for name in (metrics.SPEC_NUM_STEPS, metrics.SPEC_NUM_DRAFT_TOKENS):
        m = re.search(r"= (\w+)\(\s*name=\"" + re.escape(name) + '"', collector)
        assert m is not None and m.group(1) == "Gauge", name
        assert name in metrics.SCHEDULER_GAUGES


def test_log_lines_are_the_ones_sglang_formats(probe: dict) -> None:
    src = probe["disable_source"]
    assert 'f"speculative_adaptive disabled: {reason}. "' in src
    assert '"Falling back to static speculative params."' in src
    line = adaptive.format_disabled("speculative_eagle_topk=4 (only topk=1 is supported)")
    assert adaptive.parse_disabled(f"[2026-12-01 12:00:00] {line}") == (
        "speculative_eagle_topk=4 (only topk=1 is supported)"
    )
    upd = probe["updated_source"]
    assert 'f"Adaptive spec params updated: steps {old_steps} -> {target} "' in upd
    assert 'f"(ema_accept_len={self.ema_accept_len:.2f})"' in upd
    change = adaptive.parse_updated(adaptive.format_updated(3, 1, 0.42))
    assert change is not None and (change.old, change.new, change.ema) == (3, 1, 0.42)
    # the launch steps must be a candidate; SGLang then derives num_draft_tokens itself
    init = probe["init_source"]
    assert "is not in the adaptive config candidate_steps" in init
    assert "speculative_num_draft_tokens=cfg.speculative_num_steps + 1" in init


def test_sim_runs_as_many_draft_forwards_per_cycle_as_sglang(probe: dict) -> None:
    """SGLang's draft_forward runs num_steps - 1 drafter forwards (the first draft token is the
    previous draft extend's); the sim's cost model and traces charge the same count."""
    counted = {int(k): v for k, v in probe["draft_forwards"].items()}
    assert sorted(counted) == list(range(1, 8))
    for steps, n in counted.items():
        assert eagle.draft_forwards_per_cycle(steps) == n, steps
        pred = costmodel.predict({}, "eagle3", 8, 1, True, 1.0, num_steps=steps, topk=1,
                                 num_draft_tokens=steps + 1)  # fmt: skip
        drafts = [f for name, f in pred.forwards if "DRAFT" in name]
        assert len(drafts) == n + 1  # + the draft extend after the verify
