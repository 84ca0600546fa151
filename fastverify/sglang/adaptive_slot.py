"""SGLang 0.5.23's adaptive step controller, as behaviour: what step count it runs next.

The sim serves `--speculative-adaptive` with it, and `fastverify.speculation` replays it to
predict where a config settles. It follows `AdaptiveStepSlot` / `AdaptiveSpeculativeParams`
(`srt/speculative/adaptive_spec_params.py`) decision for decision; the contract test
(tests/contract/test_adaptive_contract.py) feeds both the same 1,000 random sequences of
accepted drafts and requires identical step sequences.

Per tier (a batch-size key of the config), after every verify pass:
- while drafting (steps > 0) an EMA of the batch's mean accepted drafts is updated
  (weight `ema_alpha`); at steps 0 the EMA stands still;
- the first `warmup_batches` passes decide nothing; then every `update_interval`-th pass
  re-decides:
  * from steps 0: probe the next candidate up (a slot that never drafted starts that probe
    with an EMA of target - 1);
  * else go down while the EMA <= the next lower candidate's drop threshold (that step
    - 0.5, or 0.5 when it is 0; plus `down_hysteresis`); if it did not go down, go up while
    the EMA > this step - 0.5 + `up_hysteresis`;
  * `ceiling_coeff` > 0 caps a target that is not a step up at ceil(EMA x coeff) (>= 1).
- A batch of size B is served by the largest tier key <= B (the smallest tier below it),
  after padding B up to the next captured CUDA-graph batch size when graphs are on.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from fastverify.sglang.adaptive import SLOT_DEFAULTS, tiers


class StepSlot:
    """One tier's controller state."""

    def __init__(self, initial_steps: int, cfg: dict[str, Any]):
        self.candidates: list[int] = sorted(set(cfg["candidate_steps"]))

        def get(key: str) -> Any:
            return cfg.get(key, SLOT_DEFAULTS[key])

        self.ema_alpha = float(get("ema_alpha"))
        self.update_interval = int(get("update_interval"))
        self.warmup_batches = int(get("warmup_batches"))
        self.down_hysteresis = float(get("down_hysteresis"))
        self.up_hysteresis = float(get("up_hysteresis"))
        self.ceiling_coeff = float(get("ceiling_coeff"))
        if initial_steps in self.candidates:
            self.steps = initial_steps
        else:
            self.steps = self.candidates[len(self.candidates) // 2]
        self.ema = float(self.steps - 1)
        self.batches = 0
        self.last_change: tuple[int, int, float] | None = None  # (old, new, ema)

    def observe(self, accepted_per_request: Sequence[float]) -> bool:
        """One verify pass's accepted drafts per request; True when the step count moved."""
        if not accepted_per_request:
            return False
        if self.steps > 0:
            mean = sum(accepted_per_request) / len(accepted_per_request)
            self.ema = (1 - self.ema_alpha) * self.ema + self.ema_alpha * mean
        self.batches += 1
        past = self.batches - self.warmup_batches
        if past <= 0 or past % self.update_interval:
            return False
        return self._decide()

    def _decide(self) -> bool:
        old = self.steps
        i = self.candidates.index(old)
        if old == 0:
            target = self.candidates[min(i + 1, len(self.candidates) - 1)]
            if target > 0 and self.ema < 0:
                self.ema = float(target - 1)
            return self._move(old, target)
        start = i
        while i > 0:
            lower = self.candidates[i - 1]
            drop_at = (0.5 if lower == 0 else lower - 0.5) + self.down_hysteresis
            if self.ema > drop_at:
                break
            i -= 1
        if i == start:
            while i < len(self.candidates) - 1:
                if self.ema <= self.candidates[i] - 0.5 + self.up_hysteresis:
                    break
                i += 1
        target = self.candidates[i]
        if self.ceiling_coeff > 0:
            cap = max(1, math.ceil(self.ema * self.ceiling_coeff))
            if cap < target <= old:
                while i > 0 and self.candidates[i] > cap:
                    i -= 1
                target = self.candidates[i]
        return self._move(old, target)

    def _move(self, old: int, target: int) -> bool:
        if target == old:
            return False
        self.steps = target
        self.last_change = (old, target, self.ema)
        return True


class AdaptiveController:
    """Every tier of one config: which step count a batch runs, and the feedback."""

    def __init__(
        self, initial_steps: int, cfg: dict[str, Any], cuda_graph_bs: list[int] | None = None
    ):
        self.slots = {bs: StepSlot(initial_steps, t) for bs, t in sorted(tiers(cfg).items())}
        self.keys = sorted(self.slots)
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    @property
    def candidates(self) -> list[int]:
        return sorted({s for slot in self.slots.values() for s in slot.candidates})

    def slot(self, batch_size: int) -> StepSlot:
        b = batch_size
        if self.cuda_graph_bs is not None:
            j = bisect.bisect_left(self.cuda_graph_bs, b)
            b = self.cuda_graph_bs[j] if j < len(self.cuda_graph_bs) else b
        j = bisect.bisect_right(self.keys, b) - 1
        return self.slots[self.keys[max(0, j)]]

    def steps_for(self, batch_size: int) -> int:
        return self.slot(batch_size).steps

    def observe(self, accepted_per_request: Sequence[float], batch_size: int) -> int | None:
        """Feed one verify pass; the new step count of that batch's tier when it moved."""
        s = self.slot(batch_size)
        return s.steps if s.observe(accepted_per_request) else None
