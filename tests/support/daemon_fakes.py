"""A fake launcher and resolver so the controller runs in milliseconds, with no processes.

`FakeLauncher.plan[profile]` says what an engine of that profile does: "ok" (ready and
verified at once), "hang" (never ready: waits for its cancel flag), or a failure reason
(e.g. "cuda_oom": exits during start-up). `crash(h)` makes a serving engine die.
`FakeLauncher.verify(h)` is what the fake engine's one verifier (`LauncherVerify`) answers
after READY; `build(tmp, checks=[...])` runs other verifiers after it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fastverify.daemon.events import EventBus
from fastverify.daemon.failures import Failure
from fastverify.daemon.launcher import EngineHandle
from fastverify.daemon.resolve import RequestError
from fastverify.daemon.statestore import StateStore
from fastverify.daemon.verifier import Check, Context, Finding
from fastverify.engines.base import ArgvCheck


class Recorder(list):
    """Every published event, in order; `wait_for(predicate)` blocks until one matches."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()

    def __call__(self, event: Any) -> None:
        with self._cond:
            self.append(event)
            self._cond.notify_all()

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> Any:
        def hit() -> Any:
            return next((e for e in list(self) if predicate(e)), None)

        with self._cond:
            found = self._cond.wait_for(hit, timeout)
        assert found is not None, "no such event was published"
        return found


class FakeLauncher:
    def port_in_use(self, argv: list[str]) -> Any:
        return None  # the fake engine binds no port

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.plan: dict[str, str] = {}
        self.started: list[EngineHandle] = []
        self.stopped: list[EngineHandle] = []
        self.verified: list[EngineHandle] = []  # marked verified (the real one writes a file)
        self.waiting = threading.Event()  # set while an engine "loads" (plan "hang")
        self.on_line = lambda h, line, facts: None
        self.on_exit = lambda h: None
        self.say = lambda msg, level=0, **_: None
        self._pid = 1000
        self.env_parts: list[Any] = []  # what features add to a start (launcher.Launcher's)
        self.line_readers_for: list[Any] = []
        self.argv_aside: list[Any] = []
        self.started_with: list[Any] = []  # a part's own start state (the fake passes no env)
        self.keepers: dict[str, Any] = {}  # a part's fields of a record (the fake keeps none)

    def url(self) -> str:
        return "http://127.0.0.1:1"

    def spawn(self, profile: Any, mode: str, argv: list[str]) -> EngineHandle:
        self._pid += 1
        h = EngineHandle(
            group_id=f"e{self._pid}", pid=self._pid, pgid=self._pid, create_time=None,
            argv=list(argv), log_path=self.tmp / f"{self._pid}.log", profile=profile.name,
            mode=mode, url=self.url(), expected_nccl={"NCCL_ALGO": profile.name.upper()},
        )  # fmt: skip
        self.started.append(h)
        return h

    def await_ready(self, h: EngineHandle, timeout_s: float, cancel: threading.Event,
                    *, heartbeat: Any = None) -> Failure | None:  # fmt: skip
        what = self.plan.get(h.profile, "ok")
        if what == "hang":
            self.waiting.set()
            cancel.wait()
            self.waiting.clear()
            return Failure("cancelled", "operation cancelled", log=str(h.log_path))
        if what != "ok":
            h.exited.set()
            return Failure(what, f"{what} during start-up", log=str(h.log_path))
        h.ready_s = 0.001
        return None

    def verify(self, h: EngineHandle) -> tuple[Failure | None, dict[str, Any]]:
        return None, {"env": {"ok": True, "message": "env ok", "processes": []}}

    def same_engine(self, h: EngineHandle, profile: Any, argv: list[str]) -> bool:
        return list(argv) == h.argv and h.expected_nccl == {"NCCL_ALGO": profile.name.upper()}

    def mark_verified(self, h: EngineHandle) -> None:
        self.verified.append(h)

    def exit_failure(self, h: EngineHandle) -> Failure:
        return Failure("cuda_oom", "engine died", log=str(h.log_path))

    def lost_workers(self, h: EngineHandle) -> list[int]:
        return []

    def stop(self, h: EngineHandle, *, forget: bool = True) -> Any:
        h.expected_exit = True
        h.serving = False
        h.exited.set()
        self.stopped.append(h)
        return SimpleNamespace(signal_used="SIGTERM", duration_s=0.0, leftover=[])

    def stop_group(self, pgid: int) -> Any:
        return SimpleNamespace(signal_used="none")

    def crash(self, h: EngineHandle) -> None:
        h.exited.set()
        self.on_exit(h)


