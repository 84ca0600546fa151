"""Load on a daemon's engine while a test looks at it: closed-loop /generate requests."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from fastverify.exporters import sglang_metrics
from tests.support.harness import DaemonHarness


@contextmanager
def traffic(d: DaemonHarness) -> Iterator[None]:
    """Closed-loop /generate requests until the block ends; yields once SGLang's gauge
    reports a running request."""
    stop = threading.Event()
    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 64}}).encode()

    def load() -> None:
        while not stop.is_set():
            req = urllib.request.Request(
                d.server_url + "/generate", data=body, headers={"Content-Type": "application/json"}
            )
            urllib.request.urlopen(req, timeout=30).read()

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        d.wait_for(lambda: running(d) > 0, 20, "a running request")
        yield
    finally:
        stop.set()
        t.join(30)


def running(d: DaemonHarness) -> float:
    values = sglang_metrics.reduce(sglang_metrics.fetch(d.server_url))
    return values["num_running_reqs"] + values["num_queue_reqs"]
