"""The suite's root: fixtures every test directory may use, beside tests/support/ (the
helpers: `from tests.support.X import ...`; a test module never imports another).

`plugin_so`: the project's NCCL tuner plugin, built once per session by its own build script
(scripts/build-tuner.sh, the system C compiler).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


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
