"""Which libnccl the binding picks, and its errors (no library needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastverify.nccl import pynccl


def test_mapped_library_reads_the_process_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 00:2a 11 /usr/lib/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 00:2a 12 /venv/site/nvidia/nccl/lib/libnccl.so.2\n"
    )
    assert pynccl.mapped_library(str(maps)) == "/venv/site/nvidia/nccl/lib/libnccl.so.2"
    maps.write_text("7f00-7f01 r-xp 00000000 00:2a 11 /usr/lib/libc.so.6\n")
    assert pynccl.mapped_library(str(maps)) is None
    assert pynccl.mapped_library(str(tmp_path / "absent")) is None


def test_wheel_library_is_the_first_on_the_path(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for root in (first, second):
        lib = root / "nvidia" / "nccl" / "lib"
        lib.mkdir(parents=True)
        (lib / pynccl.SONAME).write_bytes(b"")
    assert pynccl.wheel_library([str(tmp_path / "none"), str(second), str(first)]) == str(
        second / "nvidia" / "nccl" / "lib" / pynccl.SONAME
    )
    assert pynccl.wheel_library([str(tmp_path / "none")]) is None


def test_explicit_library_must_exist(tmp_path: Path) -> None:
    with pytest.raises(pynccl.NcclError, match="no such file"):
        pynccl.find_library({pynccl.LIBRARY_ENV: str(tmp_path / "libnccl.so.2")})


def test_unloadable_library_says_what_to_install(tmp_path: Path) -> None:
    bogus = tmp_path / "libnccl.so.2"
    bogus.write_text("not an ELF file")
    with pytest.raises(pynccl.NcclError, match="install torch's CUDA build"):
        pynccl.NcclLibrary(str(bogus))
