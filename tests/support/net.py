"""Network helpers of the tests: 127.0.0.1 only."""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator

from fastverify.experiments.common.ranks import RENDEZVOUS_PORTS_FROM, ephemeral_low


def _worker_ports() -> Iterator[int]:
    """This pytest worker's own block of ports below the kernel's ephemeral range, in turn
    from a random start: a port from `bind(0)` is an ephemeral one, which any outgoing
    connection on the machine (another test's client) may take before the server that was
    given it binds; and a block per xdist worker keeps two workers from being handed the
    same port before either has bound it. Every fourth port only: a config may put a second
    listener on the port after the one it was given (the front door's default engine port)."""
    low = ephemeral_low()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    size = (low - RENDEZVOUS_PORTS_FROM) // max(workers, 1) if low > RENDEZVOUS_PORTS_FROM else 0
    if size < 16:
        return iter(())
    first = RENDEZVOUS_PORTS_FROM + worker * size
    block = list(range(first, first + size - 3, 4))
    start = random.randrange(len(block))
    return itertools.cycle(block[start:] + block[:start])


_PORTS = _worker_ports()


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and that no other test of this run is given
    (the kernel's choice where there is no room below its ephemeral range)."""
    for port in itertools.islice(_PORTS, 256):
        if _bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
