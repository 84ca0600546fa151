"""The suite's root: fixtures every test directory may use, beside tests/support/ (the
helpers: `from tests.support.X import ...`; a test module never imports another).

Every test process and every test has its own fastverify config, profile, state and runtime
directories, never the machine's (tests/support/host_dirs.py): the process's are set when
pytest starts, each test's by `own_host_dirs`, which also fails a test that read under the
machine's directories anyway.

`plugin_so`: the project's NCCL tuner plugin, built once per session by its own build script
(scripts/build-tuner.sh, the system C compiler).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import host_dirs

ROOT = Path(__file__).resolve().parent
_BASE = pytest.StashKey[Path]()  # this process's own directories


def pytest_configure(config: pytest.Config) -> None:
    machine = host_dirs.host_dirs()  # before the isolating variables replace XDG_*
    config.stash[_BASE] = host_dirs.isolate_process()
    host_dirs.guard(machine)


def pytest_unconfigure(config: pytest.Config) -> None:
    if (base := config.stash.get(_BASE, None)) is not None:
        host_dirs.remove(base)


@pytest.fixture(autouse=True)
def own_host_dirs(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """This test's own fastverify directories (empty: a host with nothing installed)."""
    base = tmp_path_factory.mktemp("host")
    for var, value in host_dirs.isolated_env(base).items():
        monkeypatch.setenv(var, value)
    yield base
    reads = host_dirs.take_reads()
    assert not reads, f"this test read the machine's fastverify directories: {reads}"


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
