"""EAGLE's cycle as SGLang runs it: how many drafter forwards one draft+verify cycle holds.

SGLang 0.5.23 `srt/speculative/eagle_worker_v2.py` `EagleDraftWorker.draft_forward` loops
`for i in range(speculative_num_steps)` and breaks at `i == speculative_num_steps - 1` before
the drafter's forward: the first draft token of a cycle is the one the previous cycle's draft
extend (the drafter's forward over the verified tokens) produced. A cycle at k steps is
therefore k - 1 drafter decode forwards, one target verify over k + 1 tokens per request
(topk 1) and one draft extend. tests/contract/test_adaptive_contract.py runs the wheel's
`draft_forward` and counts.
"""

from __future__ import annotations


def draft_forwards_per_cycle(num_steps: int) -> int:
    """Drafter decode forwards in one cycle at `num_steps` (the draft extend not counted)."""
    return max(0, num_steps - 1)
