"""What SGLang runs with an adaptive config at one batch size, found by running its controller
(`fastverify.sglang.adaptive_slot`, decision for decision SGLang's `AdaptiveStepSlot`, per
the contract test) on recorded acceptance, time-averaged.

- `replay`: `batch` running requests, each a recorded request (its own histogram: passes of
  one request are alike) that lives for `output_len` tokens and is then replaced by another
  one drawn at random; every pass runs the step count the controller holds for the batch
  (routed by its padded size), each request accepts min(j, steps) drafts for a j drawn
  from its histogram (thinned by f for a lower acceptance), and the controller is fed the
  pass's accepted drafts, as SGLang feeds it after every verify. Steps-0 passes verify 1
  token and feed 0 drafts (the EMA stands still), so a `[0, k]` tier's probing and
  alternation show. The first `SETTLE` passes are left out: the figures are the steady
  state of a server that has been serving.
- `mean_field`: the same controller fed the pooled expected accepted drafts at each step
  (no sampling noise): which step counts a config alternates between, independent of the
  batch size, cheap enough to screen many configs with.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastverify.sglang.adaptive_slot import AdaptiveController, StepSlot
from fastverify.speculation.acceptance import Acceptance, Draws
from fastverify.speculation.costs import Costs

SETTLE = 60  # passes before the time average starts
PASSES = 600  # passes averaged by default
MEAN_FIELD_PASSES = 200


@dataclass(frozen=True)
class Replay:
    """One replay's totals: tokens per request slot, seconds, passes by step count."""

    batch: int
    tokens: float
    seconds: float
    passes: dict[int, int]
    seconds_at: dict[int, float]
    switches: int

    @property
    def tokens_per_second(self) -> float:
        return self.batch * self.tokens / self.seconds if self.seconds > 0 else 0.0

    def speedup(self, costs: Costs) -> float:
        """Over a baseline server at the same batch size."""
        row = costs.priced(self.batch)
        assert row is not None
        return self.tokens_per_second * costs.decode(row) / self.batch

    def time_shares(self) -> dict[int, float]:
        total = sum(self.seconds_at.values()) or 1.0
        return {k: s / total for k, s in sorted(self.seconds_at.items())}

    def mean_steps(self) -> float:
        n = sum(self.passes.values()) or 1
        return sum(k * c for k, c in self.passes.items()) / n


def replay(
    cfg: Mapping[str, Any],
    batch: int,
    costs: Costs,
    acceptance: Acceptance,
    *,
    f: float = 1.0,
    output_len: int = 256,
    passes: int = PASSES,
    seed: int = 0,
    launch_steps: int | None = None,
    trace: list[tuple[int, list[int]]] | None = None,
) -> Replay:
    """Run SGLang's controller on `batch` requests drawn from `acceptance` (see above).
    `trace` (a list) receives every pass's (steps, drafts each request would accept at
    unlimited steps): what the contract test replays on SGLang's own controller."""
    rng = random.Random(seed * 7919 + batch)
    row = costs.priced(batch)
    if row is None:
        raise ValueError(f"no measured costs at or above batch size {batch}")
    graph_bs = list(costs.cuda_graph_bs) or None
    launch = launch_steps if launch_steps is not None else _launch(cfg)
    ctl = AdaptiveController(launch, dict(cfg), graph_bs)
    pool = [Draws(h, f) for h in acceptance.requests]
    slots = [pool[rng.randrange(len(pool))] for _ in range(batch)]
    # requests start staggered, as a served batch's do
    left = [1 + rng.randrange(max(1, output_len - 1)) for _ in range(batch)]
    tokens = seconds = 0.0
    count: Counter[int] = Counter()
    at: defaultdict[int, float] = defaultdict(float)  # seconds at each step count
    switches = 0
    prev = None
    for n in range(SETTLE + passes):
        steps = ctl.steps_for(batch)
        cost = costs.cycle(row, steps)
        accepted = []
        latent = []
        made = 0
        for i, d in enumerate(slots):
            drawn = d.next(rng)
            latent.append(drawn)
            j = min(drawn, steps) if steps > 0 else 0
            accepted.append(j)
            got = min(j + 1, left[i])
            made += got
            left[i] -= got
            if left[i] <= 0:
                slots[i] = pool[rng.randrange(len(pool))]
                left[i] = max(1, output_len - 1)
        ctl.observe(accepted, batch)
        if trace is not None:
            trace.append((steps, latent))
        if n >= SETTLE:
            tokens += made / batch
            seconds += cost
            count[steps] += 1
            at[steps] += cost
            switches += prev is not None and steps != prev
        prev = steps
    return Replay(batch, tokens, seconds, dict(count), dict(at), switches)


def mean_field(
    entry: Mapping[str, Any],
    lengths: Sequence[float],
    *,
    passes: int = MEAN_FIELD_PASSES,
    launch_steps: int | None = None,
) -> dict[int, int]:
    """Passes by step count of one tier's controller fed the expected accepted drafts
    (`lengths[s]` = the pooled L(s), s = 0..K) instead of draws."""
    launch = launch_steps if launch_steps is not None else max(entry["candidate_steps"])
    slot = StepSlot(launch, dict(entry))
    count: Counter[int] = Counter()
    for n in range(SETTLE + passes):
        s = slot.steps
        slot.observe([lengths[s] - 1.0])
        if n >= SETTLE:
            count[s] += 1
    return dict(count)


def _launch(cfg: Mapping[str, Any]) -> int:
    """The launch step count mode adaptive starts with: the largest candidate."""
    from fastverify.sglang import adaptive

    return max(adaptive.candidate_steps(dict(cfg)))
