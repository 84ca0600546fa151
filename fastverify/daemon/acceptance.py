"""Measured acceptance and the speculation plan, kept by the daemon in its state dir.

- acceptance.json: one accept curve per (profile, mode, steps), from the accepted-drafts
  histogram a bench measured on the engine the daemon serves (`POST /v1/acceptance`). The
  daemon labels each record from what it serves, not from what the client says: the
  profile, the mode, the launch steps and the weights ("real", or "dummy" for a trial).
  Only real-weights EAGLE-3 records at fixed steps are `usable`: a dummy drafter's
  acceptance is noise, and an adaptive server's histogram mixes step counts.
- spec-plan.json and adaptive-config.json: the plan `fastverifyctl spec plan` made and the
  SGLang config it wrote (`POST /v1/spec/plan`), which mode adaptive serves.
Files are written atomically (statestore.atomic_write_json).
"""

from __future__ import annotations

import time
from typing import Any

from fastverify.config import ADAPTIVE_CONFIG_NAME, weights_label
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.statestore import StateStore, atomic_write_json
from fastverify.engines.sglang import load_format_of
from fastverify.sglang import adaptive
from fastverify.sglang.launch import LaunchArgs

ACCEPTANCE_FILE = "acceptance.json"
PLAN_FILE = "spec-plan.json"


def key(profile: str, mode: str, steps: int) -> str:
    return f"{profile}/{mode}/{steps}"


def _steps_of(argv: list[str]) -> int | None:
    spec = LaunchArgs.from_argv(argv).speculative
    return spec.num_steps if spec is not None else None


def record(store: StateStore, handle: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Keep a histogram measured on `handle` (the serving engine). RequestError: 409 when
    nothing serves or it is not the profile/mode the client measured, 422 for a bad
    histogram or a baseline server."""
    if handle is None or not getattr(handle, "serving", False):
        raise RequestError(409, "no engine is serving: nothing to attribute acceptance to",
                           reason="not_serving")  # fmt: skip
    for field in ("profile", "mode"):
        if body.get(field) is not None and body[field] != getattr(handle, field):
            raise RequestError(
                409,
                f"the histogram was measured on {field} {body[field]!r}, but the daemon now "
                f"serves {getattr(handle, field)!r} (a switch during the bench): not recorded",
                reason="served_changed",
            )
    steps = _steps_of(list(handle.argv))
    if steps is None:
        raise RequestError(422, f"{handle.profile}/{handle.mode} does not draft: no acceptance",
                           reason="not_speculative")  # fmt: skip
    hist = body.get("histogram")
    if (
        not isinstance(hist, list)
        or not hist
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in hist)
        or sum(hist) == 0
    ):
        msg = f"field 'histogram' must be non-negative ints, at least one pass; got {hist!r}"
        raise RequestError(422, msg, reason="invalid_histogram")
    if len(hist) - 1 > steps:
        msg = f"histogram has {len(hist)} entries; {steps} steps allow 0..{steps} accepted drafts"
        raise RequestError(422, msg, reason="invalid_histogram")
    weights = weights_label(load_format_of(list(handle.argv)))
    adaptive_on = adaptive.FLAG_ADAPTIVE in handle.argv
    why_not = None
    if weights == "dummy":
        why_not = "dummy weights (a trial): the drafter guesses at random; never used"
    elif adaptive_on:
        why_not = "an adaptive server: its passes ran at several step counts; never used"
    rec = {
        "profile": handle.profile,
        "mode": handle.mode,
        "steps": steps,
        "weights": weights,
        "histogram": [int(n) for n in hist],
        "verifies": sum(hist),
        "measured_at": float(body.get("measured_at") or time.time()),
        "usable": why_not is None,
        **({"why_not_usable": why_not} if why_not else {}),
    }
    data = store.load_json(ACCEPTANCE_FILE)
    data[key(rec["profile"], rec["mode"], steps)] = rec
    store.save_json(ACCEPTANCE_FILE, data)
    return rec


def load(store: StateStore) -> dict[str, Any]:
    return store.load_json(ACCEPTANCE_FILE)


def save_plan(store: StateStore, body: dict[str, Any]) -> dict[str, Any]:
    """Check the plan's adaptive config as SGLang's `_load_adaptive_config` would, then write
    it and the plan; returns the plan as stored (with the config's path)."""
    cfg = body.get("adaptive_config")
    plan = body.get("plan")
    if not isinstance(plan, dict):
        raise RequestError(422, "field 'plan' must be the plan object", reason="invalid_plan")
    try:
        adaptive.tiers(cfg)  # type: ignore[arg-type]
    except adaptive.AdaptiveConfigError as exc:
        raise RequestError(422, f"field 'adaptive_config': {exc}", reason="invalid_plan") from None
    path = store.dir / ADAPTIVE_CONFIG_NAME
    atomic_write_json(path, cfg)
    stored = {**plan, "adaptive_config": str(path), "adaptive_config_json": cfg,
              "stored_at": time.time()}  # fmt: skip
    store.save_json(PLAN_FILE, stored)
    return stored
