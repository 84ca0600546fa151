"""Prove a start's settings arrived: process environments and NCCL's own confirmations.

1. `check_process_env(pid, expected)`: read /proc/PID/environ of the server and every
   live descendant (its TP workers, schedulers, ...) and compare the NCCL variables with
   `expected` (the NCCL_* part of the environment the engine was spawned with): every
   expected variable present with the same value, and no other NCCL tuning variable.
2. `check_nccl_debug(files, expected)`: when the start ran with NCCL_DEBUG=INFO and a
   per-start NCCL_DEBUG_FILE, compare NCCL's `NCCL_X set by environment to Y` lines with
   the profile. A value NCCL confirms that differs from the profile is a mismatch; a
   variable NCCL reports that the profile does not set (from an nccl.conf) is a warning.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from fastverify.daemon import procs

_SET_BY_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*?)\s*$")


def nccl_part(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("NCCL_")}


def _is_tuning(name: str) -> bool:
    from fastverify.profiles.effective import is_nccl_tuning_var

    return is_nccl_tuning_var(name)


@dataclass
class ProcessCheck:
    pid: int
    name: str
    ok: bool
    missing: list[str] = field(default_factory=list)
    different: dict[str, list[str]] = field(default_factory=dict)  # name -> [expected, actual]
    unexpected: dict[str, str] = field(default_factory=dict)
    engine_set: dict[str, str] = field(default_factory=dict)  # set by the engine itself
    error: str | None = None


@dataclass
class VerifyReport:
    ok: bool
    message: str
    processes: list[ProcessCheck] = field(default_factory=list)
    nccl: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_env(
    actual: dict[str, str],
    expected: dict[str, str],
    engine_owned: Collection[str] = (),
) -> ProcessCheck:
    """Compare one process's environment with the expected NCCL variables.

    `engine_owned`: variables the engine sets for its own workers (SGLang sets
    NCCL_CUMEM_ENABLE and NCCL_NVLS_ENABLE before spawning its schedulers). Present without
    the profile asking for them, they are recorded in `engine_set` and accepted; a profile
    value the engine overrode is still a mismatch (the profile did not take effect)."""
    chk = ProcessCheck(pid=0, name="", ok=True)
    for key, value in expected.items():
        if key not in actual:
            chk.missing.append(key)
        elif actual[key] != value:
            chk.different[key] = [value, actual[key]]
    for key, value in actual.items():
        if key.startswith("NCCL_") and key not in expected and _is_tuning(key):
            if key in engine_owned:
                chk.engine_set[key] = value
            else:
                chk.unexpected[key] = value
    chk.ok = not (chk.missing or chk.different or chk.unexpected)
    return chk


def check_process_env(
    pid: int,
    expected: dict[str, str],
    engine_owned: Collection[str] = (),
    proc_root: Path = Path("/proc"),
) -> VerifyReport:
    """Compare the server `pid` and all its descendants with `expected` NCCL variables
    (`engine_owned`: see compare_env; only accepted in descendants, never in the server)."""
    checks: list[ProcessCheck] = []
    for proc in procs.descendants(pid, proc_root):
        try:
            env = proc.environ()
            name = proc.name()
        except psutil.NoSuchProcess:
            continue
        except (psutil.AccessDenied, OSError) as exc:
            checks.append(ProcessCheck(proc.pid, "?", False, error=f"cannot read environ: {exc}"))
            continue
        chk = compare_env(env, expected, engine_owned if proc.pid != pid else ())
        chk.pid, chk.name = proc.pid, name
        checks.append(chk)
    if not checks:
        return VerifyReport(False, f"server process {pid} is gone; nothing to verify")
    bad = [c for c in checks if not c.ok]
    if bad:
        first = bad[0]
        parts = []
        if first.error:
            parts.append(first.error)
        if first.missing:
            parts.append(f"missing {', '.join(first.missing)}")
        for k, (want, got) in first.different.items():
            hint = " (the engine sets it for its workers)" if k in engine_owned else ""
            parts.append(f"{k}={got} (profile: {want}){hint}")
        for k, v in first.unexpected.items():
            parts.append(f"{k}={v} not in the profile")
        msg = f"{len(bad)} of {len(checks)} process(es) differ; pid {first.pid}: " + "; ".join(
            parts
        )
        return VerifyReport(False, msg, checks)
    nccl = ", ".join(f"{k}={v}" for k, v in sorted(expected.items())) or "no NCCL variables"
    report = VerifyReport(True, f"{len(checks)} process(es) hold exactly {nccl}", checks)
    own = {k: v for c in checks for k, v in c.engine_set.items()}
    if own:
        set_by = ", ".join(f"{k}={v}" for k, v in sorted(own.items()))
        report.warnings.append(f"the engine itself sets {set_by} in its workers")
        report.message += f" (plus, set by the engine for its workers: {set_by})"
    return report


def _normalise(value: str) -> str:
    # NCCL prints numbers with a trailing period: "set by environment to 16777216."
    if value.endswith(".") and value[:-1].lstrip("-").isdigit():
        return value[:-1]
    return value


def parse_set_by_env(lines: Iterable[str]) -> dict[str, str]:
    """NCCL's `NCCL_X set by environment to Y` confirmations -> {NCCL_X: Y}."""
    out: dict[str, str] = {}
    for line in lines:
        m = _SET_BY_ENV.search(line)
        if m:
            out[m.group(1)] = _normalise(m.group(2))
    return out


def check_nccl_debug(files: Iterable[Path], expected: dict[str, str]) -> dict[str, Any]:
    """Compare NCCL's confirmations in `files` with `expected`; returns a report dict with
    `ok` (None when NCCL confirmed nothing), `confirmed`, `mismatched`, `not_in_profile`."""
    confirmed: dict[str, str] = {}
    read = []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                confirmed.update(parse_set_by_env(fh))
            read.append(str(path))
        except OSError:
            continue
    mismatched = {
        k: [expected[k], v] for k, v in confirmed.items() if k in expected and expected[k] != v
    }
    not_in_profile = {k: v for k, v in confirmed.items() if k not in expected}
    ok: bool | None = None if not confirmed else not mismatched
    return {
        "ok": ok,
        "files": read,
        "confirmed": confirmed,
        "mismatched": mismatched,
        "not_in_profile": not_in_profile,
    }
