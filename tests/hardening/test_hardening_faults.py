"""Faults against a real fastverifyd on the sim engine: kill -9 at random points of switches,
engine crash loops, a full or read-only state dir, corrupted state, signals during a load."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from fastverify.client import ApiError, ControlClient, DaemonUnavailable
from tests.support import host_dirs
from tests.support.hardening import (
    FULL,
    REPO,
    SEED,
    engine_port,
    group_pids,
    held_env,
    mount_tmpfs,
    nccl_env,
    read_profile_env,
    strict_journal,
    umount,
)
from tests.support.harness import DaemonHarness, engines_on_port

FULL_ONLY = pytest.mark.skipif(not FULL, reason="long variant: set FASTVERIFY_FULL=1")
TARGETS = [
    ("ring-ll", "baseline"),
    ("ring-simple", "eagle3"),
    ("ring-ll-8ch", "baseline"),
    ("tree-ll", "baseline"),  # fails CUDA-graph capture after the load: a rollback
    ("tree-ll-eager", "eagle3"),
    ("nccl-default", "eagle3"),
]


def settle(d: DaemonHarness, timeout: float = 40.0) -> dict:
    """Wait until the daemon is READY or FAILED with no operation in flight."""

    def stable() -> dict | None:
        if d.proc is not None and d.proc.poll() is not None:
            raise AssertionError(
                f"fastverifyd exited ({d.proc.returncode}):\n{d.log_text()[-3000:]}"
            )
        try:
            st = d.status()
        except (DaemonUnavailable, ApiError, OSError, ValueError):
            return None
        return st if st["state"] in ("READY", "FAILED") and not st["switch_in_flight"] else None

    return d.wait_for(stable, timeout, "a settled state (READY/FAILED, nothing in flight)")


def check_consistent(d: DaemonHarness, st: dict, what: str) -> None:
    """Exactly the engine the state says, the files parse, nothing else of ours runs."""
    port = engine_port(d)
    journal = strict_journal(d.state_dir)  # every line parses
    groups = engines_on_port(port)
    assert st["state"] == "READY", f"{what}: daemon came back {st['state']}: {st['last_failure']}"
    saved = json.loads((d.state_dir / "state.json").read_text())
    assert (saved["profile"], saved["mode"]) == (st["profile"], st["mode"]), what
    pidfile = json.loads((d.state_dir / "engine.pid").read_text())
    eng = st["engine"]
    assert pidfile["pid"] == eng["pid"] and pidfile["pgid"] == eng["pgid"], what
    assert list(groups) == [eng["pgid"]], f"{what}: engine groups on the port: {groups}"
    members = groups[eng["pgid"]]
    assert len(members) == 2, f"{what}: server + 1 TP worker expected, got {members}"
    want = read_profile_env(st["profile"], [d.profile_dir])
    for pid in members:
        env = psutil.Process(pid).environ()
        assert env.get("FASTVERIFY_ENGINE_ID") == pidfile["engine_id"], what
        held = held_env(st, pid, want)
        assert nccl_env(pid) == held, f"{what}: pid {pid} runs {nccl_env(pid)}, wants {held}"
    eagle = "--speculative-algorithm" in psutil.Process(eng["pid"]).cmdline()
    assert eagle == (st["mode"] == "eagle3"), what
    served = [
        r.get("serving")
        for r in journal
        if r.get("type") == "switch" and r.get("result") in ("ok", "rolled_back")
    ]
    assert served, f"{what}: no successful operation in the journal"
    assert served[-1] == {"profile": st["profile"], "mode": st["mode"]}, what


@pytest.mark.slow  # long (a fault or load loop); ./scripts/test still runs it
def test_kill9_at_random_points_of_switches(tmp_path: Path) -> None:
    iters = int(os.environ.get("FASTVERIFY_KILL9_ITERS") or (120 if FULL else 10))
    rng = random.Random(SEED)
    d = DaemonHarness(tmp_path, sim_load_seconds=0.3, metrics=False, start=False)
    port = engine_port(d)
    try:
        d.start()
        for i in range(iters):
            name, mode = rng.choice(TARGETS)
            delay = rng.uniform(0.0, 2.5)
            crash = rng.random() < 0.15  # else a switch: the engine dies, a crash restart runs
            action = "engine SIGKILL" if crash else f"switch to {name}/{mode}"
            what = f"iteration {i} (FASTVERIFY_SEED={SEED}): {action}, kill -9 at {delay:.3f} s"
            if crash:
                with contextlib.suppress(ProcessLookupError, TypeError):
                    os.kill(d.status()["engine"]["pid"], signal.SIGKILL)
            else:
                with contextlib.suppress(ApiError):
                    d.client.post("/v1/profile", {"name": name, "mode": mode, "wait": False})
            time.sleep(delay)
            d.kill9()
            d.restart_daemon(wait_ready=False)
            st = settle(d)
            check_consistent(d, st, what)
        assert d.stop() == 0
        assert engines_on_port(port) == {}, "an engine survived the final SIGTERM"
    finally:
        try:
            d.close()
        finally:  # an engine no daemon recorded is still ours (our port): never leave it
            for pgid in engines_on_port(port):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)


def backoff_delays(log_text: str) -> list[float]:
    """The announced restart delays, in order ("restarting P/M in X s (crash n/burst)")."""
    return [float(x) for x in re.findall(r"restarting \S+ in ([0-9.]+) s \(crash", log_text)]


@pytest.mark.slow  # long (a fault or load loop); ./scripts/test still runs it
def test_crash_loop_backoff_burst_failed_then_recovers(tmp_path: Path) -> None:
    burst, b0, bmax = 3, 0.2, 0.5
    cfg = {
        "daemon": {
            "restart_burst": burst,
            "restart_backoff_s": [b0, bmax],
            "restart_window_s": 120,
        }
    }
    with DaemonHarness(tmp_path, config=cfg, metrics=False) as d:
        flaky = d.profile_dir / "flaky.env"
        flaky.write_text("# description: Ring/LL, later broken\nNCCL_ALGO=Ring\nNCCL_PROTO=LL\n")
        r = d.ctl("profile", "set", "flaky", "-q")
        assert r.returncode == 0, r.stdout + r.stderr
        # The cause: the profile now says Tree, which the engine cannot capture CUDA graphs with.
        flaky.write_text("# description: Ring/LL, later broken\nNCCL_ALGO=Tree\nNCCL_PROTO=LL\n")
        answered, errors, states = 0, [], set()
        stop = threading.Event()

        def poll() -> None:
            nonlocal answered
            c = ControlClient(d.socket, timeout=5)
            while not stop.is_set():
                try:
                    states.add(c.get("/v1/status")["state"])
                    answered += 1
                except Exception as exc:  # any failure to answer is a finding
                    errors.append(repr(exc))
                time.sleep(0.02)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            os.kill(d.engine_pid(), signal.SIGKILL)
            st = d.wait_for(
                lambda: (s := d.status())["state"] == "FAILED" and not s["switch_in_flight"] and s,
                40,
                "FAILED after the burst",
            )
        finally:
            stop.set()
            poller.join(10)
        assert errors == [] and answered > 10, (errors, answered)
        assert {"BACKOFF", "STARTING"} <= states, states  # FAILED: seen by wait_for above
        lf = st["last_failure"]
        assert lf["reason"] == "cuda_graph_capture" and lf.get("crash_loop") is True, lf
        assert f"burst limit {burst}" in lf["message"], lf
        assert st["restarts"]["by_reason"] == {"exited(-9)": 1, "cuda_graph_capture": burst}
        assert st["engine"]["pid"] is None
        assert engines_on_port(engine_port(d)) == {}, "a failed engine was left running"
        journal = strict_journal(d.state_dir)
        delays = backoff_delays(d.log_text())
        assert delays == [min(b0 * 2**k, bmax) for k in range(burst)], delays
        # Each restart waited out its delay: BACKOFF -> STARTING no sooner than announced.
        trans = [r for r in journal if r.get("type") == "transition"]
        waits = [
            b["ts"] - a["ts"]
            for a, b in itertools.pairwise(trans)
            if a["to"] == "BACKOFF" and b["to"] == "STARTING"
        ]
        assert len(waits) == burst, trans
        for waited, announced in zip(waits, delays, strict=True):
            assert waited >= announced * 0.9, (waits, delays)
        assert len([r for r in journal if r.get("type") == "crash"]) == burst + 1
        r = d.ctl("status")
        assert r.returncode == 0 and "FAILED" in r.stdout, r.stdout + r.stderr
        hist = d.client.get("/v1/history")
        assert hist[-1]["kind"] == "crash_restart" and hist[-1]["result"] == "failed"
        # The cause goes away: the next restart serves again.
        flaky.write_text("# description: Ring/LL, fixed\nNCCL_ALGO=Ring\nNCCL_PROTO=LL\n")
        r = d.ctl("restart")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert (st["state"], st["profile"]) == ("READY", "flaky")
        assert nccl_env(st["engine"]["pid"]) == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}


def _fill(path: Path) -> None:
    with open(path, "wb") as fh:
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError):
            while True:
                fh.write(chunk)
                fh.flush()


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_unwritable_state_dir_refuses_switch_and_keeps_serving(
    tmp_path: Path, fault: str, record_property
) -> None:
    state = tmp_path / "state"
    method = None
    if mount_tmpfs(state, "16m"):
        method = "tmpfs 16 MiB" + (" + chattr +i" if fault == "read-only" else " filled")
        if fault == "read-only" and not shutil.which("chattr"):
            umount(state)
            pytest.skip("read-only as root needs chattr (e2fsprogs)")
    elif fault == "read-only" and os.geteuid() != 0:
        method = "permissions (chmod 0555)"
    elif fault == "read-only" and shutil.which("chattr"):
        method = "chattr +i"
    else:
        pytest.skip("a full file system needs a small tmpfs (mount as root); none available")
    record_property("fault_method", method)
    print(f"state dir {fault}: simulated with {method}")
    try:
        with DaemonHarness(tmp_path, metrics=False) as d:
            before = d.status()
            pid = before["engine"]["pid"]
            saved = (d.state_dir / "state.json").read_bytes()
            journal = (d.state_dir / "journal.jsonl").read_bytes()
            filler = state / "filler"
            if fault == "full":
                _fill(filler)
                expect = "No space left"
            elif method.startswith("permissions"):
                state.chmod(0o555)
                expect = "Permission denied"
            else:
                r = subprocess.run(["chattr", "+i", str(state)], capture_output=True, text=True)
                if r.returncode != 0:  # e.g. overlayfs in a container
                    pytest.skip(f"chattr +i is not supported here: {r.stderr.strip()}")
                expect = "Operation not permitted"
            try:
                for path, body in (
                    ("/v1/profile", {"name": "ring-ll"}),
                    ("/v1/mode", {"mode": "eagle3"}),
                    ("/v1/restart", {}),
                ):
                    with pytest.raises(ApiError) as err:
                        d.client.post(path, body)
                    assert err.value.status == 507, (path, err.value.body)
                    msg = err.value.body["error"]
                    assert str(state) in msg and expect in msg and "refused" in msg, msg
                r = d.ctl("profile", "set", "ring-ll")
                assert r.returncode != 0 and "not writable" in r.stderr, r.stdout + r.stderr
                after = d.status()
                assert (after["state"], after["profile"]) == ("READY", before["profile"])
                assert after["engine"]["pid"] == pid and psutil.pid_exists(pid)
                assert (d.state_dir / "state.json").read_bytes() == saved
                assert (d.state_dir / "journal.jsonl").read_bytes() == journal
            finally:
                if fault == "read-only" and method.startswith("permissions"):
                    state.chmod(0o755)
                elif fault == "read-only":
                    subprocess.run(["chattr", "-i", str(state)], check=False)
                with contextlib.suppress(FileNotFoundError):
                    filler.unlink()
            # The cause goes away: the same switch now goes through.
            r = d.ctl("profile", "set", "ring-ll", "-q")
            assert r.returncode == 0, r.stdout + r.stderr
            assert d.status()["profile"] == "ring-ll"
    finally:
        if method and method.startswith("tmpfs"):
            umount(state)


@pytest.mark.parametrize(
    "damage",
    [
        "state-truncated",
        "state-garbage",
        pytest.param("state-wrong-type", marks=FULL_ONLY),
        "journal-torn",
        pytest.param("journal-binary", marks=FULL_ONLY),
        "both",
        "state-empty-journal-gone",
    ],
)
def test_corrupted_state_or_journal_recovered(tmp_path: Path, damage: str) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        assert d.ctl("profile", "set", "ring-simple", "--mode", "eagle3", "-q").returncode == 0
        assert d.stop() == 0
        sp, jp = d.state_dir / "state.json", d.state_dir / "journal.jsonl"
        good = sp.read_bytes()
        if damage in ("state-truncated", "both"):
            sp.write_bytes(good[: len(good) // 2])
        if damage == "state-garbage":
            sp.write_bytes(b"\xff\xfe\x00garbage\x00")
        if damage == "state-wrong-type":
            sp.write_text('{"profile": 42, "mode": ["x"]}')
        if damage in ("journal-torn", "both"):
            with open(jp, "ab") as fh:
                fh.write(b'{"type": "switch", "profile": "tre')
        if damage == "journal-binary":
            with open(jp, "ab") as fh:
                fh.write(os.urandom(300).replace(b"\n", b"") + b"\n")
        if damage == "state-empty-journal-gone":
            sp.write_bytes(b"")
            jp.unlink()
        d._closed = False
        d.restart_daemon()
        st = d.status()
        found = " | ".join(st["findings"])
        if damage.startswith("state") or damage == "both":
            assert "corrupted" in found and "state.json" in found, found
            assert list(d.state_dir.glob("state.json.corrupt-*")), "the damaged file is kept"
        if damage.startswith("journal") or damage == "both":
            assert "unreadable line" in found, found
        if damage == "state-empty-journal-gone":
            assert "starting from defaults" in found, found
            assert (st["state"], st["profile"]) == ("READY", "nccl-default")
        else:
            assert (st["state"], st["profile"], st["mode"]) == ("READY", "ring-simple", "eagle3")
        assert "state.json" in d.log_text() or damage.startswith("journal")
        json.loads(sp.read_text())  # rewritten whole
        # New records start on their own line after a torn one.
        r = d.ctl("profile", "set", "ring-ll", "-q")
        assert r.returncode == 0, r.stdout + r.stderr
        tail = jp.read_bytes().splitlines()[-3:]
        for line in tail:
            json.loads(line)


def test_sigterm_during_model_load_stops_group_and_exits_0(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, sim_load_seconds=3.0, metrics=False, start=False)
    try:
        d.start(wait_ready=False)
        st = d.wait_for(
            lambda: (s := d.status())["state"] == "STARTING" and s["engine"]["pgid"] and s,
            15,
            "the engine loading",
        )
        pgid = st["engine"]["pgid"]
        d.wait_for(lambda: len(group_pids(pgid)) == 2, 10, "server + TP worker")
        time.sleep(0.5)  # inside the 3 s load
        assert d.status()["state"] == "STARTING"
        assert d.stop(timeout=20) == 0
        assert group_pids(pgid) == [], "engine group survived SIGTERM during the load"
        assert not d.socket.exists()
        assert not (d.state_dir / "engine.pid").exists()
        trans = [r for r in strict_journal(d.state_dir) if r.get("type") == "transition"]
        assert trans[-1]["to"] in ("STOPPED", "FAILED"), trans[-3:]
    finally:
        d.close()


def test_sighup_with_broken_config_keeps_old_one_says_why(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        pid = d.engine_pid()
        good = d.config_path.read_text()
        for broken, words in (
            (good + "\n[daemon\n", str(d.config_path)),
            (good.replace("\nburst = 5", '\nburst = "many"'), "restart.burst"),
            (good + '\n[server.env]\nNCCL_ALGO = "Tree"\n', "NCCL_ALGO"),
            (good + "\n[bogus]\nx = 1\n", "bogus"),
        ):
            d.config_path.write_text(broken)
            os.kill(d.pid, signal.SIGHUP)
            st = d.wait_for(
                lambda w=words: (
                    (s := d.status())["config"]["error"] and w in s["config"]["error"] and s
                ),
                10,
                f"reload refused naming {words}",
            )
            assert "keeping the previous configuration" in st["config"]["error"]
            assert st["state"] == "READY" and st["engine"]["pid"] == pid
            assert words in d.log_text()
        # The old configuration is still in force: a switch works with it.
        d.config_path.write_text(good)
        os.kill(d.pid, signal.SIGHUP)
        d.wait_for(lambda: d.status()["config"]["error"] is None, 10, "reload ok")
        assert d.ctl("profile", "set", "ring-ll", "-q").returncode == 0


def test_engine_spawned_but_unrecorded_is_reaped(tmp_path: Path) -> None:
    """A daemon killed between spawning an engine and writing engine.pid leaves only the
    pending record (the engine id it gave the child); the next daemon stops that group."""
    d = DaemonHarness(tmp_path, metrics=False, start=False)
    port = engine_port(d)
    engine_id = "feedfacecafebeef"
    env = host_dirs.clean_env(("NCCL_", "FASTVERIFY_"))
    env.update({"FASTVERIFY_ENGINE_ID": engine_id, "PYTHONPATH": str(REPO)})
    argv = [sys.executable, "-m", "fastverify.sim", "--model-path", "sim/m",
            "--tp-size", "2", "--port", str(port), "--sim-load-seconds", "0.3"]  # fmt: skip
    orphan = subprocess.Popen(
        argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        d.state_dir.mkdir(parents=True)
        (d.state_dir / "engine.pid").write_text(
            json.dumps({"engine_id": engine_id, "pending": True, "argv": argv})
        )
        d.wait_for(lambda: len(group_pids(orphan.pid)) == 2, 10, "orphan server + worker")
        d.start()
        st = d.status()
        assert orphan.wait(10) is not None and group_pids(orphan.pid) == []
        assert list(engines_on_port(port)) == [st["engine"]["pgid"]]
        assert str(orphan.pid) in d.log_text() and "before recording" in d.log_text()
    finally:
        if orphan.poll() is None:
            os.killpg(orphan.pid, signal.SIGKILL)
            orphan.wait()
        d.close()


def test_sigterm_with_followers_and_a_streaming_switch_exits_promptly(tmp_path: Path) -> None:
    """Clients that hold connections open (logs --follow, a streaming switch) do not keep
    the daemon from stopping; they end when it does."""
    d = DaemonHarness(tmp_path, sim_load_seconds=2.0, metrics=False, start=False)
    followers: list[subprocess.Popen] = []
    try:
        d.start()
        pgid = d.status()["engine"]["pgid"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        for _ in range(5):
            followers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "fastverify.ctl",
                        "--socket",
                        str(d.socket),
                        "logs",
                        "--follow",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                )
            )
        switch = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket),
             "profile", "set", "ring-ll"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
        )  # fmt: skip
        followers.append(switch)
        d.wait_for(lambda: d.status()["state"] == "STARTING", 15, "the switch loading")
        new_pgid = d.status()["engine"]["pgid"]
        assert d.stop(timeout=20) == 0
        for p in followers:
            p.wait(15)  # every client ends when the daemon goes
        assert switch.returncode != 0, "a switch cut short by shutdown must not report success"
        assert group_pids(pgid) == [] and group_pids(new_pgid) == []
    finally:
        for p in followers:
            if p.poll() is None:
                p.kill()
                p.wait()
        d.close()


def test_daemon_start_on_a_full_state_dir_says_where(tmp_path: Path) -> None:
    state = tmp_path / "state"
    if not mount_tmpfs(state, "2m"):
        pytest.skip("needs a small tmpfs (mount as root)")
    try:
        _fill(state / "filler")
        d = DaemonHarness(tmp_path, metrics=False, start=False)
        try:
            with pytest.raises(AssertionError, match="exited with 1"):
                d.start()
            assert f"cannot use the state dir {state}: No space left on device" in d.log_text()
        finally:
            d.close(check_leaks=False)
        (state / "filler").unlink()  # the cause goes away: the daemon starts and serves
        d = DaemonHarness(tmp_path, metrics=False, start=False)
        try:
            d.start()
            assert d.status()["state"] == "READY"
        finally:
            d.close()
    finally:
        umount(state)


def test_daemon_kill9_while_ready_adopts_without_restarting_the_engine(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, metrics=False, config={"server": {"mode": "eagle3"}}, start=False)
    try:
        d.start()
        before = d.status()
        pid = before["engine"]["pid"]
        d.kill9()
        # With the daemon gone, the engine keeps serving.
        with urllib.request.urlopen(d.server_url + "/health", timeout=5) as r:
            assert r.status == 200
        d.restart_daemon()
        st = d.status()
        assert st["engine"]["pid"] == pid and st["engine"]["adopted"] is True
        assert (st["profile"], st["mode"]) == (before["profile"], "eagle3")
        assert psutil.Process(pid).create_time() == pytest.approx(
            before["engine"]["started_at"], abs=2
        )
        # A config that builds another argv: the adopted engine is replaced, not kept.
        d.kill9()
        text = d.config_path.read_text().replace(
            "[server]", "[server.eagle3]\nnum_steps = 5\n\n[server]", 1
        )
        d.config_path.write_text(text)
        d.restart_daemon()
        st = d.status()
        assert st["engine"]["pid"] != pid
        assert group_pids(before["engine"]["pgid"]) == [], "the old engine group was kept"
        cmd = psutil.Process(st["engine"]["pid"]).cmdline()
        assert cmd[cmd.index("--speculative-num-steps") + 1] == "5"
        assert list(engines_on_port(engine_port(d))) == [st["engine"]["pgid"]]
    finally:
        d.close()
