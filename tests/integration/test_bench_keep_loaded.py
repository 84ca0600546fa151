"""`keep_loaded` (the steady load a trace window is captured under) against the sim: its
clients send and finish requests until told to stop, with the prompts a bench window
sends; a request its client cannot even build counts as failed, never as in flight
forever (a trace window then waited out its capture timeout on a load that sent nothing);
a load left running never holds up its process's exit.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from fastverify.experiments.bench.load import BenchConfig, keep_loaded
from tests.support.harness import REPO
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


def test_a_load_left_running_never_holds_up_the_process_exit() -> None:
    """A process whose main thread leaves while the load runs (a Ctrl-C that lands before
    its stop is set) exits: the load runs in a daemon thread and starts no other thread
    that waits on `stop` (one did, and the process hung at exit until a second Ctrl-C
    printed a traceback)."""
    code = (
        "import threading\n"
        "from fastverify.experiments.bench.load import BenchConfig, keep_loaded\n"
        "cfg = BenchConfig(url='http://127.0.0.1:1', concurrency=2, duration=1, input_len=4,\n"
        "                  output_len=4, seed=0, warmup=0)\n"
        "stop, counts = threading.Event(), {}\n"
        "threading.Thread(target=keep_loaded, args=(cfg, stop, counts), daemon=True).start()\n"
        "while counts.get('failed', 0) < 2:  # the load's loop is running\n"
        "    stop.wait(0.05)\n"
        "print('leaving with the load running', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=120)  # a bound on a hang, not a timing assertion
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the process did not exit with the load running:\n{err}") from None
    assert proc.returncode == 0 and "leaving with the load running" in out, err
    assert "Traceback" not in err, err
