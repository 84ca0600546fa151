"""The speculation plan: SGLang's `--speculative-adaptive-config` for this host's costs and
the user's workload, and what SGLang will do with it, predicted by running its controller.

1. Every batch size the costs price (the release's padded sizes up to the max running
   requests, eager beyond the graphs) gets the tier config whose time-averaged speedup over
   a baseline server, found by replaying SGLang's controller on the recorded per-request
   acceptance, is largest, among those that stay at or above `floor` x the baseline if
   acceptance falls to the stated lower one (`f_low`: each draft position kept with that
   probability; `design`). Drafting must beat never drafting by `min_gain`.
2. Tier keys go where the chosen config changes; sizes the costs do not price are named and
   left to the tier below them (never priced by a neighbour's row).
3. Memory (`memory`): the drafter's weights and the graphs of every candidate step count
   against what the server had left, and the requests the KV pool holds.
4. Per concurrency of the workload, the end-to-end prediction (`serving`): output tokens/s,
   TTFT and ITL of baseline, fixed EAGLE-3 at the recorded steps and adaptive with the
   config, at the recorded and at the lower acceptance, with prefill and decode time apart
   (where a gain comes from), and a 95% interval: the acceptance's cluster bootstrap
   (requests resampled whole) turned into tokens/s through the prediction's own slope, and
   the costs' run-to-run spread, in quadrature; `window_s` adds what a bench window of that
   length measures and its window-to-window spread.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.sglang import adaptive
from fastverify.speculation import design, serving
from fastverify.speculation.acceptance import Z95, Acceptance
from fastverify.speculation.costs import Costs

DEFAULT_MIN_GAIN = 0.02
DEFAULT_F_LOW = 0.65  # each draft position 35% less likely: the field's 3.0 -> 2.0 at 3 steps
DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)
WINDOW_SEEDS = 6


@dataclass
class Tier:
    key: int
    choices: list[design.Choice]

    @property
    def entry(self) -> dict[str, Any]:
        return self.choices[0].candidate.entry

    @property
    def steps(self) -> int:
        return max(self.entry["candidate_steps"])

    @property
    def sizes(self) -> list[int]:
        return [c.batch for c in self.choices]

    @property
    def below_floor(self) -> bool:
        return any(c.below_floor for c in self.choices)


@dataclass
class Plan:
    tiers: list[Tier]
    acceptance: Acceptance
    costs: Costs
    workload: serving.Workload
    f_low: float
    floor: float
    min_gain: float
    unpriced: list[int]
    predictions: dict[int, dict[str, Any]] = field(default_factory=dict)
    memory: dict[str, Any] | None = None  # speculation.memory.Memory.check of the config
    adaptive_config_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def drafts(self) -> bool:
        return any(t.steps > 0 for t in self.tiers)

    @property
    def launch_steps(self) -> int:
        return max(adaptive.candidate_steps(self.adaptive_config()))

    @property
    def lower_accept_length(self) -> float:
        return self.acceptance.length(self.acceptance.steps, self.f_low)

    def adaptive_config(self) -> dict[str, Any]:
        """SGLang's --speculative-adaptive-config: one entry per tier key."""
        return {str(t.key): dict(t.entry) for t in self.tiers}

    def break_even(self, bs: int, k: int) -> float:
        """The accept length at k steps at which batch `bs` matches a baseline server."""
        row = self.costs.priced(bs)
        assert row is not None
        return self.costs.cycle(row, k) / self.costs.decode(row)

    def skip_extend(self) -> dict[str, Any] | None:
        """Whether SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 helps: what it saves where the
        config never drafts, and what it costs the next step up (`fastverify.sglang.eagle`)."""
        from fastverify.sglang.eagle import SKIP_ZERO_STEP_EXTEND_VAR

        zero = [c.batch for t in self.tiers if t.steps == 0 for c in t.choices]
        priced = [b for b in zero if b in self.costs.zero_skip]
        if not self.drafts or not priced:
            return None
        saves = {b: 1 - self.costs.zero_skip[b] / self.costs.cycle(b, 0) for b in priced}
        lo, hi = min(saves.values()), max(saves.values())
        helps = hi >= 0.01
        return {
            "variable": SKIP_ZERO_STEP_EXTEND_VAR,
            "recommended": helps,
            "saves": {str(b): round(v, 4) for b, v in saves.items()},
            "from": self.costs.notes.get("zero_skip_from") or self.costs.source,
            "why": (
                f"{SKIP_ZERO_STEP_EXTEND_VAR}=1 (in the profile) saves {lo:.1%}-{hi:.1%} of every "
                f"steps-0 pass at batch {_span(zero)} (the draft extend over one token per "
                "request); what it costs: a request decoded through a skipped extend drafts "
                "its first pass after a step up from SGLang's zeroed stub (cold recovery), "
                "so when the batch shrinks into a drafting tier each such request's next "
                "pass accepts nothing" + ("" if helps else "; under 1% here: not worth it")
            ),
        }

    @property
    def why(self) -> str:
        pays = [t for t in self.tiers if t.steps > 0]
        K = self.acceptance.steps
        if not pays:
            return (
                f"speculation does not pay at any batch size here: at accept length "
                f"{self.acceptance.length(K):.2f} ({K} steps) no step count beats a baseline "
                f"server by {self.min_gain:.0%} while staying above {self.floor:.2f}x it if "
                f"acceptance falls to {self.lower_accept_length:.2f}; serve mode baseline "
                "(fastverifyctl mode set baseline)"
            )
        below = [t for t in self.tiers if t.below_floor]
        pays = [t for t in pays if not t.below_floor]
        spans = ", ".join(f"{_span(t.sizes)} ({t.entry['candidate_steps']})" for t in pays)
        rest = "; no drafting elsewhere" if len(pays) + len(below) < len(self.tiers) else ""
        head = f"speculation pays at batch size {spans}{rest}" if pays else (
            "speculation pays at no batch size")  # fmt: skip
        return head + "".join(f"; {self._below_text(t)}" for t in below)

    def _below_text(self, t: Tier) -> str:
        """A tier where no config keeps the floor: what it costs, and what to do."""
        under = [c for c in t.choices if c.below_floor]
        rows = [self.costs.priced(c.batch) or c.batch for c in under]
        zero = [self.costs.cycle(r, 0) / self.costs.decode(r) for r in rows]
        sp = [c.speedup for c in under]
        low = [c.speedup_low for c in under]
        return (
            f"at batch size {_span([c.batch for c in under])} no config keeps "
            f"{self.floor:.2f}x a baseline server (SGLang's steps-0 pass costs "
            f"{_range(min(zero), max(zero))}x a decode step there): "
            f"{t.entry['candidate_steps']} is the least bad, at "
            f"{_range(min(sp), max(sp))}x ({_range(min(low), max(low))}x if acceptance falls "
            f"to {self.lower_accept_length:.2f}); serve mode baseline where the load sits there"
        )

    def tier_dict(self, t: Tier) -> dict[str, Any]:
        K = self.acceptance.steps
        per = {}
        for c in t.choices:
            per[str(c.batch)] = {
                "speedup": round(c.speedup, 4),
                "speedup_if_lower": round(c.speedup_low, 4),
                "time_at_steps": {str(k): round(v, 3) for k, v in c.shares.items()},
                "time_at_steps_if_lower": {str(k): round(v, 3) for k, v in c.shares_low.items()},
                "best_fixed_steps": {
                    "steps": c.best_static[0],
                    "speedup": round(c.best_static[1], 4),
                },
                **({"below_floor": True} if c.below_floor else {}),
            }
        first = t.choices[0]
        ks = range(1, min(K, max(self.costs.steps(self.costs.priced(t.key) or t.key))) + 1)
        be = {str(k): round(self.break_even(t.key, k), 4) for k in ks}
        return {
            "batch_sizes": t.sizes,
            "config": t.entry,
            "steps": t.steps,
            "break_even_accept_length": be,
            "per_batch_size": per,
            "what_would_change": self._change(t, first),
        }

    def _change(self, t: Tier, c: design.Choice) -> str:
        K = self.acceptance.steps
        low = self.lower_accept_length
        span = _span(t.sizes)
        k_best, s_best = c.best_static
        if t.below_floor:
            return self._below_text(t)
        if t.steps == 0:
            if k_best == 0:
                return (f"no step count pays at batch {span}: at 1 step the accept length "
                        f"would need {self.break_even(t.key, 1):.2f} (measured "
                        f"{self.acceptance.length(1):.2f})")  # fmt: skip
            return (
                f"{_steps(k_best)} would give {s_best:.2f}x at batch {c.batch} but "
                f"{_lower_text(self, k_best, c.batch)} if acceptance falls to {low:.2f}: "
                f"held at [0] (lower --lower-accept-length or --floor to take that risk)"
            )
        lo = min(ch.speedup_low for ch in t.choices)
        hi = max(ch.speedup_low for ch in t.choices)
        steps_low = max(c.shares_low, key=lambda k: c.shares_low[k]) if c.shares_low else 0
        return (
            f"if acceptance falls to {low:.2f} (L({K}), from {self.acceptance.length(K):.2f}), "
            f"batch {span} runs at {_range(lo, hi)}x baseline (SGLang settles at "
            f"{_steps(steps_low)}); {_steps(t.steps)} pay{'s' * (t.steps == 1)} while "
            f"L({t.steps}) >= "
            f"{self.break_even(t.key, t.steps):.2f} (measured "
            f"{self.acceptance.length(t.steps):.2f})"
        )

    def to_dict(self) -> dict[str, Any]:
        K = self.acceptance.steps
        return {
            "tiers": {str(t.key): self.tier_dict(t) for t in self.tiers},
            "adaptive_config": self.adaptive_config_path,
            "adaptive_config_json": self.adaptive_config(),
            "launch_steps": self.launch_steps,
            "drafts": self.drafts,
            "accept_curve": self.acceptance.pooled.curve(),
            "accept_histogram": list(self.acceptance.pooled.histogram),
            "accept_steps": K,
            "accept_requests": [list(h) for h in self.acceptance.requests],
            "accept_interval": [round(v, 4) for v in self.acceptance.interval(K)],
            "requests": len(self.acceptance.requests),
            "lower_acceptance": {
                "factor": round(self.f_low, 4),
                "accept_length": round(self.lower_accept_length, 4),
            },
            "floor": self.floor,
            "min_gain": self.min_gain,
            "unpriced_batch_sizes": self.unpriced,
            "memory": self.memory,
            "skip_zero_step_extend": self.skip_extend(),
            "workload": self.workload.to_dict(),
            "predictions": {str(c): v for c, v in sorted(self.predictions.items())},
            "costs": self.costs.to_dict(),
            "why": self.why,
            **self.extra,
        }


