"""The adaptive config, shaped so that what SGLang's controller does with it is what pays.

SGLang's controller (`fastverify.sglang.adaptive_slot`) only sees an EMA of accepted drafts
at the step count it runs; its thresholds sit at fixed offsets from the candidates (drop
below a lower candidate c at c - 0.5 + down_hysteresis, 0.5 + down_hysteresis for c = 0; rise
from s at s - 0.5 + up_hysteresis), and from steps 0 it always probes the next candidate up
after one update interval (the EMA freezes at 0). So:
- a tier where drafting does not pay is `[0]`: it never probes;
- a tier that drafts k steps at the recorded acceptance either holds `[k]`, or steps down to
  a lower candidate when acceptance falls: `[c, k]` (c >= 1: it rests at c), `[0, k]` or
  `[0, 1, k]` (they alternate with the probe when they fall to 0). The thresholds come from
  the recorded curve: with m_f(s) = L_f(s) - 1 the accepted drafts at s when every draft
  position is kept with probability f (`acceptance.Acceptance.length`), the drop from k sits
  at m_{f_d}(k) and the rise from c at m_{f_u}(c) with f_low < f_d < f_u < 1, so between
  f_d and f_u neither fires (the hysteresis) and no acceptance makes it flap.
`candidates` builds those configs for acceptance between the recorded one (f = 1) and a
stated lower one (f_low); `choose` keeps, per batch size, the config whose time-averaged
speedup at the recorded acceptance is largest among those that stay above `floor` x the
baseline at f_low and midway (screened with `replay.mean_field`, then confirmed by
`replay.replay` on draws; a config that flaps on draws is dropped for the next one).
Never drafting is the refuge only while it keeps the floor itself: where SGLang's steps-0
pass costs more than that (on SGLang 0.5.17, H100, 8B shape, 1024-token prompts: 2.29x a
decode step at batch 16, 3.34x at 32), the fixed step count that does best at the worse of
the two acceptances is taken instead when it beats never drafting at both, and the choice is
marked `below_floor`: a baseline server is faster there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastverify.speculation import replay as rp
from fastverify.speculation.acceptance import Acceptance
from fastverify.speculation.costs import Costs

DEFAULT_FLOOR = 0.97
# where between f_low and 1 the drop and the rise sit (shares of the gap)
PLACEMENTS = ((0.35, 0.65), (0.2, 0.5), (0.5, 0.8))
SIMPLER_BY = 0.005  # a config within this of the best with fewer candidates wins
# A config with several candidates flaps when its replay on draws falls this far (a share of
# its mean-field speedup) below the mean field. A single candidate cannot flap: its replay
# differs from the mean field by the draws alone (on SGLang 0.5.17 at a forced accept length
# of 3.0 a fixed [3] replayed 1.5% under its mean field at batch 32, and an absolute 0.02
# dropped it for [0], which ran at 0.59x baseline there).
FLAP_SHARE = 0.02


@dataclass(frozen=True)
class Candidate:
    """One tier entry of SGLang's config and its mean-field passes by step count at f = 1,
    midway and f_low."""

    entry: dict[str, Any]
    fractions: tuple[dict[int, int], dict[int, int], dict[int, int]]

    @property
    def key(self) -> str:
        return repr(sorted(self.entry.items()))

    @property
    def drafts(self) -> bool:
        return max(self.entry["candidate_steps"]) > 0

    @property
    def steps(self) -> int:
        return max(self.entry["candidate_steps"])


@dataclass
class Choice:
    """What one batch size gets: the candidate and its confirmed figures."""

    batch: int
    candidate: Candidate
    speedup: float  # at the recorded acceptance (replay on draws)
    speedup_low: float  # at the stated lower acceptance
    shares: dict[int, float]  # time at each step count, recorded acceptance
    shares_low: dict[int, float]
    switches: int
    best_static: tuple[int, float]  # (k, speedup) of the best fixed step count
    rejected: list[str] = field(default_factory=list)
    # no config keeps `floor` x a baseline server here, not even never drafting (SGLang's
    # steps-0 pass, a verify and a draft extend, can cost several decode steps): this is the
    # least bad one, and a baseline server serves this batch size faster
    below_floor: bool = False


def _round(x: float) -> float:
    return round(x, 4)


def candidates(acc: Acceptance, f_low: float) -> list[Candidate]:
    """Every tier config considered (see the module docstring)."""
    K = acc.steps
    mid = (1.0 + f_low) / 2
    levels = (1.0, mid, f_low)
    lengths = {f: [acc.length(s, f) for s in range(K + 1)] for f in levels}

    def at(share: float) -> float:
        return f_low + share * (1.0 - f_low)

    entries: list[dict[str, Any]] = [{"candidate_steps": [0]}]
    entries += [{"candidate_steps": [k]} for k in range(1, K + 1)]
    for k in range(1, K + 1):
        for d_share, u_share in PLACEMENTS:
            d_thr = acc.length(k, at(d_share)) - 1.0
            # [0, k] and [0, 1, k]: drop to 0 at d_thr (0.5 + down_hysteresis)
            entries.append({"candidate_steps": [0, k], "down_hysteresis": _round(d_thr - 0.5)})
            if k >= 2:
                u_thr = acc.length(1, at(u_share)) - 1.0
                entries.append({"candidate_steps": [0, 1, k],
                                "down_hysteresis": _round(d_thr - 0.5),
                                "up_hysteresis": _round(u_thr - 0.5)})  # fmt: skip
            for c in range(1, k):
                u_thr = acc.length(c, at(u_share)) - 1.0
                d_c = d_thr - (c - 0.5)
                u_c = u_thr - (c - 0.5)
                if u_c >= 0.5:  # at c the EMA never exceeds c: it could never rise
                    continue
                entries.append({"candidate_steps": [c, k], "down_hysteresis": _round(d_c),
                                "up_hysteresis": _round(u_c)})  # fmt: skip
    out, seen = [], set()
    for e in entries:
        at_one, at_mid, at_low = (rp.mean_field(e, lengths[f]) for f in levels)
        cand = Candidate(e, (at_one, at_mid, at_low))
        if cand.key not in seen:
            seen.add(cand.key)
            out.append(cand)
    return out


def mean_field_speedup(
    fractions: dict[int, int], lengths: Sequence[float], costs: Costs, row: int
) -> float:
    """Tokens per second over a baseline server's at batch `row`, from passes by steps."""
    tokens = sum(n * lengths[s] for s, n in fractions.items())
    seconds = sum(n * costs.cycle(row, s) for s, n in fractions.items())
    return tokens / seconds * costs.decode(row) if seconds else 0.0


