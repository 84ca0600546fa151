"""`python -m fastverify.frontdoor`: the front door process (fastverifyd starts it in its own
process group; see fastverify/daemon/frontdoor_group.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from fastverify.frontdoor.control import serve_control
from fastverify.frontdoor.gate import Gate
from fastverify.frontdoor.relay import Relay


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host or "127.0.0.1", int(port)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fastverify.frontdoor")
    p.add_argument("--listen", required=True, type=_listen, help="HOST:PORT clients use")
    p.add_argument("--engine-host", default="127.0.0.1")
    p.add_argument("--engine-port", type=int, default=0, help="0: hold until `serve PORT`")
    p.add_argument("--control", required=True, type=Path, help="the control socket's path")
    p.add_argument("--queue-size", type=int, default=1024)
    p.add_argument("--max-wait-s", type=float, default=300.0)
    p.add_argument("--retry-after-s", type=int, default=5)
    p.add_argument("--hold", action="store_true", help="start holding (an engine is starting)")
    p.add_argument("--stop-grace-s", type=float, default=10.0, help="in-flight grace at SIGTERM")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    gate = Gate(args.queue_size, args.max_wait_s, args.retry_after_s)
    if args.engine_port:
        gate.serve(args.engine_port)
    if args.hold:
        gate.hold()
    relay = Relay(gate, args.engine_host)
    host, port = args.listen
    server = await asyncio.start_server(relay.handle, host, port, limit=64 * 1024, backlog=1024)
    control = await serve_control(gate, args.control)
    logging.info("front door on %s:%d, engine %s:%s", host, port, args.engine_host, gate.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    # stop taking connections; answer the held requests 503 + Retry-After (never a reset)
    # and give the ones in flight the same grace fastverifyd gives the engine
    server.close()
    gate.close()
    await gate.drain(args.stop_grace_s)
    control.close()
    with contextlib.suppress(OSError):
        args.control.unlink()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s frontdoor %(message)s")
    args = parse(sys.argv[1:] if argv is None else argv)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
