"""The host-mode unit under real systemd: a Debian bookworm container booted with
systemd-nspawn, where `deploy.sh install --mode host` installs fastverify from wheels (its own
venv), renders and installs fastverifyd.service, and systemd runs fastverifyd on the sim
engine. Checked: active only after READY=1, the STATUS= line in `systemctl status`, the
watchdog fed, a kill -9 of the daemon restarted by systemd, `systemctl stop` leaves no engine.
Each test brings the unit to the state it starts from (`stopped` or `serving`), so any one of
them passes alone and in any order.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.containers import need_root_tools, run, unavailable
from tests.support.net import free_port

# booting systemd in a container: the hang guard (not a bound) gives a loaded host room
pytestmark = [pytest.mark.container, pytest.mark.slow, pytest.mark.timeout(900)]

ENV = ["env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "LANG=C.UTF-8", "HOME=/root"]  # fmt: skip
WATCHDOG_S = 4


class Machine:
    """A booted nspawn container; `sh()` runs a command inside all its namespaces."""

    def __init__(self, root: Path, proc: subprocess.Popen, log: Path):
        self.root, self.proc, self.log = root, proc, log
        self.leader = 0

    def find_leader(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
            with contextlib.suppress(FileNotFoundError):
                pids = children.read_text().split()
                if pids:
                    self.leader = int(pids[0])
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        unavailable(f"systemd-nspawn did not boot: {self.log.read_text()[-2000:]}")

    def sh(self, script: str, *, check: bool = True, timeout: float = 120):
        cmd = ["nsenter", "-t", str(self.leader), "-a", *ENV, "/bin/sh", "-c", script]
        return run(cmd, check=check, timeout=timeout)

    def show(self, *props: str) -> dict[str, str]:
        args = " ".join(f"-p {p}" for p in props)
        out = self.sh(f"systemctl show {args} fastverifyd.service").stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, lines: int = 60) -> str:
        """The unit's journal: what a failure message shows (why it did not start)."""
        out = self.sh(f"journalctl -u fastverifyd.service -n {lines} --no-pager", check=False)
        return out.stdout[-6000:]

    def daemon_status(self) -> dict:
        proc = self.sh("fastverifyctl status --json", check=False, timeout=20)
        try:
            return json.loads(proc.stdout) if proc.returncode == 0 else {}
        except ValueError:
            return {}

    def poweroff(self) -> None:
        if self.proc.poll() is None and self.leader:
            self.sh("systemctl poweroff", check=False, timeout=30)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # nspawn: clean shutdown of the container
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def machine(bookworm_rootfs: Path, repo_snapshot: Path, wheelhouse: Path) -> Iterator[Machine]:
    need_root_tools("systemd-nspawn", "nsenter", "mount")
    work = Path(f"/tmp/fvnspawn-{os.getpid()}")
    upper, lower_work, merged = work / "upper", work / "work", work / "root"
    for d in (upper, lower_work, merged):
        d.mkdir(parents=True)
    opts = f"lowerdir={bookworm_rootfs},upperdir={upper},workdir={lower_work}"
    mounted = run(["mount", "-t", "overlay", "overlay", "-o", opts, str(merged)], check=False)
    if mounted.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        unavailable(f"overlay mount failed: {mounted.stderr.strip()}")
    machine = None
    try:
        shutil.copytree(repo_snapshot, merged / "opt/src", ignore=shutil.ignore_patterns(".whl"))
        shutil.copytree(wheelhouse, merged / "opt/wheels")
        for d in ("models/model", "models/draft"):
            (merged / d).mkdir(parents=True)
        log = work / "nspawn.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(
                ["systemd-nspawn", "--register=no", "--keep-unit", "--quiet",
                 "--console=passive", "-D", str(merged), "-b"],
                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        machine = Machine(merged, proc, log)
        deadline = time.monotonic() + 90
        state = ""
        while state not in ("running", "degraded"):
            # The first child may still be nspawn's own until systemd has exec'd: re-find it.
            machine.find_leader()
            booted = machine.sh("systemctl is-system-running --wait", check=False, timeout=90)
            state = booted.stdout.strip()
            if time.monotonic() > deadline:
                raise AssertionError(f"machine did not boot: {state} {booted.stderr}")
            time.sleep(0.2)
        yield machine
    finally:
        if machine is not None:
            machine.poweroff()
        run(["umount", str(merged)], check=False)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def installed(machine: Machine) -> Machine:
    """deploy.sh install --mode host inside the machine; started by the tests themselves."""
    machine.sh(
        "/opt/src/deploy.sh install --mode host --engine auto --no-start "
        "--pip-options '--no-index --find-links /opt/wheels'",
        timeout=400,
    )
    # The container shares the host's network: its server and exporter take ports that are
    # free on the host now, not SGLang's 30000 and the exporter's 9464 (anything else on this
    # machine may hold those).
    server_port, metrics_port = free_port(), free_port()
    # (in a copy of the installed config: deploy.sh keeps owning its own file, unedited)
    machine.sh(
        f"sed 's/^port = 30000$/port = {server_port}/' /etc/fastverify/fastverifyd.toml"
        " > /etc/fastverify/test.toml"
        f" && grep -q '^port = {server_port}$' /etc/fastverify/test.toml"
    )
    # Test tuning in a drop-in (the operator's way): a short watchdog and a visible load.
    machine.sh(
        "mkdir -p /etc/systemd/system/fastverifyd.service.d && "
        "printf '[Service]\\nWatchdogSec=%ss\\nExecStart=\\nExecStart=%s\\n' "
        f"{WATCHDOG_S} '/opt/fastverify/bin/fastverifyd --config "
        "/etc/fastverify/test.toml --sim-load-seconds 3 "
        f"--metrics-listen 127.0.0.1:{metrics_port}' "
        "> /etc/systemd/system/fastverifyd.service.d/test.conf && systemctl daemon-reload"
    )
    return machine