class LauncherVerify(Check):
    """The fake engine's verifier: the env part of the record is what `launcher.verify(h)`
    (a test may replace it) answers."""

    name = "env"

    def __init__(self, launcher: FakeLauncher) -> None:
        self.launcher = launcher

    def verify(self, h: EngineHandle, ctx: Context) -> Finding:
        failure, details = self.launcher.verify(h)
        ctx.details.update(details)
        if failure is not None:
            return self.failed(failure)
        return self.ok(details["env"]["message"])


class FakeResolver:
    def __init__(self, cfg: Any, known: tuple[str, ...] = ("ring", "tree", "bad", "slow")):
        self.cfg = cfg
        self.known = known
        self.p2p_checked: list[str] = []
        self.p2p_redirected: set[str] = set()

    def defaults(self, name: str | None, mode: str | None, active: dict) -> tuple[str, str]:
        return (name or active.get("profile") or "ring", mode or active.get("mode") or "baseline")

    def resolve(
        self,
        name: str,
        mode: str,
        force: bool = False,
        load_format: str | None = None,
        eagle3_steps: int | None = None,
    ) -> tuple[Any, list[str]]:
        if name not in self.known:
            raise RequestError(422, f"invalid profile {name!r}", reason="invalid_profile")
        argv = ["engine", "--profile", name, "--mode", mode]
        argv += ["--load-format", load_format] * bool(load_format)
        return SimpleNamespace(name=name), argv + (
            ["--steps", str(eagle3_steps)] * bool(eagle3_steps)
        )

    def check_argv(self, argv: list[str]) -> ArgvCheck:
        return ArgvCheck(True, "ok")

    def require_direct_p2p(self, profile: Any) -> None:
        """The fake host's GPUs reach each other directly but for the profiles in
        `p2p_redirected` (refused as the real resolver refuses them); each profile checked
        is kept (`p2p_checked`)."""
        self.p2p_checked.append(profile.name)
        if profile.name in self.p2p_redirected:
            raise RequestError(422, f"profile {profile.name} needs P2P", reason="p2p_redirected")


def config(backoff: tuple[float, float] = (0.0, 0.0), burst: int = 3) -> Any:
    restart = SimpleNamespace(
        readiness_timeout_s=30.0, window_s=60.0, backoff_s=list(backoff), burst=burst,
        stop_grace_s=1.0,
    )  # fmt: skip
    return SimpleNamespace(
        daemon=SimpleNamespace(default_profile="ring"),
        restart=restart,
        exporter=SimpleNamespace(trace_steps=5),
        frontdoor=SimpleNamespace(mode="off"),
        server=SimpleNamespace(url="http://127.0.0.1:1", mode="baseline", load_format="auto"),
        source=None,
    )


def build(tmp: Path, checks: tuple[Any, ...] = (), **cfg_kw: Any) -> tuple[Any, FakeLauncher, list]:
    """A controller over the fakes; `checks`: verifiers run after the fake engine's own."""
    from fastverify.daemon.checks import DirectP2P
    from fastverify.daemon.controller import Controller
    from fastverify.daemon.observers import Journal

    cfg = config(**cfg_kw)
    launcher = FakeLauncher(tmp)
    bus = EventBus()
    seen = Recorder()
    bus.subscribe(seen)
    store = StateStore(tmp / "state")
    bus.subscribe(Journal(store))
    engine = SimpleNamespace(name="fake", simulated=True)
    resolver = FakeResolver(cfg)
    # the daemon's own refusal of a profile the host's P2P cannot serve, as it runs it
    verifiers = [DirectP2P(resolver), LauncherVerify(launcher), *checks]
    ctl = Controller(cfg, engine, launcher, resolver, store, bus, checks=verifiers)  # type: ignore[arg-type]
    return ctl, launcher, seen
