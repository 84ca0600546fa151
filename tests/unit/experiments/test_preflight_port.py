"""The ranks' rendezvous port (experiments/preflight/run.py `free_port`, also used by
rehearse and the tuner derivation): free, and below the kernel's ephemeral range, so that
no outgoing connection on the machine can take it before rank 0 binds it."""

from __future__ import annotations

import random
import socket

from fastverify.experiments.preflight import run as preflight


def test_the_port_is_free_and_below_the_ephemeral_range() -> None:
    low = preflight._ephemeral_low()
    for seed in range(20):
        port = preflight.free_port(random.Random(seed))
        if low > preflight.RENDEZVOUS_PORTS_FROM:
            assert preflight.RENDEZVOUS_PORTS_FROM <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: binds


def test_a_taken_port_is_skipped() -> None:
    seed = 7
    taken = preflight.free_port(random.Random(seed))
    with socket.socket() as s:
        s.bind(("127.0.0.1", taken))
        s.listen()
        assert preflight.free_port(random.Random(seed)) != taken


def test_an_unreadable_range_is_zero(tmp_path) -> None:
    assert preflight._ephemeral_low(str(tmp_path / "missing")) == 0
    bad = tmp_path / "range"
    bad.write_text("x y\n")
    assert preflight._ephemeral_low(str(bad)) == 0
    bad.write_text("32768\t60999\n")
    assert preflight._ephemeral_low(str(bad)) == 32768
