"""Classify why an engine start failed, from its log, quoting the line that says so.

Reasons (stable strings; used in the journal, status, HTTP results and as the
`reason` label of `fastverify_engine_restarts_total`):

cuda_graph_capture  SGLang: "Capture cuda graph failed" (decode/draft runners) or "Fail when
                    using backend: breakable for prefill runner" (0.5.23 breakable prefill
                    capture), e.g. NCCL_ALGO=Tree + CUDA graphs
cuda_oom            "CUDA out of memory" / torch.OutOfMemoryError / cudaErrorMemoryAllocation
nccl_error          "NCCL WARN", "NCCL error", ncclUnhandledCudaError, ... (NCCL itself failed)
port_in_use         "Address already in use" / errno 98
model_path_missing  the model path does not exist / is not a HF repo / no config.json
import_error        ModuleNotFoundError / ImportError (broken environment)
argv_rejected       SGLang's argument parser refused the argv ("unrecognized arguments",
                    "ambiguous option", ...)
readiness_timeout   no ready signal within the readiness timeout
env_mismatch        the processes' environment (or NCCL's own report) differs from the profile
engine_override     the engine replaced a profile variable by its own rules (SGLang's
                    deterministic inference sets NCCL_ALGO), or keeps it under protest
                    (a profile NCCL_GRAPH_REGISTER=1 with TP > 1 and CUDA graphs)
worker_exited       (crash restarts) a TP worker verified at READY died while the server lived
engine_unresponsive (crash restarts) the live engine stopped answering SGLang's
                    /health_generate (daemon/watch.py), quoting its "Health check failed" line
tuner_not_loaded    a tuner profile's start: NCCL printed no load of the tuner plugin
tuner_unsupported   NCCL opened the plugin file but found no tuner symbol it knows
tuner_wrong_plugin  NCCL loaded another tuner plugin than fastverify's
tuner_refused       fastverify's plugin loaded but refused its table or the ABI (WARN)
tuner_no_nccl_log   no NCCL INFO output to confirm the tuner from
state_dir_full      the engine exited while the state dir (its log, the pid file, the journal)
                    had no space left: the disk, not the profile, stopped it
adaptive_disabled   mode adaptive: SGLang logged "speculative_adaptive disabled: REASON" and
                    serves fixed steps (fastverify.daemon.adaptive_check)
exited(CODE)        the engine exited for a reason none of the above recognised; negative
                    CODE = killed by that signal (exited(-9) = SIGKILL)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from fastverify.nccl import loglines as nccl_lines
from fastverify.sglang import loglines as sglang_lines

# Most specific first: a CUDA-graph capture failure caused by OOM is reported as OOM's
# consequence by SGLang ("Capture cuda graph failed: CUDA out of memory"), so OOM wins there.
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "cuda_oom",
        re.compile(
            r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|cudaErrorMemoryAllocation"
            r"|CUDA error: out of memory|Not enough memory\. Please try to increase "
            r"--mem-fraction-static",
            re.I,
        ),
    ),
    ("cuda_graph_capture", sglang_lines.CAPTURE_FAILURE),  # SGLang's text (fastverify.sglang)
    ("port_in_use", re.compile(r"Address already in use|\[Errno 98\]|EADDRINUSE", re.I)),
    (
        "model_path_missing",
        re.compile(
            r"(model path|model_path).*(does not exist|not found|not exist)"
            r"|Repo id must be in the form|is not a valid model identifier"
            r"|HFValidationError|does not appear to have a file named config\.json"
            r"|No such file or directory: .*(config\.json|/models?/)"
            r"|Can't load the configuration of",
            re.I,
        ),
    ),
    ("import_error", re.compile(r"ModuleNotFoundError|ImportError|No module named ", re.I)),
    (
        "argv_rejected",
        re.compile(
            r"error: unrecognized arguments|error: argument --|error: the following arg"
            r"|error: ambiguous option"
        ),
    ),
    ("nccl_error", nccl_lines.FAILURE),  # NCCL's own failure text (fastverify.nccl)
]

TUNER_REASONS = (
    "tuner_not_loaded",
    "tuner_unsupported",
    "tuner_wrong_plugin",
    "tuner_refused",
    "tuner_no_nccl_log",
)
REASONS = (
    "cuda_graph_capture",
    "cuda_oom",
    "nccl_error",
    "port_in_use",
    "model_path_missing",
    "import_error",
    "argv_rejected",
    "readiness_timeout",
    "env_mismatch",
    "engine_override",
    "worker_exited",
    "engine_unresponsive",
    "state_dir_full",
    *TUNER_REASONS,  # daemon/tuner_check.py: NCCL did not load the profile's tuner
)


@dataclass(frozen=True)
class Failure:
    """Why a start failed: `reason` (see module doc), a one-line `message`, the quoted log
    `line` that matched (None when nothing matched) and the `log` file path."""

    reason: str
    message: str
    line: str | None = None
    log: str | None = None
    exit_code: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _signal_name(code: int) -> str:
    import signal

    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


# Lines SGLang prints on every start that name an error it has already handled: its model
# registry skips a model module whose optional dependency is missing (srt/models/registry.py,
# "Ignore import error when loading sglang.srt.models.X: No module named 'Y'").
BENIGN = re.compile(r"Ignore import error when loading ")


# A Python exception's own line ("RuntimeError: The size of tensor a (1536) must match ..."),
# bare or behind SGLang's "[time] " prefix: the cause SGLang prints just before its own
# summary ("Fail when using backend: breakable for prefill runner.").
EXCEPTION_LINE = re.compile(r"^(?:\[[^\]]*\]\s*)?(?:[\w.]+\.)?\w*(?:Error|Exception): \S")


def classify_lines(lines: Iterable[str]) -> tuple[str, str] | None:
    """(reason, line) for the highest-priority pattern found in `lines`, else None."""
    match = _classify(lines)
    return (match[0], match[1]) if match else None


def _classify(lines: Iterable[str]) -> tuple[str, str, str | None] | None:
    """(reason, line, cause): `cause` is the exception line printed before `line` when
    `line` is a summary of SGLang's rather than the exception itself."""
    found: dict[str, tuple[str, str | None]] = {}
    last_exception: str | None = None
    for line in lines:
        if BENIGN.search(line):
            continue
        for reason, pattern in PATTERNS:
            if reason not in found and pattern.search(line):
                cause = None if EXCEPTION_LINE.search(line) else last_exception
                found[reason] = (line.rstrip(), cause)
        if EXCEPTION_LINE.search(line):
            last_exception = re.sub(r"^\[[^\]]*\]\s*", "", line.strip())
    for reason, _ in PATTERNS:
        if reason in found:
            return reason, *found[reason]
    return None


def classify(
    lines: Iterable[str],
    *,
    exit_code: int | None,
    log: str | None = None,
    timed_out: bool = False,
    timeout_s: float | None = None,
) -> Failure:
    """Classify a failed start from the engine's log lines and exit status."""
    match = _classify(lines)
    if match:
        reason, line, cause = match
        where = f" (exit code {exit_code})" if exit_code is not None else ""
        because = f" ({cause})" if cause else ""
        return Failure(reason, f"{line.strip()}{because}{where}", line, log, exit_code)
    if timed_out:
        msg = f"engine not ready within {timeout_s:g} s" if timeout_s else "engine not ready"
        return Failure("readiness_timeout", msg, None, log, exit_code)
    if exit_code is None:
        return Failure("exited(?)", "engine disappeared", None, log, None)
    if exit_code < 0:
        msg = f"engine killed by {_signal_name(exit_code)}"
    else:
        msg = f"engine exited with code {exit_code}"
    return Failure(f"exited({exit_code})", msg, None, log, exit_code)
