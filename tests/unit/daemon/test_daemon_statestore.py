"""state.json / journal.jsonl / engine.pid durability and recovery."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fastverify.daemon.statestore import StateStore
from fastverify.durable import atomic_write_json


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "state.json"
    atomic_write_json(p, {"a": 1})
    atomic_write_json(p, {"a": 2})
    assert json.loads(p.read_text()) == {"a": 2}
    assert [f.name for f in tmp_path.iterdir()] == ["state.json"]


def test_roundtrip_and_history(tmp_path: Path) -> None:
    s = StateStore(tmp_path)
    s.save_state({"profile": "ring-ll", "mode": "eagle3", "last_good": None})
    s.append_journal({"type": "transition", "from": "STOPPED", "to": "STARTING"})
    s.append_journal({"type": "switch", "profile": "ring-ll", "result": "ok"})
    assert StateStore(tmp_path).load_state()["mode"] == "eagle3"
    assert [r["profile"] for r in s.history()] == ["ring-ll"]
    assert s.findings == []


def test_corrupt_state_recovers_from_last_good_journal_record(tmp_path: Path) -> None:
    s = StateStore(tmp_path)
    ring = {"profile": "ring-ll", "mode": "baseline"}
    s.append_journal({"type": "switch", **ring, "result": "ok", "serving": ring})
    s.append_journal(
        {"type": "switch", "profile": "tree-ll", "mode": "baseline", "result": "rolled_back",
         "serving": ring}
    )  # fmt: skip
    s.append_journal({"type": "switch", "profile": "x", "mode": "baseline", "result": "failed"})
    (tmp_path / "state.json").write_bytes(b'{"profile": "tree-\x00')
    state = StateStore(tmp_path).load_state()
    assert state["profile"] == "ring-ll" and state["last_good"]["profile"] == "ring-ll"
    assert (tmp_path / "state.json.corrupt-1").exists()


def test_truncated_journal_line_is_skipped_and_next_record_starts_fresh(tmp_path: Path) -> None:
    s = StateStore(tmp_path)
    s.append_journal({"type": "switch", "profile": "a", "result": "ok"})
    with open(tmp_path / "journal.jsonl", "a") as fh:
        fh.write('{"type": "switch", "prof')  # torn write
    s.append_journal({"type": "switch", "profile": "b", "result": "ok"})
    assert [r["profile"] for r in s.history()] == ["a", "b"]
    s.read_journal()  # the whole journal, as start-up reads it, reports what it skipped
    assert any("skipped 1 unreadable line" in f for f in s.findings)


def test_missing_state_without_journal_is_empty(tmp_path: Path) -> None:
    s = StateStore(tmp_path)
    assert s.load_state() == {}
    assert s.findings == []


def test_journal_is_fsynced_append_only(tmp_path: Path) -> None:
    s = StateStore(tmp_path)
    for i in range(5):
        s.append_journal({"type": "switch", "n": i})
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    assert [json.loads(x)["n"] for x in lines] == list(range(5))
    assert oct(os.stat(tmp_path / "journal.jsonl").st_mode & 0o777) == "0o640"


def test_journal_rotates_and_history_spans_both_files(tmp_path: Path) -> None:
    s = StateStore(tmp_path)
    s.journal_max_bytes = 300
    for i in range(20):
        s.append_journal({"type": "switch", "profile": f"p{i}", "result": "ok"})
    assert (tmp_path / "journal.1.jsonl").exists()
    assert (tmp_path / "journal.jsonl").stat().st_size <= 300 + 100
    names = [r["profile"] for r in s.history()]
    assert names == [f"p{i}" for i in range(20 - len(names), 20)]  # newest kept, in order
    assert len(names) >= 4


def test_prune_logs_keeps_the_newest(tmp_path: Path) -> None:
    s = StateStore(tmp_path)
    for i in range(6):
        p = s.logs_dir / f"{i}.log"
        p.write_text("x")
        os.utime(p, (1000 + i, 1000 + i))
        if i == 0:
            (s.logs_dir / "0.nccl").mkdir()
    assert s.prune_logs(keep=3) == 3
    assert sorted(p.name for p in s.logs_dir.iterdir()) == ["3.log", "4.log", "5.log"]
