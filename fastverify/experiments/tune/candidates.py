"""Tune stage 2, candidates: shipped and user profiles (or the ones named), each with its
all-reduce backend, CUDA-graph requirement and validation problems. A tuner profile
derived for this rank count (stage `derive_tuner`, GPUs only) joins them afterwards.

At TP 1 there is no all-reduce: profiles that differ only in NCCL's variables and the
all-reduce backend serve the same server, so they cannot differ and are not ranked. Each
such group is measured once (the serving profile where it is one of them, else the first),
and the stage says which profiles it stands for (`tp1`; decide and the report say it too)."""

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


TP1_WHY = (
    "TP 1: one GPU has no all-reduce, so NCCL profiles (and all-reduce backends) cannot differ"
)
# requirements that only choose the all-reduce backend (nothing to choose at TP 1)
_COLLECTIVE_REQUIRES = frozenset({"custom-all-reduce"})


def _collective(name: str) -> bool:
    """An environment variable that only tunes collectives: NCCL's, or SGLang's all-reduce
    backend choice (PCIe-IPC, custom all-reduce)."""
    return name.startswith("NCCL_") or any(
        word in name for word in ("ALLREDUCE", "ALL_REDUCE", "PCIE_IPC")
    )


def tp1_key(profile: Any) -> tuple[Any, ...]:
    """What a profile changes on a one-GPU server: its environment and requirements without
    the collective ones (equal keys: the same server at TP 1)."""
    env: Mapping[str, str] = getattr(profile, "env", None) or {}
    requires = dict(getattr(profile, "requires", {}) or {})
    return (
        tuple(sorted((k, v) for k, v in env.items() if not _collective(k))),
        tuple(sorted((k, str(v)) for k, v in requires.items() if k not in _COLLECTIVE_REQUIRES)),
    )


def collapse_tp1(
    rows: list[dict[str, Any]], profiles: Mapping[str, Any], serving: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """At TP 1: one row per group of profiles that serve the same one-GPU server (the serving
    profile's row where it is in the group, else the first), and the groups that stood for
    more than one: `[{kept, same_as: [...]}]`."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tp1_key(profiles[r["name"]]), []).append(r)
    kept, merged = [], []
    for members in groups.values():
        first = next((r for r in members if r["name"] == serving), members[0])
        kept.append(first)
        others = [r["name"] for r in members if r is not first]
        if others:
            first["stands_for"] = others
            merged.append({"kept": first["name"], "same_as": others})
    order = {id(r): i for i, r in enumerate(rows)}
    return sorted(kept, key=lambda r: order[id(r)]), merged


def tp1_text(tp1: Mapping[str, Any] | None) -> str | None:
    """The sentence decide and the report say at TP 1 (None: not TP 1)."""
    if not tp1:
        return None
    stood = "; ".join(f"{g['kept']} stood for {', '.join(g['same_as'])}" for g in tp1["groups"])
    return f"{TP1_WHY}: they were not ranked" + (f" ({stood})" if stood else "")


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
    loaded: dict[str, Any] = {}
    for entry, profile, problems in ProfileStore().list_entries():
        if wanted and entry.name not in wanted:
            continue
        if profile is None:
            rejected.append({"name": entry.name, "problems": [str(p) for p in problems]})
            continue
        rows.append(candidate_row(profile, entry.source))
        loaded[entry.name] = profile
    if wanted:  # the order given on the command line
        rows.sort(key=lambda r: wanted.index(r["name"]))
    engine = ctx.data("inventory").get("engine") or {}
    tp1: dict[str, Any] | None = None
    if engine.get("tp_size") == 1 and rows:
        rows, groups = collapse_tp1(rows, loaded, engine.get("serving"))
        tp1 = {"why": TP1_WHY, "groups": groups}
        ctx.emit(f"candidates: {tp1_text(tp1)}; measuring "
                 f"{', '.join(r['name'] for r in rows)}")  # fmt: skip
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
    return StageResult("done", None, {"candidates": rows, "rejected": rejected, "tp1": tp1})
