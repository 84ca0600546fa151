"""The host fingerprint on recorded results: the daemon's own, kept in its state dir, and
the recorded results keyed to another.

fastverifyd computes its fingerprint once at start (fastverify.daemon.host_fingerprint) and
keeps it in its state dir (`host-fingerprint.json`, `load`) and in /v1/status
(`daemon.fingerprint`); it stamps it on what it records (acceptance records), clients on
what they write (preflight reports, cost files). Reading a result back, `check` compares its
fingerprint with this host's (another host's refused unless accepted, one without a
fingerprint noted); `stale(state_dir, here)` lists the recorded results in a state dir keyed
to another fingerprint (tune decisions, cost files, acceptance records): what a difference
invalidates. Pure file reading: nothing here probes the host.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastverify.host import fingerprint

FILE = "host-fingerprint.json"


def load(state_dir: Path | str) -> dict[str, Any] | None:
    """The fingerprint the daemon of `state_dir` recorded at its start (None: none yet)."""
    try:
        rec = json.loads((Path(state_dir) / FILE).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("facts"), dict) else None


def stale(state_dir: Path | str, here: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Recorded results in `state_dir` keyed to another fingerprint than `here`'s: tune
    decisions (tune/decisions/*.json and decision.json's report), cost files (*.json of kind
    engine-trials in the state dir) and acceptance records. Each {kind, name, fingerprint,
    facts}: the facts that differ and invalidate it. Results without a fingerprint are not
    listed (nothing says which host they describe)."""
    d = Path(state_dir)
    found: list[tuple[str, str, Any]] = []
    for p in sorted((d / "tune" / "decisions").glob("*.json")):
        found.append(("tune decision", str(p), _read(p).get("fingerprint")))
    for p in sorted(d.glob("*.json")):
        doc = _read(p)
        if doc.get("kind") == "engine-trials":
            found.append(("cost file", str(p), doc.get("fingerprint")))
    acceptance = _read(d / "acceptance.json")
    for key, rec in sorted(acceptance.items()):
        if isinstance(rec, dict):
            found.append(("acceptance record", key, rec.get("fingerprint")))
    out = []
    for kind, name, fp in found:
        verdict = fingerprint.compare(fp, here, kind, name)
        if verdict["status"] == "differs":
            out.append({"kind": kind, "name": name, "fingerprint": fp.get("id"),
                        "facts": [c["fact"] for c in verdict["changes"]]})  # fmt: skip
    return out


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def recorded_in(path: str | Path) -> Any:
    """The fingerprint a result file carries (None: none, or not a JSON object)."""
    return _read(Path(path)).get("fingerprint")


def check(
    items: list[tuple[str, str, Any]], here: Mapping[str, Any] | None, accept: bool, flag: str
) -> tuple[list[str], str | None, list[dict[str, Any]]]:
    """Recorded results read back on this host: `items` (kind, name, its fingerprint).
    Returns (lines to say, the refusal or None, each verdict): a result of another host is
    refused unless `accept` (then warned); one without a fingerprint, or a host whose own is
    unknown, is a one-line note."""
    lines: list[str] = []
    refusals: list[str] = []
    verdicts = []
    for kind, name, fp in items:
        v = fingerprint.compare(fp, here, kind, name)
        verdicts.append({"kind": kind, "name": name, "status": v["status"],
                         "facts": [c["fact"] for c in v["changes"]]})  # fmt: skip
        if v["status"] == "differs" and not accept:
            refusals.append(v["message"])
        elif v["message"]:
            lines.append(("warning: " if v["status"] == "differs" else "") + v["message"])
    refusal = "; ".join(refusals) + f" ({flag}: use them anyway)" if refusals else None
    return lines, refusal, verdicts


def doctor_view(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """`fastverifyctl doctor`'s lines on the daemon's fingerprint: {id, host, stale, lines}."""
    daemon = (status or {}).get("daemon") or {}
    fp = daemon.get("fingerprint")
    if not status:
        return {"id": None, "stale": [], "lines": ["host fingerprint: no daemon answered"]}
    if not fp:
        why = "host fingerprint: not computed yet (the daemon does at start)"
        return {"id": None, "stale": [], "lines": [why]}
    state_dir = str(daemon.get("state_dir") or "")
    found = stale(state_dir, fp)
    lines = [f"host fingerprint {fp['id']}: {fingerprint.host_label(fp['facts'])}"]
    if not os.access(state_dir, os.R_OK | os.X_OK):
        lines.append(f"  cannot read the daemon's state dir {state_dir}: its recorded results "
                     "were not checked (run doctor as the daemon's user)")  # fmt: skip
    if found:
        lines.append(f"  {len(found)} recorded result(s) keyed to another fingerprint "
                     "(they do not describe this host):")  # fmt: skip
    for s in found[:10]:
        facts = ", ".join(fingerprint.LABELS[f] for f in s["facts"])
        lines.append(f"  {s['kind']} {s['name']} (fingerprint {s['fingerprint']}): {facts} differ")
    if len(found) > 10:
        lines.append(f"  ... and {len(found) - 10} more (--json lists them)")
    return {"id": fp["id"], "host": fingerprint.host_label(fp["facts"]), "stale": found,
            "lines": lines}  # fmt: skip
