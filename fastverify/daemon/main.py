"""`fastverifyd`: the supervisor daemon's entry point (flags, config, signals, main loop).

    fastverifyd [--config FILE] [--engine auto|sglang|sim] [--state-dir DIR] [--socket PATH] ...

Every option but --config and --version overrides one configuration key and is derived
from that key's declaration (fastverify.config; docs/reference/config.md names the key of each); the
old key names the file uses are logged as one warning each. The first log line names the engine
chosen and why. Signals: SIGTERM/SIGINT stop the engine group and exit 0 (STOPPING=1 is
sent first; a SIGINT ignored at start, as in a background job, stays ignored); SIGHUP
re-reads the config file, keeping the old configuration (and saying why) when the new one
is invalid. The main loop sends WATCHDOG=1 when systemd asks for it.

Exit codes: 0 clean shutdown, 2 configuration/usage error (a TCP door's token file,
certificate or key that cannot be used included: read before anything starts), 1 could
not start (socket in use by another daemon, state dir locked, an exporter asked for with
--metrics-listen or exporter.metrics_listen that cannot listen, ...), 3 declarative mode
under systemd: the engine stayed FAILED after restart.recover_retries retries (the engine
group is stopped first; the unit fails and Restart= decides). The default exporter address
that cannot listen is a status finding instead: the daemon runs without /metrics.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastverify import __version__ as VERSION
from fastverify import config as configmod
from fastverify.frontdoor import layout

if TYPE_CHECKING:  # imported where an engine is made (the daemon's start-up stays light)
    from fastverify.daemon.notify import Notifier
    from fastverify.daemon.supervisor import Supervisor
    from fastverify.engines.base import Engine
    from fastverify.exporters.hub import MetricsHub

log = logging.getLogger("fastverifyd")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def build_parser() -> argparse.ArgumentParser:
    """fastverifyd's flags, each with its help (`fastverifyd --help`)."""
    p = argparse.ArgumentParser(
        prog="fastverifyd",
        description="fastverify supervisor daemon: runs the SGLang server (or the sim) with "
        "one NCCL profile, switches, verifies and rolls back on request, serves /metrics.",
        epilog="Every flag overrides the key of the config file it names "
        "(docs/reference/config.md).",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="TOML config file (default: $FASTVERIFY_CONFIG, else fastverifyd.toml in "
        "/etc/fastverify as root or $XDG_CONFIG_HOME/fastverify)",
    )
    configmod.add_flags(p)  # one per key that declares a flag
    p.add_argument("--version", action="version", version=f"fastverifyd {VERSION}")
    return p


# config key -> the fastverifyd flag that sets it (a bad value is blamed on the flag)
FLAGS = configmod.FLAGS
# what a SIGHUP reload leaves as it is until the daemon restarts, by the name its log gives
_RESTART_ONLY: dict[str, Callable[[configmod.Config], object]] = {
    "state_dir": lambda c: c.daemon.state_dir,
    "socket": lambda c: c.api.socket,
    "tcp_listen": lambda c: c.api.tcp_listen,
    "metrics_listen": lambda c: c.exporter.metrics_listen,
    "engine": lambda c: c.daemon.engine,
    "frontdoor_mode": lambda c: c.frontdoor.mode,
}
overrides = configmod.overrides  # the flags' values, by table, for config.load


def make_engine(name: str, cfg: configmod.Config) -> Engine:
    if name == "sim":
        from fastverify.engines.sim_adapter import SimEngine

        return SimEngine(cfg.server.python, cfg.sim.load_seconds, cfg.sim.sglang_version)
    from fastverify.engines.sglang import SGLangEngine

    return SGLangEngine(cfg.server.python, cfg.server.sglang_flags)


# the server's SGLang is below the range fastverify knows: refused before any load
EXIT_SGLANG_UNSUPPORTED = 2