def _lower_text(p: Plan, k: int, bs: int) -> str:
    row = p.costs.priced(bs)
    assert row is not None
    s = p.acceptance.length(k, p.f_low) * p.costs.decode(row) / p.costs.cycle(row, k)
    return f"{s:.2f}x"


def _steps(k: int) -> str:
    return f"{k} step" if k == 1 else f"{k} steps"


def _range(lo: float, hi: float) -> str:
    return f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}"


def _span(sizes: list[int]) -> str:
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"


def unpriced_sizes(costs: Costs, limit: int) -> list[int]:
    """Captured batch sizes up to `limit` the costs have no row for."""
    priced = set(costs.batch_sizes)
    return [b for b in costs.cuda_graph_bs if b <= limit and b not in priced]


def make_plan(
    acceptance: Acceptance,
    costs: Costs,
    *,
    workload: serving.Workload | None = None,
    concurrencies: tuple[int, ...] | list[int] = DEFAULT_CONCURRENCIES,
    max_batch: int | None = None,
    f_low: float = DEFAULT_F_LOW,
    floor: float = design.DEFAULT_FLOOR,
    min_gain: float = DEFAULT_MIN_GAIN,
    window_s: float | None = None,
    seed: int = 0,
) -> Plan:
    workload = workload or serving.Workload()
    limit = max_batch or costs.max_running_requests or max(costs.batch_sizes)
    sizes = [b for b in costs.batch_sizes if b <= limit]
    if not sizes:
        raise ValueError(f"the costs price no batch size up to {limit}")
    cands = design.candidates(acceptance, f_low)
    choices = [
        design.choose(b, cands, acceptance, costs, f_low, floor=floor, min_gain=min_gain,
                      output_len=workload.output_len, seed=seed)
        for b in sizes
    ]  # fmt: skip
    tiers: list[Tier] = []
    for ch in choices:
        last = tiers[-1].choices[-1] if tiers else None
        # a drafting config taken as the least bad is a tier of its own (never drafting is
        # one config, wherever it falls short)
        if (
            last is not None
            and last.candidate.key == ch.candidate.key
            and (not ch.candidate.drafts or last.below_floor == ch.below_floor)
        ):
            tiers[-1].choices.append(ch)
        else:
            tiers.append(Tier(ch.batch, [ch]))
    plan = Plan(tiers, acceptance, costs, workload, f_low, floor, min_gain,
                unpriced_sizes(costs, limit))  # fmt: skip
    if costs.memory is not None:
        plan.memory = costs.memory.check(plan.adaptive_config(), list(costs.cuda_graph_bs),
                                         workload.input_len + workload.output_len)  # fmt: skip
    context = context_note(costs, workload)
    if context:
        plan.extra["context_note"] = context
    for c in concurrencies:
        if costs.priced(c) is not None:
            plan.predictions[c] = predict(plan, c, window_s=window_s, seed=seed)
    return plan


