"""Which recorded acceptance a plan may use: a record's identity (the model, drafter, topk
and steps an argv serves) and the usable records measured on the serving model, drafter and
topk. The daemon labels each bench's record with the identity of what it serves
(fastverify.daemon.acceptance); `fastverifyctl spec plan` picks its record with the same
rule (fastverify.cli.spec_cmd), from the argv the daemon would serve."""

from __future__ import annotations

from typing import Any

from fastverify.sglang.launch import LaunchArgs

IDENTITY = ("model", "drafter", "topk", "steps")


def identity_of(argv: list[str]) -> dict[str, Any] | None:
    """Model, drafter, topk and steps an argv serves (None: it does not draft)."""
    la = LaunchArgs.from_argv(argv)
    spec = la.speculative
    if spec is None:
        return None
    return {"model": la.model_path, "drafter": spec.draft_model_path, "topk": spec.eagle_topk,
            "steps": spec.num_steps}  # fmt: skip


def matching(
    records: dict[str, Any], serving: dict[str, Any] | None, allow_forced: bool = False
) -> list[dict[str, Any]]:
    """Usable records measured on the serving model, drafter and topk, newest first; with
    `allow_forced` also those whose only fault is acceptance SGLang forced."""
    out = [r for r in records.values() if isinstance(r, dict)
           and (r.get("usable") or (allow_forced and r.get("usable_forced")))]  # fmt: skip
    if serving:
        out = [r for r in out if all(r.get(k) == serving.get(k) for k in IDENTITY[:3])]
    return sorted(out, key=lambda r: -float(r.get("measured_at") or 0))
