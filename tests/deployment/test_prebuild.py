"""The install phase's rootfs build (tests/support/prebuild.py) on a machine where an earlier
build was killed half-way: debootstrap had mounted proc inside the unfinished root, and a
plain rmtree of it failed with PermissionError on every later run. Run with a stand-in
debootstrap on PATH that mounts proc in its target as the real one does (no network here),
and real mounts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import prebuild
from tests.support.containers import need_root_tools, run

pytestmark = pytest.mark.container

FAKE_DEBOOTSTRAP = """#!/bin/sh
# --variant=... --include=... SUITE TARGET MIRROR, as prebuild calls it
target=$4
mkdir -p "$target/proc" "$target/var/cache/apt/archives" "$target/etc"
mount -t proc proc "$target/proc"
echo "I: Retrieving Packages"
echo "I: Installing core packages..."
if [ -n "$FAIL_AFTER_MOUNT" ]; then exit 1; fi
umount "$target/proc"
echo "I: Base system installed successfully."
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    need_root_tools("mount", "umount")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "debootstrap").write_text(FAKE_DEBOOTSTRAP)
    (bin_dir / "debootstrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    root = tmp_path / "cache"
    root.mkdir()
    monkeypatch.setattr(prebuild, "CACHE", root)
    monkeypatch.setattr(prebuild, "ROOTFS", root / "rootfs-test")
    yield root
    for point in prebuild.mounts_under(tmp_path):  # a failed test leaves nothing mounted
        run(["umount", "-R", "-l", point], check=False)


def test_a_killed_builds_root_with_proc_mounted_is_removed_first(cache: Path) -> None:
    stale = cache / "rootfs-test.tmp"
    (stale / "proc").mkdir(parents=True)
    (stale / "etc").mkdir()
    run(["mount", "-t", "proc", "proc", str(stale / "proc")])
    run(["mount", "-t", "tmpfs", "tmpfs", str(stale / "etc")])  # and a second one
    assert len(prebuild.mounts_under(stale)) == 2

    said = prebuild.build_rootfs()

    assert said.startswith(f"rootfs {cache / 'rootfs-test'}: built in"), said
    assert (cache / "rootfs-test/.complete").exists()
    assert not stale.exists()
    assert prebuild.mounts_under(cache) == []
    assert prebuild.build_rootfs() == f"rootfs {cache / 'rootfs-test'}: present"


def test_a_failed_build_leaves_no_root_and_no_mount(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_AFTER_MOUNT", "1")
    with pytest.raises(RuntimeError, match="debootstrap exited 1"):
        prebuild.build_rootfs()
    assert not (cache / "rootfs-test.tmp").exists()
    assert not (cache / "rootfs-test").exists()
    assert prebuild.mounts_under(cache) == []
    assert (
        "proc"
        not in subprocess.run(
            ["findmnt", "-R", "-n", "-o", "TARGET", str(cache)], capture_output=True, text=True
        ).stdout
    )