def sglang_facts(engine: Engine) -> Any:
    """The engine's SGLang facts, with the version policy's log lines; None when the
    version is below the range (logged: the version, the range and what to do)."""
    from fastverify.sglang.facts import VersionTooOld

    try:
        facts = engine.facts()
    except VersionTooOld as exc:
        log.error("%s; fastverifyd is not starting (nothing was loaded)", exc)
        return None
    problem = getattr(engine, "interpreter_problem", lambda: None)()
    if problem:
        log.error(
            "%s: every engine start will fail until it names SGLang's interpreter; until "
            "then the facts of SGLang %s (the pinned release) are assumed",
            problem,
            facts.facts_version,
        )
    elif facts.warning:
        log.warning("UNSUPPORTED SGLANG: %s", facts.warning)
    else:
        log.info("SGLang %s (facts %s, in the supported range)", facts.version, facts.facts_version)
    return facts


def _check_memory_pinning(cfg: configmod.Config, sup: Supervisor) -> None:
    """Where NCCL will use IB (several nodes, ibverbs devices): can this process pin its
    buffers (fastverify.daemon.memlock)? A problem is a status finding, before any load."""
    from fastverify.daemon import memlock

    why = memlock.rdma_expected(cfg)
    if why is None:
        return
    verdict = memlock.check()
    if verdict.ok:
        log.info("RDMA (%s): %s", why, verdict.message)
        return
    message = f"RDMA ({why}): {verdict.message}"
    log.warning("%s", message)
    sup.add_finding("memlock", message)


def _lock_state_dir(state_dir: Path) -> int:
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(f"another fastverifyd holds {state_dir}/daemon.lock") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _start_exporter(hub: MetricsHub, cfg: configmod.Config, engine: Engine, web: Any = None) -> Any:
    listen = cfg.exporter.metrics_listen
    try:
        from fastverify.exporters.runtime import ExporterRuntime
    except ImportError as exc:
        log.warning("exporter unavailable (%s); /metrics is off", exc)
        return None
    period = cfg.exporter.trace_period_s
    if period is None:
        period = 60.0 if engine.simulated else 0.0
    facts = engine.facts()
    if period and not facts.has("step_spans"):
        log.warning(
            "SGLang %s has no profiler step spans (0.5.11 and later): periodic profile "
            "windows are off",
            facts.version,
        )
        period = 0.0
    runtime = ExporterRuntime(
        hub,
        listen,
        None,
        str(Path(cfg.state_dir) / "traces"),
        period,
        cfg.exporter.trace_steps,
        # the TP ranks on this node (a multi-node server's other ranks trace on theirs)
        expected_ranks=cfg.server.tp_size // max(1, cfg.server.nnodes),
        web=web,
        request_metrics_dir=str(Path(cfg.state_dir) / configmod.REQUEST_METRICS_DIR),
    )
    runtime.start()
    log.info("metrics on %s", runtime.metrics_url)
    return runtime


