"""Tune stage 2, candidates: shipped and user profiles (or the ones named), each with its
all-reduce backend, CUDA-graph requirement and validation problems. A tuner profile
derived for this rank count (stage `derive_tuner`, GPUs only) joins them afterwards."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastverify.experiments.tune.context import Ctx, StageResult
from fastverify.sglang.allreduce import requested_backend


def candidate_backend(profile: Any) -> str:
    """The all-reduce backend a profile asks SGLang for ("pcie_ipc" or "nccl")."""
    env: Mapping[str, str] = getattr(profile, "env", None) or {}
    return requested_backend(env)


def candidate_row(profile: Any, source: str) -> dict[str, Any]:
    requires = dict(getattr(profile, "requires", {}) or {})
    return {
        "name": profile.name,
        "source": source,
        "backend": candidate_backend(profile),
        "cuda_graph": str(requires.get("cuda-graph", "on")).lower() not in ("off", "false", "0"),
        "requires": requires,
        "tags": list(getattr(profile, "tags", ()) or ()),
        "description": getattr(profile, "description", "") or "",
    }


def unknown_names(names: tuple[str, ...]) -> list[str]:
    """Each name of `--profiles` that no profile file answers to, with what was probably
    meant (`ring-lll (did you mean ring-ll?)`; checked before the lease and any stage)."""
    from fastverify.profiles.store import ProfileStore

    store = ProfileStore()
    return [f"{n} ({store.hint(n)})" for n in names if store.find(n) is None]


def run(ctx: Ctx) -> StageResult:
    from fastverify.profiles.store import ProfileStore

    wanted = ctx.cfg.profiles
    rows: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for entry, profile, problems in ProfileStore().list_entries():
        if wanted and entry.name not in wanted:
            continue
        if profile is None:
            rejected.append({"name": entry.name, "problems": [str(p) for p in problems]})
            continue
        rows.append(candidate_row(profile, entry.source))
    if wanted:  # the order given on the command line
        rows.sort(key=lambda r: wanted.index(r["name"]))
    if not rows:
        return StageResult(
            "failed",
            "no usable profile among the candidates",
            {"candidates": [], "rejected": rejected},
        )
    ctx.emit(
        f"candidates: {len(rows)} profile(s) ({', '.join(r['name'] for r in rows)})"
        + (
            f"; {len(rejected)} invalid: " + ", ".join(r["name"] for r in rejected)
            if rejected
            else ""
        )
    )
    return StageResult("done", None, {"candidates": rows, "rejected": rejected})
