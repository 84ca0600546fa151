"""Helpers for the sim-engine tests: start `python -m fastverify.sim` as a real child
process in its own session (`SimProcess`, or `sim_server` for a TP 8 server with metrics),
follow its output, talk HTTP to it, and stop exactly the process group it started."""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from fastverify.sim.server import HEALTH_POLL_VAR as SIM_HEALTH_POLL_VAR
from tests.support.net import free_port

# the sim's /health answers after SGLang's 1 s poll; tests not about readiness shorten it
SIM_TEST_HEALTH_POLL_S = "0.05"

REPO = Path(__file__).resolve().parents[2]
READY = "The server is fired up and ready to roll!"


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _live_procs() -> list[tuple[int, int, int]]:
    """(pid, ppid, pgid) of every live, non-zombie process, read from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            out.append((int(entry), int(fields[1]), int(fields[2])))
    return out


def group_members(pgid: int) -> list[int]:
    """PIDs (still alive, not zombies) whose process group is `pgid`."""
    return [pid for pid, _, group in _live_procs() if group == pgid]


def children_of(pid: int) -> list[int]:
    return sorted(child for child, parent, _ in _live_procs() if parent == pid)


_KV_TOKENS = re.compile(r"#token: (\d+),")
_GEN_THROUGHPUT = re.compile(r"gen throughput \(token/s\): ([\d.]+)")


def _field(pattern: re.Pattern[str], line: str) -> str:
    m = pattern.search(line)
    assert m is not None, f"no {pattern.pattern!r} in {line!r}"
    return m.group(1)


def decode_lines_rate(lines: Sequence[str]) -> tuple[float, list[float]]:
    """The rate over the window that consecutive decode lines cover (the first line only
    opens it): each line's tokens are the growth of the running requests' KV tokens since
    the line before, its time those tokens over its gen throughput; and the lines' own
    rates. A plain mean of the rates would overweight the fast intervals whenever a busy
    host stalls one."""
    kv = [int(_field(_KV_TOKENS, ln)) for ln in lines]
    rates = [float(_field(_GEN_THROUGHPUT, ln)) for ln in lines[1:]]
    tokens = [after - before for before, after in itertools.pairwise(kv)]
    return sum(tokens) / sum(n / r for n, r in zip(tokens, rates, strict=True)), rates


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def cpu_seconds(pids: Sequence[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


class SimProcess:
    """One sim engine child process (own session, so its group is ours to stop)."""

    def __init__(
        self,
        *,
        tp: int = 4,
        eagle3: bool = True,
        load: float = 0.3,
        env: Mapping[str, str] | None = None,
        extra: Sequence[str] = (),
        port: int | None = None,
        model: str = "sim/kimi-k2.5",
    ):
        self.port = port or free_port()
        self.argv = [
            sys.executable,
            "-m",
            "fastverify.sim",
            "--model-path",
            model,
            "--tp-size",
            str(tp),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--enable-metrics",
            "--sim-load-seconds",
            str(load),
        ]
        if eagle3:
            self.argv += [
                "--speculative-algorithm",
                "EAGLE3",
                "--speculative-draft-model-path",
                "sim/kimi-k2.5-eagle3",
                "--speculative-num-steps",
                "3",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "4",
            ]
        self.argv += list(extra)
        self.env = clean_env(env)
        self.lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
            start_new_session=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def text(self) -> str:
        with self._cond:
            return "\n".join(line for _, line in self.lines)

    def wait_line(
        self, needle: str | re.Pattern[str], timeout: float = 20.0, start: int = 0
    ) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for _, line in self.lines[start:]:
                    if needle.search(line) if isinstance(needle, re.Pattern) else needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"no line matching {needle!r}; output:\n{self.text()[-4000:]}"
                    )
                self._cond.wait(min(left, 0.2))

    def wait_ready(self, timeout: float = 20.0) -> SimProcess:
        self.wait_line(READY, timeout)
        return self

    def wait_exit(self, timeout: float = 20.0) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    # HTTP
    def request(
        self, method: str, path: str, body: Any = None, timeout: float = 30.0
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        status, _, body = self.request("GET", path)
        assert status == 200, (path, status, body)
        return json.loads(body)

    def post_json(self, path: str, body: Any, timeout: float = 60.0) -> Any:
        status, _, data = self.request("POST", path, body, timeout)
        assert status == 200, (path, status, data)
        return json.loads(data)

    def stream(self, path: str, body: Any, timeout: float = 60.0) -> Iterator[tuple[float, Any]]:
        """Yield (arrival time, decoded SSE payload or None for [DONE])."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(
                "POST",
                path,
                body=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            assert resp.status == 200, resp.status
            assert resp.getheader("Content-Type", "").startswith("text/event-stream")
            while True:
                line = resp.readline()
                if not line:
                    return
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                payload = line[len(b"data: ") :]
                now = time.monotonic()
                yield now, (None if payload == b"[DONE]" else json.loads(payload))
        finally:
            conn.close()

    def stop(self, sig: int = signal.SIGTERM, grace: float = 5.0) -> None:
        """Stop the process group we started: `sig`, then SIGKILL after `grace` s."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        self._reader.join(5)

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    """Wait until no pid in `pids` is alive (zombies count as gone); return survivors."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        still = []
        for pid in alive:
            try:
                state = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if state[state.rindex(")") + 2] != "Z":
                still.append(pid)
        alive = still
        if alive:
            time.sleep(0.05)
    return alive


SIM_SERVER_TP = 8


@contextlib.contextmanager
def sim_server(tmp: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start the sim in its own session with no NCCL_* variables (plus `env`: a profile's
    variables, say); stop exactly that group."""
    port = free_port()
    extra_env = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(extra_env)
    env[SIM_HEALTH_POLL_VAR] = SIM_TEST_HEALTH_POLL_S  # readiness below, not its 1 s poll
    log = open(tmp / f"sim-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastverify.sim", "--model-path", "sim/x",
         "--tp-size", str(SIM_SERVER_TP), "--host", "127.0.0.1", "--port", str(port),
         "--enable-metrics", "--sim-load-seconds", "0.3", *extra],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp / f"sim-{port}.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                # /health is a generation that answers after the sim's poll
                if httpx.get(f"{url}/health", timeout=10).status_code == 200:
                    break
            time.sleep(0.1)
        else:
            raise AssertionError("sim did not become ready")
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
