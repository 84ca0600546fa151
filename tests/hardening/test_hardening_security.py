"""Security: control socket permissions, TCP off by default / token-only when on, secrets
never printed, the engine's environment reduced to what it needs."""

from __future__ import annotations

import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from fastverify.client import ApiError, ControlClient
from tests.support.hardening import REPO, engine_port, held_env, read_profile_env
from tests.support.harness import DaemonHarness, free_port
from tests.support.sim import SIM_HEALTH_POLL_VAR, SIM_TEST_HEALTH_POLL_S

# What an engine needs from the daemon's environment (the policy, stated independently of
# fastverify.profiles.effective): system basics, CUDA/NVIDIA device selection and build
# caches. Hugging Face settings and tokens (HF_*) reach it only when `env_passthrough`
# names them (an HF_ENDPOINT pointing anywhere must not leak through).
ENGINE_BASE = {
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH",
    "VIRTUAL_ENV", "CONDA_PREFIX", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME",
    "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
}  # fmt: skip
ENGINE_PREFIXES = ("LC_",)

POLLUTION = {
    "LD_PRELOAD": "",  # empty: harmless for the daemon itself, must still not be inherited
    "PYTHONSTARTUP": "/nonexistent/startup.py",
    "PYTHONINSPECT": "",
    "http_proxy": "http://proxy.invalid:3128",
    "SGLANG_SOMETHING": "1",
    "OMP_NUM_THREADS": "3",
    "JUNK_VARIABLE": "junk",
    "NCCL_ALGO": "Tree",
    "NCCL_PROTO": "LL128",
    "NCCL_DEBUG": "TRACE",
}


def _secret(tag: str) -> str:
    return f"{tag}-{secrets.token_hex(12)}"


def test_socket_never_world_accessible_even_with_umask_0(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, metrics=False, start=False)
    try:
        old = os.umask(0)
        try:
            d.start()
        finally:
            os.umask(old)
        st = os.stat(d.socket)
        assert stat.S_ISSOCK(st.st_mode)
        assert st.st_mode & 0o007 == 0, oct(st.st_mode)
        assert st.st_uid == os.getuid()
        for name in ("state.json", "journal.jsonl", "engine.pid", "daemon.lock"):
            mode = (d.state_dir / name).stat().st_mode
            assert mode & 0o002 == 0, f"{name} is world-writable: {oct(mode)}"
        # Another local user cannot connect (when we can become one).
        if os.geteuid() == 0:
            probe = (
                "import socket,sys\n"
                "s=socket.socket(socket.AF_UNIX)\n"
                "try:\n s.connect(sys.argv[1]); print('CONNECTED')\n"
                "except PermissionError: print('DENIED')\n"
            )
            r = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 sys.executable, "-c", probe, str(d.socket)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if r.returncode == 0:
                assert r.stdout.strip() == "DENIED", r.stdout + r.stderr
    finally:
        d.close()


def _listening(pid: int) -> set[tuple[str, int]]:
    out = set()
    for c in psutil.Process(pid).net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN:
            out.add((c.laddr.ip, c.laddr.port))
    return out


def test_tcp_off_by_default_only_exporter_and_engine_listen(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path) as d:
        metrics_port = int(d.metrics_url.split(":")[2].split("/")[0])
        assert _listening(d.pid) == {("127.0.0.1", metrics_port)}
        eng = d.status()["engine"]
        listen = set()
        for pid in [eng["pid"], *[c.pid for c in psutil.Process(eng["pid"]).children(True)]]:
            listen |= _listening(pid)
        assert listen == {("127.0.0.1", engine_port(d))}, listen
    with DaemonHarness(tmp_path / "nometrics", metrics=False) as d:
        assert _listening(d.pid) == set()


