"""fastverify.durable: what a crash or a concurrent writer can and cannot leave behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fastverify import durable


def test_atomic_write_replaces_whole_files_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    durable.atomic_write_json(path, {"a": 1})
    durable.atomic_write_json(path, {"b": [1, 2]}, mode=0o644)
    assert json.loads(path.read_text()) == {"b": [1, 2]}
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json"]


def test_without_overwrite_an_existing_file_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "x.env"
    path.write_text("old\n")
    with pytest.raises(FileExistsError):
        durable.atomic_write_text(path, "new\n", overwrite=False)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.env"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    durable.atomic_write_json(path, {"a": 1})
    with pytest.raises(TypeError):
        durable.atomic_write_bytes(path, "not bytes")  # type: ignore[arg-type]
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_scan_counts_what_it_skips(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n": 1}\n\n[1, 2]\n\xff\xfe\n{"n": 2}\n{"n": 3')
    assert durable.scan_jsonl(path) == ([{"n": 1}, {"n": 2}], 3)
    assert durable.read_jsonl(tmp_path / "missing.jsonl") == []


def test_append_creates_the_file_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    durable.append_jsonl(path, {"b": 1, "a": 2}, sort_keys=True, compact=False)
    assert path.read_text() == '{"a": 2, "b": 1}\n'
    assert oct(os.stat(path).st_mode & 0o777) == "0o640"
