"""Profiler step-span names of SGLang's model runners (`srt/utils/profile_utils.py`,
`build_step_span_name`).

0.5.23: the target verify forward is `step[VERIFY bs=N]`, every drafter forward
`step[DRAFT bs=N]`, every other forward the forward-mode name (`step[DECODE bs=N]`,
`step[EXTEND bs=N toks=T]`); detail suffixes may follow before `]`
(`step[DECODE bs=8 nq=... forward_id=3]`). Older releases named the verify forward by
its mode, `step[TARGET_VERIFY bs=N]`, and some draft paths borrow that mode, so with the
old naming the target cannot be told from the drafter by name alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

VERIFY = "VERIFY"
DRAFT = "DRAFT"
TARGET_VERIFY = "TARGET_VERIFY"  # before 0.5.2x: the verify forward's mode name
VERIFY_STAGES = (VERIFY, TARGET_VERIFY)
_SPAN = re.compile(r"step\[([A-Z_]+) bs=(\d+)(?: toks=(\d+))?(?: [^\]]*)?\]")


@dataclass(frozen=True)
class StepSpan:
    stage: str
    bs: int
    toks: int | None = None

    @property
    def is_verify(self) -> bool:
        return self.stage in VERIFY_STAGES

    @property
    def is_draft(self) -> bool:
        return self.stage == DRAFT


def step_span_name(stage: str, bs: int, toks: int | None = None) -> str:
    """The span name SGLang writes for one forward (no detail annotations)."""
    if toks is not None:
        return f"step[{stage} bs={bs} toks={toks}]"
    return f"step[{stage} bs={bs}]"


def parse_step_span(name: str) -> StepSpan | None:
    """`step[VERIFY bs=4]` -> StepSpan('VERIFY', 4); None for any other name."""
    m = _SPAN.search(name)
    if m is None:
        return None
    return StepSpan(m.group(1), int(m.group(2)), int(m.group(3)) if m.group(3) else None)


def is_verify_span(name: str, stage: str | None = None) -> bool:
    """A target verify span: `stage` if given, else either naming."""
    span = parse_step_span(name)
    if span is None:
        return False
    return span.stage == stage if stage else span.is_verify