def _raw_tcp(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_tcp_control_requires_the_token(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(32)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = free_port()
    cfg = {"daemon": {"tcp_listen": f"127.0.0.1:{port}", "token_file": str(token_file)}}
    with DaemonHarness(tmp_path, metrics=False, config=cfg) as d:
        tcp = f"127.0.0.1:{port}"
        # the good token first: after repeated failures the source backs off (429), and then
        # even the right token waits (see test_tcp_tls.py for the backoff itself)
        good = ControlClient(tcp=tcp, token=token, timeout=60)
        assert good.get("/v1/status")["state"] == "READY"
        assert good.post("/v1/profile", {"name": "ring-ll"})["result"] == "ok"
        assert d.status()["profile"] == "ring-ll"
        pid = d.engine_pid()
        wrong = [
            None,
            "",
            "x",
            token[:-1],
            token + "x",
            token.upper() if token.upper() != token else token.lower(),
            " " + token[1:],
        ]
        statuses = []
        for bad in wrong:
            for method, path, body in (
                ("GET", "/v1/status", None),
                ("GET", "/v1/history", None),
                ("POST", "/v1/profile", {"name": "nccl-default"}),
                ("POST", "/v1/restart", {}),
                ("GET", "/v1/nonexistent", None),
            ):
                with pytest.raises(ApiError) as err:
                    ControlClient(tcp=tcp, token=bad, timeout=10).request(method, path, body)
                statuses.append(err.value.status)
                assert err.value.status in (401, 429), (bad, path, err.value.body)
                assert token not in json.dumps(err.value.body)
        assert statuses[:5] == [401] * 5 and 429 in statuses, statuses  # then it backs off
        for header in (f"Basic {token}", f"bearer{token}", f"Token {token}", token):
            raw = _raw_tcp(
                port, f"GET /v1/status HTTP/1.1\r\nAuthorization: {header}\r\n\r\n".encode()
            )
            assert raw.startswith((b"HTTP/1.0 401", b"HTTP/1.0 429")), raw[:200]
        assert d.engine_pid() == pid and d.status()["profile"] == "ring-ll"
        # TCP listens only where configured; the token never shows up anywhere.
        assert ("127.0.0.1", port) in _listening(d.pid)
        outputs = [d.log_text(), json.dumps(d.status()), json.dumps(d.client.get("/v1/history"))]
        assert all(token not in o for o in outputs)


def test_tcp_needs_a_token_file_and_a_long_token(tmp_path: Path) -> None:
    port = free_port()
    d = DaemonHarness(
        tmp_path / "a",
        metrics=False,
        start=False,
        config={"daemon": {"tcp_listen": f"127.0.0.1:{port}"}},
    )
    with pytest.raises(AssertionError, match="token"):
        d.start()
    assert d.proc.wait(10) == 2
    d.close(check_leaks=False)
    short = tmp_path / "short"
    short.write_text("tooshort")
    short.chmod(0o600)
    cfg = {"daemon": {"tcp_listen": f"127.0.0.1:{port}", "token_file": str(short)}}
    d = DaemonHarness(tmp_path / "b", metrics=False, start=False, config=cfg)
    with pytest.raises(AssertionError, match="shorter than 16"):
        d.start()
    assert d.proc.wait(10) == 2
    d.close(check_leaks=False)
    loose = tmp_path / "loose"
    loose.write_text("x" * 32)
    loose.chmod(0o644)
    cfg = {"daemon": {"tcp_listen": f"127.0.0.1:{port}", "token_file": str(loose)}}
    d = DaemonHarness(tmp_path / "c", metrics=False, start=False, config=cfg)
    with pytest.raises(AssertionError, match=r"readable by group or others.*chmod 600"):
        d.start()
    assert d.proc.wait(10) == 2
    d.close(check_leaks=False)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_secrets_never_printed_and_engine_env_is_minimal(tmp_path: Path) -> None:
    vals = {
        "HF_TOKEN": _secret("hf"),
        "MY_API_KEY": _secret("apikey"),
        "AWS_SECRET_ACCESS_KEY": _secret("aws"),
        "GITHUB_TOKEN": _secret("gh"),
        "DB_PASSWORD": _secret("dbpw"),
        "SOME_SECRET": _secret("some"),
    }
    service_pw = _secret("svcpw")
    cfg = {
        "server": {
            "env_passthrough": ["MY_API_KEY", "DB_PASSWORD"],
            "env": {"SERVICE_PASSWORD": service_pw, "PLAIN_SETTING": "on"},
        }
    }
    every_secret = [*vals.values(), service_pw]
    with DaemonHarness(tmp_path, env={**vals, **POLLUTION}, config=cfg) as d:
        assert d.ctl("profile", "set", "ring-ll", "-q").returncode == 0
        assert d.ctl("profile", "set", "tree-ll", "-q").returncode == 1  # a failure + rollback
        st = d.status()
        daemon_env = psutil.Process(d.pid).environ()
        want = {
            k: v
            for k, v in daemon_env.items()
            if (k in ENGINE_BASE or k.startswith(ENGINE_PREFIXES)) and not k.startswith("NCCL_")
        }
        want.update(read_profile_env(st["profile"]))
        want.update(
            {
                "MY_API_KEY": vals["MY_API_KEY"],
                "DB_PASSWORD": vals["DB_PASSWORD"],
                "SERVICE_PASSWORD": service_pw,
                "PLAIN_SETTING": "on",
                "PYTHONPATH": str(REPO),
                # FlashInfer's autotune cache and JIT workspace: the daemon's state dir
                "FLASHINFER_AUTOTUNE_DIR": str(d.state_dir / "flashinfer" / "autotune"),
                "FLASHINFER_WORKSPACE_BASE": str(d.state_dir / "flashinfer"),
                # setproctitle (SGLang's schedulers) leaves /proc/PID/environ readable
                "SPT_NOENV": "1",
                # the harness's own env_passthrough: the sim's shortened health poll
                SIM_HEALTH_POLL_VAR: SIM_TEST_HEALTH_POLL_S,
            }
        )
        root = psutil.Process(st["engine"]["pid"])
        procs = [root, *root.children(recursive=True)]
        assert len(procs) == 2
        for p in procs:
            env = p.environ()
            engine_id = env.pop("FASTVERIFY_ENGINE_ID")
            assert len(engine_id) >= 16
            held = {**want, **held_env(st, p.pid, {})}
            assert env == held, {
                "extra": sorted(set(env) - set(held)),
                "missing": sorted(set(held) - set(env)),
                "different": sorted(k for k in set(env) & set(held) if env[k] != held[k]),
            }
        for leak in ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "SOME_SECRET", *POLLUTION):
            assert leak not in env or leak in want, leak
        with urllib.request.urlopen(d.metrics_url, timeout=10) as r:
            metrics = r.read().decode()
        outputs = {
            "metrics": metrics,
            "status --json": d.ctl("status", "--json").stdout,
            "status": d.ctl("status").stdout,
            "history --json": d.ctl("history", "--json").stdout,
            "history": d.ctl("history").stdout,
            "logs": d.ctl("logs", "-n", "5000").stdout,
            "server argv": json.dumps(d.client.get("/v1/server/argv")),
            "api status": json.dumps(d.client.get("/v1/status")),
            "api history": json.dumps(d.client.get("/v1/history")),
            "state dir": "".join(
                p.read_text(errors="replace")
                for p in d.state_dir.iterdir()
                if p.is_file() and p.suffix in (".json", ".jsonl", ".pid")
            ),
        }
        assert "fastverify_up" in metrics and "ring-ll" in outputs["status --json"]
        stop_code = d.stop()
        outputs["daemon log"] = d.log_text()
        for where, text in outputs.items():
            for s in every_secret:
                assert s not in text, f"a secret value appears in {where}"
        assert stop_code == 0
