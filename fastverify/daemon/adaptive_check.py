"""Verification of mode adaptive: did SGLang keep --speculative-adaptive?

SGLang 0.5.23 serves without adaptive when the args do not allow it (topk != 1, attention
DP, two-batch overlap, ...; `fastverify.sglang.adaptive.unsupported_reason`): it logs
`speculative_adaptive disabled: REASON. Falling back to static speculative params.` at
start-up and serves fixed steps. A switch to adaptive that SGLang disabled fails with reason
`adaptive_disabled`, quoting SGLang's line (and rolls back like any failed verification).
`summary(argv)`: the config, launch steps and tier candidates an adaptive server started
with, kept in its history record (`speculation`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastverify.daemon.failures import Failure
from fastverify.sglang import adaptive
from fastverify.sglang.launch import LaunchArgs


def check(argv: list[str], log_path: str | Path) -> Failure | None:
    """None when `argv` is not adaptive or SGLang kept adaptive; else the failure."""
    if adaptive.FLAG_ADAPTIVE not in argv:
        return None
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                reason = adaptive.parse_disabled(line)
                if reason is not None:
                    return Failure(
                        "adaptive_disabled",
                        f"SGLang serves without --speculative-adaptive: {reason}",
                        line=line.rstrip("\n"),
                        log=str(log_path),
                    )
    except OSError:
        return None
    return None


def summary(argv: list[str]) -> dict[str, Any] | None:
    """What an adaptive server was started with, for its history record: the config, the
    launch steps and each tier's candidate steps (None for any other server)."""
    if adaptive.FLAG_ADAPTIVE not in argv:
        return None
    args = LaunchArgs.from_argv(argv)
    i = argv.index(adaptive.FLAG_ADAPTIVE_CONFIG) if adaptive.FLAG_ADAPTIVE_CONFIG in argv else -1
    path = argv[i + 1] if 0 <= i < len(argv) - 1 else None
    out: dict[str, Any] = {
        "adaptive_config": path,
        "launch_steps": args.speculative.num_steps if args.speculative else None,
    }
    if path:
        try:
            cfg = adaptive.load_config(path)
            out["candidates"] = {
                str(b): t["candidate_steps"] for b, t in sorted(adaptive.tiers(cfg).items())
            }
        except adaptive.AdaptiveConfigError as exc:
            out["config_error"] = str(exc)
    return out
