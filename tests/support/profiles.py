"""Shared constants and helpers for the profile tests."""

from __future__ import annotations

from pathlib import Path

from fastverify.profiles.validate import Topology

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "profiles"
DATA = REPO / "tests" / "unit" / "profiles" / "data"
PCIE = Topology(has_nvlink=False, source="test: PCIe only")
NVLINK = Topology(has_nvlink=True, source="test: NVLink")
UNKNOWN = Topology(has_nvlink=None, source="test: unknown")


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    return path