def choose(
    batch: int,
    cands: Sequence[Candidate],
    acc: Acceptance,
    costs: Costs,
    f_low: float,
    *,
    floor: float = DEFAULT_FLOOR,
    min_gain: float = 0.0,
    output_len: int = 256,
    seed: int = 0,
) -> Choice:
    """The config for one batch size (see the module docstring)."""
    row = costs.priced(batch)
    assert row is not None
    K = min(acc.steps, max(costs.steps(row)))
    mid = (1.0 + f_low) / 2
    lengths = [[acc.length(s, f) for s in range(acc.steps + 1)] for f in (1.0, mid, f_low)]
    usable = [c for c in cands if max(c.entry["candidate_steps"]) <= K]
    static = max(
        ((k, acc.length(k) * costs.decode(row) / costs.cycle(row, k)) for k in range(K + 1)),
        key=lambda kv: kv[1],
    )
    scored = []
    for c in usable:
        s = [mean_field_speedup(c.fractions[i], lengths[i], costs, row) for i in range(3)]
        scored.append((c, s))
    never = next(c for c in usable if not c.drafts)
    feasible = [(c, s) for c, s in scored if min(s[1], s[2]) >= floor or not c.drafts]
    feasible.sort(key=lambda cs: (-cs[1][0], len(cs[0].entry["candidate_steps"])))
    rejected: list[str] = []
    never_speedup = mean_field_speedup(never.fractions[0], lengths[0], costs, row)
    paying = [(c, s) for c, s in feasible
              if c.drafts and s[0] > never_speedup * (1.0 + min_gain) + 1e-9]  # fmt: skip
    # a config with fewer candidates within SIMPLER_BY of a better one is tried first
    first = [(c, s) for c, s in paying if not _simpler_nearby(c, s[0], paying)]
    for c, s in first + [cs for cs in paying if cs not in first]:
        rec = rp.replay({"1": c.entry}, batch, costs, acc, output_len=output_len, seed=seed)
        low = rp.replay({"1": c.entry}, batch, costs, acc, f=f_low, output_len=output_len,
                        seed=seed + 1)  # fmt: skip
        sp, sp_low = rec.speedup(costs), low.speedup(costs)
        if sp_low < floor:
            rejected.append(f"{c.entry}: {sp:.3f}x / {sp_low:.3f}x on draws (under the floor "
                            "at the lower acceptance)")  # fmt: skip
            continue
        if len(c.entry["candidate_steps"]) > 1 and sp < s[0] * (1.0 - FLAP_SHARE):
            rejected.append(f"{c.entry}: {sp:.3f}x / {sp_low:.3f}x on draws (flaps)")
            continue
        return Choice(batch, c, sp, sp_low, rec.time_shares(), low.time_shares(), rec.switches,
                      static, rejected)  # fmt: skip
    rec = rp.replay({"1": never.entry}, batch, costs, acc, output_len=output_len, seed=seed)
    sp0 = rec.speedup(costs)
    fallback = Choice(batch, never, sp0, sp0, rec.time_shares(), rec.time_shares(), 0, static,
                      rejected, below_floor=sp0 < floor)  # fmt: skip
    if sp0 >= floor:
        return fallback
    # even never drafting is under the floor: the fixed step count (it cannot flap) whose
    # worse speedup of the two acceptances is largest, when that beats never drafting at both
    zero = costs.cycle(row, 0) / costs.decode(row)
    rejected.append(f"{never.entry}: {sp0:.3f}x (the steps-0 pass costs {zero:.2f}x a decode "
                    "step here)")  # fmt: skip
    best, best_worse = fallback, sp0
    for c in usable:
        if len(c.entry["candidate_steps"]) > 1 or not c.drafts:
            continue
        rec = rp.replay({"1": c.entry}, batch, costs, acc, output_len=output_len, seed=seed)
        low = rp.replay({"1": c.entry}, batch, costs, acc, f=f_low, output_len=output_len,
                        seed=seed + 1)  # fmt: skip
        sp, sp_low = rec.speedup(costs), low.speedup(costs)
        if min(sp, sp_low) > best_worse:
            best_worse = min(sp, sp_low)
            best = Choice(batch, c, sp, sp_low, rec.time_shares(), low.time_shares(),
                          rec.switches, static, rejected, below_floor=True)  # fmt: skip
    return best


def _simpler_nearby(c: Candidate, sp: float, feasible: Sequence[tuple[Candidate, list]]) -> bool:
    """A config with fewer candidates within SIMPLER_BY of this one's speedup exists."""
    n = len(c.entry["candidate_steps"])
    return any(
        len(o.entry["candidate_steps"]) < n and o.drafts and s[0] >= sp - SIMPLER_BY
        for o, s in feasible
    )
