"""Start-up: restore the saved state, adopt (or stop) the engine a previous daemon left, start.

`start_up(ctl)`:
1. restore active / last good / last failure from state.json;
2. let each part adopt (or stop) what a killed daemon's part left (parts.py); stop what a
   standby switch left beside the engine engine.pid names (`settle_standby`); then read
   engine.pid
   (group.SupervisedGroup.previous: a group a killed daemon spawned but never recorded is
   stopped, one that is not provably ours is left alone with a finding); adopt the group
   it names when it runs the argv this configuration would build: STOPPED -> STARTING
   (followed to readiness) -> VERIFYING -> READY, as for a fresh start; a group that is
   ours but runs another argv is stopped;
3. otherwise start the saved profile (declarative mode: the configured one, never a
   fallback; a group serving another profile is not adopted), falling back to the last
   good one and then to `default_profile` when a profile is refused (deleted, invalid):
   each refusal is a history record (`start`, `failed`, `fallback_to`) and the fallback a
   status finding; when nothing can even be started the daemon goes STOPPED -> FAILED
   with the reason;
5. close the requests a killed daemon left unanswered (interrupted.py) once that has settled.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

from fastverify.config import MODES
from fastverify.daemon import events as ev
from fastverify.daemon import interrupted, procs
from fastverify.daemon.controller import Controller
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.operations import Claim, Operation
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.states import State

if TYPE_CHECKING:
    from fastverify.profiles.model import Profile

log = logging.getLogger("fastverifyd.reconcile")


def start_up(ctl: Controller) -> None:
    """See the module docstring."""
    cfg = ctl.cfg
    saved = ctl.store.load_state()
    lg = saved.get("last_good")
    if isinstance(lg, dict) and lg.get("profile"):
        ctl.last_good = {"profile": lg["profile"], "mode": lg.get("mode") or cfg.server.mode}
    if isinstance(saved.get("last_failure"), dict):
        ctl.last_failure = saved["last_failure"]
    profile = saved.get("profile") or cfg.daemon.default_profile
    mode = saved.get("mode") or cfg.server.mode
    if mode not in MODES:
        mode = cfg.server.mode
    if cfg.daemon.declarative:
        # The manifest is the desired state: what it declares, or nothing Ready.
        profile, mode = cfg.daemon.default_profile, cfg.server.mode
    ctl.active = {"profile": profile, "mode": mode}
    unanswered = interrupted.pending(ctl)  # closed once this start-up has settled
    for part in ctl.parts:  # first: an adopted server may map what a part holds
        note = part.adopt()
        if note:
            ctl.say(note, logging.WARNING if "leaving it alone" in note else logging.INFO)
    settle_standby(ctl)  # a standby switch the killed daemon left: one engine stays
    if (op := adopt(ctl)) is not None:
        interrupted.close_after(ctl, unanswered, op)
        return
    # The saved profile, else the last good one, else the configured default: a profile
    # deleted while the daemon was down must not leave nothing serving.
    candidates: list[tuple[str, str]] = [(profile, mode)]
    if ctl.last_good and not cfg.daemon.declarative:
        candidates.append((ctl.last_good["profile"], ctl.last_good["mode"]))
    candidates.append((cfg.daemon.default_profile, mode))
    refused: list[tuple[str, str, RequestError]] = []
    for name, m in dict.fromkeys(candidates):
        if refused:
            first = refused[0]
            ctl.say(f"starting {name}/{m} instead of {first[0]}/{first[1]}", logging.WARNING)
        try:
            op = ctl.request("start", name, m)
        except RequestError as exc:
            ctl.say(f"cannot start {name}/{m}: {exc}", logging.ERROR)
            refused.append((name, m, exc))
            if exc.reason not in FALL_BACK_ON:
                break  # not the profile's fault (e.g. state dir): another would fail too
            continue
        if refused:
            _record_fallback(ctl, refused, (name, m))
        interrupted.close_after(ctl, unanswered, op)
        return
    last = refused[-1][2]
    for name, m, why in refused:
        _record_refused(ctl, name, m, why, None)
    ctl.last_failure = {
        "reason": last.reason,
        "message": str(last),
        "log": None,
        "at": time.time(),
    }
    ctl.set_state(State.FAILED, last.reason)
    interrupted.close_after(ctl, unanswered, None)


# Refusals that another profile may not share (the profile itself is missing or broken).
FALL_BACK_ON = ("invalid_profile", "argv_rejected", "invalid_mode")


def _record_refused(
    ctl: Controller, name: str, mode: str, exc: RequestError, instead: tuple[str, str] | None
) -> None:
    """A history record (kind `start`, result `failed`) for a start refused before anything
    ran, naming what was started instead."""
    now = time.time()
    record: dict[str, Any] = {
        "id": secrets.token_hex(4),
        "kind": "start",
        "result": "failed",
        "profile": name,
        "mode": mode,
        "reason": exc.reason,
        "message": str(exc),
        "log": None,
        "line": None,
        "duration_s": 0.0,
        "serving": {"profile": None, "mode": None},
    }
    if instead is not None:
        record["fallback_to"] = {"profile": instead[0], "mode": instead[1]}
    ctl.bus.publish(ev.OperationFinished(record["id"], "start", "failed", record, now))


def _record_fallback(
    ctl: Controller, refused: list[tuple[str, str, RequestError]], started: tuple[str, str]
) -> None:
    for name, m, why in refused:
        _record_refused(ctl, name, m, why, started)
    name, m, why = refused[0]
    ctl.set_finding(
        "profile_fallback",
        f"profile {name}/{m} (active before this start) cannot be started: {why}; "
        f"started {started[0]}/{started[1]} instead (switch with `fastverifyctl profile set`)",
    )


def settle_standby(ctl: Controller) -> None:
    """A daemon killed during a standby switch (standby_switch.py) left two engines: the one
    engine.pid names is adopted (adopt below); the other is stopped here: a standby that
    never served (engine-standby.pid), or the old engine it replaced (engine.pid's
    `retiring`). Only groups proven ours are stopped."""
    launcher = ctl.launcher
    group = getattr(launcher, "standby_group", None)
    if group is None:
        return
    try:
        main = json.loads(ctl.store.pid_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        main = {}
    main = main if isinstance(main, dict) else {}
    prev = group.previous()
    for pgid, res in prev.stopped:
        ctl.say(f"stopped standby engine group {pgid}, started by a daemon that died before "
                f"recording it ({res.signal_used})", logging.WARNING)  # fmt: skip
    if prev.kind == "ours":
        if prev.record.get("engine_id") != main.get("engine_id"):
            res = group.stop_pgid(prev.pgid)
            ctl.say(f"stopped standby engine group {prev.pgid}: a daemon killed during a "
                    f"standby switch left it before the cut-over ({res.signal_used})")  # fmt: skip
        group.clear_record()
    retiring = main.get("retiring")
    if isinstance(retiring, dict) and isinstance(retiring.get("pid"), int):
        ours, _why = procs.is_ours(retiring)
        if ours:
            pgid = int(retiring.get("pgid") or retiring["pid"])
            res = launcher.stop_group(pgid)
            ctl.say(f"stopped engine group {pgid}: the engine a standby switch replaced, "
                    f"left by a killed daemon ({res.signal_used})")  # fmt: skip


def adopt(ctl: Controller) -> Operation | None:
    """Adopt the previous engine group (see the module docstring); the adopt operation."""
    prev = ctl.launcher.previous()
    for pgid, res in prev.stopped:  # spawned by a daemon killed before it recorded them
        ctl.say(
            f"stopped engine group {pgid}, started by a daemon that died before recording"
            f" it ({res.signal_used})",
            logging.WARNING,
        )
    if prev.kind == "unreadable":
        log.warning("%s", prev.why)
        ctl.store.findings.append(prev.why)
    if prev.kind == "foreign":
        msg = (
            f"engine.pid names pid {prev.record.get('pid')}: {prev.why}; leaving it alone "
            "(nothing killed)"
        )
        ctl.say(msg, logging.WARNING)
        ctl.store.findings.append(msg)
    if prev.kind != "ours":
        return None
    info, why = prev.record, prev.why
    pgid = int(info.get("pgid", info["pid"]))
    declared = (ctl.cfg.daemon.default_profile, ctl.cfg.server.mode)
    if ctl.cfg.daemon.declarative and (info.get("profile"), info.get("mode")) != declared:
        ctl.say(
            f"previous engine group {pgid} serves {info.get('profile')}/{info.get('mode')}, "
            f"not the declared {declared[0]}/{declared[1]}; stopping it"
        )
        res = ctl.launcher.stop_group(pgid)
        ctl.say(f"stopped previous engine group {pgid} ({res.signal_used})")
        ctl.launcher.group.clear_record()
        return None
    try:
        profile_obj, argv = ctl.resolver.resolve(info.get("profile", ""), info.get("mode", ""))
        same_argv = ctl.launcher.same_argv(argv, list(info.get("argv", [])))
    except RequestError:
        profile_obj, same_argv = None, False
    if profile_obj is None or not same_argv:
        ctl.say(
            f"previous engine group {pgid} runs an argv this config would not build; stopping it"
        )
        res = ctl.launcher.stop_group(pgid)
        ctl.say(f"stopped previous engine group {pgid} ({res.signal_used})")
        ctl.launcher.group.clear_record()
        return None
    op = Operation("adopt", info["profile"], info["mode"])
    if ctl.slot.claim(op, settle_s=0) is not Claim.TAKEN:
        return None
    h = ctl.launcher.adopt(info)
    ctl.active = {"profile": h.profile, "mode": h.mode}
    ctl.say(f"adopting the previous engine group {pgid} ({h.profile}/{h.mode}): {why}")
    ctl.spawn_thread(_follow_adopted, ctl, op, h, profile_obj)
    return op


def _follow_adopted(ctl: Controller, op: Operation, h: EngineHandle, profile_obj: Profile) -> None:
    try:
        ctl.set_state(State.STARTING, f"adopting engine {h.pid}")
        outcome = ctl.starts.start(op, profile_obj, h.argv, None, op.cancel, adopt=h)
        if not isinstance(outcome, EngineHandle) and not ctl.shutting_down.is_set():
            # The adopted engine was lost (e.g. the killed daemon was stopping it): start
            # the same profile afresh instead of ending FAILED with nothing.
            ctl.say(f"adopted engine lost ({outcome.reason}); starting afresh")
            if ctl.state != State.STARTING:
                ctl.set_state(State.FAILED, outcome.reason)
            ctl.set_state(State.STARTING, f"fresh start of {h.profile}/{h.mode}")
            outcome = ctl.starts.start(op, profile_obj, h.argv, None, op.cancel)
        prev = dict(ctl.active)
        if isinstance(outcome, EngineHandle):
            result = ctl.starts.succeeded(op, outcome, prev)
        else:
            result = ctl.rollback.failed(op, outcome, prev)
    except Exception as exc:
        log.exception("adoption failed")
        result = ctl.result(op, "failed", reason="internal_error", message=str(exc))
    ctl.finish(op, result)
