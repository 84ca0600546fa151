"""The front end's queue (speculation.front_end.Intake) and its constants from rounds of
prompts sent at once: the queueing arithmetic of processor sharing, then one at a time."""

from __future__ import annotations

import json

import pytest

from fastverify.speculation import costs as spec_costs
from fastverify.speculation.front_end import FrontEnd, Intake, from_rounds

MS = 1e-3


def drain(q: Intake[str]) -> list[tuple[float, str]]:
    out = []
    while (t := q.next_arrival()) is not None:
        out += q.until(t)
    return out


def test_without_a_front_end_a_request_arrives_when_it_enters() -> None:
    q: Intake[str] = Intake(None)
    for t, name in ((0.003, "b"), (0.001, "a"), (0.003, "c")):
        q.enter(t, name)
    assert drain(q) == [(0.001, "a"), (0.003, "b"), (0.003, "c")]
    assert len(q) == 0


def test_a_lone_request_takes_its_share_then_the_serial_step() -> None:
    q: Intake[str] = Intake(FrontEnd(2 * MS, 0.5 * MS))
    q.enter(1.0, "x")
    assert q.until(1.0 + 2.4 * MS) == []  # not yet
    [(at, name)] = q.until(1.0 + 2.6 * MS)
    assert name == "x" and at == pytest.approx(1.0 + 2.5 * MS)


def test_requests_sent_together_share_the_loop_then_leave_one_at_a_time() -> None:
    n, share, serial = 8, 2 * MS, 0.5 * MS
    q: Intake[int] = Intake(FrontEnd(share, serial))
    for i in range(n):
        q.enter(0.0, i)
    out = drain(q)
    assert [i for _, i in out] == list(range(n))  # in the order they came
    # round-robin: nobody leaves the loop before all the work is done, then every half ms
    for k, (at, _) in enumerate(out):
        assert at == pytest.approx(n * share + (k + 1) * serial)


def test_a_later_request_shares_what_is_left() -> None:
    share = 2 * MS
    q: Intake[str] = Intake(FrontEnd(share, 0.0))
    q.enter(0.0, "first")
    q.enter(1 * MS, "second")  # first has 1 ms left, now at half speed: 2 ms more
    assert drain(q) == [(pytest.approx(3 * MS), "first"), (pytest.approx(4 * MS), "second")]


def test_until_hands_out_only_what_arrived() -> None:
    q: Intake[int] = Intake(FrontEnd(1 * MS, 1 * MS))
    for i in range(3):
        q.enter(0.0, i)
    assert [i for _, i in q.until(4.5 * MS)] == [0]  # leave the loop at 3 ms: 4, 5, 6 ms
    q.enter(5.0 * MS, 9)  # enters while the others are in the serial step
    assert [i for _, i in q.until(6.0 * MS)] == [1, 2]
    assert drain(q) == [(pytest.approx(7 * MS), 9)]  # its share, then the free serial step


def test_the_constants_from_rounds_of_hand_offs() -> None:
    # a lone prompt is handed on after 3 ms; 5 sent at once: the first after 3 + 4 x 2 ms,
    # then every 0.5 ms
    rnd = {"dispatched_ms": [11.0, 11.5, 12.0, 12.5, 13.0], "arrivals_ms": [11.2] * 5}
    fe = from_rounds([rnd, rnd, {"dispatched_ms": [4.0]}], 3.0, "test")
    assert fe is not None
    assert fe.share_s == pytest.approx(2 * MS) and fe.serial_s == pytest.approx(0.5 * MS)
    assert fe.lone_s() == pytest.approx(2.5 * MS)
    assert FrontEnd.from_dict(json.loads(json.dumps(fe.to_dict()))) == fe
    assert from_rounds([{"dispatched_ms": [4.0]}], 3.0) is None  # no round of two


def _costs_file(tmp_path, front: object) -> object:
    data = {"kind": "engine-trials", "source": "test", "baseline_ms": {"1": 6.0},
            "cycle_ms": {"1": {"0": 7.0}}, "prefill_ms": {"baseline": {"8": 15.0, "128": 16.0}},
            "prefill_batch_ms": {"baseline": {"4096": 160.0}}, "prefill_batch_prompt": 128,
            "front_end_ms": front}  # fmt: skip
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(data))
    return path


def test_a_cost_file_front_end_prices_the_batch_forward_without_its_queue(tmp_path) -> None:
    path = _costs_file(tmp_path, {"share_ms": 1.5, "serial_ms": 0.5})
    with_fe = spec_costs.from_file(path)
    without = spec_costs.from_file(_costs_file(tmp_path, None))
    assert with_fe.front_end == FrontEnd(1.5 * MS, 0.5 * MS, "")
    # the batch point's last prompt queued 31 x 2 ms behind the others: not forward time
    queued = 31 * 2 * MS
    fwd = with_fe.prefill_forward("baseline", 4096, 32)
    assert fwd == pytest.approx(without.prefill_forward("baseline", 4096, 32) - queued)
    # the batch point itself (the last first token) is what it was measured as
    assert with_fe.batch_prefill("baseline", 4096, 32) == without.batch_prefill(
        "baseline", 4096, 32
    )
    # and it survives a stored plan's round trip
    assert spec_costs.Costs.from_dict(with_fe.to_dict()).front_end == with_fe.front_end


@pytest.mark.parametrize("bad", [{"share_ms": "x", "serial_ms": 1}, {"share_ms": 1},
                                 {"share_ms": -1, "serial_ms": 0}])  # fmt: skip
def test_a_bad_front_end_is_named(tmp_path, bad: dict) -> None:
    with pytest.raises(spec_costs.CostsError, match="front_end_ms"):
        spec_costs.from_file(_costs_file(tmp_path, bad))
