"""Adaptive speculative decoding facts (fastverify.sglang.adaptive, .adaptive_slot, .eagle) and
the configs `spec plan` writes, against SGLang 0.5.23's own code (tests/contract/adaptive_probe.py
runs `AdaptiveSpeculativeParams`, `_load_adaptive_config` and `adaptive_unsupported_reason`
from the wheel, and reads the sources named below). One probe run answers the whole module.
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

from fastverify.sglang import adaptive, eagle, metrics
from fastverify.sglang.adaptive_slot import AdaptiveController
from fastverify.sim import costmodel
from fastverify.sim.request_meta import FILE_FORMAT
from fastverify.speculation import plan as spec_plan
from fastverify.speculation import replay
from tests.support import field
from tests.unit.speculation.synth import acceptance, sim_costs

# the module fixture runs a whole SGLang probe: the hang guard (not a
# performance bound) gives a loaded host room
pytestmark = pytest.mark.timeout(900)

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


# (recorded accept length at 3 steps, the lower one the plan must survive, profile env, TP)
PLANS = [
    (1.6, 1.3, field.RING_LL, 8), (2.5, 2.0, field.RING_LL, 8), (3.0, 2.0, field.RING_LL, 8),
    (3.6, 2.6, field.RING_LL, 8), (3.0, 2.2, {}, 2), (3.9, 3.0, {"NCCL_PROTO": "Simple"}, 8),
]  # fmt: skip


def plans(tmp: Path) -> list[tuple[Path, spec_plan.Plan]]:
    """Configs `spec plan` writes over acceptances from hopeless to near-perfect, three
    profiles, TP 8 and TP 2 (up to 32 requests: the batch sizes keep the probe short)."""
    out = []
    for i, (length, lower, env, tp) in enumerate(PLANS):
        acc = acceptance(length, requests=48, seed=i)
        p = spec_plan.make_plan(acc, sim_costs(dict(env), tp), max_batch=32, concurrencies=(),
                                f_low=acc.factor_for(lower))  # fmt: skip
        path = tmp / f"plan{i}.json"
        spec_plan.write_adaptive_config(p, path)
        out.append((path, p))
    return out


def closed_loops(tmp: Path, written: list[tuple[Path, spec_plan.Plan]]) -> list[dict[str, Any]]:
    """For every drafting tier of every plan, at its key batch size, at the recorded and at
    the lower acceptance: the plan's own replay (the draws each request made, the steps it
    chose, and the time shares the plan reports)."""
    runs = []
    for i, (_path, p) in enumerate(written):
        for t in p.tiers:
            if t.steps == 0:
                continue
            choice = t.choices[0]
            cfg = tmp / f"tier-{i}-{t.key}.json"
            cfg.write_text(json.dumps({"1": t.entry}))
            for f, seed, shares in ((1.0, 0, choice.shares), (p.f_low, 1, choice.shares_low)):
                trace: list[tuple[int, list[int]]] = []
                r = replay.replay({"1": t.entry}, t.key, p.costs, p.acceptance, f=f,
                                  output_len=p.workload.output_len, seed=seed,
                                  trace=trace)  # fmt: skip
                assert r.time_shares() == shares  # the plan's figures are this replay's
                runs.append({
                    "config": str(cfg), "initial": max(t.entry["candidate_steps"]),
                    "batch": t.key, "cuda_graph_bs": list(p.costs.cuda_graph_bs),
                    "draws": [d for _s, d in trace], "ours": [s for s, _d in trace],
                    "shares": shares, "costs": p.costs, "f": f,
                })  # fmt: skip
    return runs


@pytest.fixture(scope="module")
def probe(sglang_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    rng = random.Random(29)
    runs = [random_run(rng) for _ in range(N_SEQUENCES)]
    tmp = tmp_path_factory.mktemp("adaptive")
    written = plans(tmp)
    loops = closed_loops(tmp, written)
    bad = tmp / "bad.json"
    bad.write_text(json.dumps({"1": {"candidate_steps": [1, -2]}}))
    no_tier = tmp / "no-tier.json"
    no_tier.write_text(json.dumps({"ema_alpha": 0.2}))
    reasons = [{}, {"speculative_eagle_topk": 4}, {"speculative_algorithm": "NGRAM"},
               {"attn_dp_size": 2}, {"enable_multi_layer_eagle": True},
               {"enable_two_batch_overlap": True}, {"enable_pdmux": True}]  # fmt: skip
    request = {
        "runs": runs,
        "configs": [str(p) for p in [*(w for w, _ in written), bad, no_tier]],
        "reasons": reasons,
        "draft_forwards": list(range(1, 8)),
        "closed_loop": [
            {
                k: v
                for k, v in r.items()
                if k in ("config", "initial", "batch", "cuda_graph_bs", "draws")
            }
            for r in loops
        ],
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
    out["loops"] = loops
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
    for (path, _plan), res in zip(probe["written"], results, strict=False):
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


def test_sglangs_controller_on_the_plans_configs_runs_what_the_plan_predicts(probe: dict) -> None:
    """SGLang's own AdaptiveSpeculativeParams, choosing every pass's steps itself and fed the
    drafts each request accepts at those steps, runs the same steps as the plan's replay on
    every drafting tier of every plan, at the recorded and at the lower acceptance: the
    time-averaged steps the plan reports are SGLang's."""
    loops, theirs = probe["loops"], probe["closed_loop"]
    assert len(loops) == len(theirs) >= 8
    moved = lowered = 0
    for run, seq in zip(loops, theirs, strict=True):
        assert seq == run["ours"], f"{run['config']} at f={run['f']:.2f} differs at pass " \
            f"{_first_diff(seq, run['ours'])}"  # fmt: skip
        costs, key = run["costs"], run["batch"]
        row = costs.priced(key)
        at: dict[int, float] = {}
        for s in seq[replay.SETTLE :]:
            at[s] = at.get(s, 0.0) + costs.cycle(row, s)
        total = sum(at.values())
        assert {s: v / total for s, v in sorted(at.items())} == pytest.approx(run["shares"])
        moved += len(set(seq)) > 1
        lowered += run["f"] < 1 and min(seq[replay.SETTLE :]) < max(seq)
    assert moved >= 1 and lowered >= 1  # the sequences exercise the step-down


