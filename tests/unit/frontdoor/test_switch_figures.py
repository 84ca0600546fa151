"""How a switch looked to clients, as `profile set` and `history` print it: a standby
switch, one whose new engine failed (the old one served on), and a standby-mode switch that
held (and why)."""

from __future__ import annotations

from fastverify.cli.switch_figures import clients_cell, clients_line

ZERO = {"downtime_s": 0.0, "held": 0, "longest_wait_s": 0.0, "cut": 0, "refused": 0,
        "cut_requests": []}  # fmt: skip


def test_a_standby_switch() -> None:
    rec = {"switch": {"mode": "standby", **ZERO, "standby": {"mode": "standby", "why": "fits"}}}
    assert (
        clients_line(rec)
        == "clients: standby, 0.00 s down (held 0, longest 0.00 s), 0 cut, 0 refused"
    )
    assert clients_cell(rec) == "standby 0.0s 0h 0c 0r"


def test_a_failed_standby_says_the_old_engine_served_on() -> None:
    rec = {"switch": {"mode": "standby", **ZERO, "kept_serving": True}}
    assert (clients_line(rec) or "").endswith(
        "the new engine never took traffic: the old one served on"
    )


def test_a_standby_mode_switch_that_held_says_why() -> None:
    why = "standby needs the weight cache ([server] weight_cache = off)"
    rec = {"switch": {"mode": "hold", **ZERO, "downtime_s": 3.2, "held": 4,
                      "standby": {"mode": "hold", "why": why}}}  # fmt: skip
    assert (clients_line(rec) or "").endswith(f"[{why}]")
