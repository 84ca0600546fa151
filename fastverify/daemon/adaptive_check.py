"""Verification of mode adaptive: did SGLang keep --speculative-adaptive?

SGLang 0.5.23 serves without adaptive when the args do not allow it (topk != 1, attention
DP, two-batch overlap, ...; `fastverify.sglang.adaptive.unsupported_reason`): it logs
`speculative_adaptive disabled: REASON. Falling back to static speculative params.` at
start-up and serves fixed steps. A switch to adaptive that SGLang disabled fails with reason
`adaptive_disabled`, quoting SGLang's line (and rolls back like any failed verification).
"""

from __future__ import annotations

from pathlib import Path

from fastverify.daemon.failures import Failure
from fastverify.sglang import adaptive


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
