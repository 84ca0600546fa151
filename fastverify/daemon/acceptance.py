"""Measured acceptance and the speculation plan, kept by the daemon in its state dir.

- acceptance.json: every bench's accepted-drafts histograms on the engine the daemon serves
  (`POST /v1/acceptance`), the summed one and each request's own (the plan resamples
  requests), newest kept up to KEEP. The daemon labels each record from what it serves, not
  from what the client says: the profile, the mode, the model, the drafter, the topk, the
  launch steps and the weights ("real", or "dummy" for a trial); the client says what the
  prompts were (`dataset`: name, format, content hash; "synthetic" for random token ids) and
  the sampling (temperature, top_p). Only real-weights EAGLE-3 records at fixed steps and
  topk 1 are `usable`: a dummy drafter's acceptance is noise, an adaptive server's histogram
  mixes step counts, and a tree's (topk > 1) is no chain. Each record carries the host
  fingerprint the daemon computed at start (daemon/host_fingerprint.py), null until known.
  Acceptance SGLang forced (SGLANG_SIMULATE_ACC_LEN in the server's environment: the
  engine's `forced`) is labelled `acceptance_source` "forced (SGLANG_SIMULATE_ACC_LEN=L)"
  (else "measured"), on dummy weights too, and is `usable_forced` only: the plan takes it
  with --allow-forced.
- spec-plan.json and adaptive-config.json: the plan `fastverifyctl spec plan` made and the
  SGLang config it wrote (`POST /v1/spec/plan`), which mode adaptive serves.
Files are written atomically (durable.atomic_write_json).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fastverify.config import ADAPTIVE_CONFIG_NAME, weights_label
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.statestore import StateStore
from fastverify.durable import atomic_write_json
from fastverify.engines.sglang import load_format_of
from fastverify.host import here
from fastverify.sglang import adaptive
from fastverify.sglang.forced import label_of_record as forced_label
from fastverify.speculation.records import identity_of

ACCEPTANCE_FILE = "acceptance.json"
PLAN_FILE = "spec-plan.json"
KEEP = 50  # records kept, newest first (a bench never overwrites another's)


def key(rec: dict[str, Any]) -> str:
    """A record's key in acceptance.json: what it was measured on, and when."""
    return f"{rec['profile']}/{rec['mode']}/{rec['steps']}@{rec['measured_at']:.3f}"


def _histograms(value: Any, steps: int, field: str) -> list[list[int]]:
    if not isinstance(value, list) or not all(
        isinstance(h, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                    for n in h)
        for h in value
    ):  # fmt: skip
        raise RequestError(422, f"field {field!r} must be lists of non-negative ints",
                           reason="invalid_histogram")  # fmt: skip
    for h in value:
        if len(h) - 1 > steps:
            raise RequestError(422, f"field {field!r}: a histogram of {len(h)} entries; "
                               f"{steps} steps allow 0..{steps} accepted drafts",
                               reason="invalid_histogram")  # fmt: skip
    return [[int(n) for n in h] for h in value if sum(h) > 0]


def record(
    store: StateStore, handle: Any, body: Mapping[str, Any], forced: dict[str, Any] | None
) -> dict[str, Any]:
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
    ident = identity_of(list(handle.argv))
    if ident is None:
        raise RequestError(422, f"{handle.profile}/{handle.mode} does not draft: no acceptance",
                           reason="not_speculative")  # fmt: skip
    steps = ident["steps"]
    hist = body.get("histogram")
    ok = isinstance(hist, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in hist
    )
    if not isinstance(hist, list) or not ok or not sum(hist):
        msg = f"field 'histogram' must be non-negative ints, at least one pass; got {hist!r}"
        raise RequestError(422, msg, reason="invalid_histogram")
    _histograms([hist], steps, "histogram")
    requests = _histograms(body.get("requests") or [], steps, "requests")
    dataset: dict[str, Any] = body.get("dataset") or {}
    sampling: dict[str, Any] = body.get("sampling") or {}
    if not isinstance(dataset, dict):
        dataset = {}
    if not isinstance(sampling, dict):
        sampling = {}
    weights = weights_label(load_format_of(list(handle.argv)))
    adaptive_on = adaptive.FLAG_ADAPTIVE in handle.argv
    why_not = None
    if weights == "dummy" and not forced:
        why_not = "dummy weights (a trial): the drafter guesses at random; never used"
    elif adaptive_on:
        why_not = "an adaptive server: its passes ran at several step counts; never used"
    elif ident["topk"] not in (None, 1):
        why_not = f"topk {ident['topk']}: a tree's histogram is no chain; never planned with"
    elif not requests:
        why_not = "no per-request histograms (an older bench): the plan resamples requests"
    usable_forced = bool(forced) and why_not is None
    if forced and why_not is None:
        why_not = (f"{forced['label']}: SGLang set the accept length, the drafter did not "
                   "earn it; spec plan uses it only with --allow-forced")  # fmt: skip
    rec = {
        "profile": handle.profile,
        "mode": handle.mode,
        **ident,
        "weights": weights,
        "dataset": {k: dataset[k] for k in sorted(dataset)} or {"name": "unknown"},
        "synthetic": bool(dataset.get("synthetic", not dataset)),
        "sampling": {
            "temperature": float(sampling.get("temperature", 0.0)),
            "top_p": float(sampling.get("top_p", 1.0)),
        },
        "input_len": body.get("input_len"),
        "output_len": body.get("output_len"),
        "histogram": [int(n) for n in hist],
        "requests": requests,
        "verifies": sum(hist),
        "measured_at": float(body.get("measured_at") or time.time()),
        "usable": why_not is None,
        "acceptance_source": forced_label(forced),
        "forced": forced,
        "usable_forced": usable_forced,
        **({"why_not_usable": why_not} if why_not else {}),
        "fingerprint": here.load(store.dir),  # the host it was measured on
    }
    data = store.load_json(ACCEPTANCE_FILE)
    data[key(rec)] = rec
    newest = sorted(data.items(), key=lambda kv: -float(kv[1].get("measured_at", 0) or 0))
    store.save_json(ACCEPTANCE_FILE, dict(newest[:KEEP]))
    return rec


def load(store: StateStore) -> dict[str, Any]:
    return store.load_json(ACCEPTANCE_FILE)


def save_plan(store: StateStore, body: Mapping[str, Any]) -> dict[str, Any]:
    """Check the plan's adaptive config as SGLang's `_load_adaptive_config` would, then write
    it and the plan; returns the plan as stored (with the config's path)."""
    cfg = body.get("adaptive_config")
    plan = body.get("plan")
    if not isinstance(plan, dict):
        raise RequestError(422, "field 'plan' must be the plan object", reason="invalid_plan")
    try:
        adaptive.tiers(cfg)
    except adaptive.AdaptiveConfigError as exc:
        raise RequestError(422, f"field 'adaptive_config': {exc}", reason="invalid_plan") from None
    path = store.dir / ADAPTIVE_CONFIG_NAME
    atomic_write_json(path, cfg)
    stored = {**plan, "adaptive_config": str(path), "adaptive_config_json": cfg,
              "stored_at": time.time()}  # fmt: skip
    store.save_json(PLAN_FILE, stored)
    return stored
