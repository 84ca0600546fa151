"""Session fixtures for the deployment tests: a private dockerd, a Debian bookworm rootfs
(debootstrap, cached), the base image imported from it, a wheelhouse built from this
checkout, and a snapshot of the checkout to build from.

Heavy artefacts are cached under $FASTVERIFY_TEST_CACHE (default /var/cache/fastverify-test)
so reruns are fast; a clean machine builds them inside the suite (debootstrap ~75 s).
Everything started here is stopped here: dockerd (by its pid), containers and images the
tests created. Tests that need root services are marked `container`; where the machine
cannot run them they skip with a loud reason, and under CI (CI=true) they fail instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.containers import (
    CACHE,
    REPO,
    ROOTFS_KEY,
    ROOTFS_PACKAGES,
    SUITE,
    Docker,
    debian_mirror,
    locked,
    need_root_tools,
    run,
    unavailable,
)
from tests.support.shared_run import once

# --- checkout snapshot and wheels --------------------------------------------------------


@pytest.fixture(scope="session")
def repo_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout (tracked + untracked, not ignored): what a clone would hold."""
    dest = tmp_path_factory.mktemp("repo")
    files = run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"]).stdout
    for rel in filter(None, files.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.fixture(scope="session")
def wheelhouse(repo_snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of fastverify, its dependencies and its build backend (for offline installs:
    containers and the nspawn machine cannot reach a package index). Built once per run:
    the xdist workers share it (a second build would replace the fastverify wheel under a
    worker installing it)."""
    dest = CACHE / "wheelhouse"
    dest.mkdir(parents=True, exist_ok=True)

    def build(done: Path) -> None:
        with locked(CACHE / "wheelhouse.lock"):  # another run's workers
            for old in dest.glob("fastverify-*.whl"):
                old.unlink()
            run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
                 "--find-links", str(dest), "--wheel-dir", str(dest), str(repo_snapshot),
                 "hatchling"],
                timeout=600,
            )  # fmt: skip
        done.write_text(str(dest))

    once(tmp_path_factory, "wheelhouse.done", build)
    return dest


# --- Debian rootfs (debootstrap) -----------------------------------------------------------


@pytest.fixture(scope="session")
def bookworm_rootfs() -> Path:
    """A Debian bookworm minbase with python3, venv, pip and systemd, built once and cached."""
    need_root_tools("debootstrap")
    root = CACHE / f"rootfs-{SUITE}-{ROOTFS_KEY}"
    with locked(CACHE / "rootfs.lock"):
        if (root / ".complete").exists():
            return root
        tmp = root.with_name(root.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(ROOTFS_PACKAGES)}",
             SUITE, str(tmp), debian_mirror()],
            timeout=900,
        )  # fmt: skip
        for cache in (tmp / "var/cache/apt/archives").glob("*.deb"):
            cache.unlink()
        (tmp / "etc/hostname").write_text("fastverify-test\n")
        # No login prompt on the console of a booted container.
        with contextlib.suppress(FileNotFoundError):
            (tmp / "etc/systemd/system/getty.target.wants/getty@tty1.service").unlink()
        (tmp / ".complete").write_text(f"{SUITE} {' '.join(ROOTFS_PACKAGES)}\n")
        tmp.rename(root)
    return root


# --- dockerd -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    """dockerd on a private socket with no bridge or iptables; data root cached."""
    need_root_tools("dockerd", "docker")
    cli = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")
    assert cli
    # Short paths: Unix socket paths are limited to 108 bytes.
    run_dir = Path(f"/tmp/fvdock-{os.getpid()}")
    run_dir.mkdir(mode=0o700, exist_ok=True)
    sock = run_dir / "docker.sock"
    data_root = CACHE / "docker"
    data_root.mkdir(parents=True, exist_ok=True)
    lock = open(CACHE / "docker.lock", "w")  # noqa: SIM115 (held for the session)
    fcntl.flock(lock, fcntl.LOCK_EX)
    log = open(tmp_path_factory.mktemp("dockerd") / "dockerd.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        ["dockerd", "--data-root", str(data_root), "--exec-root", str(run_dir / "exec"),
         "--host", f"unix://{sock}", "--pidfile", str(run_dir / "docker.pid"),
         "--iptables=false", "--ip6tables=false", "--bridge=none"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    env = {**os.environ, "DOCKER_HOST": f"unix://{sock}", "DOCKER_BUILDKIT": "0"}
    env.pop("DOCKER_CONTEXT", None)
    docker = Docker(env=env, cli=cli)
    try:
        deadline = time.monotonic() + 60
        while docker("version", check=False, timeout=10).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                unavailable(f"dockerd did not start: {Path(log.name).read_text()[-2000:]}")
            time.sleep(0.5)
        yield docker
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def base_image(dockerd: Docker, bookworm_rootfs: Path) -> str:
    """The rootfs as a local image (stands in for lmsysorg/sglang: python3, no SGLang)."""
    tag = f"fastverify-test-base:{ROOTFS_KEY}"
    if dockerd("image", "inspect", tag, check=False).returncode != 0:
        tar = subprocess.Popen(
            ["tar", "-C", str(bookworm_rootfs), "--exclude=./.complete", "-c", "."],
            stdout=subprocess.PIPE,
        )
        imp = subprocess.run(
            [dockerd.cli, "import", "-", tag], stdin=tar.stdout, env=dockerd.env,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait(timeout=60)
        assert imp.returncode == 0, imp.stderr
    return tag


@pytest.fixture(scope="session")
def fastverify_image(
    dockerd: Docker, base_image: str, repo_snapshot: Path, wheelhouse: Path
) -> Iterator[str]:
    """The real Dockerfile built on the local base, offline (--network none), from wheels."""
    context = repo_snapshot
    whl = context / ".whl"
    if whl.exists():
        shutil.rmtree(whl)
    shutil.copytree(wheelhouse, whl)
    tag = f"fastverify:test-{os.getpid()}"
    dockerd(
        "build", "--quiet", "--network", "none", "--tag", tag,
        "--build-arg", f"BASE_IMAGE={base_image}",
        "--build-arg", "PIP_OPTIONS=--no-index --find-links /src/.whl",
        str(context), timeout=600,
    )  # fmt: skip
    shutil.rmtree(whl)
    try:
        yield tag
    finally:
        dockerd("image", "rm", "--force", tag, check=False)
        # The build stage's image is left dangling by the legacy builder: ours to remove.
        dockerd("image", "prune", "--force", check=False)
