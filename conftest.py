"""The suite's root: fixtures every test directory may use, beside tests/support/ (the
helpers: `from tests.support.X import ...`; a test module never imports another).

Every test process and every test has its own fastverify config, profile, state and runtime
directories, never the machine's (tests/support/host_dirs.py): the process's are set when
pytest starts, each test's by `own_host_dirs`, which also fails a test that read under the
machine's directories anyway.

`plugin_so`: the project's NCCL tuner plugin, built once per session by its own build script
(scripts/build-tuner.sh, the system C compiler).

With `--dist loadfile` (./scripts/test) the workers get whole files, longest first, and the
dockerd files together (tests/support/schedule.py); `--record-durations` rewrites the
per-file seconds that order them (tests/durations.json).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import host_dirs, schedule

ROOT = Path(__file__).resolve().parent
_BASE = pytest.StashKey[Path]()  # this process's own directories
_SECONDS: dict[str, float] | None = None  # per test file, with --record-durations


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test file's seconds (setup, call, teardown) to {schedule.DURATIONS}",
    )


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getoption("dist") == "loadfile":
        return schedule.LongestFirst(config, log)
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _SECONDS is not None:
        file = schedule.file_of(report.nodeid)
        _SECONDS[file] = _SECONDS.get(file, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _SECONDS:
        schedule.write_durations(_SECONDS)


def pytest_configure(config: pytest.Config) -> None:
    global _SECONDS
    if config.getoption("record_durations") and not os.environ.get("PYTEST_XDIST_WORKER"):
        _SECONDS = {}
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
