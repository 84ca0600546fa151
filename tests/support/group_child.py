"""A supervised program for the process-group machine's tests (it imports nothing of
fastverify): a leader with one child in its group, as SGLang's server has its schedulers.

    python group_child.py READY_FILE [--crash-starts N,M,... COUNTER_FILE]

Counts its starts in COUNTER_FILE and exits 3 at once when this start's number is listed
(a start that crashes); otherwise starts a child, writes READY_FILE (its pid), and on SIGTERM or
SIGINT terminates its child and exits 0: a handled signal, so a SIGSTOPped leader hears it
only once it runs again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def main() -> int:
    ready = sys.argv[1]
    if "--crash-starts" in sys.argv:
        i = sys.argv.index("--crash-starts")
        crashing, counter = {int(n) for n in sys.argv[i + 1].split(",")}, sys.argv[i + 2]
        try:
            with open(counter) as f:
                n = int(f.read() or 0) + 1
        except FileNotFoundError:
            n = 1
        with open(counter, "w") as f:
            f.write(str(n))
        if n in crashing:
            return 3
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])

    def stop(signum: int, frame: object) -> None:
        child.terminate()
        child.wait()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tmp = f"{ready}.tmp"
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, ready)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
