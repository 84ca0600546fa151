"""Fixtures for the tuner tests: the real plugin, built once per session with the
project's own build script (scripts/build-tuner.sh, the system C compiler)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def plugin_so(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tuner") / "libnccl-tuner-fastverify.so"
    proc = subprocess.run(
        [str(ROOT / "scripts" / "build-tuner.sh"), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"build-tuner.sh failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip() == str(out)
    return out
