"""DaemonHarness: a real `fastverifyd` (sim engine by default) in temporary dirs, for tests.

    from tests.support.harness import DaemonHarness

    def test_switch(tmp_path):
        with DaemonHarness(tmp_path, sim_load_seconds=0.3) as d:   # starts, waits for READY
            r = d.ctl("profile", "set", "ring-ll")                 # the real fastverifyctl
            assert r.returncode == 0, r.stderr
            st = d.client.get("/v1/status")                        # fastverify.client.ControlClient
            assert st["profile"] == "ring-ll"

Constructor: `DaemonHarness(tmp_path, *, engine="sim", sim_load_seconds=0.3, metrics=True,
env=None, extra_args=(), config=None, tp_size=2, start=True, sigint_ignored=False,
preexec=None)`.

- `env`: extra variables for the daemon's own environment (e.g. NCCL_ALGO=Ring to prove
  the engine does not inherit them, NOTIFY_SOCKET, WATCHDOG_USEC). The daemon otherwise gets
  the test's environment minus NCCL_*, NOTIFY_SOCKET, WATCHDOG_* and FASTVERIFY_*.
- `config`: `{"server": {...}, "daemon": {...}}` (keys by table or by their old names:
  the file is written in the tables' layout) merged over the harness defaults (free
  engine port, tp_size, fast backoff [0.1, 0.5] s, 5 s stop grace, 30 s readiness timeout,
  profile_dirs = [tmp_path/"profiles"] (created, empty) so tests can add their own
  profiles; the shipped ones stay available). On the sim, `env_passthrough` also names
  the sim's health poll (FASTVERIFY_SIM_HEALTH_POLL_S, shortened in the daemon's
  environment; `env` sets it back to SGLang's 1 s for a test about readiness).
- `extra_args`: more fastverifyd flags.
- `start=False` (or use without `with`): call `.start(wait_ready=True)` yourself.
- `sigint_ignored`: start the daemon with SIGINT ignored, as a background job starts
  (default: SIGINT's default disposition, whatever the suite itself inherited).
- `preexec`: called in the daemon's process before exec (e.g. lower a resource limit, drop a
  capability from the bounding set, as a container runtime would start it).

Attributes / methods:
  `.client` ControlClient on the socket; `.socket` (short path under /tmp, AF_UNIX limit);
  `.state_dir`; `.config_path`; `.log_path` (the daemon's stderr); `.metrics_url`
  (`http://127.0.0.1:PORT/metrics`, None when metrics=False); `.server_url` (engine);
  `.pid` (daemon); `.proc` (Popen); `.status()`; `.engine_pid()`;
  `.ctl(*args, timeout=60, env=None) -> CompletedProcess` (runs `python -m fastverify.ctl
  --socket SOCK ...`, text mode); `.wait_state(state_or_states, timeout=15) -> status`
  (READY and FAILED mean settled: that state with no operation in flight, so the
  operation that reached it has answered and its history record is written);
  `.wait_for(predicate, timeout, what)`; `.stop(timeout=20) -> exit code` (SIGTERM);
  `.kill9()` (SIGKILL the daemon only; the engine group keeps running); `.log_text()`.

Cleanup (on `__exit__` or `.close()`): stops the daemon (SIGTERM, then SIGKILL after the
timeout), then checks every engine process group the harness saw (from status and the
state dir's engine.pid, only groups whose processes carry this harness's engine ids; the
weight cache's groups from weight-cache.pid, by their FASTVERIFY_WEIGHT_CACHE_ID):
any survivor is SIGKILLed and the test fails with "engine process leaked". Nothing else
is ever signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fastverify.client import ApiError, ControlClient, DaemonUnavailable  # noqa: E402
from fastverify.config import relayout  # noqa: E402
from tests.support import host_dirs  # noqa: E402
from tests.support.net import free_port  # noqa: E402
from tests.support.sim import SIM_HEALTH_POLL_VAR, SIM_TEST_HEALTH_POLL_S  # noqa: E402

# States an operation ends in: waited for with nothing in flight (see wait_state).
SETTLED = ("READY", "FAILED")
CACHE_ID_VAR = "FASTVERIFY_WEIGHT_CACHE_ID"  # the weight cache's marker (daemon/weight_cache.py)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def to_toml(data: dict[str, Any], prefix: str = "") -> str:
    """A minimal TOML writer for config dicts (scalars, lists, nested tables)."""
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    for k, v in data.items():
        if isinstance(v, dict):
            tables.append((k, v))
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in tables:
        name = f"{prefix}.{k}" if prefix else k
        out += f"\n[{name}]\n" + to_toml(v, name)
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def ctrl_c_reaches_it() -> None:
    """`preexec_fn` for a process a test will interrupt: SIGINT's default disposition, set in
    the child before exec, so Python there raises KeyboardInterrupt on Ctrl-C.

    A test never relies on the disposition it inherited: under `nohup ... &`, `cmd &` from a
    script or a CI wrapper, SIGINT arrives ignored, and a child that inherits that ignores the
    test's SIGINT (Python installs its Ctrl-C handler only where SIGINT was not ignored).
    tests/hardening/test_sigint_disposition.py checks every test that sends SIGINT uses this.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ctl_interrupted_at(
    args: list[str], event: str, before: Callable[[], Any] | None = None
) -> tuple[int, str]:
    """`fastverifyctl ARGS` run to the first stderr line holding `event` (and `before()`
    holds then), then Ctrl-C: its exit code as a shell reports it and all it printed on
    stderr. A process that ends by SIGINT is 130 to a shell as exit(130) is; fastverifyctl
    exits 130, and in about 1 run in 20 of a Ctrl-C'd spec costs on Python 3.11 it ends by
    the signal right after its last line (cause not found; what it printed and did is the
    same), so both read 130 and each test asserts what was printed and done."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastverify.ctl", *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=ctrl_c_reaches_it,
    )  # fmt: skip
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:  # the event, never a sleep
        seen.append(line)
        if event in line:
            break
    if before is not None:
        assert before(), seen
    proc.send_signal(signal.SIGINT)
    try:
        _rest, err = proc.communicate(timeout=300)  # a bound on a hang
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{event}: no exit after Ctrl-C\n{''.join(seen)}") from None
    code = 128 + signal.SIGINT if proc.returncode == -signal.SIGINT else proc.returncode
    return code, "".join(seen) + err


def sigint_in(pid: int, field: str) -> bool:
    """Whether /proc/PID/status's `field` mask (SigIgn, SigCgt) holds SIGINT: the kernel's view
    of what a process does with Ctrl-C."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _scrubbed_env() -> dict[str, str]:
    """The test's environment without what would steer what it starts (NCCL_*, FASTVERIFY_*,
    systemd's watchdog and notify socket), the test's own fastverify directories kept."""
    env = host_dirs.clean_env(("NCCL_", "FASTVERIFY_", "WATCHDOG_"))
    for name in ("NOTIFY_SOCKET", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    return env


def run_ctl(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The real fastverifyctl of this checkout, as a user runs it: no --socket of a harness in
    front of the command, the scrubbed environment plus `env`."""
    full = _scrubbed_env()
    full["PYTHONPATH"] = str(REPO)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", *args],
        capture_output=True, text=True, timeout=timeout, env=full, cwd=REPO,
    )  # fmt: skip


class DaemonHarness:
    def __init__(
        self,
        tmp_path: Path,
        *,
        engine: str = "sim",
        sim_load_seconds: float = 0.3,
        metrics: bool = True,
        env: dict[str, str] | None = None,
        extra_args: Iterable[str] = (),
        config: dict[str, Any] | None = None,
        tp_size: int = 2,
        start: bool = True,
        sigint_ignored: bool = False,
        preexec: Callable[[], None] | None = None,
    ):
        self.tmp = Path(tmp_path)
        self.engine = engine
        self.sim_load_seconds = sim_load_seconds
        self.metrics = metrics
        self.env_extra = dict(env or {})
        self.extra_args = list(extra_args)
        self._autostart = start
        # the daemon's SIGINT is set, never inherited from however the suite was started
        self._sigint = signal.SIG_IGN if sigint_ignored else signal.SIG_DFL
        self._preexec = preexec
        self.short = Path(tempfile.mkdtemp(prefix="fv-", dir="/tmp"))
        self.socket = self.short / "control.sock"
        self.state_dir = self.tmp / "state"
        self.profile_dir = self.tmp / "profiles"
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.tmp / "fastverifyd.log"
        self.engine_port = free_port()
        self.metrics_port = free_port() if metrics else None
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics" if metrics else None
        defaults: dict[str, Any] = {
            "server": {"port": self.engine_port, "tp_size": tp_size},
            "daemon": {
                "profile_dirs": [str(self.profile_dir)],
                "restart_backoff_s": [0.1, 0.5],
                "restart_burst": 5,
                "restart_window_s": 60,
                "stop_grace_s": 5,
                "readiness_timeout_s": 30,
                "gpu_release_timeout_s": 2,
            },
        }
        # both in the file's layout, so a test may name a key by its old name or its new one
        self.config = _merge(relayout(defaults), relayout(config or {}))
        if engine == "sim":
            # the engine gets a clean environment: the sim's health poll (set in the daemon's
            # own, see start) reaches it only through env_passthrough, beside the test's names
            names = list(self.config["server"].get("env_passthrough", ()))
            if SIM_HEALTH_POLL_VAR not in names:
                self.config["server"]["env_passthrough"] = [*names, SIM_HEALTH_POLL_VAR]
        self.config_path = self.tmp / "fastverifyd.toml"
        self.config_path.write_text(to_toml(self.config), encoding="utf-8")
        port = self.config["server"].get("port", self.engine_port)
        self.server_url = f"http://127.0.0.1:{port}"
        self.client = ControlClient(self.socket, timeout=60)
        self.proc: subprocess.Popen | None = None
        self._log_fh: Any = None
        self._seen_groups: dict[int, str] = {}  # pgid -> engine id
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def argv(self) -> list[str]:
        argv = [
            sys.executable, "-m", "fastverify.daemon.main",
            "--config", str(self.config_path),
            "--engine", self.engine,
            "--state-dir", str(self.state_dir),
            "--socket", str(self.socket),
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}" if self.metrics else "",
            "--sim-load-seconds", str(self.sim_load_seconds),
        ]  # fmt: skip
        return argv + self.extra_args

    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> DaemonHarness:
        env = _scrubbed_env()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        # the sim's /health answers after SGLang's 1 s poll; the suite's starts need not
        # wait for it (tests about readiness set it back through `env`); the engine gets it
        # by env_passthrough (__init__)
        env[SIM_HEALTH_POLL_VAR] = SIM_TEST_HEALTH_POLL_S
        env.update(self.env_extra)
        self._log_fh = open(self.log_path, "ab")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            self.argv(),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(self.tmp),
            preexec_fn=self._in_child,
        )
        self.wait_for(self._answers, timeout, "the control socket to answer")
        if self.proc.poll() is not None:
            raise AssertionError(
                f"fastverifyd exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}"
            )
        if wait_ready:
            self.wait_state("READY", timeout)  # settled: the start's record is in history
        return self

    def _in_child(self) -> None:
        signal.signal(signal.SIGINT, self._sigint)
        if self._preexec is not None:
            self._preexec()

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            return True  # exited: reported by the caller
        try:
            self.status(timeout=2.0)
            return True
        except (DaemonUnavailable, ApiError, OSError, ValueError):
            return False

    def __enter__(self) -> DaemonHarness:
        if self._autostart and self.proc is None:
            try:
                self.start()
            except BaseException:  # __exit__ does not run when __enter__ raises
                self.close(check_leaks=False)
                raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close(check_leaks=exc[0] is None)

    # ------------------------------------------------------------------ queries
    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        st = ControlClient(self.socket, timeout=timeout).get("/v1/status")
        self._remember(st)
        return st

    def _remember(self, st: dict[str, Any]) -> None:
        eng = st.get("engine") or {}
        if eng.get("pgid"):
            self._seen_groups.setdefault(int(eng["pgid"]), "")
        self._remember_pidfile()

    def _remember_pidfile(self) -> None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            info = json.loads((self.state_dir / "engine.pid").read_text())
            self._seen_groups[int(info.get("pgid", info["pid"]))] = info.get("engine_id", "")
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # the weight cache
            info = json.loads((self.state_dir / "weight-cache.pid").read_text())
            pgid = int(info.get("pgid", info["pid"]))
            self._seen_groups[pgid] = f"{CACHE_ID_VAR}={info['cache_id']}"

    def engine_pid(self) -> int | None:
        return (self.status().get("engine") or {}).get("pid")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def ctl(
        self,
        *args: str,
        timeout: float = 60,
        env: dict[str, str] | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        full_env = _scrubbed_env()
        full_env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO), full_env.get("PYTHONPATH")])
        )
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            input=input,
            check=False,
        )

    def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what}\n"
                    f"--- daemon log (tail) ---\n{self.log_text()[-3000:]}"
                )
            time.sleep(0.03)

    def wait_state(self, state: str | Iterable[str], timeout: float = 15.0) -> dict[str, Any]:
        """The status once the daemon is in one of `state`. READY and FAILED are waited for
        settled: the daemon publishes the state before the operation that reached it has
        recorded and answered (`switch_in_flight` names it until then, and a `cancel` then
        answers 409 `already_finished`), so a test that goes on at the bare state races that
        record."""
        wanted = {state} if isinstance(state, str) else set(state)
        last: dict[str, Any] = {}

        def check() -> dict[str, Any] | None:
            nonlocal last
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"fastverifyd exited ({self.proc.returncode}) while waiting for {wanted}:\n"
                    f"{self.log_text()[-3000:]}"
                )
            try:
                last = self.status()
            except (DaemonUnavailable, ApiError, OSError, ValueError):
                return None
            if last.get("state") not in wanted:
                return None
            settling = last["state"] in SETTLED and last.get("switch_in_flight")
            return None if settling else last

        try:
            return self.wait_for(check, timeout, f"state {sorted(wanted)}")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\n--- last status ---\n{json.dumps(last, indent=1)}"
            ) from None

    # ------------------------------------------------------------------ stopping
    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM the daemon and wait; returns its exit code (SIGKILL after `timeout`)."""
        if self.proc is None:
            return None
        with contextlib.suppress(Exception):
            if self.proc.poll() is None:
                self.status(timeout=1.0)
        self._remember_pidfile()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError(
                    f"fastverifyd did not exit within {timeout} s of SIGTERM\n"
                    + self.log_text()[-3000:]
                ) from None
        return self.proc.returncode

    def kill9(self) -> None:
        """SIGKILL the daemon (only); its engine group keeps running."""
        assert self.proc is not None
        with contextlib.suppress(Exception):
            self.status(timeout=1.0)
        self._remember_pidfile()
        self.proc.kill()
        self.proc.wait(5)

    def restart_daemon(self, wait_ready: bool = True, timeout: float = 30.0) -> DaemonHarness:
        """Start a new daemon on the same state dir, socket and config (after stop/kill9)."""
        if self._log_fh is not None:
            self._log_fh.close()
        return self.start(wait_ready=wait_ready, timeout=timeout)

    def _group_alive(self, pgid: int, engine_id: str) -> list[int]:
        import psutil

        pids = []
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) != pgid or p.status() == psutil.STATUS_ZOMBIE:
                    continue
                var, _, want = engine_id.rpartition("=")
                if want and p.environ().get(var or "FASTVERIFY_ENGINE_ID") != want:
                    continue
                pids.append(p.pid)
            except (ProcessLookupError, psutil.Error, OSError):
                continue
        return pids

    def leaked(self, wait: float = 5.0) -> dict[int, list[int]]:
        """Engine groups seen by this harness that still have live processes."""
        deadline = time.monotonic() + wait
        while True:
            out = {g: p for g, eid in self._seen_groups.items() if (p := self._group_alive(g, eid))}
            if not out or time.monotonic() >= deadline:
                return out
            time.sleep(0.05)

    def close(self, check_leaks: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        problems = []
        try:
            code = self.stop()
            if code not in (0, None, -signal.SIGKILL) and check_leaks:
                problems.append(f"fastverifyd exited with {code}")
        except AssertionError as exc:
            problems.append(str(exc))
        leaks = self.leaked()
        for pgid in leaks:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        if self._log_fh is not None:
            self._log_fh.close()
        shutil.rmtree(self.short, ignore_errors=True)
        if leaks:
            problems.append(f"engine process leaked (killed now): {leaks}")
        if problems and check_leaks:
            raise AssertionError("; ".join(problems) + f"\n{self.log_text()[-2000:]}")


def engines_on_port(port: int) -> dict[int, list[int]]:
    """Live processes started with `--port PORT` (our engines' servers) and their
    descendants (TP workers), by pgid."""
    import psutil

    groups: dict[int, list[int]] = {}
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        try:
            ours = "--port" in cmd and cmd[cmd.index("--port") + 1] == str(port)
            if ours and p.status() != psutil.STATUS_ZOMBIE:
                pids = groups.setdefault(os.getpgid(p.pid), [])
                pids.append(p.pid)
                # workers exec'd like SGLang's spawned schedulers carry no --port
                for c in p.children(recursive=True):
                    cmd_c = c.cmdline()
                    if "--port" not in cmd_c and c.status() != psutil.STATUS_ZOMBIE:
                        pids.append(c.pid)
        except (psutil.Error, ProcessLookupError, IndexError):
            continue
    return groups
