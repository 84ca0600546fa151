"""The front door's hold gate: requests pass while an engine serves, wait during a hold,
are refused 503 when the queue is full or they outwait max_wait_s; drain reports what is
still in flight; serve() closes the episode with its figures; a standby switch's cuts are
named in its record and not again in the next."""

from __future__ import annotations

import asyncio

from fastverify.frontdoor.control import answer
from fastverify.frontdoor.gate import Gate, Refusal


def run(coro):
    return asyncio.run(coro)


def test_serving_passes_and_hold_waits_until_serve() -> None:
    async def go() -> None:
        gate = Gate(queue_size=4, max_wait_s=60)
        gate.serve(7001)
        assert await gate.admit("GET /a") == 7001
        gate.hold()
        waiter = asyncio.create_task(gate.admit("POST /generate"))
        while gate.waiting == 0:
            await asyncio.sleep(0)
        assert not waiter.done()
        figures = gate.serve(7002)
        assert await waiter == 7002
        assert figures["held"] == 1 and figures["refused"] == 0
        assert 0 <= figures["longest_wait_s"] <= figures["downtime_s"]
        assert gate.status()["state"] == "serving"

    run(go())


def test_full_queue_and_max_wait_refuse_with_retry_after() -> None:
    async def go() -> None:
        gate = Gate(queue_size=1, max_wait_s=0.05, retry_after_s=7)
        gate.hold()
        first = asyncio.create_task(gate.admit("a"))
        while gate.waiting == 0:
            await asyncio.sleep(0)
        second = await gate.admit("b")  # the queue holds one
        assert isinstance(second, Refusal) and second.retry_after_s == 7
        assert "full" in second.why
        timed_out = await first  # nobody serves: it outwaits max_wait_s
        assert isinstance(timed_out, Refusal) and "held" in timed_out.why
        assert gate.status()["totals"]["refused"] == 2
        assert sum(gate.status()["hold_seconds"]["counts"]) == 1

    run(go())


def test_drain_names_what_is_still_in_flight_and_cuts_count() -> None:
    async def go() -> None:
        gate = Gate(queue_size=4, max_wait_s=60)
        gate.serve(7001)
        done = gate.begin("POST /done", 7001)
        slow = gate.begin("POST /v1/chat/completions", 7001)
        gate.end(done)
        gate.hold()
        drained = await gate.drain(0.01)
        assert drained == {"drained": False, "in_flight": 1,
                           "requests": ["POST /v1/chat/completions"]}  # fmt: skip
        gate.cut("POST /v1/chat/completions")
        gate.end(slow)
        assert (await gate.drain(0.01))["drained"]
        figures = gate.serve(7001)
        assert figures["cut"] == 1 and figures["cut_requests"] == ["POST /v1/chat/completions"]
        assert gate.status()["episode"]["cut"] == 0  # a new episode

    run(go())


def test_closing_answers_the_held_503() -> None:
    async def go() -> None:
        gate = Gate(queue_size=4, max_wait_s=60)
        gate.hold()
        waiter = asyncio.create_task(gate.admit("POST /generate"))
        while gate.waiting == 0:
            await asyncio.sleep(0)
        gate.close()
        refusal = await waiter
        assert isinstance(refusal, Refusal) and "stopping" in refusal.why
        assert isinstance(await gate.admit("GET /health"), Refusal)

    run(go())


def test_a_standby_cut_over_drains_only_the_old_engine() -> None:
    # the new engine serves at once; the drain waits for the old port's requests alone
    async def go() -> None:
        gate = Gate(queue_size=4, max_wait_s=60)
        gate.serve(7001)
        old = gate.begin("POST /old", 7001)
        figures = gate.serve(7002)
        assert (figures["held"], figures["downtime_s"]) == (0, 0.0)
        assert await gate.admit("POST /new") == 7002
        gate.begin("POST /new", 7002)  # stays in flight on the new engine
        pending = asyncio.ensure_future(gate.drain(30, port=7001))
        await asyncio.sleep(0)
        assert not pending.done()
        gate.end(old)
        drained = await pending
        assert drained == {"drained": True, "in_flight": 0, "requests": []}
        assert (await gate.drain(0.01))["in_flight"] == 1  # all ports: the new one's

    run(go())


def test_a_standby_switchs_cuts_are_named_in_its_record_only() -> None:
    # the old engine's stop cuts a stream after the cut-over: the switch takes that cut
    # (once the old engine's requests have ended); a later crash's record names its own only
    async def go() -> None:
        gate = Gate(queue_size=4, max_wait_s=60)
        gate.serve(7001)
        old = gate.begin("POST /old", 7001)
        gate.serve(7002)  # the cut-over
        taking = asyncio.ensure_future(answer(gate, {"op": "take_cuts", "port": 7001,
                                                     "timeout_s": 30}))  # fmt: skip
        await asyncio.sleep(0)
        assert not taking.done()  # the old engine's request has not ended yet
        gate.cut("POST /old")  # the old engine's stop cut it
        gate.end(old)
        assert await taking == {"cut": 1, "cut_requests": ["POST /old"], "drained": True}
        new = gate.begin("POST /new", 7002)
        gate.cut("POST /new")  # the new engine crashes
        gate.end(new)
        gate.hold()
        crash = gate.serve(7001)  # the restart's record
        assert (crash["cut"], crash["cut_requests"]) == (1, ["POST /new"])
        assert gate.status()["totals"]["cut"] == 2

    run(go())
