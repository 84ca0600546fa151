"""The rank-group runner of preflight, rehearse and the tuner derivation
(experiments/common/ranks.py): the rendezvous port is free and below the kernel's ephemeral
range, so that no outgoing connection on the machine can take it before rank 0 binds it;
the wait stops ranks that reported but linger, and ranks that never report, and only them."""

from __future__ import annotations

import random
import socket
import sys
from pathlib import Path

from fastverify.experiments.common import ranks
from fastverify.experiments.common.ranks import RankGroup


def test_the_port_is_free_and_below_the_ephemeral_range() -> None:
    low = ranks.ephemeral_low()
    for seed in range(20):
        port = ranks.rendezvous_port(random.Random(seed))
        if low > ranks.RENDEZVOUS_PORTS_FROM:
            assert ranks.RENDEZVOUS_PORTS_FROM <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: binds


def test_a_taken_port_is_skipped() -> None:
    seed = 7
    taken = ranks.rendezvous_port(random.Random(seed))
    with socket.socket() as s:
        s.bind(("127.0.0.1", taken))
        s.listen()
        assert ranks.rendezvous_port(random.Random(seed)) != taken


def test_an_unreadable_range_is_zero(tmp_path) -> None:
    assert ranks.ephemeral_low(str(tmp_path / "missing")) == 0
    bad = tmp_path / "range"
    bad.write_text("x y\n")
    assert ranks.ephemeral_low(str(bad)) == 0
    bad.write_text("32768\t60999\n")
    assert ranks.ephemeral_low(str(bad)) == 32768


def _group(tmp_path: Path, world: int, code: str) -> RankGroup:
    group = RankGroup(tmp_path, "t", world)
    group.start({}, lambda _rank, out: [sys.executable, "-c", code, str(out)])
    return group


def test_ranks_that_reported_but_linger_in_teardown_are_stopped(tmp_path: Path) -> None:
    # As seen on 2 x H200: both ranks wrote their report, then NCCL teardown never returned.
    code = "import pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text('{}'); time.sleep(600)"
    with _group(tmp_path, 2, code) as group:
        waited = group.wait(timeout_s=300, report_grace_s=0.2)
    assert waited == {"timed_out": False, "stopped_after_report": True, "stopped": [0, 1]}
    assert all(p.returncode == -9 for p in group.procs)
    assert [r["returncode"] for r in group.reports()] == [-9, -9]


def test_ranks_that_never_report_time_out(tmp_path: Path) -> None:
    with _group(tmp_path, 1, "import time; time.sleep(600)") as group:
        waited = group.wait(timeout_s=0.5)
    assert waited == {"timed_out": True, "stopped_after_report": False, "stopped": [0]}
    assert group.procs[0].returncode == -9
    (report,) = group.reports(sizes=[])
    assert report["status"] == "failed" and report["sizes"] == []


def test_a_rank_that_dies_stops_its_waiting_peers(tmp_path: Path) -> None:
    code = "import os, sys, time\nif os.environ['RANK'] == '0': sys.exit(3)\ntime.sleep(600)\n"
    with _group(tmp_path, 2, code) as group:
        waited = group.wait(timeout_s=300, peer_grace_s=0.2)
    assert waited == {"timed_out": False, "stopped_after_report": False, "stopped": [1]}
    assert [p.returncode for p in group.procs] == [3, -9]


def test_each_rank_gets_its_rendezvous_environment(tmp_path: Path) -> None:
    code = (
        "import json, os, sys; keys = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_PORT', 'A')\n"
        "open(sys.argv[1], 'w').write(json.dumps({k: os.environ[k] for k in keys}))\n"
    )
    with RankGroup(tmp_path, "env", 2) as group:
        group.start({"A": "1"}, lambda _r, out: [sys.executable, "-c", code, str(out)], port=4321)
        assert group.wait(timeout_s=300)["stopped"] == []
    docs = group.reports()
    assert [(d["RANK"], d["LOCAL_RANK"], d["WORLD_SIZE"]) for d in docs] == [
        ("0", "0", "2"), ("1", "1", "2"),
    ]  # fmt: skip
    assert {d["MASTER_PORT"] for d in docs} == {"4321"} and {d["A"] for d in docs} == {"1"}
