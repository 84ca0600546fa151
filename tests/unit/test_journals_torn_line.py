"""Every journal the project appends to keeps every complete record after a torn last line
(a crash or a full disk mid-write): the next record starts on a line of its own and the
reader skips only the torn one. One case per journal: the daemon's, tune's, sweep's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastverify.daemon.statestore import StateStore
from fastverify.experiments.sweep import config, results
from fastverify.experiments.tune.journal import Journal

TORN = '{"type": "measurement", "profile": "torn'  # what a crash mid-write leaves


def _daemon(tmp: Path) -> tuple[Path, Callable[[dict[str, Any]], None], Callable[[], list]]:
    store = StateStore(tmp)
    return store.journal_path, store.append_journal, store.read_journal


def _tune(tmp: Path) -> tuple[Path, Callable[[dict[str, Any]], None], Callable[[], list]]:
    journal = Journal(tmp)
    return journal.path, journal.append, lambda: Journal(tmp).records


def _sweep(tmp: Path) -> tuple[Path, Callable[[dict[str, Any]], None], Callable[[], list]]:
    path = tmp / config.RESULTS_FILE
    return path, lambda rec: results.append_record(path, rec), lambda: results.load_records(path)


@pytest.mark.parametrize("journal", [_daemon, _tune, _sweep], ids=["daemon", "tune", "sweep"])
def test_a_torn_last_line_loses_no_record(journal: Callable, tmp_path: Path) -> None:
    path, append, read = journal(tmp_path)
    append({"type": "measurement", "n": 1})
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(TORN)
    append({"type": "measurement", "n": 2})
    append({"type": "measurement", "n": 3})
    assert [r["n"] for r in read() if "n" in r] == [1, 2, 3]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[1] == TORN  # kept as it was, on its own line
    assert [json.loads(line)["n"] for line in (lines[0], *lines[2:])] == [1, 2, 3]
