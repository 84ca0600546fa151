"""Operator doors against real processes: the engine's environment, profile
directories seen through the daemon, CLI exits when the daemon is stopped or resets the
connection, the docs' promises (validate exit code, piped output, progress), cancel."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from tests.support.harness import REPO, DaemonHarness, _scrubbed_env, ctrl_c_reaches_it

SECRET = "s3cr3t-hash-9f8e7d"


def test_engine_gets_only_the_hf_variables_the_config_names(tmp_path: Path) -> None:
    daemon_env = {
        "HF_ENDPOINT": "http://mirror.invalid",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_TOKEN": "hf_" + "t" * 24,
    }
    cfg = {"server": {"env_passthrough": ["HF_TOKEN"]}}
    with DaemonHarness(tmp_path, env=daemon_env, config=cfg, metrics=False) as d:
        env = psutil.Process(d.engine_pid()).environ()
        assert env.get("HF_TOKEN") == daemon_env["HF_TOKEN"]
        assert "HF_ENDPOINT" not in env and "HF_HOME" not in env


def test_link_to_a_foreign_file_is_not_quoted_over_the_api(tmp_path: Path) -> None:
    outside = tmp_path / "root-only"
    outside.write_text(f"root:$6${SECRET}:19000:0:99999:7:::\n")
    with DaemonHarness(tmp_path, metrics=False) as d:
        (tmp_path / "profiles" / "leak.env").symlink_to(outside)
        res = d.ctl("profile", "set", "leak", "--json")
        assert res.returncode == 2, res.stdout + res.stderr
        body = json.loads(res.stdout)
        assert "symbolic link" in json.dumps(body)
        assert SECRET not in res.stdout + res.stderr + d.log_text()


# --------------------------------------------------------------------------- helpers

PCT = re.compile(r"\((\d+)%\)")


def ctl(sock: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = _scrubbed_env()
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "--socket", str(sock), *args],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )  # fmt: skip


@contextlib.contextmanager
def fake_daemon(path: Path, answer: Callable[[socket.socket], None]) -> Iterator[None]:
    """A Unix socket server that handles every connection with `answer` (a real socket the
    real CLI connects to: a daemon that resets, answers 503, or speaks something else)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(16)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with contextlib.suppress(OSError):
                answer(conn)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        srv.close()
        t.join(5)


def reset(conn: socket.socket) -> None:
    conn.recv(1)  # the request started arriving; leave the rest unread -> RST on close
    conn.close()


def answer_503(conn: socket.socket) -> None:
    conn.sendall(
        b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n\r\n"
        b'{"error": "too many concurrent API connections; retry"}\n'
    )
    conn.close()


def not_http(conn: socket.socket) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
    conn.close()


