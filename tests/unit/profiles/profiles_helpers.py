"""Shared constants and helpers for the profile tests (imported as a plain module)."""

from __future__ import annotations

from pathlib import Path

from fastverify.profiles.validate import Topology

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "profiles"
DATA = Path(__file__).parent / "data"
PCIE = Topology(has_nvlink=False, source="test: PCIe only")
NVLINK = Topology(has_nvlink=True, source="test: NVLink")
UNKNOWN = Topology(has_nvlink=None, source="test: unknown")


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    return path