def test_steps_0_is_a_verify_at_one_draft_token_and_a_draft_extend(probe: dict) -> None:
    """eagle_worker_v2: at steps 0 a trivial verify input through the TARGET_VERIFY graph
    captured at draft_token_num=1, then the draft extend unless the skip variable is set
    (default off): what `fastverify.sglang.eagle` says and the sim's cost model charges."""
    fwd = probe["forward_source"]
    assert "elif self.speculative_num_steps == 0:" in fwd
    assert "self._build_trivial_verify_input(batch)" in fwd
    assert f"envs.{eagle.SKIP_ZERO_STEP_EXTEND_VAR}.get()" in fwd
    assert "_draft_extend_for_decode" in fwd and "_stub_skipped_draft_extend" in fwd
    assert "draft_token_num=1" in probe["trivial_verify_source"]
    assert probe["skip_extend_default"] is False and not eagle.skip_zero_step_extend({})
    assert eagle.skip_zero_step_extend({eagle.SKIP_ZERO_STEP_EXTEND_VAR: "1"})
    env = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    zero = costmodel.predict(env, "eagle3", 8, 4, True, 1.0, num_steps=0, num_draft_tokens=1)
    kinds = [name for name, _f in zero.forwards]
    assert kinds == ["step[VERIFY bs=4]", "step[DRAFT bs=4]"]
    skip = costmodel.predict(env, "eagle3", 8, 4, True, 1.0, num_steps=0, num_draft_tokens=1,
                             skip_draft_extend=True)  # fmt: skip
    assert [name for name, _f in skip.forwards] == ["step[VERIFY bs=4]"]


def test_the_decode_logs_accept_rate_divides_by_the_active_draft_tokens(probe: dict) -> None:
    """metrics_reporter reads num_draft_tokens from the spec config, which adaptive's
    apply_runtime_state overrides at every switch (in the scheduler process): the decode
    line's accept rate divides by the active step count at logging time, 0 at steps 0. The
    per-request meta_info rate (tokenizer process, never overridden) divides by the launch's;
    the sim does both (fastverify.sim.scheduler, .request_meta)."""
    src = probe["decode_log_source"]
    assert "draft_per_round = get_spec().speculative_num_draft_tokens - 1" in src
    assert "total_draft_tokens = self.spec_num_forward_ct * draft_per_round" in src
    apply = probe["apply_state_source"]
    assert "get_context().override(" in apply
    assert "speculative_num_draft_tokens=state.speculative_num_draft_tokens" in apply
    meta = probe["meta_info_source"]
    assert "get_spec().speculative_num_draft_tokens - 1" in meta


def test_the_request_metrics_file_is_the_one_the_sim_writes(probe: dict) -> None:
    src = probe["exporter_source"]
    name = FILE_FORMAT.replace("{hour}", "{hour_suffix}")
    assert f'log_filename = f"{name}"' in src
    assert 'hour_suffix = current_time.strftime("%Y%m%d_%H")' in src
    assert "json.dump(metrics_data, self._current_file_handler)" in src
    assert "HEALTH_CHECK_RID_PREFIX in obj.rid" in src
