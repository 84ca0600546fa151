"""fastverifyd under faults: engine crashes, crash loops, daemon kill -9, stale pid files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from fastverify.daemon import procs
from tests.support.harness import DaemonHarness, engines_on_port, free_port, sigint_in


def test_engine_kill9_is_restarted_with_reason(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path) as d:
        st = d.status()
        old = st["engine"]["pid"]
        os.kill(old, signal.SIGKILL)
        seen = d.wait_state(["BACKOFF", "STARTING", "VERIFYING"], timeout=10)
        assert seen["restarts"]["by_reason"] == {"exited(-9)": 1}
        st = d.wait_state("READY", timeout=15)
        assert st["engine"]["pid"] != old
        assert st["restarts"]["total"] == 1
        assert st["last_failure"]["reason"] == "exited(-9)"
        assert "SIGKILL" in st["last_failure"]["message"]
        # READY is published before the operation's record is appended: wait for the record
        d.wait_for(
            lambda: d.client.get("/v1/history")[-1].get("kind") == "crash_restart",
            15,
            "the crash restart's history record",
        )
        assert d.client.get("/v1/history")[-1]["result"] == "ok"
        assert not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE
        assert list(engines_on_port(int(d.server_url.rsplit(":", 1)[1]))) == [st["engine"]["pgid"]]


def test_crash_loop_fails_keeps_api_and_recovers_on_switch(tmp_path: Path) -> None:
    cfg = {"daemon": {"restart_burst": 1, "restart_backoff_s": [0.05, 0.1]}}
    with DaemonHarness(tmp_path, config=cfg, metrics=False) as d:
        os.kill(d.engine_pid(), signal.SIGKILL)
        d.wait_for(lambda: d.status()["restarts"]["total"] == 1, 10, "first restart")
        st = d.wait_state("READY", timeout=15)
        os.kill(st["engine"]["pid"], signal.SIGKILL)
        st = d.wait_state("FAILED", timeout=15)
        assert st["last_failure"]["reason"] == "exited(-9)"
        assert "burst limit 1" in st["last_failure"]["message"]
        assert st["engine"]["pid"] is None
        r = d.ctl("status")
        assert r.returncode == 0 and "FAILED" in r.stdout
        r = d.ctl("profile", "set", "ring-ll", "-q")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert (st["state"], st["profile"]) == ("READY", "ring-ll")


def test_daemon_kill9_during_start_then_restart_gives_one_engine(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, sim_load_seconds=1.5, metrics=False, start=False)
    try:
        d.start(wait_ready=False)
        loading = d.wait_for(
            lambda: (s := d.status())["state"] == "STARTING" and s["engine"]["pid"] and s,
            15,
            "start",
        )
        d.kill9()
        port = int(d.server_url.rsplit(":", 1)[1])
        assert len(engines_on_port(port)) == 1  # the orphaned engine is still loading
        d.restart_daemon(wait_ready=True, timeout=30)
        st = d.status()
        groups = engines_on_port(port)
        assert list(groups) == [st["engine"]["pgid"]], groups
        assert len(groups[st["engine"]["pgid"]]) == 2  # server + 1 TP worker (tp_size=2)
        # Ours, alive and loading the same argv: followed to READY instead of restarted.
        assert st["engine"]["adopted"] is True
        assert st["engine"]["pid"] == loading["engine"]["pid"]
        adopted, closed = d.client.get("/v1/history")[-2:]
        assert (adopted["kind"], adopted["result"]) == ("adopt", "ok")
        # the start-up's own start, unanswered by the killed daemon, closed by the new one
        assert (closed["kind"], closed["result"], closed["outcome"]) == (
            "start",
            "interrupted",
            "adopted",
        ), closed
        saved = json.loads((d.state_dir / "state.json").read_text())
        assert (saved["profile"], saved["mode"]) == (st["profile"], st["mode"])
        pidfile = json.loads((d.state_dir / "engine.pid").read_text())
        assert pidfile["pid"] == st["engine"]["pid"]
    finally:
        d.close()


def test_stale_pid_file_never_kills_a_foreign_process(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        state = tmp_path / "state"
        state.mkdir()
        (state / "engine.pid").write_text(
            json.dumps(
                {
                    "pid": sleeper.pid,
                    "pgid": sleeper.pid,
                    "create_time": psutil.Process(sleeper.pid).create_time(),
                    "engine_id": "0123456789abcdef",
                    "argv": ["sleep", "60"],
                    "profile": "ring-ll",
                    "mode": "baseline",
                }
            )
        )
        with DaemonHarness(tmp_path, metrics=False) as d:
            st = d.status()
            assert sleeper.poll() is None, "the daemon killed a process it did not start"
            assert any(str(sleeper.pid) in f and "leaving it alone" in f for f in st["findings"])
            assert st["engine"]["pid"] != sleeper.pid
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_state_restored_and_corruption_recovered(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        assert d.ctl("profile", "set", "ring-ll", "--mode", "eagle3", "-q").returncode == 0
        assert d.stop() == 0
        d._closed = False
        d.restart_daemon()
        st = d.status()
        assert (st["profile"], st["mode"], st["last_good"]) == ("ring-ll", "eagle3", "ring-ll")
        assert d.stop() == 0
        # A torn state.json and a torn last journal line (power cut mid-write).
        (d.state_dir / "state.json").write_text('{"profile": "ring-')
        with open(d.state_dir / "journal.jsonl", "a") as fh:
            fh.write('{"type": "switch", "profile": "tre')
        d.restart_daemon()
        st = d.status()
        assert (st["profile"], st["mode"]) == ("ring-ll", "eagle3")
        assert any("corrupted" in f for f in st["findings"]), st["findings"]
        assert any("unreadable line" in f for f in st["findings"]), st["findings"]
        assert list(d.state_dir.glob("state.json.corrupt-*"))
        json.loads((d.state_dir / "state.json").read_text())  # rewritten whole
        for line in (d.state_dir / "journal.jsonl").read_text().splitlines()[-3:]:
            json.loads(line)  # new records start on their own line


def test_engine_env_has_secrets_but_nothing_prints_them(tmp_path: Path) -> None:
    secret = "hf_s3cr3t_value_1234567890"
    key = "k3y-value-0987654321"
    cfg = {"server": {"env_passthrough": ["HF_TOKEN"], "env": {"MY_API_KEY": key}}}
    with DaemonHarness(tmp_path, env={"HF_TOKEN": secret, "AWS_SECRET": "x" * 20}, config=cfg) as d:
        env = psutil.Process(d.engine_pid()).environ()
        assert env["HF_TOKEN"] == secret and env["MY_API_KEY"] == key
        assert "AWS_SECRET" not in env  # only what the engine needs
        outputs = [
            d.ctl("status", "--json").stdout,
            d.ctl("history", "--json").stdout,
            d.ctl("logs", "-n", "1000").stdout,
            d.ctl("server", "check", "--json").stdout,
            d.log_text(),
            (d.state_dir / "engine.pid").read_text(),
            (d.state_dir / "state.json").read_text(),
        ]
        for out in outputs:
            assert secret not in out and key not in out


def test_sigterm_stops_engine_group_within_grace(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False, config={"daemon": {"stop_grace_s": 3}}) as d:
        pgid = d.status()["engine"]["pgid"]
        assert d.stop() == 0
        # within the grace: SIGTERM was enough (the time it took: benchmarks/bench_stop.py)
        assert f"stopped engine group {pgid} (SIGTERM" in d.log_text()
        assert _pgid_members(pgid) == []
        assert not d.socket.exists()


def test_sigint_stops_the_daemon_in_the_foreground(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        pgid = d.status()["engine"]["pgid"]
        assert sigint_in(d.pid, "SigCgt") and not sigint_in(d.pid, "SigIgn")
        os.kill(d.pid, signal.SIGINT)
        assert d.proc.wait(timeout=60) == 0, d.log_text()[-2000:]
        assert _pgid_members(pgid) == []


def test_a_daemon_started_in_the_background_keeps_sigint_ignored(tmp_path: Path) -> None:
    """`fastverifyd &` from a script: the script's Ctrl-C must not stop the daemon."""
    with DaemonHarness(tmp_path, metrics=False, sigint_ignored=True) as d:
        engine = d.engine_pid()
        assert sigint_in(d.pid, "SigIgn") and not sigint_in(d.pid, "SigCgt")
        os.kill(d.pid, signal.SIGINT)  # an ignored signal is discarded when sent
        st = d.status()
        assert st["state"] == "READY" and d.engine_pid() == engine, st
        assert d.stop() == 0  # SIGTERM still stops it


