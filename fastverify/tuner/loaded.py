"""Did NCCL load the tuner plugin? Read it from NCCL's own INFO output.

NCCL 2.28 (src/plugin/tuner.cc, plugin_open.cc) prints, with NCCL_DEBUG=INFO and the
INIT or TUNING subsystem:

    NCCL_TUNER_PLUGIN set by environment to /usr/local/lib/fastverify/libnccl-tuner-fastverify.so
    Successfully loaded external tuner plugin /usr/local/lib/fastverify/libnccl-tuner-fastverify.so
    TUNER/Plugin: Using fastverify (v5)

and on failure `TUNER/Plugin: Could not find: NAME ...`, `TUNER/Plugin: NAME: <dlerror>`
or `External tuner plugin NAME is unsupported`. The plugin adds its own lines
(`fastverify tuner: 3 of 3 rows from PATH apply (... tuner ABI v5)` at INFO; a refused
table or ABI at WARN). See tests/fixtures/nccl-2.28.9-tuner/ for real output. The lines
are read by `fastverify.nccl.loglines`, the one parser of NCCL's output; this module
only decides what they mean for the tuner.

`tuner_load_status(text)` returns a `TunerLoad`: loaded or not, the plugin's name and
ABI version, the path NCCL opened, the rows the plugin kept, and the reason when not
loaded (`reason` is one of the REASON_* strings, for the daemon's failure reason).
`check_tuner_loaded(texts, expect_name)` applies it to every rank's log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from fastverify.nccl import loglines

REASON_NOT_LOADED = "tuner_not_loaded"  # no load line (plugin missing, wrong path, no INFO)
REASON_UNSUPPORTED = "tuner_unsupported"  # NCCL found no tuner symbol it knows
REASON_WRONG_PLUGIN = "tuner_wrong_plugin"  # another plugin's name
REASON_REFUSED = "tuner_refused"  # the plugin loaded but refused its table or the ABI
REASON_NO_LOG = "tuner_no_nccl_log"  # no NCCL INFO lines at all: cannot tell


@dataclass
class TunerLoad:
    loaded: bool
    name: str | None = None
    abi_version: int | None = None
    path: str | None = None
    requested: str | None = None  # NCCL_TUNER_PLUGIN as NCCL read it
    rows_applied: int | None = None
    rows_total: int | None = None
    reason: str | None = None
    detail: str = ""
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tuner_load_status(text: str, expect_name: str | None = "fastverify") -> TunerLoad:
    """Parse one process's NCCL INFO output (a log file's text)."""
    st = TunerLoad(loaded=False)
    seen_nccl = False
    failure = ""
    unsupported = False
    for line in text.splitlines():
        parts = loglines.split_line(line)
        if parts is None:
            continue
        seen_nccl = True
        level, body = parts
        if level == "WARN":
            if "fastverify tuner" in body or "tuner" in body.lower():
                st.warnings.append(body[:300])
            continue
        rec = loglines.parse_message(body)
        if rec is None:
            continue
        if rec["kind"] == "nccl_env":
            if rec["var"] == "NCCL_TUNER_PLUGIN":
                st.requested = (rec["value"].split() or [None])[0]
            continue
        if rec["kind"] != "nccl_tuner":
            continue
        event = rec["event"]
        if event == "loaded":
            st.path = rec["path"]
        elif event == "using":
            st.name, st.abi_version = rec["name"], rec["api"]
        elif event == "unsupported":
            unsupported = True
            failure = body
        elif event == "rows":
            st.rows_applied = max(st.rows_applied or 0, rec["applied"])
            st.rows_total = rec["total"]
        elif event == "no_rows":
            st.rows_applied, st.rows_total = 0, rec["total"]
        elif event in ("not_found", "open_failed") and not failure:
            failure = body
    if st.name is not None and (st.path is not None or st.requested is not None):
        st.loaded = True
    if not seen_nccl:
        st.reason, st.detail = REASON_NO_LOG, "no NCCL INFO lines (is NCCL_DEBUG=INFO set?)"
    elif unsupported:
        st.loaded = False
        st.reason, st.detail = REASON_UNSUPPORTED, failure
    elif not st.loaded:
        st.reason = REASON_NOT_LOADED
        st.detail = failure or (
            "NCCL printed no tuner load line"
            + (f" although NCCL_TUNER_PLUGIN={st.requested}" if st.requested else "")
        )
    elif expect_name and st.name != expect_name:
        st.reason = REASON_WRONG_PLUGIN
        st.detail = f"NCCL uses tuner {st.name!r}, expected {expect_name!r}"
    elif st.warnings and any("fastverify tuner" in w for w in st.warnings):
        st.reason = REASON_REFUSED
        st.detail = next(w for w in st.warnings if "fastverify tuner" in w)
    return st


def check_tuner_loaded(texts: Iterable[str], expect_name: str | None = "fastverify") -> TunerLoad:
    """Every rank's log must show the plugin loaded; returns the first failure, else the
    first rank's status (ranks without any NCCL output are skipped if another has some)."""
    results = [tuner_load_status(t, expect_name) for t in texts]
    with_log = [r for r in results if r.reason != REASON_NO_LOG] or results
    if not with_log:
        return TunerLoad(False, reason=REASON_NO_LOG, detail="no NCCL log given")
    for r in with_log:
        if r.reason is not None:
            return r
    return with_log[0]
