"""The smaller attacks, each through the real daemon, its socket, its files and processes: a
stopped engine, a hung engine under the default watch, engine log permissions, credentials in
URLs, a read-only state dir, deeply nested JSON and TOML, a FIFO as the configuration and a
control socket this client may not open."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify.client import ApiError, ControlClient
from fastverify.config import WatchConfig
from fastverify.daemon.watch import WatchPolicy
from tests.support.harness import REPO, DaemonHarness, run_ctl

PASSWORD = "s3cr3t-pw-4417"


def _stops(log: str, pgid: int) -> list[str]:
    return [ln for ln in log.splitlines() if f"stopped engine group {pgid} (" in ln]


def test_a_stopped_engine_is_continued_before_sigterm(tmp_path: Path) -> None:
    # a grace long enough that a SIGTERM left pending would end in SIGKILL, never in time
    with DaemonHarness(tmp_path, metrics=False, config={"daemon": {"stop_grace_s": 60}}) as d:
        eng = d.status()["engine"]
        os.killpg(eng["pgid"], signal.SIGSTOP)
        r = d.ctl("profile", "set", "ring-ll", "-q", timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        stops = _stops(d.log_text(), eng["pgid"])
        assert stops and "(SIGTERM" in stops[0], stops


def test_default_watch_leaves_ready_within_30_s_of_a_hang() -> None:
    policy = WatchPolicy.from_config(WatchConfig())
    assert policy.worst_case_s() <= 30  # kubelet's liveness defaults take about 30 s
    assert policy.worst_case_s(check_s=0.1) <= 30  # an engine that answers 503 at once


def test_the_watch_says_when_a_hang_becomes_a_verdict() -> None:
    """The daemon's watch line: with the default one failure, the first failed check is the
    verdict (it read "declared 0 s after its first failed check")."""
    said = WatchPolicy.from_config(WatchConfig()).describe()
    assert "declared at its first failed check (at most 25 s after it hangs)" in said, said
    two = WatchPolicy.from_config(WatchConfig(failures=2)).describe()
    assert "declared 25 s after its first failed check (at most 50 s after it hangs)" in two, two


def test_a_hung_engine_under_the_default_watch_is_restarted_with_sigterm(tmp_path: Path) -> None:
    # the harness leaves [watch] at its defaults; SIGSTOP is a hang no request can reach
    with DaemonHarness(tmp_path, metrics=False, config={"daemon": {"stop_grace_s": 60}}) as d:
        eng = d.status()["engine"]
        os.killpg(eng["pgid"], signal.SIGSTOP)
        st = d.wait_for(
            lambda: (
                (s := d.status())["last_failure"]
                and s["last_failure"]["reason"] == "engine_unresponsive"
                and s
            ),
            120,
            "the default watch to find the hang",
        )
        assert "22 s" in st["last_failure"]["message"], st["last_failure"]
        st = d.wait_state("READY", 120)
        assert st["engine"]["pid"] != eng["pid"]
        stops = _stops(d.log_text(), eng["pgid"])
        assert stops and "(SIGTERM" in stops[0], stops


def test_engine_logs_are_not_world_readable(tmp_path: Path) -> None:
    old = os.umask(0)  # whatever umask the daemon inherits
    try:
        d = DaemonHarness(tmp_path, metrics=False, start=False)
        d.start()
    finally:
        os.umask(old)
    try:
        log = Path(d.status()["engine"]["log"])
        assert stat.S_IMODE(log.stat().st_mode) & 0o007 == 0, oct(log.stat().st_mode)
        assert stat.S_IMODE(log.parent.stat().st_mode) & 0o007 == 0
    finally:
        d.close()


def test_credentials_in_urls_never_reach_the_engine(tmp_path: Path) -> None:
    """A URL's credentials in a value bound for SGLang's argv would be in /proc/PID/cmdline
    (every user reads it) and in the engine's own log: refused at start and at a reload,
    with the password masked in the refusal."""
    url = f"https://alice:{PASSWORD}@models.example/org/model"
    cfg = tmp_path / "creds.toml"
    for key in ("model_path", "draft_model_path", "extra_args"):
        value = json.dumps([url] if key == "extra_args" else url)
        cfg.write_text(f"[server]\n{key} = {value}\n")
        proc = subprocess.run(
            [sys.executable, "-m", "fastverify.daemon.main", "--config", str(cfg),
             "--state-dir", str(tmp_path / "state"), "--socket", str(tmp_path / "s.sock")],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert proc.returncode == 2, (key, proc.returncode, proc.stderr[-2000:])
        assert f"server.{key}" in proc.stderr and "env_passthrough" in proc.stderr
        assert PASSWORD not in proc.stdout + proc.stderr and "alice:***@" in proc.stderr
    with DaemonHarness(tmp_path / "d", metrics=False) as d:
        pid = d.status()["engine"]["pid"]
        before = d.log_text().count("reload refused")
        text = d.config_path.read_text(encoding="utf-8")
        d.config_path.write_text(text + f'\n[server]\nmodel_path = "{url}"\n'
                                 if "[server]" not in text else
                                 text.replace("[server]", f'[server]\nmodel_path = "{url}"', 1),
                                 encoding="utf-8")  # fmt: skip
        os.kill(d.pid, signal.SIGHUP)
        d.wait_for(lambda: d.log_text().count("reload refused") > before, 60, "the refusal")
        assert PASSWORD not in d.log_text()
        assert d.status()["engine"]["pid"] == pid  # nothing restarted


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root")
def test_a_read_only_state_dir_answers_507_on_record_endpoints(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with DaemonHarness(tmp_path, metrics=False) as d:
        client = ControlClient(d.socket)
        # the state dir, read-only from now on (the serving engine keeps its open log)
        subprocess.run(["mount", "--bind", str(state), str(state)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(state)], check=True)
            with pytest.raises(OSError):
                (state / "probe").write_text("x")
            bodies = {
                "/v1/baselines": {"profile": "nccl-default", "tokens_per_second": 80.0,
                                  "per_request_tokens_per_second": 10.0, "concurrency": 8},
                "/v1/decision": {"profile": "nccl-default", "mode": "baseline",
                                 "backend": "nccl", "applied": True, "why": "fastest"},
            }  # fmt: skip
            for path, body in bodies.items():
                with pytest.raises(ApiError) as exc:
                    client.post(path, body)
                assert exc.value.status == 507, (path, exc.value.body)
                assert exc.value.body["reason"] == "state_dir_unwritable"
                assert "not recorded" in exc.value.body["error"]
            assert d.status()["state"] == "READY"
        finally:
            subprocess.run(["umount", str(state)], check=False)


def _raw_post(sock_path: Path, path: str, body: bytes) -> tuple[int, dict]:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(str(sock_path))
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")  # fmt: skip
    s.sendall(head.encode() + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.split(b"\r\n\r\n", 1)[1])


def test_deeply_nested_json_is_a_clean_400(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        depth = 1_500  # past the JSON decoder's recursion limit, within every body limit
        for path in ("/v1/decision", "/v1/profile"):
            status, body = _raw_post(d.socket, path, b"[" * depth + b"]" * depth)
            assert status == 400, (path, status, body)
            assert "nested too deeply" in body["error"]
        assert d.status()["state"] == "READY"


def test_deeply_nested_toml_and_a_fifo_as_config_exit_2(tmp_path: Path) -> None:
    nested = tmp_path / "nested.toml"
    nested.write_text("[server]\nextra_args = " + "[" * 50_000 + "]" * 50_000 + "\n")
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)  # nobody ever writes it: opening it for reading would block for good
    for cfg, says in ((nested, "nested too deeply"), (fifo, "not a regular file")):
        proc = subprocess.run(
            [sys.executable, "-m", "fastverify.daemon.main", "--config", str(cfg),
             "--state-dir", str(tmp_path / "state"), "--socket", str(tmp_path / "s.sock")],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert proc.returncode == 2, (cfg, proc.returncode, proc.stderr[-2000:])
        assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        # fastverifyctl reads the configuration for its profile dirs: it must not block either
        r = run_ctl("profile", "list", env={"FASTVERIFY_CONFIG": str(cfg)})
        assert r.returncode == 0 and "nccl-default" in r.stdout, (cfg, r.stderr[-2000:])


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists(),
    reason="needs root to drop CAP_DAC_OVERRIDE with setpriv",
)
@pytest.mark.parametrize("args", [("status",), ("profile", "set", "ring-ll"), ("logs",)])
def test_ctl_exits_8_on_a_socket_it_may_not_open(tmp_path: Path, args: tuple[str, ...]) -> None:
    sock_path = tmp_path / "control.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(sock_path))
    srv.listen()
    try:
        os.chmod(sock_path, 0o660)
        os.chown(sock_path, 1001, 1001)  # root without CAP_DAC_OVERRIDE is "other" to it
        env = {"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
        for argv in ((*args, "--socket", str(sock_path)), ("--socket", str(sock_path), *args)):
            r = subprocess.run(
                ["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
                 sys.executable, "-m", "fastverify.ctl", *argv],
                capture_output=True, text=True, env=env, timeout=120,
            )  # fmt: skip
            assert r.returncode == 8, (argv, r.returncode, r.stderr)
            assert "permission denied" in r.stderr
    finally:
        srv.close()