@pytest.fixture
def stopped(installed: Machine) -> Machine:
    """The unit installed and not running."""
    installed.sh("systemctl stop fastverifyd.service", timeout=150)
    assert installed.show("ActiveState")["ActiveState"] == "inactive", installed.journal()
    return installed


@pytest.fixture
def serving(installed: Machine) -> Machine:
    """The unit active and its daemon READY (started here when it is not)."""
    m = installed
    if m.show("ActiveState")["ActiveState"] != "active":
        # Type=notify: `systemctl start` returns once the daemon has sent READY=1
        start = m.sh("systemctl start fastverifyd.service", check=False, timeout=150)
        assert start.returncode == 0, f"{start.stderr}\njournal:\n{m.journal()}"
    wait_until(lambda: m.daemon_status().get("state") == "READY", 60, "READY")
    return m


def test_unit_is_active_only_after_ready(stopped: Machine) -> None:
    m = stopped
    assert m.show("UnitFileState")["UnitFileState"] == "enabled"
    m.sh("systemctl start --no-block fastverifyd.service")
    samples: list[tuple[str, str]] = []

    def sample() -> bool:
        active = m.show("ActiveState")["ActiveState"]
        state = m.daemon_status().get("state", "")
        samples.append((active, state))
        return active == "active" or active == "failed"

    try:
        wait_until(sample, 90, "fastverifyd.service active", interval=0.1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; samples {samples[-5:]}; journal:\n{m.journal()}") from None
    assert samples[-1][0] == "active", samples
    assert ("activating", "STARTING") in samples or ("activating", "") in samples, samples
    assert all(state == "READY" for active, state in samples if active == "active"), samples

    # deploy.sh again: idempotent, and it waits for READY and prints the status.
    out = m.sh(
        "/opt/src/deploy.sh install --mode host --engine auto --wait-timeout 60 "
        "--pip-options '--no-index --find-links /opt/wheels'",
        timeout=300,
    ).stdout
    assert "nothing changed" in out and "state:      READY" in out


def test_status_line_shows_in_systemctl_status(serving: Machine) -> None:
    m = serving
    text = wait_until(lambda: m.show("StatusText")["StatusText"], 20, "a STATUS= line")
    assert "nccl-default" in text
    out = m.sh("systemctl status --no-pager fastverifyd.service", check=False).stdout
    assert f'Status: "{text}' in out


def test_watchdog_is_fed(serving: Machine) -> None:
    m = serving
    props = ("ActiveState", "MainPID", "NRestarts", "WatchdogUSec", "WatchdogTimestampMonotonic")
    before = m.show(*props)
    assert before["WatchdogUSec"] == f"{WATCHDOG_S}s"
    # Fed for longer than two watchdog periods: systemd stamps each WATCHDOG=1 it receives; a
    # daemon that stopped feeding it would have been killed (a new MainPID) before a stamp
    # this late exists.
    goal = int(before["WatchdogTimestampMonotonic"]) + int(WATCHDOG_S * 2.5 * 1e6)

    def fed_past_goal() -> dict[str, str] | None:
        now = m.show(*props)
        assert now["MainPID"] == before["MainPID"], f"restarted: {now}\n{m.journal()}"
        return now if int(now["WatchdogTimestampMonotonic"]) >= goal else None

    after = wait_until(fed_past_goal, WATCHDOG_S * 10, "the watchdog fed past 2.5 periods")
    assert after["ActiveState"] == "active"
    assert after["NRestarts"] == before["NRestarts"]


def test_kill_9_of_the_daemon_is_restarted_by_systemd(serving: Machine) -> None:
    m = serving
    before = m.show("MainPID", "NRestarts")
    old_engine = m.daemon_status()["engine"]["pid"]
    m.sh(f"kill -9 {before['MainPID']}")
    wait_until(
        lambda: (s := m.show("ActiveState", "MainPID", "NRestarts"))["ActiveState"] == "active"
        and s["MainPID"] != before["MainPID"],
        60, "restart after kill -9",
    )  # fmt: skip
    after = m.show("MainPID", "NRestarts")
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1
    status = wait_until(
        lambda: (s := m.daemon_status()).get("state") == "READY" and s, 60, "READY again"
    )
    assert status["engine"]["pid"] != old_engine
    alive = m.sh(f"kill -0 {old_engine} 2>/dev/null && echo alive || echo gone").stdout.strip()
    assert alive == "gone", "the killed daemon's engine was left running"


def test_stop_leaves_no_engine_process(serving: Machine) -> None:
    m = serving
    engine = m.daemon_status()["engine"]["pid"]
    # ('[f]' keeps grep and the shell running it out of the match)
    assert m.sh("ps -eo pid,args | grep -c '[f]astverify.sim'").stdout.strip() != "0"
    m.sh("systemctl stop fastverifyd.service", timeout=150)
    assert m.show("ActiveState")["ActiveState"] == "inactive"
    left = m.sh("ps -eo pid,args | grep '[f]astverify' || true").stdout.strip()
    assert left == "", left
    assert m.sh(f"kill -0 {engine} 2>/dev/null && echo alive || echo gone").stdout.strip() == "gone"
    assert (
        m.sh("test -e /run/fastverify/control.sock && echo yes || echo no").stdout.strip() == "no"
    )
