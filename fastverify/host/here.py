"""This host's fingerprint as the daemon records it, and the recorded results keyed to another.

fastverifyd computes the fingerprint (fastverify.host.fingerprint) once at start, in the
background, from the same facts tune's inventory reads (`collect`: nvidia-smi, `nvidia-smi
topo -m`, lspci and the IOMMU state, the server interpreter's package versions, and from the
daemon itself its engine, SGLang release, server argv and engine host; on a host without GPUs
or lspci each of those is a missing program, answered at once). It keeps it in its state dir
(`host-fingerprint.json`) and in /v1/status (`daemon.fingerprint`), and stamps it on what it
records (acceptance records); clients stamp it on what they write (preflight reports, cost
files). The sim's "host" is its simulated one, so two sim daemons of one configuration have
one fingerprint, and another `sim_sglang_version` another.

`stale(state_dir, here)` lists the recorded results in a state dir keyed to another
fingerprint (tune decisions, cost files, acceptance records): what a difference invalidates.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fastverify.host import fingerprint

FILE = "host-fingerprint.json"
log = logging.getLogger("fastverify.host")


def collect(
    status: Mapping[str, Any], argv: list[str], eagle3_argv: list[str], python: str
) -> dict[str, Any]:
    """{id, facts} of this host and the daemon's engine (`status`: its /v1/status; `argv` and
    `eagle3_argv`: the server argv it would start, masked as /v1/server/argv gives them)."""
    from fastverify.experiments.preflight.hostcheck import visible_gpus
    from fastverify.experiments.tune.inventory import package_versions, torch_nccl_version
    from fastverify.host import pcie
    from fastverify.profiles import topology as topo_mod

    path_env = os.environ.get("PATH")
    gpus = visible_gpus()
    versions = package_versions(python)
    if isinstance(versions, dict) and versions.get("torch") and gpus:
        versions["nccl (torch)"] = torch_nccl_version(python)
    topo = topo_mod.detect(path_env)
    caps = (status.get("engine") or {}).get("capabilities") or {}
    facts = fingerprint.build(
        gpu=fingerprint.gpu_identity(),
        gpus=gpus,
        topology=topo.to_dict() if topo else None,
        pcie=pcie.collect(pcie.HostInputs(path_env=path_env)).to_dict(),
        versions=versions if isinstance(versions, dict) else {},
        status=status,
        argv=argv,
        eagle3_argv=eagle3_argv,
        engine_host=caps.get("host"),
    )
    return fingerprint.record(facts)


def of_daemon(api: Any, python: str, stop: threading.Event | None = None) -> dict[str, Any]:
    """The fingerprint of the daemon whose control facade is `api`: its status, its server
    argv (the EAGLE-3 one names the drafter), and its engine's host once probed."""
    stop = stop or threading.Event()
    status = api.status()
    for _ in range(180):  # a real engine's host is probed in the background (seconds)
        caps = (status.get("engine") or {}).get("capabilities") or {}
        if "probing" not in str(caps.get("error") or "") or stop.wait(1.0):
            break
        status = api.status()

    def argv(mode: str | None) -> list[str]:
        try:
            return list(api.server_argv(None, mode, False).get("argv") or [])
        except Exception:  # no EAGLE-3 configured, a profile that cannot resolve: no fact
            return []

    return collect(status, argv(None), argv("eagle3"), python)


def start(api: Any, store: Any, python: str) -> threading.Thread:
    """Compute the daemon's fingerprint in the background and keep it in its state dir."""

    def work() -> None:
        try:
            rec = of_daemon(api, python)
        except Exception as exc:  # the daemon serves without one; what depends on it says so
            log.warning("cannot compute the host fingerprint: %s", exc)
            return
        store.save_json(FILE, rec)
        log.info("host fingerprint %s (%s)", rec["id"], fingerprint.host_label(rec["facts"]))

    # the last start's is gone first: until this start's is known there is none, never a stale one
    (Path(store.dir) / FILE).unlink(missing_ok=True)
    t = threading.Thread(target=work, name="host-fingerprint", daemon=True)
    t.start()
    return t


def load(state_dir: Path | str) -> dict[str, Any] | None:
    """The fingerprint the daemon of `state_dir` recorded at its start (None: none yet)."""
    try:
        rec = json.loads((Path(state_dir) / FILE).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("facts"), dict) else None


def for_config(config_path: str | None) -> dict[str, Any] | None:
    """The fingerprint recorded by the daemon of this configuration (its state dir)."""
    from fastverify import config as config_mod

    try:
        return load(config_mod.load(Path(config_path) if config_path else None).state_dir)
    except config_mod.ConfigError:
        return None


def current(status: Callable[[], Mapping[str, Any]], config_path: str | None) -> Any:
    """This host's fingerprint for a client writing or reading a result: the daemon's
    (`status()`: its /v1/status), else the one its configuration's state dir holds."""
    try:
        fp = (status().get("daemon") or {}).get("fingerprint")
    except Exception:  # no daemon answers: the state dir of its configuration
        fp = None
    return fp or for_config(config_path)


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
    found = stale(daemon.get("state_dir") or "", fp)
    lines = [f"host fingerprint {fp['id']}: {fingerprint.host_label(fp['facts'])}"]
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
