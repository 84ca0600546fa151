"""Did NCCL load the profile's tuner plugin? The daemon's check at each verified start.

A tuner profile (one that sets FASTVERIFY_TUNER_TABLE) always starts with NCCL's INFO
output in a per-start directory (`wants_nccl_debug`): NCCL_DEBUG=INFO,
NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING, NCCL_DEBUG_FILE=<logs>/<start>.nccl/%h.%p.log.
`check_engine_tuner(pid, debug_dir)` reads the table the engine really got (from
/proc/PID/environ of the server) and every rank's NCCL file, and returns
`(failure or None, details or None)`:

- details: `{"name", "abi_version", "path", "rows_applied", "rows_total", "table",
  "files"}` when NCCL loaded the plugin (reported in status and the switch's record);
- failure: a `Failure` whose reason is one of `fastverify.tuner.loaded`'s REASON_*
  (tuner_not_loaded, tuner_unsupported, tuner_wrong_plugin, tuner_refused,
  tuner_no_nccl_log), quoting NCCL's own line where there is one.

An engine without FASTVERIFY_TUNER_TABLE is not checked (None, None).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from fastverify.daemon.failures import TUNER_REASONS, Failure
from fastverify.nccl.loglines import has_comm_init
from fastverify.tuner import plugin as plugin_mod
from fastverify.tuner.loaded import REASON_NO_LOG, REASON_NOT_LOADED, check_tuner_loaded

if TYPE_CHECKING:
    from fastverify.profiles.model import Profile

TABLE_ENV = plugin_mod.TABLE_ENV
PLUGIN_ENV = "NCCL_TUNER_PLUGIN"
REASONS = TUNER_REASONS  # the same strings as fastverify.tuner.loaded's REASON_*


def wants_nccl_debug(profile: Profile) -> bool:
    """True for a profile that names a tuner table: its starts need NCCL's INFO lines."""
    env = getattr(profile, "env", None) or {}
    return bool(env.get(TABLE_ENV))


def _engine_env(pid: int) -> dict[str, str] | None:
    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return None


def check_engine_tuner(
    pid: int, debug_dir: Path | None, log: str | None = None
) -> tuple[Failure | None, dict[str, Any] | None]:
    """See the module docstring. `log` is the engine's log (quoted in a failure)."""
    env = _engine_env(pid)
    if env is None or not env.get(TABLE_ENV):
        return None, None
    table, so = env[TABLE_ENV], env.get(PLUGIN_ENV)
    if debug_dir is None:  # an engine adopted from a daemon that did not keep NCCL's output
        return Failure(
            REASON_NO_LOG,
            f"cannot tell whether NCCL loaded the tuner (no NCCL debug output for this "
            f"start; table {table})",
            log=log,
        ), None
    files = sorted(p for p in debug_dir.glob("*") if p.is_file())
    texts = []
    for f in files:
        try:
            texts.append(f.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    # NCCL loads the tuner at communicator init: a process that printed NCCL lines without
    # creating a communicator (e.g. only ncclGetUniqueId) has nothing to show.
    with_comm = [t for t in texts if has_comm_init(t)]
    st = check_tuner_loaded(with_comm or texts, plugin_mod.PLUGIN_NAME)
    where = f" (NCCL output: {debug_dir})"
    if st.reason is not None:
        detail = st.detail
        if st.reason == REASON_NOT_LOADED and not so:
            detail = f"{detail}; {plugin_mod.not_found_message()}"
        elif st.reason == REASON_NOT_LOADED:
            detail = f"{detail} (NCCL_TUNER_PLUGIN={so})"
        return Failure(st.reason, f"tuner: {detail}{where}", line=st.detail or None, log=log), None
    return None, {
        "name": st.name,
        "abi_version": st.abi_version,
        "path": st.path or st.requested,
        "rows_applied": st.rows_applied,
        "rows_total": st.rows_total,
        "table": table,
        "files": len(texts),
    }


def summary(tuner: dict[str, Any]) -> str:
    """One line for the daemon's log: what NCCL loaded and how much of the table applies."""
    rows = tuner.get("rows_applied")
    total = tuner.get("rows_total")
    applied = "rows: unknown" if rows is None else f"{rows} of {total} table rows apply"
    return (
        f"verify: NCCL loaded tuner {tuner['name']} (ABI v{tuner['abi_version']}) from "
        f"{tuner['path']}; {applied} (table {tuner['table']})"
    )
