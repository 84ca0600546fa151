"""A full disk never tears a record silently: JSON lines on a real, small tmpfs (mounted here,
unmounted after), and a daemon whose state dir fills up in the middle of a switch."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastverify.durable import append_jsonl
from tests.support.harness import DaemonHarness


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


needs_mount = pytest.mark.skipif(not _can_mount(), reason="mounting a tmpfs needs root")


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
                   check=True)  # fmt: skip
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path) -> None:
    """Write `path` until the file system refuses more (ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                if os.write(fd, chunk) <= 0:
                    return
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


@needs_mount
def test_a_record_is_written_whole_or_not_at_all_on_a_full_tmpfs(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "fs", "64k") as fs:
        journal = fs / "journal.jsonl"
        append_jsonl(journal, {"n": 1})
        before = journal.read_bytes()
        fill(fs / "filler")
        (fs / "filler").unlink()
        fill(fs / "filler")  # the file system is full to the last byte again
        with pytest.raises(OSError) as exc:
            append_jsonl(journal, {"n": 2, "pad": "x" * 20_000})
        assert exc.value.errno == errno.ENOSPC
        assert journal.read_bytes() == before  # nothing torn, nothing half-written
        (fs / "filler").unlink()
        append_jsonl(journal, {"n": 3})
        lines = journal.read_bytes().splitlines()
        assert [json.loads(x)["n"] for x in lines] == [1, 3]


@needs_mount
def test_the_state_dir_filling_mid_switch_says_so_and_puts_the_last_good_back(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "state", "16m"):
        d = DaemonHarness(tmp_path, metrics=False, sim_load_seconds=3.0, start=False)
        try:
            d.start(wait_ready=True, timeout=60)
            good = d.status()
            result: dict = {}

            def switch() -> None:
                r = d.ctl("profile", "set", "ring-ll", "--json", timeout=120)
                result["rc"], result["out"] = r.returncode, r.stdout + r.stderr

            t = threading.Thread(target=switch)
            t.start()
            d.wait_for(
                lambda: (
                    (s := d.status())["state"] == "STARTING"
                    and s["engine"]["pid"] not in (None, good["engine"]["pid"])
                ),
                30,
                "the new engine to load",
            )
            filler = d.state_dir / "filler"
            fill(filler)
            st = d.wait_for(
                lambda: (
                    (s := d.status())["last_failure"]
                    and s["last_failure"]["reason"] == "state_dir_full"
                    and s
                ),
                60,
                "the switch to fail for the full state dir",
            )
            assert "state dir full" in st["last_failure"]["message"]
            d.wait_for(
                lambda: any("state dir" in f for f in d.status()["findings"]),
                30,
                "status to say the state dir is full",
            )
            filler.unlink()
            t.join(120)
            assert not t.is_alive()
            out = json.loads(result["out"][: result["out"].rindex("}") + 1])
            assert out["result"] == "rolled_back", out
            assert out["reason"] == "state_dir_full"
            st = d.wait_state("READY", 60)
            assert st["profile"] == good["profile"]
            assert not any("state dir" in f for f in st["findings"]), st["findings"]
        finally:
            d.close()
