"""Session fixtures for the deployment tests: a private dockerd, a Debian bookworm rootfs,
the base image imported from it, the image of this checkout built on it, a wheelhouse with
fastverify's wheel built from this checkout, and a snapshot of the checkout.

The heavy artefacts (the rootfs, the base image, the dependencies' wheels, the image) are
built before the suite by ./scripts/test's install phase (tests/support/prebuild.py) and
cached under $FASTVERIFY_TEST_CACHE (default /var/cache/fastverify-test); a fixture only
checks that its artefact is there and, if not, says how to build it. Everything started here
is stopped here: dockerd (by its pid), the containers the tests created. Tests that need root
services are marked `container`; where the machine cannot run them they skip with a loud
reason, and under CI (CI=true) they fail instead.

One dockerd runs per data root, so a second run beside this one waits for this one's
dockerd to stop (tests.support.containers.locked, bounded): for the tests that use it, their
timeout counts the test alone, not that wait in the session fixture's setup.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import prebuild
from tests.support.containers import Docker, need_root_tools, run, unavailable
from tests.support.shared_run import once


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "dockerd" in getattr(item, "fixturenames", ()):
            mark = item.get_closest_marker("timeout")
            given = (mark.args[0] if mark.args else mark.kwargs.get("timeout")) if mark else None
            seconds = given if given is not None else item.config.getini("timeout")
            item.add_marker(pytest.mark.timeout(float(seconds), func_only=True))


# --- checkout snapshot and wheels --------------------------------------------------------


@pytest.fixture(scope="session")
def repo_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout (tracked + untracked, not ignored): what a clone would hold."""
    dest = tmp_path_factory.mktemp("repo")
    prebuild.snapshot_checkout(dest)
    return dest


def prebuilt(*names: str) -> None:
    """Fail (CI) or skip loudly where the install phase has not built what a test needs."""
    if gone := prebuild.missing(*names):
        unavailable(f"{', '.join(gone)} not built: run {prebuild.HOW}")


@pytest.fixture(scope="session")
def wheelhouse(repo_snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's wheels: the install phase's (fastverify's dependencies, its build backend)
    and fastverify's own, built offline from the snapshot once per run, in the run's own
    directory (the xdist workers share it; another run beside this one has its own). The
    containers and the nspawn machine install from it, offline."""
    prebuilt("wheelhouse")

    def build(dest: Path) -> None:
        dest.mkdir(exist_ok=True)
        for whl in prebuild.WHEELHOUSE.glob("*.whl"):
            if not whl.name.startswith("fastverify-"):
                shutil.copy2(whl, dest)
        run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
             "--no-index", "--no-deps", "--find-links", str(dest), "--wheel-dir", str(dest),
             str(repo_snapshot)],
            timeout=240,
        )  # fmt: skip

    return once(tmp_path_factory, "wheelhouse", build)


@pytest.fixture(scope="session")
def bookworm_rootfs() -> Path:
    """A Debian bookworm minbase with python3, venv, pip and systemd (the install phase's)."""
    need_root_tools("systemd-nspawn")
    prebuilt("rootfs")
    return prebuild.ROOTFS


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    """dockerd on a private socket with no bridge or iptables; data root cached."""
    need_root_tools("dockerd", "docker")
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    try:
        with prebuild.private_dockerd(log) as docker:
            yield docker
    except prebuild.DockerdDidNotStart as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def base_image(dockerd: Docker) -> str:
    """The rootfs as a local image (stands in for lmsysorg/sglang: python3, no SGLang),
    imported by the install phase."""
    prebuilt("base image")
    return prebuild.BASE_IMAGE


@pytest.fixture(scope="session")
def fastverify_image(dockerd: Docker, base_image: str) -> str:
    """The real Dockerfile built on the local base from this checkout, offline: by the install
    phase (a build here would run under a test's timeout), tagged with a digest of what it
    copies, so that a changed checkout is never tested with an older image."""
    prebuilt("test image")
    return prebuild.test_image()