# Past this multiple of the context the costs were measured at, decode is priced at a context
# it never ran: SGLang 0.5.17 (H100, 8B shape, 128-token cost windows) served 1024-token
# prompts at 0.90-1.0x the baseline's prediction and 0.45-0.79x adaptive's
# (benchmarks/results/decision-tools-sglang-0.5.17-h100.json).
CONTEXT_SLACK = 2.0


def context_note(costs: Costs, workload: serving.Workload) -> str | None:
    """What a prediction is worth when the workload's requests grow past the context the cost
    windows decoded at (attention and the draft's extend grow with it; the costs do not)."""
    measured = costs.notes.get("context_tokens")
    served = workload.input_len + workload.output_len
    if not isinstance(measured, int) or served <= CONTEXT_SLACK * measured:
        return None
    return (
        f"decode is priced at the {measured}-token context the cost windows ran at; these "
        f"requests reach {served} tokens, so every prediction here is high (on SGLang 0.5.17 "
        "at 8x the context: baseline served 0.90-1.0x, adaptive 0.45-0.79x of it). Measure "
        f"at this context: fastverifyctl spec costs --input-len {workload.input_len}"
    )


def predict(plan: Plan, concurrency: int, *, window_s: float | None = None, seed: int = 0) -> dict:
    """End-to-end figures at one concurrency (see the module docstring)."""
    acc, costs, wl = plan.acceptance, plan.costs, plan.workload
    cfg = plan.adaptive_config()
    # fixed EAGLE-3 at the recorded steps, or at the most the costs priced
    K = min(acc.steps, *(max(costs.steps(b)) for b in costs.batch_sizes))

    def run(mode: str, f: float = 1.0) -> serving.Served:
        return serving.serve(mode, concurrency, costs, wl, acc, config=cfg, steps=K, f=f,
                             seed=seed)  # fmt: skip

    base, eagle, ad = run("baseline"), run("eagle"), run("adaptive")
    ad_low, eagle_low = run("adaptive", plan.f_low), run("eagle", plan.f_low)
    # the acceptance's uncertainty in f units, through the prediction's own slope
    sd_len = acc.stderr(K, seed=seed)
    slope_len = (acc.length(K) - acc.length(K, 0.95)) / 0.05 or 1e-9
    sd_f = sd_len / slope_len
    delta = max(0.03, 3 * sd_f)
    ad_d = run("adaptive", 1.0 - delta)
    slope = (ad.tokens_per_second - ad_d.tokens_per_second) / delta
    half = Z95 * math.hypot(slope * sd_f, ad.tokens_per_second * costs.spread)
    out: dict[str, Any] = {
        "baseline": base.to_dict(),
        "eagle": eagle.to_dict(),
        "adaptive": ad.to_dict(),
        "adaptive_ci": [
            round(ad.tokens_per_second - half, 3),
            round(ad.tokens_per_second + half, 3),
        ],
        "if_lower": {
            "adaptive": ad_low.to_dict(),
            "eagle": eagle_low.to_dict(),
            "accept_length": round(plan.lower_accept_length, 4),
        },
        "gain": gain(base, ad),
    }
    if window_s is not None:
        runs = [r.tokens_per_second for r in serving.window_runs(
            "adaptive", concurrency, costs, wl, acc, config=cfg, steps=K, window_s=window_s,
            seeds=range(seed, seed + WINDOW_SEEDS))]  # fmt: skip
        mean, sd_w = serving.mean_sd(runs)
        half_w = Z95 * math.sqrt((slope * sd_f) ** 2 + (mean * costs.spread) ** 2 + sd_w**2)
        out["window"] = {"seconds": window_s, "adaptive_tokens_per_second": round(mean, 3),
                         "ci": [round(mean - half_w, 3), round(mean + half_w, 3)],
                         "window_to_window_sd": round(sd_w, 3)}  # fmt: skip
    return out