def _metrics_explicit(ns: argparse.Namespace, cfg: configmod.Config) -> bool:
    """Was the exporter asked for (flag or config key), rather than on by default?"""
    return "exporter.metrics_listen" in cfg.given


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    try:
        cfg = configmod.load(ns.config, overrides(ns), FLAGS)
    except configmod.ConfigError as exc:
        print(f"fastverifyd: configuration error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, cfg.daemon.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for note in cfg.notes:
        log.warning("%s", note)
    from fastverify.engines.detect import choose_engine

    engine_name, reason = choose_engine(cfg.daemon.engine, cfg.server.python or None)
    log.info("fastverifyd %s: engine %s (%s)", VERSION, engine_name, reason)
    return Daemon(ns, cfg, engine_name, reason).run()


class Daemon:
    """Owns the pieces for one run: state lock, supervisor, API servers, exporter, signals."""

    def __init__(
        self, ns: argparse.Namespace, cfg: configmod.Config, engine_name: str, reason: str
    ):
        self.ns = ns
        self.cfg = layout.engine_side(cfg)  # behind a front door: the engine's internal port
        self.engine_name = engine_name
        self.reason = reason
        self.stop_event = threading.Event()
        self.reload_event = threading.Event()
        self.web: Any = None  # exporters.webconfig.WebConfig of /metrics (--web-config-file)

    def _exporter(
        self, hub: MetricsHub, cfg: configmod.Config, engine: Engine
    ) -> tuple[Any, str | None]:
        """Start the exporter: (runtime, None), or (None, why it cannot serve /metrics)."""
        listen = cfg.exporter.metrics_listen
        try:
            return _start_exporter(hub, cfg, engine, self.web), None
        except (OSError, ValueError) as exc:
            errno_ = exc.errno if isinstance(exc, OSError) else None
            why = os.strerror(errno_) if errno_ else str(exc)
        return None, (
            f"the exporter cannot listen on {listen} ({why}): /metrics is off; free the port,"
            ' choose another exporter.metrics_listen (--metrics-listen), or set it to ""'
            " to run without the exporter"
        )

    def _signal(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGHUP:
            self.reload_event.set()
        else:
            self.stop_event.set()

    def run(self) -> int:
        from fastverify.daemon import api
        from fastverify.daemon.notify import Notifier
        from fastverify.daemon.statestore import StateStore
        from fastverify.daemon.supervisor import Supervisor

        cfg = self.cfg
        # Handlers first: a SIGTERM during start-up must still mean "stop cleanly".
        # SIGINT only where it was not ignored at start: a background job (`fastverifyd &` in
        # a script, `nohup ... &`) starts with it ignored so that Ctrl-C in that terminal
        # reaches the foreground command only; Python leaves an inherited SIG_IGN, and so do we.
        sigs = [signal.SIGTERM, signal.SIGHUP]
        if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
            sigs.append(signal.SIGINT)
        for sig in sigs:
            signal.signal(sig, self._signal)
        door = None
        if cfg.api.tcp_listen:  # its credentials are checked before anything starts
            from fastverify.credentials import CredentialError
            from fastverify.daemon import tcpdoor

            try:
                door = tcpdoor.load(cfg.api)
            except CredentialError as exc:
                log.error("%s; fastverifyd is not starting", exc)
                return 2
        if cfg.exporter.web_config_file and cfg.exporter.metrics_listen:
            from fastverify.exporters.webconfig import WebConfigError, load

            try:
                self.web = load(cfg.exporter.web_config_file)
            except WebConfigError as exc:
                log.error("%s; fastverifyd is not starting", exc)
                return 2
        notifier = Notifier.from_env()
        try:
            lock_fd = _lock_state_dir(cfg.state_dir)
        except RuntimeError as exc:
            log.error("%s", exc)
            return 1
        except OSError as exc:  # e.g. ENOSPC/EROFS: say where, not just the errno
            log.error("cannot use the state dir %s: %s", cfg.state_dir, exc.strerror or exc)
            return 1
        store = StateStore(cfg.state_dir)
        engine = make_engine(self.engine_name, cfg)
        facts = sglang_facts(engine)
        if facts is None:
            return EXIT_SGLANG_UNSUPPORTED
        hub = None
        if cfg.exporter.metrics_listen:
            try:
                from fastverify.exporters.hub import MetricsHub

                hub = MetricsHub()
                hub.engine.set_sglang(facts.summary())
            except ImportError as exc:
                log.warning("exporter hub unavailable (%s)", exc)
        try:
            sup = Supervisor(cfg, engine, self.reason, store, notifier, hub)
        except Exception as exc:
            log.error("cannot set up the supervisor: %s", exc)
            return 1
        if hub is not None:
            runtime, problem = self._exporter(hub, cfg, engine)
            if problem is not None and _metrics_explicit(self.ns, cfg):
                log.error("%s; fastverifyd is not starting", problem)
                return 1
            if problem is not None:
                log.error("%s", problem)
                sup.add_finding("metrics", problem)
            sup.attach_runtime(runtime)
        _check_memory_pinning(cfg, sup)
        servers = []
        try:
            sock = api.bind_unix(cfg.socket_path, cfg.api.socket_group)
            servers.append(api.ApiServer(sock, sup.api, None))
            if door is not None:
                servers.append(api.open_tcp_door(cfg.api, door, sup.api, hub))
        except (RuntimeError, OSError, ValueError) as exc:
            log.error("cannot open the control API: %s", exc)
            return 1
        for s in servers:
            api.serve_in_thread(s)
        self.health = None
        if cfg.exporter.health_listen:
            from fastverify.daemon.health import Health, HealthServer

            self.health = Health(sup.status)
            try:
                health_server = HealthServer(cfg.exporter.health_listen, self.health).start()
            except OSError as exc:
                log.error("%s; fastverifyd is not starting", exc.strerror or exc)
                for s in servers:
                    api.stop(s)
                return 1
            log.info("health checks on %s/readyz (also /livez, /startupz)", health_server.url)
        log.info(
            "control API on %s%s",
            cfg.socket_path,
            f" and tcp {cfg.api.tcp_listen}" if cfg.api.tcp_listen else "",
        )
        if not self.stop_event.is_set():
            sup.startup()
            from fastverify.daemon import host_fingerprint

            host_fingerprint.start(sup.api, store, cfg.server.python)
        code = self._loop(sup, notifier)
        notifier.stopping("stopping: engine group and control API")
        log.info("shutting down")
        for s in servers:
            api.stop(s)
        if self.health is not None:
            health_server.stop()
        sup.shutdown()
        if sup.runtime is not None:
            with contextlib.suppress(Exception):
                sup.runtime.stop()
        with contextlib.suppress(OSError):
            cfg.socket_path.unlink()
        notifier.close()
        os.close(lock_fd)
        log.info("stopped")
        return code

    def _loop(self, sup: Supervisor, notifier: Notifier) -> int:
        wd = notifier.watchdog_interval_s
        tick = min(1.0, wd) if wd else 1.0
        last_status = 0.0
        while not self.stop_event.wait(tick):
            if wd:
                notifier.watchdog()
            if self.health is not None:
                self.health.beat()
            if self.reload_event.is_set():
                self.reload_event.clear()
                self._reload(sup, notifier)
            try:
                sup.tick()
            except Exception:
                log.exception("supervisor tick failed")
            code: int | None = sup.exit_code()
            if code is not None:
                log.error(
                    "exiting with status %d: the engine stays FAILED (declarative mode, "
                    "restart.recover_retries spent); systemd's Restart= decides",
                    code,
                )
                return code
            now = time.monotonic()
            if now - last_status >= 10:
                notifier.status(sup.status_line())
                last_status = now
        return 0

    def _reload(self, sup: Supervisor, notifier: Notifier) -> None:
        notifier.reloading()
        try:
            new = configmod.load(self.ns.config, overrides(self.ns), FLAGS)
        except configmod.ConfigError as exc:
            sup.config_error = f"reload refused, keeping the previous configuration: {exc}"
            sup.daemon_log(f"SIGHUP: {sup.config_error}", logging.ERROR)
        else:
            moved = [name for name, value in _RESTART_ONLY.items() if value(new) != value(self.cfg)]
            self.cfg = new = layout.engine_side(new)
            for note in new.notes:
                sup.daemon_log(f"SIGHUP: {note}", logging.WARNING)
            sup.reconfigure(new, make_engine(self.engine_name, new))
            sup.config_error = None
            note = f" ({', '.join(moved)} change only on restart)" if moved else ""
            sup.daemon_log(
                f"SIGHUP: configuration reloaded from {new.source or 'defaults'}; server settings "
                f"apply at the next engine start{note}"
            )
        notifier.ready(sup.status_line())


if __name__ == "__main__":
    sys.exit(main())
