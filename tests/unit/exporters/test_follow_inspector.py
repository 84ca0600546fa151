"""Following growing files (rotation, truncation, partial lines) and the NCCL inspector
JSON lines (header inheritance, reference rank, summaries fed to the hub)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fastverify.exporters.hub import MetricsHub
from fastverify.exporters.inspector import InspectorFollower, parse_records, summarize
from fastverify.follow import FileFollower


def test_follow_partial_lines_rotation_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    f = FileFollower(log)
    assert f.read_lines() == []  # missing file: waited for
    log.write_text("one\ntw")
    assert f.read_lines() == ["one"]
    with open(log, "a") as fh:
        fh.write("o\nthree\n")
    assert f.read_lines() == ["two", "three"]
    # logrotate (create): the old file gets a last line, then a new file appears
    with open(log, "a") as fh:
        fh.write("last of old\n")
    os.rename(log, tmp_path / "server.log.1")
    log.write_text("first of new\n")
    assert f.read_lines() == ["last of old", "first of new"]
    assert f.rotations == 1
    # copytruncate: same inode, shorter file
    with open(log, "r+") as fh:
        fh.truncate(0)
    with open(log, "a") as fh:
        fh.write("after truncate\n")
    assert f.read_lines() == ["after truncate"]
    assert f.truncations == 1
    f.close()


def test_follow_from_end_and_bad_bytes(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"old\n")
    f = FileFollower(log, from_end=True)
    assert f.read_lines() == []
    with open(log, "ab") as fh:
        fh.write(b"new \xff\r\n")
    assert f.read_lines() == ["new \ufffd"]
    f.close()


def _rec(rank: int, sn: int, us: float, size: int = 43008, coll: str = "AllReduce",
         header: bool = True) -> str:  # fmt: skip
    obj: dict = {"coll_perf": {"coll": coll, "coll_sn": sn, "coll_msg_size_bytes": size,
                               "coll_exec_time_us": us, "coll_timing_source": "kernel_gpu",
                               "coll_algobw_gbs": 1.0, "coll_busbw_gbs": 1.75}}  # fmt: skip
    if header:
        obj["header"] = {"id": "0x1", "rank": rank, "n_ranks": 8, "nnodes": 1}
        obj["metadata"] = {"inspector_output_format_version": "v4.0", "pid": 1}
    return json.dumps(obj)


def test_inspector_records_and_summary() -> None:
    ctx: dict = {}
    lines = [
        _rec(1, 1, 40.0), _rec(1, 2, 50.0),
        '{"header": {"rank": 0, "n_ranks": 8}, "dump_stats": {"records": 3}}',
        _rec(0, 1, 44.0, header=False), _rec(0, 2, 46.0, header=False),
        _rec(0, 3, 100.0, coll="AllGather", header=False),
        '{"coll_perf": {"coll": "AllRed',  # torn line of a file being written
    ]  # fmt: skip
    recs = parse_records(lines, ctx)
    assert [r["rank"] for r in recs] == [1, 1, 0, 0, 0]
    s = summarize(recs)
    assert s["rank"] == 0 and s["ranks"] == [0, 1]
    assert s["allreduce_calls"] == 2  # rank 0's all-reduces only; AllGather not counted
    assert s["mean_exec_seconds"] == pytest.approx(45e-6)
    assert s["mean_busbw_bytes_per_second"] == pytest.approx(1.75e9)
    assert s["mean_message_bytes"] == 43008
    assert summarize([])["allreduce_calls"] == 0


def test_inspector_follower_feeds_hub(tmp_path: Path) -> None:
    hub = MetricsHub()
    hub.set_engine(True, "ring-ll", "eagle3", {}, "sglang", None)
    follower = InspectorFollower(hub, tmp_path)
    assert follower.poll_once() is None  # nothing yet
    (tmp_path / "host-pid11.log").write_text("\n".join(_rec(0, i, 45.0) for i in range(122)) + "\n")
    (tmp_path / "host-pid12.log").write_text("\n".join(_rec(1, i, 45.0) for i in range(122)) + "\n")
    assert follower.poll_once()["allreduce_calls"] == 122
    with open(tmp_path / "host-pid11.log", "a") as fh:
        fh.write(_rec(0, 200, 45.0) + "\n")
    assert follower.poll_once()["allreduce_calls"] == 1
    follower.stop()
    calls = hub.snapshot()["allreduce_calls"]
    assert calls == {("ring-ll", "eagle3", "inspector"): 123}


def test_runtime_switches_inspector_dir(tmp_path: Path) -> None:
    from fastverify.exporters.runtime import ExporterRuntime

    hub = MetricsHub()
    hub.set_engine(True, "insp", "baseline", {}, "sglang", None)
    rt = ExporterRuntime(hub, "", None, tmp_path / "t", 0, 5).start()
    try:
        d = tmp_path / "dump"
        d.mkdir()
        (d / "h-pid1.log").write_text(_rec(0, 1, 45.0) + "\n")
        rt.set_inspector_dir(d)
        summary = rt._inspector.poll_once()  # the follower's own thread first polls after 2 s
        assert summary is not None and summary["allreduce_calls"] == 1
        calls = hub.snapshot()["allreduce_calls"]
        assert calls == {("insp", "baseline", "inspector"): 1}
        rt.set_inspector_dir(None)
        assert rt._inspector is None
    finally:
        rt.stop()
