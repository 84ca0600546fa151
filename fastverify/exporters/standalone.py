"""`fastverify-exporter`: the exporter without the daemon, for people who run SGLang themselves.

    fastverify-exporter --sglang-url http://127.0.0.1:30000 [--log-file server.log]
        [--trace-dir DIR [--trace-period 60] [--trace-steps 5]] [--inspector-dir DIR]
        [--listen 127.0.0.1:9464] [--web-config-file FILE] [--profile NAME]
        [--mode baseline|eagle3]
        [--profile-env FILE] [--baseline-tps TOK_S [--baseline-request-tps TOK_S]
        [--baseline-concurrency N]]

Polls SGLang's /metrics, follows the server's log file (like `tail -F`: survives rotation
and truncation; the existing content is read once for NCCL facts, decode figures only
from new lines), runs profile windows into `--trace-dir` when given, tails NCCL inspector
dumps, and serves /metrics on `--listen` (loopback by default). `--profile`/`--mode` label
the series; `--profile-env` (a profile .env file) fills fastverify_profile_info's settings;
`--baseline-tps` records a baseline for that profile, measured at `--baseline-concurrency`
concurrent requests (break-even and speedup gauges while SGLang runs that many requests).
Stops cleanly on SIGTERM/SIGINT (a SIGINT ignored at start, as in a background
job, stays ignored). Exit codes: 0 stopped, 2 bad arguments, 1 cannot listen.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from fastverify.exporters.hub import MetricsHub

log = logging.getLogger("fastverify.exporter")


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE settings of a profile env file, read by the profiles' own parser (the
    project's one env-file reader); OSError when it cannot be read."""
    from fastverify.profiles.envfile import parse_file

    parsed = parse_file(path)
    unreadable = [p for p in parsed.problems if p.line == 0]
    if unreadable:
        raise OSError(0, unreadable[0].message)
    return parsed.env


class LogFollowerThread:
    """Feed a growing log file to the hub (follow.Tail: survives rotation and truncation);
    what the file held before the start is read once for NCCL facts only."""

    def __init__(self, hub: MetricsHub, path: Path, interval_s: float = 0.2) -> None:
        from fastverify.follow import Tail

        self.hub = hub
        self._live = False
        self.tail = Tail(path, self._line, interval_s=interval_s)

    def _line(self, line: str) -> None:
        self.hub.on_log_line(line, live=self._live)

    def start(self) -> LogFollowerThread:
        self.tail.read_now()  # catch up: NCCL facts only
        self._live = True
        self.tail.start()
        return self

    def stop(self) -> None:
        self.tail.stop(timeout=5)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fastverify-exporter",
        description="Prometheus exporter for an SGLang server (tok/s, accept length, "
        "verify-cycle time, all-reduces per verify) without fastverifyd.",
    )
    p.add_argument("--sglang-url", required=True, help="SGLang server, e.g. http://127.0.0.1:30000")
    p.add_argument("--log-file", type=Path, help="the server's log file to follow")
    p.add_argument("--trace-dir", type=Path, help="where profile windows are written")
    period = "seconds between profile windows (default 60 with --trace-dir; 0 = off)"
    p.add_argument("--trace-period", type=float, default=None, help=period)
    p.add_argument("--trace-steps", type=int, default=5, help="forward steps per window")
    p.add_argument("--inspector-dir", type=Path, help="NCCL_INSPECTOR_DUMP_DIR to tail")
    p.add_argument("--listen", default="127.0.0.1:9464", help="HOST:PORT for /metrics")
    p.add_argument(
        "--web-config-file",
        help="exporter-toolkit web config (YAML, as node_exporter's --web.config.file): "
        "tls_server_config, basic_auth_users (bcrypt), http_server_config, rate_limit",
    )
    p.add_argument("--poll-interval", type=float, default=1.0, help="SGLang /metrics poll period")
    p.add_argument("--profile", help="profile name label")
    p.add_argument("--mode", choices=("baseline", "eagle3"), help="decoding mode label")
    p.add_argument("--profile-env", type=Path, help="profile .env file for the info labels")
    p.add_argument(
        "--baseline-tps",
        type=float,
        metavar="TOK_S",
        help="baseline-mode tokens/s measured for --profile (enables the speedup "
        "and break-even gauges in EAGLE-3 mode)",
    )
    p.add_argument(
        "--baseline-request-tps",
        type=float,
        metavar="TOK_S",
        help="baseline-mode tokens/s per request (default: --baseline-tps / "
        "--baseline-concurrency)",
    )
    p.add_argument(
        "--baseline-concurrency",
        type=int,
        default=1,
        metavar="N",
        help="concurrent requests the baseline was measured at (default 1); the verdict "
        "gauges appear only while SGLang reports that many running requests",
    )
    p.add_argument("--log-level", default="info")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from fastverify.exporters.http import parse_listen
    from fastverify.exporters.runtime import ExporterRuntime

    try:
        parse_listen(args.listen)
    except ValueError as exc:
        print(f"fastverify-exporter: {exc}", file=sys.stderr)
        return 2
    settings: dict[str, str] = {}
    if args.profile_env:
        try:
            settings = read_env_file(args.profile_env)
        except OSError as exc:
            print(
                f"fastverify-exporter: --profile-env {args.profile_env}: {exc.strerror}",
                file=sys.stderr,
            )
            return 2
    period = args.trace_period
    if period is None:
        period = 60.0 if args.trace_dir else 0.0
    hub = MetricsHub()
    if args.profile or args.mode or settings:
        hub.set_labels(args.profile or "", args.mode, settings, "sglang")
    if args.baseline_tps is not None:
        if args.baseline_concurrency < 1:
            print("fastverify-exporter: --baseline-concurrency must be at least 1 request",
                  file=sys.stderr)  # fmt: skip
            return 2
        per_request = args.baseline_request_tps or args.baseline_tps / args.baseline_concurrency
        if args.baseline_tps <= 0 or per_request <= 0:
            print("fastverify-exporter: baseline figures must be positive", file=sys.stderr)
            return 2
        hub.set_baseline(
            args.profile or "", args.baseline_tps, per_request, time.time(),
            args.baseline_concurrency,
        )  # fmt: skip
    web = None
    if args.web_config_file:
        from fastverify.exporters.webconfig import WebConfigError, load

        try:
            web = load(args.web_config_file)
        except WebConfigError as exc:
            print(f"fastverify-exporter: {exc}", file=sys.stderr)
            return 2
    runtime = ExporterRuntime(
        hub,
        args.listen,
        args.sglang_url,
        args.trace_dir,
        period,
        args.trace_steps,
        poll_interval_s=args.poll_interval,
        inspector_dir=args.inspector_dir,
        web=web,
    )
    try:
        runtime.start()
    except OSError as exc:
        print(f"fastverify-exporter: {exc.strerror or exc}", file=sys.stderr)
        return 1
    follower = LogFollowerThread(hub, args.log_file).start() if args.log_file else None
    done = threading.Event()  # the stop signals are handled from before "serving" is said
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:  # ignored at start: a background job
        signal.signal(signal.SIGINT, lambda *_: done.set())
    print(
        f"fastverify-exporter: serving {runtime.metrics_url} for {args.sglang_url}",
        file=sys.stderr,
        flush=True,
    )
    while not done.wait(1.0):
        pass
    if follower is not None:
        follower.stop()
    runtime.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
