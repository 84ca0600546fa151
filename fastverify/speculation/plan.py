"""The speculation plan: per batch-size tier, the step count that maximises tokens/s.

At batch size B and k draft steps (k = 0: no drafting) a step of the whole batch takes
`costs.cycle(B, k)` and yields B x L(k) tokens (L from the measured accept curve), so

    speedup(B, k) = L(k) x cycle(B, 0) / cycle(B, k),

with a 95% interval from L(k)'s standard error (verify passes taken as independent draws).
The tier's answer is the k with the largest speedup among those whose 95% interval lies
above 1 + min_gain (0 when none does). The margin (default 5%, `--min-gain`) is what
drafting must win by to be worth it: the costs are themselves known only to a few percent
(the sim's calibration is within 1.9% of the field's figures; a TP shard measured on one GPU
was 0.8% off two GPUs), and a cycle does not show what speculation costs elsewhere (the
drafter's weights and KV cache out of the target's pool, the draft extend in every prefill).
A tier held at 0 by the margin reports the step count that came closest (`closest`).
What would change it: the break-even accept length L*(B, k) = cycle(B, k) / cycle(B, 0).

SGLang's `--speculative-adaptive-config` written from the plan: a tier with k > 0 gets
candidates [0, k] and a down-hysteresis that puts SGLang's drop-to-0 threshold (accepted
drafts EMA <= 0.5 + down_hysteresis) at this host's break-even (L*(B, k) - 1 accepted
drafts), so SGLang stops drafting where this host's costs say drafting loses; a tier with
k = 0 gets [0] (never drafts, never probes).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.sglang import adaptive
from fastverify.speculation.breakeven import breakeven_accept_length
from fastverify.speculation.costs import Costs
from fastverify.speculation.curve import AcceptCurve

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_MIN_GAIN = 0.05
Z95 = 1.96


@dataclass(frozen=True)
class Tier:
    batch_size: int
    steps: int
    speedup: float
    ci: tuple[float, float]
    tokens_per_second: float
    baseline_tokens_per_second: float
    break_even: dict[int, float]  # k -> L*(B, k)
    change: str  # what would change the answer
    closest: dict[str, Any] | None = None  # held at 0 by the margin: the best k's prediction

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "speedup": round(self.speedup, 4),
            "ci": [round(self.ci[0], 4), round(self.ci[1], 4)],
            "tokens_per_second": round(self.tokens_per_second, 2),
            "baseline_tokens_per_second": round(self.baseline_tokens_per_second, 2),
            "break_even_accept_length": {str(k): round(v, 4) for k, v in self.break_even.items()},
            "what_would_change": self.change,
            **({"closest": self.closest} if self.closest else {}),
        }


@dataclass
class Plan:
    tiers: dict[int, Tier]
    curve: AcceptCurve
    costs: Costs
    adaptive_config_path: str | None = None
    min_gain: float = DEFAULT_MIN_GAIN
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def largest_steps(self) -> int:
        return max(t.steps for t in self.tiers.values())

    @property
    def why(self) -> str:
        pays = [b for b, t in sorted(self.tiers.items()) if t.steps > 0]
        if not pays:
            return (
                f"speculation does not pay at any batch size here: at accept length "
                f"{self.curve.length(self.curve.steps):.2f} ({self.curve.steps} steps) a draft+"
                "verify cycle costs more than the tokens it adds"
            )
        return (
            f"speculation pays at batch size {_ranges(pays)} (steps "
            f"{', '.join(str(self.tiers[b].steps) for b in pays)}); "
            f"no drafting elsewhere"
            if len(pays) < len(self.tiers)
            else f"speculation pays at every batch size planned (up to {max(pays)})"
        )

    def adaptive_config(self) -> dict[str, Any]:
        """SGLang's --speculative-adaptive-config for this plan (tiers by batch size)."""
        cfg: dict[str, Any] = {}
        for bs, t in sorted(self.tiers.items()):
            if t.steps == 0:
                cfg[str(bs)] = {"candidate_steps": [0]}
                continue
            drop_at = t.break_even[t.steps] - 1.0  # accepted drafts (bonus excluded)
            cfg[str(bs)] = {
                "candidate_steps": [0, t.steps],
                "up_hysteresis": 0.0,
                "down_hysteresis": round(drop_at - 0.5, 4),
            }
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return {
            "tiers": {str(b): t.to_dict() for b, t in sorted(self.tiers.items())},
            "adaptive_config": self.adaptive_config_path,
            "launch_steps": self.largest_steps,
            "accept_curve": self.curve.curve(),
            "accept_histogram": list(self.curve.histogram),
            "accept_steps": self.curve.steps,
            "costs": self.costs.to_dict(),
            "why": self.why,
            "min_gain": self.min_gain,
            **self.extra,
        }