def http_json(status: int, body: dict) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        conn.recv(65536)
        data = json.dumps(body).encode()
        conn.sendall(
            f"HTTP/1.0 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        conn.close()

    return answer


DAEMON_COMMANDS = [
    ("status",),
    ("status", "--json"),
    ("profile", "set", "ring-ll"),
    ("profile", "set", "ring-ll", "--json"),
    ("profile", "current"),
    ("mode", "get"),
    ("mode", "set", "eagle3", "-q"),
    ("restart",),
    ("history",),
    ("logs", "-n", "5"),
    ("server", "check"),
    ("cancel",),
    ("cancel", "--json"),
    ("verify",),
    ("verify", "--json"),
]


def _assert_unreachable(res: subprocess.CompletedProcess[str], args: tuple[str, ...]) -> None:
    out = res.stdout + res.stderr
    assert res.returncode == 3, (args, res.returncode, out)
    assert "Traceback" not in out, (args, out)
    assert "fastverifyd" in out, (args, out)
    if "--json" in args:
        assert json.loads(res.stdout)["reachable"] is False, (args, res.stdout)


# --------------------------------------------------------------------------- exits


def test_stopped_daemon_is_exit_3_with_a_sentence(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        commands = (("status",), ("status", "--json"), ("profile", "set", "ring-ll"),
                    ("mode", "get"), ("logs", "-n", "5"))  # fmt: skip
        os.kill(d.pid, signal.SIGSTOP)
        try:  # side by side: each waits out its own timeout (the daemon's backlog queues them)
            with ThreadPoolExecutor(len(commands)) as pool:
                results = list(pool.map(lambda args: d.ctl(*args, timeout=120), commands))
            for args, res in zip(commands, results, strict=True):
                _assert_unreachable(res, args)
                assert "did not answer" in res.stdout + res.stderr, res.stderr
        finally:
            os.kill(d.pid, signal.SIGCONT)
        assert d.ctl("status").returncode == 0  # and it answers again once continued


def test_daemon_that_resets_the_connection_is_exit_3(tmp_path: Path) -> None:
    sock = Path(f"/tmp/fv-reset-{os.getpid()}.sock")
    with fake_daemon(sock, reset):
        try:
            for args in DAEMON_COMMANDS:
                _assert_unreachable(ctl(sock, *args), args)
        finally:
            sock.unlink()


def test_daemon_answering_503_is_exit_3(tmp_path: Path) -> None:
    sock = Path(f"/tmp/fv-503-{os.getpid()}.sock")
    with fake_daemon(sock, answer_503):
        try:
            for args in DAEMON_COMMANDS:
                res = ctl(sock, *args)
                _assert_unreachable(res, args)
                assert "503" in res.stdout + res.stderr, (args, res.stderr)
        finally:
            sock.unlink()


def test_something_else_on_the_socket_is_exit_3(tmp_path: Path) -> None:
    sock = Path(f"/tmp/fv-ssh-{os.getpid()}.sock")
    with fake_daemon(sock, not_http):
        try:
            for args in (("status",), ("profile", "set", "ring-ll"), ("cancel",)):
                _assert_unreachable(ctl(sock, *args), args)
        finally:
            sock.unlink()


def test_exit_codes_are_defined_once_and_unique() -> None:
    from fastverify.cli import output

    codes = {k: v for k, v in vars(output).items() if k.startswith("EXIT_")}
    assert len(set(codes.values())) == len(codes), codes
    for path in (REPO / "fastverify" / "cli").glob("*.py"):
        if path.name == "output.py":
            continue
        text = path.read_text()
        assert not re.search(r"^EXIT_\w+\s*=", text, re.M), f"{path} defines its own exit code"
    table = (REPO / "docs" / "reference" / "api.md").read_text()  # the one exit-code table
    for value in codes.values():
        assert re.search(rf"^\| {value} \|", table, re.M), (
            f"docs/reference/api.md does not list exit {value}"
        )


# --------------------------------------------------------------------------- cancel (CLI side)


def test_cancel_reports_the_daemon_answer(tmp_path: Path) -> None:
    sock = Path(f"/tmp/fv-cancel-{os.getpid()}.sock")
    op = {"id": "ab12", "kind": "switch", "profile": "tree-ll", "mode": "baseline"}
    with fake_daemon(sock, http_json(200, {"result": "cancelled", "operation": op})):
        try:
            res = ctl(sock, "cancel")
            assert res.returncode == 0, res.stderr
            assert "cancelled" in res.stdout and "tree-ll/baseline" in res.stdout
            res = ctl(sock, "cancel", "--json")
            assert res.returncode == 0 and json.loads(res.stdout)["operation"] == op
        finally:
            sock.unlink()
    with fake_daemon(sock, http_json(404, {"error": "no operation in flight"})):
        try:
            res = ctl(sock, "cancel")
            assert res.returncode == 1 and "nothing to cancel" in res.stderr, res.stderr
            res = ctl(sock, "cancel", "--json")
            assert res.returncode == 1
            assert json.loads(res.stdout)["result"] == "nothing_in_flight"
        finally:
            sock.unlink()


# --------------------------------------------------------------------------- docs' promises


def test_profile_list_of_a_daemon_without_its_own_listing_is_made_here(tmp_path: Path) -> None:
    """A daemon older than `GET /v1/profiles` answers it 404: the list is read here, the active
    profile marked from its status, with where it reads its own profiles."""
    sock = tmp_path / "older.sock"
    theirs = str(tmp_path / "their-profiles")
    status = {"state": "READY", "profile": "ring-ll", "daemon": {"profile_dirs": [theirs]}}

    def older(conn: socket.socket) -> None:
        path = conn.recv(65536).split(b" ")[1]
        code, body = (200, status) if path == b"/v1/status" else (404, {"error": "not found"})
        data = json.dumps(body).encode()
        conn.sendall(f"HTTP/1.0 {code} X\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        conn.close()

    with fake_daemon(sock, older):
        r = ctl(sock, "profile", "list")
    assert r.returncode == 0, r.stderr
    assert "*\tring-ll\tshipped\t" in r.stdout and "\tnccl-default\tshipped\t" in r.stdout
    assert f"note: the daemon reads user profiles from {theirs}, " in r.stderr, r.stderr
    assert f"FASTVERIFY_PROFILE_DIRS={theirs} fastverifyctl" in r.stderr, r.stderr


def test_docs_profile_validate_example_is_what_happens(tmp_path: Path) -> None:
    # docs/guides/profiles.md, linked from the README
    readme = (REPO / "docs" / "guides" / "profiles.md").read_text()
    block = readme.split("$ fastverifyctl profile validate bad.env", 1)[1].split("\n$ ", 1)[0]
    lines = [ln for ln in block.splitlines()[1:] if ln.strip()]
    promised_exit = int(next(ln for ln in lines if ln.startswith("exit ")).split()[1])
    promised = [ln for ln in lines if ln.startswith("bad.env:")]
    # the file those lines describe
    (tmp_path / "bad.env").write_text(
        '# description: bad\nNCCL_ALGOS=Ring\nNCCL_PROTO="LL"\nNCCL_NTHREADS=500\n'
        "NCCL_P2P_LEVEL=sys\n"
    )
    env = {**_scrubbed_env(), "PYTHONPATH": str(REPO),
           "FASTVERIFY_PROFILE_DIRS": str(tmp_path / "none")}  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "profile", "validate", "bad.env"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == promised_exit == 1
    assert res.stderr.splitlines() == promised
    missing = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "profile", "validate", "./nope.env"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert missing.returncode == 2, missing.stderr


def _progress_of(stdout: str) -> list[int]:
    return [int(m.group(1)) for m in PCT.finditer(stdout)]


def test_piped_profile_set_prints_one_line_per_phase(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("profile", "set", "ring-ll")
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout.splitlines()
        assert not [ln for ln in out if ln.startswith("  |")], r.stdout  # no engine lines
        progress = [ln for ln in out if PCT.search(ln)]
        phases = [ln.split("] ", 1)[1].rsplit(" (", 1)[0] for ln in progress]
        assert len(phases) == len(set(phases)), r.stdout  # each phase once
        assert len(out) < 20, r.stdout
        v = d.ctl("profile", "set", "ring-simple", "-v")
        assert v.returncode == 0 and any(ln.startswith("  |") for ln in v.stdout.splitlines())


def test_failed_switch_shows_an_engine_log_excerpt(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("profile", "set", "tree-ll")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "last engine log lines (tree-ll/baseline, " in r.stderr
        excerpt = r.stderr.split("last engine log lines (", 1)[1]
        assert "  | " in excerpt and "capture cuda graph failed" in excerpt.lower(), r.stderr
        # the failed engine's own lines: not the rollback server's start-up
        assert "fired up and ready to roll" not in excerpt, r.stderr


def test_eagle3_progress_never_goes_back(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("profile", "set", "ring-ll", "--mode", "eagle3")
        assert r.returncode == 0, r.stdout + r.stderr
        start = r.stdout.index("state STARTING")
        seen = _progress_of(r.stdout[start:])
        assert seen and seen == sorted(seen), r.stdout
        assert "draft model weights" in r.stdout, r.stdout


def test_human_status_shows_phase_and_percent_while_loading(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False, sim_load_seconds=4) as d:
        assert d.ctl("profile", "set", "ring-ll", "--no-wait").returncode == 0

        def progress_line() -> str | None:
            out = d.ctl("status").stdout
            m = re.search(r"^progress:\s+(weights|cuda_graph)\s+\d+%", out, re.M)
            return out if m else None

        d.wait_for(progress_line, 60, "human status showing the load's phase and percent")
        d.wait_state("READY", 60)


def test_fractional_timeout_is_shown_as_given(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False, sim_load_seconds=2) as d:
        r = d.ctl("profile", "set", "ring-ll", "--timeout", "0.3", "--json")
        assert r.returncode == 1, r.stdout + r.stderr
        assert json.loads(r.stdout)["reason"] == "readiness_timeout"
        failure = d.status()["last_failure"]
        assert "within 0.3 s" in failure["message"], failure
        assert "within 0.3 s" in d.ctl("status").stdout


def test_set_of_the_serving_profile_is_a_no_op_unless_restart(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        st = d.status()
        pid, records = st["engine"]["pid"], len(d.client.get("/v1/history"))
        r = d.ctl("profile", "set", st["profile"])
        assert r.returncode == 0 and "already serving" in r.stdout, r.stdout + r.stderr
        r = d.ctl("profile", "set", st["profile"], "--mode", st["mode"], "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["result"] == "unchanged", r.stdout
        assert d.status()["engine"]["pid"] == pid
        assert len(d.client.get("/v1/history")) == records
        r = d.ctl("profile", "set", st["profile"], "--restart", "-q")
        assert r.returncode == 0, r.stdout + r.stderr
        assert d.status()["engine"]["pid"] != pid


def test_mode_set_quiet_prints_only_the_result(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("mode", "set", "eagle3", "-q")
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.splitlines() == [ln for ln in r.stdout.splitlines() if ln.startswith("ok")]
        assert d.status()["mode"] == "eagle3"


def test_paths_are_refused_without_promising_they_work(tmp_path: Path) -> None:
    prof = tmp_path / "mine.env"
    prof.write_text("# description: m\nNCCL_ALGO=Ring\n")
    with DaemonHarness(tmp_path, metrics=False) as d:
        for arg in (str(prof), "./mine.env", "mine.env"):
            r = d.ctl("profile", "set", arg)
            assert r.returncode == 2, (arg, r.stdout + r.stderr)
            assert (
                "path ending in .env" not in r.stderr
                and "./mine.env" not in r.stderr.split("error:", 1)[1].split("(", 1)[1]
            ), r.stderr
        from fastverify.client import ApiError

        for name in (str(prof), "mine.env", "a/b"):
            try:
                d.client.post("/v1/profile", {"name": name})
            except ApiError as exc:
                assert exc.status == 422 and "path ending in .env" not in exc.body["error"]
                assert "a path such as" not in exc.body["error"], exc.body
            else:
                raise AssertionError(f"{name!r} accepted")


def test_api_type_errors_name_one_type(tmp_path: Path) -> None:
    from fastverify.client import ApiError

    with DaemonHarness(tmp_path, metrics=False) as d:
        try:
            d.client.post("/v1/profile", {"name": "ring-ll", "timeout_s": "soon"})
        except ApiError as exc:
            assert exc.status == 422
            assert "must be a number" in exc.body["error"], exc.body
            assert "number or number" not in exc.body["error"], exc.body
        else:
            raise AssertionError("accepted")


def test_ctrl_c_on_a_piped_switch_detaches_and_says_how_to_cancel(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False, sim_load_seconds=3) as d:
        env = {**_scrubbed_env(), "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket),
             "profile", "set", "ring-ll"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, preexec_fn=ctrl_c_reaches_it,
        )  # fmt: skip
        try:
            d.wait_for(lambda: d.status()["state"] == "STARTING", 60, "the switch loading")
            # the CLI has seen the operation accepted once its first line is out
            first = proc.stdout.readline()
            assert "accepted" in first, first
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, (out, err)
        assert f"fastverifyctl --socket {d.socket} cancel" in err and "Traceback" not in err, err
        d.wait_for(lambda: d.status()["profile"] == "ring-ll", 60, "the switch going on")
        assert d.wait_state("READY", 60)["profile"] == "ring-ll"


def _read_until(fd: int, proc: subprocess.Popen, wanted: str, seen: list[str]) -> str:
    """What a terminal shows (`fd`: its master side) until `wanted` appears; fails when the
    process exits first."""
    import select

    while wanted not in "".join(seen):
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                seen.append(os.read(fd, 4096).decode(errors="replace"))
            except OSError:  # the terminal closed: the process exited
                raise AssertionError(f"no {wanted!r} before exit: {''.join(seen)}") from None
        elif proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {wanted!r}: {''.join(seen)}")
    return "".join(seen)


def test_ctrl_c_on_a_terminal_answered_y_exits_7(tmp_path: Path) -> None:
    """Ctrl-C of `profile set` on a terminal, answered "y": the switch is cancelled, so
    `profile set X && deploy` must not go on: exit 7, as for a cancel from another shell."""
    import pty

    with DaemonHarness(tmp_path, metrics=False, sim_load_seconds=3) as d:
        before = d.status()["profile"]
        env = {**_scrubbed_env(), "PYTHONPATH": str(REPO), "TERM": "dumb", "COLUMNS": "200"}
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket),
             "profile", "set", "ring-ll"],
            stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=ctrl_c_reaches_it,
        )  # fmt: skip
        os.close(slave)
        seen: list[str] = []
        try:
            _read_until(master, proc, "accepted", seen)
            proc.send_signal(signal.SIGINT)
            _read_until(master, proc, "cancel the", seen)
            os.write(master, b"y\n")
            code = proc.wait(60)
            with contextlib.suppress(OSError):
                while chunk := os.read(master, 4096):
                    seen.append(chunk.decode(errors="replace"))
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
        out = "".join(seen)
        assert code == 7, out
        assert "cancelled" in out and "Traceback" not in out, out
        assert d.wait_state("READY", 60)["profile"] == before


@pytest.mark.parametrize("door", ["--socket", "FASTVERIFY_SOCKET"])
def test_a_pasted_hint_acts_on_the_daemon_that_printed_it(tmp_path: Path, door: str) -> None:
    """The CLI's hints carry the socket the command used: `fastverifyctl cancel`, pasted as
    printed (without FASTVERIFY_SOCKET in the shell), cancels this daemon's switch and not
    the default daemon's."""
    with DaemonHarness(tmp_path, metrics=False, sim_load_seconds=3) as d:
        before = d.status()["profile"]
        env = {**_scrubbed_env(), "PYTHONPATH": str(REPO)}
        where = ["--socket", str(d.socket)]
        if door == "FASTVERIFY_SOCKET":
            env[door], where = str(d.socket), []
        proc = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", *where, "profile", "set", "ring-ll"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, preexec_fn=ctrl_c_reaches_it,
        )  # fmt: skip
        try:
            assert "accepted" in proc.stdout.readline()
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        hints = re.findall(r"`(fastverifyctl [^`]*)`", err)
        assert hints and all(f"--socket {d.socket} " in h for h in hints), err
        cancel = next(h for h in hints if h.endswith(" cancel"))
        pasted = subprocess.run(
            [sys.executable, "-m", "fastverify.ctl", *shlex.split(cancel)[1:]],
            capture_output=True, text=True, timeout=60,
            env={**_scrubbed_env(), "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert pasted.returncode == 0, pasted.stdout + pasted.stderr
        st = d.wait_state("READY", 60)
        assert st["profile"] == before
        assert d.client.get("/v1/history")[-1]["result"] == "cancelled"


def test_queue_says_what_it_waits_for(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False, sim_load_seconds=3) as d:
        assert d.ctl("profile", "set", "ring-ll", "--no-wait").returncode == 0
        d.wait_for(lambda: d.status()["switch_in_flight"], 30, "a switch in flight")
        r = d.ctl("profile", "set", "ring-simple", "--queue")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "waiting for the switch ring-ll/" in r.stderr, r.stderr
        assert d.status()["profile"] == "ring-simple"


def test_sweep_checks_every_name_before_switching(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        pid, records = d.status()["engine"]["pid"], len(d.client.get("/v1/history"))
        out = tmp_path / "sweep"
        r = d.ctl("sweep", "ring-ll", "nccl-defualt", "tree-lll", "--repeats", "1",
                  "--duration", "0.5", "--output", str(out), "--no-plot", timeout=300)  # fmt: skip
        assert r.returncode == 2, r.stdout + r.stderr
        assert "nccl-defualt" in r.stderr and "tree-lll" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert d.status()["engine"]["pid"] == pid  # nothing was switched
        assert len(d.client.get("/v1/history")) == records
        assert not (out / "results.jsonl").exists()


def test_python_option_asks_the_given_venv_for_torch(tmp_path: Path) -> None:
    """`--python VENV/bin/python`: two real virtualenvs of the CLI's own base interpreter
    (whose pythons resolve to the same file), one without torch, one that sees the SGLang
    venv's real torch; preflight and rehearse ask each interpreter itself."""
    import sysconfig
    import venv

    from tests.support.contract import venv_python

    sglang = venv_python()
    assert sglang.exists(), f"{sglang} is missing: run scripts/sglang-venv.sh first"
    ask = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(sglang), "-c", ask], capture_output=True, text=True, check=True)
    pythons = {}
    for name in ("bare", "torch"):
        venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp_path / name)
        pythons[name] = tmp_path / name / "bin" / "python"
    purelib = sysconfig.get_path("purelib", vars={"base": str(tmp_path / "torch")})
    (Path(purelib) / "sglang-venv.pth").write_text(site.stdout.strip() + "\n")
    assert os.path.realpath(pythons["bare"]) == os.path.realpath(pythons["torch"])
    env = {**_scrubbed_env(), "PYTHONPATH": str(REPO)}
    model = REPO / "examples" / "model-configs" / "tiny-dense.json"
    for cmd in (["preflight"], ["rehearse", "--model-config", str(model)]):
        said = {}
        for name, py in pythons.items():
            r = subprocess.run([sys.executable, "-m", "fastverify.ctl", *cmd, "--python", str(py)],
                               capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
            said[name] = r
        bare, torch = said["bare"], said["torch"]
        assert bare.returncode == 6, bare.stderr
        assert f"needs PyTorch in {pythons['bare']}" in bare.stderr, bare.stderr
        assert torch.returncode != 6 and "needs PyTorch" not in torch.stderr, torch.stderr
