"""`keep_loaded` (the steady load a trace window is captured under) against the sim: its
clients send and finish requests until told to stop, with the prompts a bench window
sends; a request its client cannot even build counts as failed, never as in flight
forever (a trace window then waited out its capture timeout on a load that sent nothing).
"""

from __future__ import annotations

import threading
import time

from fastverify.experiments.bench.load import BenchConfig, keep_loaded
from tests.support.sim import SimProcess


def _run_until(cfg: BenchConfig, key: str, n: int) -> dict[str, int]:
    stop, counts = threading.Event(), {}
    t = threading.Thread(target=keep_loaded, args=(cfg, stop, counts), daemon=True)
    t.start()
    deadline = time.monotonic() + 120  # a bound on a broken loop, not a timing assertion
    while counts.get(key, 0) < n and time.monotonic() < deadline and t.is_alive():
        stop.wait(0.05)
    stop.set()
    t.join(30)
    return counts


def test_the_load_finishes_requests_with_random_ids_and_a_dataset() -> None:
    with SimProcess(tp=1, eagle3=True, load=0.2) as sim:
        sim.wait_ready()
        url = f"http://127.0.0.1:{sim.port}"
        for dataset in (None, "fastverify-docs"):
            cfg = BenchConfig(url=url, concurrency=2, duration=1, input_len=16, output_len=8,
                              seed=0, warmup=0, dataset=dataset)  # fmt: skip
            counts = _run_until(cfg, "finished", 4)
            assert counts["finished"] >= 4 and counts["failed"] == 0, (dataset, counts)


def test_a_request_that_cannot_be_sent_counts_as_failed() -> None:
    cfg = BenchConfig(url="http://127.0.0.1:1", concurrency=1, duration=1, input_len=4,
                      output_len=4, seed=0, warmup=0)  # fmt: skip
    counts = _run_until(cfg, "failed", 2)
    assert counts["failed"] >= 2 and counts["finished"] == 0, counts
