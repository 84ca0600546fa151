"""The restart policy is pure: crash times and the clock in, a decision out."""

from __future__ import annotations

from fastverify.daemon.restart import CrashWindow, RestartPolicy


def test_exponential_backoff_capped() -> None:
    p = RestartPolicy(window_s=300, backoff_s=(1.0, 30.0), burst=10)
    assert [p.delay(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_burst_within_the_window_gives_up() -> None:
    w = CrashWindow(RestartPolicy(window_s=60, backoff_s=(0.5, 8.0), burst=3))
    decisions = [w.record(now) for now in (0.0, 1.0, 2.0)]
    assert [(d.n, d.give_up, d.delay_s) for d in decisions] == [
        (1, False, 0.5), (2, False, 1.0), (3, False, 2.0)
    ]  # fmt: skip
    fourth = w.record(3.0)
    assert fourth.give_up and fourth.n == 4
    assert "4 crashes within 60 s (burst limit 3)" in fourth.message


def test_old_crashes_leave_the_window() -> None:
    w = CrashWindow(RestartPolicy(window_s=60, backoff_s=(1.0, 8.0), burst=2))
    w.record(0.0)
    w.record(10.0)
    d = w.record(65.0)  # the crash at 0 s is older than 60 s, the one at 10 s is not
    assert (d.n, d.give_up, d.delay_s) == (2, False, 2.0)
    w.clear()
    assert w.record(66.0).n == 1


def test_retune_keeps_the_history() -> None:
    w = CrashWindow(RestartPolicy(window_s=60, backoff_s=(1.0, 8.0), burst=5))
    w.record(0.0)
    w.record(1.0)
    w.retune(RestartPolicy(window_s=60, backoff_s=(1.0, 8.0), burst=1))
    assert w.decide(2.0).give_up
