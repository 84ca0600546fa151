"""EAGLE's cycle as SGLang runs it: how many drafter forwards one draft+verify cycle holds,
and what a steps-0 pass of the adaptive worker runs.

SGLang 0.5.23 `srt/speculative/eagle_worker_v2.py` `EagleDraftWorker.draft_forward` loops
`for i in range(speculative_num_steps)` and breaks at `i == speculative_num_steps - 1` before
the drafter's forward: the first draft token of a cycle is the one the previous cycle's draft
extend (the drafter's forward over the verified tokens) produced. A cycle at k steps is
therefore k - 1 drafter decode forwards, one target verify over k + 1 tokens per request
(topk 1) and one draft extend. tests/contract/test_adaptive_contract.py runs the wheel's
`draft_forward` and counts.

At steps 0 (`forward_batch_generation`, `speculative_num_steps == 0`) nothing is drafted: a
trivial verify input routes through the TARGET_VERIFY graph captured at
`draft_token_num=1` (a plain decode, functionally), then `_draft_extend_for_decode` runs
over that one token per request "keeping draft KV warm for when the batch shrinks", unless
SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND (EnvBool, default False; 0.5.14+) is set: then
`_stub_skipped_draft_extend` fills zeroed topk_p / topk_index / hidden states, and an
upshift to steps > 0 drafts from that stale state ("cold recovery", the flag's documented
cost). The contract test reads both branches in the wheel.
"""

from __future__ import annotations

from collections.abc import Mapping

from fastverify.sglang.envvars import env_bool

SKIP_ZERO_STEP_EXTEND_VAR = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"


def draft_forwards_per_cycle(num_steps: int) -> int:
    """Drafter decode forwards in one cycle at `num_steps` (the draft extend not counted)."""
    return max(0, num_steps - 1)


def skip_zero_step_extend(env: Mapping[str, str]) -> bool:
    """Whether a steps-0 pass skips the draft extend in this environment (EnvBool)."""
    return bool(env_bool(env.get(SKIP_ZERO_STEP_EXTEND_VAR)))
