"""Verification, 3 of 4 (verifier.py tells the story): the proofs that a start's settings
arrived, which the env and nccl verifiers (checks.py) read: process environments and NCCL's
own confirmations.

1. `check_process_env(pid, expected, engine_env=...)`: read /proc/PID/environ of the server
   and every live descendant (its TP workers, schedulers, ...) and compare the NCCL
   variables with `expected` (the NCCL_* part of the environment the engine was spawned
   with, plus the profile's SGLANG_* variables such as SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1,
   `sglang_part`): every expected variable present with the same value, and no other NCCL tuning
   variable, except those the engine adds by its own rules (`fastverify.sglang.envrules`:
   SGLang 0.5.23 adds NCCL_GRAPH_REGISTER=0 with TP > 1, ...), which workers may hold and
   the report shows (`engine_added`). A profile variable the engine replaces (deterministic
   inference's NCCL_ALGO) or keeps under protest (NCCL_GRAPH_REGISTER=1) fails with reason
   `engine_override`, not `env_mismatch`. With `composed` (the names the daemon started
   the server with), the server's environment may hold nothing beyond them, and no worker
   a loader/interpreter variable beyond them (LD_PRELOAD, PYTHONPATH, ...).
2. `check_nccl_debug(files, expected)`: when the start ran with NCCL_DEBUG=INFO and a
   per-start NCCL_DEBUG_FILE, compare NCCL's `NCCL_X set by environment to Y` lines with
   the profile. A value NCCL confirms that differs from the profile is a mismatch; a
   variable NCCL reports that the profile does not set (from an nccl.conf) is a warning.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from fastverify.daemon import procs
from fastverify.nccl.loglines import set_by_env
from fastverify.sglang.envrules import EngineEnv


def nccl_part(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("NCCL_")}


def sglang_part(env: Mapping[str, str]) -> dict[str, str]:
    """A profile's SGLang variables (e.g. SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1): verified in
    every process like its NCCL ones."""
    return {k: v for k, v in env.items() if k.startswith("SGLANG_")}


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
    overridden: dict[str, list[str]] = field(default_factory=dict)  # [profile, engine]
    error: str | None = None


@dataclass
class VerifyReport:
    ok: bool
    message: str
    processes: list[ProcessCheck] = field(default_factory=list)
    nccl: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    reason: str | None = None  # None when ok; env_mismatch | engine_override
    engine_added: dict[str, str] = field(default_factory=dict)
    engine_rules: dict[str, Any] | None = None  # EngineEnv.to_dict() the check used

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unreadable_environ(pid: int) -> str:
    return (
        f"/proc/{pid}/environ does not hold the environment the process started with (it "
        f"lacks {procs.ENGINE_ID_VAR}): its process title was written over it (setproctitle "
        f"without {procs.KEEP_ENVIRON_VAR}=1, which the daemon sets for the engines it starts)"
    )


# What a `server.python` wrapper (the operator's own program, e.g. one that puts SGLang on
# its path) sets for the interpreter it runs: its business, not a profile's.
WRAPPER_PATHS = frozenset({"PATH", "PYTHONPATH", "LD_LIBRARY_PATH"})
# The families that change what NCCL and SGLang do: only a profile or [server.env] sets them.
ENGINE_FAMILIES = ("NCCL_", "SGLANG_", "FLASHINFER_", "TORCH_NCCL_")


def _beyond(actual: Mapping[str, str], composed: Collection[str], worker: bool) -> dict[str, str]:
    """Names in a process's environment the daemon did not compose (values masked) that
    matter: any that makes the loader or the interpreter run code of its choosing (but the
    wrapper's own paths, WRAPPER_PATHS), and in the server any of NCCL's, SGLang's or
    FlashInfer's (its workers' are the engine's own rules, compare_env's)."""
    from fastverify.profiles.env_policy import is_loader_var
    from fastverify.redact import mask_env

    def matters(k: str) -> bool:
        if is_loader_var(k):
            return k not in WRAPPER_PATHS
        return not worker and k.startswith(ENGINE_FAMILIES)

    return mask_env({k: v for k, v in actual.items() if k not in composed and matters(k)})


def compare_env(
    actual: dict[str, str],
    expected: dict[str, str],
    engine_owned: Collection[str] = (),
    engine_env: EngineEnv | None = None,
) -> ProcessCheck:
    """Compare one process's environment with the expected NCCL variables.

    `engine_env`: what the engine's rules add or override in its workers. Added (or
    possibly added) variables present without the profile asking for them are recorded in
    `engine_set` and accepted; a profile value the rules say the engine replaces lands in
    `overridden`. `engine_owned`: names accepted in workers whatever their value (for
    engines without rules)."""
    chk = ProcessCheck(pid=0, name="", ok=True)
    allowed = engine_env.allowed_extra() if engine_env is not None else {}
    overrides = engine_env.overrides if engine_env is not None else {}
    for key, value in expected.items():
        if key not in actual:
            chk.missing.append(key)
        elif actual[key] != value:
            if key in overrides and actual[key] == overrides[key][1]:
                chk.overridden[key] = [value, actual[key]]
            else:
                chk.different[key] = [value, actual[key]]
    for key, value in actual.items():
        if key.startswith("NCCL_") and key not in expected and _is_tuning(key):
            if key in allowed or key in engine_owned:
                chk.engine_set[key] = value
            else:
                chk.unexpected[key] = value
    chk.ok = not (chk.missing or chk.different or chk.unexpected or chk.overridden)
    return chk


def check_process_env(
    pid: int,
    expected: dict[str, str],
    engine_owned: Collection[str] = (),
    proc_root: Path = Path("/proc"),
    engine_env: EngineEnv | None = None,
    composed: Collection[str] | None = None,
) -> VerifyReport:
    """Compare the server `pid` and all its descendants with `expected` NCCL variables.
    `engine_owned` / `engine_env`: see compare_env; only applied to descendants: the
    server's own /proc environ is the one it was started with. `composed`: the names of the
    environment the daemon started the server with; anything beyond them is `unexpected`
    (`_beyond`)."""
    checks: list[ProcessCheck] = []
    engine_id = None
    for proc in procs.descendants(pid, proc_root):
        try:
            env = proc.environ()
            name = proc.name()
        except psutil.NoSuchProcess:
            continue
        except (psutil.AccessDenied, OSError) as exc:
            checks.append(ProcessCheck(proc.pid, "?", False, error=f"cannot read environ: {exc}"))
            continue
        worker = proc.pid != pid
        if not worker:
            engine_id = env.get(procs.ENGINE_ID_VAR)
        elif engine_id and env.get(procs.ENGINE_ID_VAR) != engine_id:
            # every process the server starts inherits the engine id: without it, what
            # /proc shows is not the environment the process runs with
            checks.append(ProcessCheck(proc.pid, name, False, error=unreadable_environ(proc.pid)))
            continue
        chk = compare_env(
            env, expected, engine_owned if worker else (), engine_env if worker else None
        )
        chk.pid, chk.name = proc.pid, name
        if composed is not None and (beyond := _beyond(env, composed, worker)):
            chk.unexpected.update(beyond)
            chk.ok = False
        checks.append(chk)
    rules = engine_env.to_dict() if engine_env is not None else None
    if not checks:
        return VerifyReport(
            False, f"server process {pid} is gone; nothing to verify", reason="env_mismatch"
        )
    overridden = {k: v for c in checks for k, v in c.overridden.items()}
    conflicts = engine_env.conflicts if engine_env is not None else {}
    bad = [c for c in checks if not c.ok]
    if bad and not overridden:
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
            whose = "the profile" if k.startswith("NCCL_") else "what fastverifyd composed"
            parts.append(f"{k}={v} not in {whose}")
        msg = f"{len(bad)} of {len(checks)} process(es) differ; pid {first.pid}: " + "; ".join(
            parts
        )
        return VerifyReport(False, msg, checks, reason="env_mismatch", engine_rules=rules)
    if overridden or conflicts:
        version = engine_env.version if engine_env is not None else "?"
        parts = [
            f"SGLang {version} replaced the profile's {k}={want} with {got}"
            for k, (want, got) in sorted(overridden.items())
        ]
        parts += [conflicts[k] for k in sorted(conflicts)]
        msg = "engine override: " + "; ".join(parts)
        return VerifyReport(False, msg, checks, reason="engine_override", engine_rules=rules)
    nccl = ", ".join(f"{k}={v}" for k, v in sorted(nccl_part(expected).items()))
    nccl = nccl or "no NCCL variables"
    other = ", ".join(f"{k}={v}" for k, v in sorted(expected.items()) if not k.startswith("NCCL_"))
    held = f"hold {other} and exactly {nccl}" if other else f"hold exactly {nccl}"
    report = VerifyReport(True, f"{len(checks)} process(es) {held}", checks)
    report.engine_rules = rules
    own = {k: v for c in checks for k, v in c.engine_set.items()}
    report.engine_added = own
    if own:
        set_by = ", ".join(f"{k}={v}" for k, v in sorted(own.items()))
        who = f"SGLang {engine_env.version}" if engine_env is not None else "the engine"
        report.warnings.append(f"{who} adds {set_by} in its workers")
        report.message += f" (plus, added by {who} by its own rules: {set_by})"
    if engine_env is not None:
        workers = [c for c in checks if c.pid != pid]
        absent = sorted(k for k in engine_env.added if workers and k not in own)
        if absent:
            report.warnings.append(
                f"SGLang {engine_env.version} should have added {', '.join(absent)} "
                "in its workers; they do not hold it"
            )
    return report


def parse_set_by_env(lines: Iterable[str]) -> dict[str, str]:
    """NCCL's `NCCL_X set by environment to Y` confirmations -> {NCCL_X: Y}
    (fastverify.nccl.loglines.set_by_env)."""
    return set_by_env(lines)


def check_nccl_debug(
    files: Iterable[Path], expected: dict[str, str], engine_env: EngineEnv | None = None
) -> dict[str, Any]:
    """Compare NCCL's confirmations in `files` with `expected`; returns a report dict with
    `ok` (None when NCCL confirmed nothing), `confirmed`, `mismatched`, `not_in_profile`,
    `engine_added` (confirmed values the engine's rules add) and `overridden` (profile
    values the engine's rules replace: `reason` engine_override)."""
    confirmed: dict[str, str] = {}
    read = []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                confirmed.update(parse_set_by_env(fh))
            read.append(str(path))
        except OSError:
            continue
    final = engine_env.final(expected) if engine_env is not None else dict(expected)
    overrides = engine_env.overrides if engine_env is not None else {}
    mismatched = {
        k: [expected[k], v]
        for k, v in confirmed.items()
        if k in expected and expected[k] != v and not (k in overrides and final[k] == v)
    }
    overridden = {
        k: [expected[k], v]
        for k, v in confirmed.items()
        if k in overrides and expected.get(k) != v and final[k] == v
    }
    engine_added = {k: v for k, v in confirmed.items() if k not in expected and final.get(k) == v}
    not_in_profile = {
        k: v for k, v in confirmed.items() if k not in expected and k not in engine_added
    }
    ok: bool | None = None if not confirmed else not (mismatched or overridden)
    reason = None
    if mismatched:
        reason = "env_mismatch"
    elif overridden:
        reason = "engine_override"
    return {
        "ok": ok,
        "reason": reason,
        "files": read,
        "confirmed": confirmed,
        "mismatched": mismatched,
        "overridden": overridden,
        "engine_added": engine_added,
        "not_in_profile": not_in_profile,
    }