def gain(base: serving.Served, other: serving.Served) -> dict[str, Any]:
    """Where `other`'s gain over baseline comes from: the shares of a baseline request's
    time that each phase saves (negative: it costs more)."""
    total = base.prefill_s + base.decode_s or 1.0
    ratio = other.tokens_per_second / base.tokens_per_second if base.tokens_per_second else 0.0
    return {
        "ratio": round(ratio, 4),
        "prefill_saves": round((base.prefill_s - other.prefill_s) / total, 4),
        "decode_saves": round((base.decode_s - other.decode_s) / total, 4),
    }


def replay_stored(stored: dict[str, Any], concurrency: int, window_s: float,
                  seeds: int = WINDOW_SEEDS) -> dict[str, Any]:  # fmt: skip
    """What a bench window of `window_s` at `concurrency` should measure on the server a
    stored plan configured (mode adaptive): mean and spread of the plan's replays of it."""
    acc = Acceptance.from_requests(stored["accept_requests"], int(stored["accept_steps"]))
    costs = Costs.from_dict(stored["costs"])
    wl = stored.get("workload") or {}
    workload = serving.Workload(int(wl.get("input_len", 128)), int(wl.get("output_len", 256)))
    runs = serving.window_runs("adaptive", concurrency, costs, workload, acc,
                               config=stored["adaptive_config_json"], window_s=window_s,
                               seeds=range(seeds))  # fmt: skip
    tps, sd = serving.mean_sd([r.tokens_per_second for r in runs])
    return {
        "tokens_per_second": tps,
        "sd": sd,
        "ttft_p50_s": serving.mean_sd([r.ttft_p50_s for r in runs])[0],
        "itl_mean_s": serving.mean_sd([r.itl_mean_s for r in runs])[0],
        "decode_only": runs[0].decode_only,
        "workload": workload.to_dict(),
    }


