"""The controller driven by a fake launcher: switch, rollback, cancel, crash restart, queue.

No processes, no sockets: each test runs in milliseconds and waits on the operation's
result or on an event, never on a clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastverify.daemon import events as ev
from fastverify.daemon.operations import Claim, Operation
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.states import State
from tests.support.daemon_fakes import build


def states(seen: list) -> list[str]:
    return [str(e.new) for e in seen if isinstance(e, ev.StateChanged)]


def serve(ctl, profile: str = "ring") -> dict:
    op = ctl.request("start", profile, "baseline")
    result = op.wait(10)
    assert result is not None and result["result"] == "ok", result
    return result


def test_switch_publishes_typed_events_and_serves(tmp_path: Path) -> None:
    ctl, launcher, seen = build(tmp_path)
    serve(ctl, "ring")
    seen.clear()
    result = ctl.request("switch", "tree", None).wait(10)
    assert result["result"] == "ok"
    assert result["previous"] == {"profile": "ring", "mode": "baseline"}
    assert states(seen) == ["STOPPING", "STARTING", "VERIFYING", "READY"]
    up = [e for e in seen if isinstance(e, ev.EngineUp)]
    assert len(up) == 1
    assert (up[0].profile, up[0].mode, up[0].url) == ("tree", "baseline", "http://127.0.0.1:1")
    assert up[0].settings == {"NCCL_ALGO": "TREE", "weights": "real"}
    down = [e for e in seen if isinstance(e, ev.EngineDown)]
    assert [(d.profile, d.why, dict(d.settings)) for d in down] == [
        ("ring", "stopped", {"NCCL_ALGO": "RING", "weights": "real"})
    ]
    fin = [e for e in seen if isinstance(e, ev.OperationFinished)]
    assert [(f.kind, f.result) for f in fin] == [("switch", "ok")]
    assert ctl.active == {"profile": "tree", "mode": "baseline"}
    assert ctl.slot.holder is None
    # each engine that came up was marked verified, after its profile's P2P check
    assert launcher.verified == launcher.started
    assert ctl.resolver.p2p_checked == ["ring", "tree"]


def test_failed_switch_rolls_back_to_the_last_good(tmp_path: Path) -> None:
    ctl, launcher, seen = build(tmp_path)
    serve(ctl, "ring")
    launcher.plan["bad"] = "cuda_oom"
    seen.clear()
    result = ctl.request("switch", "bad", None).wait(10)
    assert result["result"] == "rolled_back"
    assert result["reason"] == "cuda_oom"
    assert result["rolled_back_to"] == {"profile": "ring", "mode": "baseline"}
    assert states(seen) == [
        "STOPPING", "STARTING", "FAILED", "ROLLING_BACK", "VERIFYING", "READY"
    ]  # fmt: skip
    assert ctl.state == State.READY
    assert ctl.last_failure["reason"] == "cuda_oom"
    assert ctl.store.history()[-1]["result"] == "rolled_back"
    # the engine that failed its start was never marked verified; the two ring ones were
    assert [h.profile for h in launcher.verified] == ["ring", "ring"]


def test_a_profile_the_hosts_p2p_cannot_serve_is_refused_before_anything_stops(
    tmp_path: Path,
) -> None:
    ctl, launcher, seen = build(tmp_path)
    serve(ctl, "ring")
    ctl.resolver.p2p_redirected.add("tree")
    seen.clear()
    with pytest.raises(RequestError) as refused:
        ctl.request("switch", "tree", None)
    assert refused.value.reason == "p2p_redirected"
    assert launcher.stopped == [] and [h.profile for h in launcher.started] == ["ring"]
    assert states(seen) == [] and ctl.active == {"profile": "ring", "mode": "baseline"}


def test_cancel_stops_a_long_load_and_puts_the_previous_profile_back(tmp_path: Path) -> None:
    ctl, launcher, seen = build(tmp_path)
    serve(ctl, "ring")
    launcher.plan["slow"] = "hang"
    op = ctl.request("switch", "slow", None)
    assert launcher.waiting.wait(10)  # the new engine is "loading" (STARTING)
    assert ctl.state == State.STARTING
    seen.clear()
    assert ctl.cancel() is op
    result = op.wait(10)
    assert result["result"] == "cancelled"
    assert result["rolled_back_to"] == {"profile": "ring", "mode": "baseline"}
    slow = [h for h in launcher.started if h.profile == "slow"]
    assert slow and slow[0] in launcher.stopped  # the loading engine's group was stopped
    assert states(seen) == ["ROLLING_BACK", "VERIFYING", "READY"]
    assert ctl.active == {"profile": "ring", "mode": "baseline"}
    assert ctl.store.history()[-1]["result"] == "cancelled"
    assert ctl.last_failure is None  # a cancel is not a failure


def test_cancel_without_an_operation_is_none(tmp_path: Path) -> None:
    ctl, _launcher, _seen = build(tmp_path)
    assert ctl.cancel() is None
    serve(ctl)
    assert ctl.cancel() is None


def test_a_second_request_while_busy_is_409_and_queue_waits(tmp_path: Path) -> None:
    ctl, launcher, _seen = build(tmp_path)
    serve(ctl, "ring")
    launcher.plan["slow"] = "hang"
    op = ctl.request("switch", "slow", None)
    assert launcher.waiting.wait(10)
    with pytest.raises(RequestError) as err:
        ctl.request("switch", "tree", None)
    assert err.value.status == 409
    assert err.value.body["in_flight"]["profile"] == "slow"
    # a queued request whose client went away is withdrawn and never runs
    with pytest.raises(RequestError) as err:
        ctl.request("switch", "tree", None, queue=True, withdrawn=lambda: True)
    assert err.value.reason == "withdrawn"
    ctl.cancel()
    assert op.wait(10)["result"] == "cancelled"
    assert not [h for h in launcher.started if h.profile == "tree"]


def test_crash_restarts_with_backoff_then_gives_up_after_the_burst(tmp_path: Path) -> None:
    ctl, launcher, seen = build(tmp_path, burst=1)
    serve(ctl, "ring")
    seen.clear()
    first = launcher.started[-1]
    first.serving = True
    launcher.crash(first)
    # crash 1 -> BACKOFF -> restart -> READY
    seen.wait_for(lambda e: isinstance(e, ev.OperationFinished))
    done = [e for e in seen if isinstance(e, ev.OperationFinished)]
    assert [(d.kind, d.result) for d in done] == [("crash_restart", "ok")]
    assert ctl.state == State.READY
    crashes = [e for e in seen if isinstance(e, ev.Crashed)]
    assert [c.reason for c in crashes] == ["cuda_oom"]
    # crash 2 within the window exceeds the burst of 1: FAILED, nothing restarted
    n = len(launcher.started)
    second = launcher.started[-1]
    seen.clear()
    launcher.crash(second)
    seen.wait_for(lambda e: isinstance(e, ev.OperationFinished))
    assert ctl.state == State.FAILED
    assert ctl.last_failure["crash_loop"] is True
    assert len(launcher.started) == n
    assert ctl.restarts["cuda_oom"] == 2


def test_a_switch_preempts_a_restart_waiting_out_its_backoff(tmp_path: Path) -> None:
    ctl, launcher, _seen = build(tmp_path, backoff=(3600.0, 3600.0))
    serve(ctl, "ring")
    h = launcher.started[-1]
    launcher.crash(h)
    # the restart holds the slot and waits out its backoff ("restarting ring/baseline in ...")
    seq = 0
    while not any("restarting ring/baseline" in e["line"] for e in ctl.ring.tail(50)):
        batch = ctl.ring.since(seq, timeout=10)
        assert batch, "the crash restart never started its backoff"
        seq = batch[-1]["seq"]
    assert ctl.state == State.BACKOFF
    result = ctl.request("switch", "tree", None).wait(10)
    assert result["result"] == "ok"
    assert ctl.active["profile"] == "tree"


def test_status_figures_vanish_when_the_engine_is_not_ready() -> None:
    from fastverify.daemon.observers import LiveFigures

    clock = [0.0]
    figs = LiveFigures(fresh_s=30.0, clock=lambda: clock[0])
    decode = {"kind": "decode", "gen_throughput": 82.5}
    figs(ev.EngineLine("x", decode))
    assert figs.tokens_per_second() is None  # not READY yet
    figs(ev.StateChanged(State.VERIFYING, State.READY))
    figs(ev.EngineLine("x", decode))
    assert figs.tokens_per_second() == 82.5
    clock[0] = 31.0
    assert figs.tokens_per_second() is None  # stale
    figs(ev.EngineLine("x", decode))
    figs(ev.StateChanged(State.READY, State.BACKOFF))
    assert figs.tokens_per_second() is None
    figs(ev.StateChanged(State.BACKOFF, State.STARTING))
    figs(ev.EngineLine("x", decode))
    assert figs.tokens_per_second() is None


def test_slot_two_claims_at_once_exactly_one_wins() -> None:
    import threading

    from fastverify.daemon.operations import Slot

    slot = Slot()
    ops = [Operation("switch", f"p{i}", "baseline") for i in range(8)]
    claims: list[Claim] = []
    barrier = threading.Barrier(len(ops))

    def go(op: Operation) -> None:
        barrier.wait()
        claims.append(slot.claim(op, settle_s=0))

    threads = [threading.Thread(target=go, args=(op,)) for op in ops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(c.value for c in claims) == ["busy"] * 7 + ["taken"]


def test_crash_restart_waits_in_backoff_while_the_state_dir_is_unwritable(
    tmp_path: Path,
) -> None:
    import threading

    ctl, launcher, seen = build(tmp_path)
    serve(ctl, "ring")
    fixed = threading.Event()
    probes: list[str] = []

    def check_writable() -> str | None:
        if fixed.is_set():
            return None
        probes.append("refused")
        if len(probes) == 3:
            # the finding is up while the restart waits; then the operator fixes the dir
            assert any("waits for the state dir" in f for f in ctl.findings.values())
            assert ctl.state == State.BACKOFF
            fixed.set()
        return f"state dir {ctl.store.dir} is not writable (Read-only file system)"

    ctl.store.check_writable = check_writable  # type: ignore[method-assign]
    n = len(launcher.started)
    seen.clear()
    launcher.crash(launcher.started[-1])
    done = seen.wait_for(lambda e: isinstance(e, ev.OperationFinished))
    assert (done.kind, done.result) == ("crash_restart", "ok")
    assert len(probes) == 3 and len(launcher.started) == n + 1  # no spawn while refused
    assert ctl.state == State.READY and ctl.findings == {}
    assert "FAILED" not in states(seen)


def test_asking_for_what_already_serves_is_unchanged_unless_restart(tmp_path: Path) -> None:
    ctl, launcher, seen = build(tmp_path)
    serve(ctl, "ring")
    n = len(launcher.started)
    seen.clear()
    for kind, name, mode in (("switch", "ring", None), ("mode", None, "baseline")):
        result = ctl.request(kind, name, mode).wait(10)
        assert result["result"] == "unchanged" and "already serving" in result["message"]
    assert len(launcher.started) == n and seen == []  # nothing stopped, started or journalled
    assert ctl.store.history()[-1]["kind"] == "start"
    result = ctl.request("switch", "ring", None, restart=True).wait(10)
    assert result["result"] == "ok" and len(launcher.started) == n + 1
    # another mode of the same profile is a real switch
    assert ctl.request("mode", None, "eagle3").wait(10)["result"] == "ok"


def test_a_cancel_after_the_switch_succeeded_is_refused_not_ignored(tmp_path: Path) -> None:
    ctl, launcher, _seen = build(tmp_path)
    serve(ctl, "ring")
    answers: list = []

    def cancel_late(h) -> None:  # the switch is serving; it is only being recorded
        try:
            answers.append(ctl.cancel())
        except RequestError as exc:
            answers.append(exc)

    launcher.mark_verified = cancel_late  # type: ignore[method-assign]
    result = ctl.request("switch", "tree", None).wait(10)
    assert result["result"] == "ok" and ctl.active["profile"] == "tree"
    assert len(answers) == 1 and isinstance(answers[0], RequestError), answers
    assert answers[0].status == 409 and "nothing was cancelled" in str(answers[0])


def test_a_cancel_that_lands_while_verifying_is_honoured(tmp_path: Path) -> None:
    ctl, launcher, _seen = build(tmp_path)
    serve(ctl, "ring")
    verify = launcher.verify

    def verify_then_cancel(h):
        out = verify(h)
        assert ctl.cancel() is not None  # accepted: the switch has not succeeded yet
        return out

    launcher.verify = verify_then_cancel  # type: ignore[method-assign]
    result = ctl.request("switch", "tree", None).wait(10)
    assert result["result"] == "cancelled"
    assert result["rolled_back_to"] == {"profile": "ring", "mode": "baseline"}
    assert ctl.active["profile"] == "ring" and ctl.state == State.READY


def test_an_engine_is_serving_only_once_ready_is_published(tmp_path: Path) -> None:
    """While the start writes its files (a slow disk), the engine is not yet serving: the
    main loop starts no health watch on it, so a hang then cannot be dropped before READY."""
    import threading

    ctl, launcher, _seen = build(tmp_path)
    entered, release = threading.Event(), threading.Event()

    def slow_mark(h) -> None:
        entered.set()
        release.wait(10)

    launcher.mark_verified = slow_mark
    op = ctl.request("start", "ring", "baseline")
    assert entered.wait(10)
    h = ctl.current
    assert h is not None and not h.serving and ctl.state != State.READY
    ctl.tick()  # the main loop's tick: a serving engine would get its watch here
    assert h.watch is None
    release.set()
    assert op.wait(10)["result"] == "ok"
    assert h.serving and ctl.state == State.READY