def test_sighup_with_broken_config_keeps_old_one(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        good = d.config_path.read_text()
        d.config_path.write_text(good + "\n[daemon\nbroken = \n")
        os.kill(d.pid, signal.SIGHUP)
        st = d.wait_for(lambda: (s := d.status())["config"]["error"] and s, 10, "reload error")
        assert "keeping the previous configuration" in st["config"]["error"]
        assert st["state"] == "READY"
        assert "SIGHUP" in d.log_text() and str(d.config_path) in st["config"]["error"]
        # A valid config applies: a new profile directory is searched from now on.
        extra = tmp_path / "more-profiles"
        extra.mkdir()
        (extra / "fresh.env").write_text("NCCL_ALGO=Ring\n")
        d.config_path.write_text(good.replace(str(d.profile_dir), str(extra)))
        os.kill(d.pid, signal.SIGHUP)
        d.wait_for(lambda: d.status()["config"]["error"] is None, 10, "reload ok")
        assert "configuration reloaded" in d.log_text()
        assert d.ctl("profile", "set", "fresh", "-q").returncode == 0


def test_tp_worker_death_is_a_crash(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False, tp_size=3) as d:
        st = d.status()
        leader = psutil.Process(st["engine"]["pid"])
        worker = leader.children(recursive=True)[0]
        os.kill(worker.pid, signal.SIGKILL)
        st = d.wait_for(
            lambda: (
                (s := d.status())["state"] == "READY" and s["engine"]["pid"] != leader.pid and s
            ),
            20,
            "a restarted engine",
        )
        assert st["engine"]["pid"] is not None  # READY always has a serving engine
        reason = st["last_failure"]["reason"]
        assert reason == "worker_exited" or reason.startswith("exited("), st["last_failure"]
        assert st["restarts"]["total"] == 1
        assert not leader.is_running() or leader.status() == psutil.STATUS_ZOMBIE
        assert len(psutil.Process(st["engine"]["pid"]).children(recursive=True)) == 2


def test_sigterm_during_a_switch_answers_the_caller_and_leaves_nothing(tmp_path: Path) -> None:
    import threading

    from fastverify.client import ApiError, ControlClient

    with DaemonHarness(tmp_path, metrics=False, sim_load_seconds=1.0) as d:
        answers: list = []

        def switch() -> None:
            try:
                answers.append(
                    ControlClient(d.socket, timeout=30).post(
                        "/v1/profile", {"name": "ring-ll", "timeout_s": 60}
                    )
                )
            except ApiError as exc:
                answers.append(exc.body)
            except OSError as exc:
                answers.append(repr(exc))

        # The sim loads for 1 s: stop the daemon mid-load.
        t = threading.Thread(target=switch)
        t.start()
        d.wait_for(lambda: d.status()["state"] == "STARTING", 10, "the switch to start")
        pgid = d.status()["engine"]["pgid"]
        assert d.stop() == 0
        t.join(30)
        assert len(answers) == 1
        ans = answers[0]
        assert (
            isinstance(ans, dict) and ans.get("result") == "failed" and ans["reason"] == "cancelled"
        )
        assert _pgid_members(pgid) == []
        last = [json.loads(x) for x in (d.state_dir / "journal.jsonl").read_text().splitlines()
                if '"type": "switch"' in x][-1]  # fmt: skip
        assert (last["profile"], last["result"], last["reason"]) == (
            "ring-ll",
            "failed",
            "cancelled",
        )


def _pgid_members(pgid: int) -> list[int]:
    """Live members of `pgid` (processes of parallel tests come and go: never raises)."""
    return [p.pid for p in procs.group_members(pgid)]


def test_a_taken_port_is_named_with_its_fix_before_any_load(tmp_path: Path) -> None:
    """Another process listens on the engine's port: the start fails before anything is
    loaded (SGLang binds only after its load), naming the process and the fix; `doctor`
    says it; once the port is free a recovery retry serves, and status then calls the
    failure an earlier one, not the serving engine's."""
    port = free_port()
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    # retries every 2 s at most, as many as it takes: the port is freed only after the CLI
    # steps below, however long a loaded host takes over them
    config = {"server": {"port": port},
              "daemon": {"recover_backoff_s": [1, 2], "recover_retries": 1000}}  # fmt: skip
    d = DaemonHarness(tmp_path, config=config, metrics=False, start=False)
    try:
        with d:
            d.start(wait_ready=False)
            st = d.wait_state("FAILED", 60)
            assert st["last_failure"]["reason"] == "port_in_use", st["last_failure"]
            assert not list(d.state_dir.glob("logs/*.log"))  # no engine was started
            text = d.ctl("status").stdout
            fix = f"port_in_use: port {port} (127.0.0.1) is in use by pid {os.getpid()} ("
            assert f"last failure: {fix}" in text, text
            assert "set [server] port (or fastverifyd --server-port) to a free port" in text
            rec = d.wait_for(lambda: (s := d.status())["recovery"]["next_in_s"] is not None
                             and s, 30, "a planned recovery retry")  # fmt: skip
            assert "none has served verified yet" in rec["recovery"]["target"]["why"]
            text = d.ctl("status").stdout
            assert "retries of nccl-default/baseline (" in text
            assert "the last good profile" not in text
            doctor = d.ctl("doctor", "--no-topology")
            assert f"the daemon's last failure: {fix}" in doctor.stdout, doctor.stdout
            squatter.close()  # the port is free: a retry serves
            st = d.wait_state("READY", 120)
            assert st["last_failure"]["current"] is False
            text = d.ctl("status").stdout
            assert f"earlier failure: {fix}" in text and "before the engine serving now" in text
            assert "last failure:" not in text
    finally:
        squatter.close()


def test_status_never_reads_ready_without_a_serving_engine(tmp_path: Path) -> None:
    """The engine's leader is SIGKILLed while its log has a backlog the daemon's tail has not
    read yet (a chatty engine): reading why it died takes a while, and every status answered
    meanwhile is READY with the live engine or already past READY with the crash counted."""
    with DaemonHarness(tmp_path, metrics=False) as d:
        st = d.status()
        leader = st["engine"]["pid"]
        with open(st["engine"]["log"], "a", encoding="utf-8") as fh:
            fh.write("INFO a chatty engine line\n" * 200_000)
        os.kill(leader, signal.SIGKILL)
        seen: list[tuple[str, int | None, int]] = []

        def moved_on() -> bool:
            s = d.status()
            seen.append((s["state"], s["engine"]["pid"], s["restarts"]["total"]))
            return s["state"] != "READY"

        d.wait_for(moved_on, 30, "the daemon to leave READY")
        assert all(pid == leader for state, pid, _ in seen if state == "READY"), seen
        assert all(n == 1 for state, _, n in seen if state != "READY"), seen
        d.wait_state("READY", timeout=30)


@pytest.mark.parametrize("target", ["ring-ll", "tree-ll"])
def test_switch_in_flight_at_a_daemon_kill9_is_closed_in_history(
    tmp_path: Path, target: str
) -> None:
    """`profile set X --no-wait`, then kill -9 of fastverifyd while X starts: the request
    is in the journal before anything acts, and the next daemon closes it as interrupted,
    with who asked, what became of it and what serves instead (tree-ll fails its CUDA-graph
    capture on the sim: the last good is put back)."""
    with DaemonHarness(tmp_path, sim_load_seconds=1.5, metrics=False) as d:
        before = d.status()["profile"]
        r = d.ctl("profile", "set", target, "--no-wait", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        op_id = json.loads(r.stdout)["op"]["id"]
        d.wait_for(
            lambda: (s := d.status())["state"] == "STARTING" and s["engine"]["pid"], 15, "start"
        )
        asked = [x for x in d.client.get("/v1/history") if x["id"] == op_id]
        assert asked == []  # in flight: no result yet
        journal = [json.loads(x) for x in (d.state_dir / "journal.jsonl").read_text().splitlines()]
        request = [x for x in journal if x.get("id") == op_id]
        assert [x["type"] for x in request] == ["request"], request
        assert request[0]["by"].startswith("uid ") and request[0]["previous"]["profile"] == before
        d.kill9()
        d.restart_daemon(wait_ready=False)
        st = d.wait_state("READY", timeout=60)
        closed = [x for x in d.client.get("/v1/history") if x["id"] == op_id]
        assert len(closed) == 1, closed
        rec = closed[0]
        assert (rec["kind"], rec["profile"], rec["result"], rec["reason"]) == (
            "switch",
            target,
            "interrupted",
            "daemon_restarted",
        ), rec
        assert rec["by"] == request[0]["by"]
        assert rec["message"].startswith("interrupted (daemon restarted)")
        if target == "ring-ll":
            assert (rec["outcome"], st["profile"]) == ("adopted", "ring-ll"), rec
        else:
            assert rec["outcome"] == "failed" and st["profile"] == before, (rec, st)
            assert rec["put_back"]["profile"] == before and "put back" in rec["message"]
        shown = d.ctl("history")
        assert shown.returncode == 0 and "interrupted" in shown.stdout, shown.stdout
