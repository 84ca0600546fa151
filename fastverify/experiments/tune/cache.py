"""The decision cache: a finished, applied tune's decision.json kept under this host's tune
dir by its host fingerprint (`<tune dir>/decisions/<fingerprint id>.json`), and the
winner's evidence a reuse on an identical host checks against (`tune --reuse`, reuse.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastverify.durable import atomic_write_json
from fastverify.experiments.tune.context import TuneConfig

CACHE_DIR = "decisions"


def evidence(win: Mapping[str, Any], cfg: TuneConfig) -> dict[str, Any]:
    """What the winner measured and with which bench settings (decision.json `evidence`)."""
    return {
        "evidence": win.get("evidence"),
        "tokens_per_second": win.get("tokens_per_second"),
        "ci95": win.get("ci95"),
        "samples": win.get("samples") or [],
        "bench": {
            "concurrency": cfg.concurrency,
            "input_len": cfg.input_len,
            "output_len": cfg.output_len,
        },
    }


def store(tune_dir: Path, result: Mapping[str, Any]) -> Path | None:
    """Put a finished, applied decision in this host's cache, keyed by its fingerprint."""
    fp = result.get("fingerprint") or {}
    if not fp.get("id") or not (result.get("decision") or {}).get("applied"):
        return None
    path = tune_dir / CACHE_DIR / f"{fp['id']}.json"
    atomic_write_json(path, result, mode=0o644)
    return path