def _ranges(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def plan_tier(
    curve: AcceptCurve, costs: Costs, bs: int, min_gain: float = DEFAULT_MIN_GAIN
) -> Tier:
    row_bs = bs if bs in costs.table else costs.nearest(bs)
    c0 = costs.cycle(row_bs, 0)
    ks = [k for k in costs.steps(row_bs) if 1 <= k <= curve.steps]
    base_tps = bs / c0
    speed: dict[int, float] = {}
    half: dict[int, float] = {}
    be: dict[int, float] = {}
    for k in ks:
        ck = costs.cycle(row_bs, k)
        speed[k] = curve.length(k) * c0 / ck
        half[k] = Z95 * curve.stderr(k) * c0 / ck
        be[k] = breakeven_accept_length(ck, 1.0 / c0)  # a decode step yields 1 token/request
    # drafting only where it wins by the margin with 95% confidence
    paying = [k for k in ks if speed[k] - half[k] > 1.0 + min_gain]
    margin = f"{min_gain:.0%} margin"
    if paying:
        k = max(paying, key=lambda k: speed[k])
        ci = (speed[k] - half[k], speed[k] + half[k])
        change = (
            f"no drafting (0 steps) at batch {bs} once the accept length at {_steps(k)} falls "
            f"below {be[k] * (1 + min_gain):.2f} (break-even {be[k]:.2f} + {margin}; "
            f"measured {curve.length(k):.2f})"
        )
        return Tier(bs, k, speed[k], ci, base_tps * speed[k], base_tps, be, change)
    if not ks:
        change = f"no step count to compare at batch {bs} (the curve or the costs end at 0)"
        return Tier(bs, 0, 1.0, (1.0, 1.0), base_tps, base_tps, be, change)
    k = min(ks, key=lambda k: be[k] / curve.length(k))
    closest = {
        "steps": k,
        "speedup": round(speed[k], 4),
        "ci": [round(speed[k] - half[k], 4), round(speed[k] + half[k], 4)],
    }
    held = (
        f"{_steps(k)} would give {speed[k]:.2f}x [{speed[k] - half[k]:.2f}, "
        f"{speed[k] + half[k]:.2f}], not clear of the {margin} (--min-gain); "
        if speed[k] > 1.0
        else ""
    )
    change = (
        f"{held}{_steps(k)} pays at batch {bs} once the accept length at {_steps(k)} is >= "
        f"{be[k] * (1 + min_gain):.2f} (break-even {be[k]:.2f} + {margin}; measured "
        f"{curve.length(k):.2f})"
    )
    return Tier(bs, 0, 1.0, (1.0, 1.0), base_tps, base_tps, be, change, closest)


def _steps(k: int) -> str:
    return f"{k} step" if k == 1 else f"{k} steps"


def make_plan(
    curve: AcceptCurve,
    costs: Costs,
    batch_sizes: list[int] | tuple[int, ...] | None = None,
    min_gain: float = DEFAULT_MIN_GAIN,
) -> Plan:
    sizes = sorted(set(batch_sizes or DEFAULT_BATCH_SIZES))
    tiers = {bs: plan_tier(curve, costs, bs, min_gain) for bs in sizes}
    return Plan(tiers, curve, costs, min_gain=min_gain)


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