def write_adaptive_config(plan: Plan, path: str | Path) -> Path:
    """Write the plan's adaptive config atomically (temp file, fsync, rename) after checking
    it as SGLang's `_load_adaptive_config` would; sets `plan.adaptive_config_path`."""
    cfg = plan.adaptive_config()
    adaptive.tiers(cfg)  # refuses what SGLang would refuse, before anything is written
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".adaptive-", suffix=".json", dir=dest.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(cfg, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    plan.adaptive_config_path = str(dest)
    return dest


def predicted_speedup(stored: dict[str, Any], concurrency: int) -> dict[str, Any] | None:
    """From a stored plan (`Plan.to_dict`): what adaptive gives at `concurrency` over a
    baseline server: the end-to-end prediction when the plan made one there, else the
    decode speedup of the largest planned batch size at or below it; None when it has none."""
    tiers = stored.get("tiers") or {}
    per = {int(b): (int(key), v) for key, t in tiers.items()
           for b, v in (t.get("per_batch_size") or {}).items()}  # fmt: skip
    below = [b for b in per if b <= concurrency]
    if not below:
        return None
    key, row = per[max(below)]
    steps = int(tiers[str(key)].get("steps", 0))
    pred = (stored.get("predictions") or {}).get(str(concurrency))
    if pred:
        base = pred["baseline"]["tokens_per_second"] or 1.0
        lo, hi = pred.get("adaptive_ci") or [None, None]
        return {"steps": steps, "speedup": pred["gain"]["ratio"],
                "ci": [lo / base, hi / base] if lo is not None else None,
                "from": "end-to-end prediction"}  # fmt: skip
    return {"steps": steps, "speedup": row["speedup"], "ci": None,
            "from": f"decode passes at batch size {max(below)}"}  # fmt: skip
