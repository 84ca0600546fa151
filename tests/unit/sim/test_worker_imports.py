"""A sim TP worker (`python -m fastverify.sim.worker_main`, seven of them per TP 8 engine
start) starts on its log writer and socket: the engine's start-up, cost model, argv and
config modules stay out of it until a command needs them."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.sim import REPO, clean_env

# What the worker's own start would import (main(), before its first command)
PROBE = """
import json, sys
from fastverify.sim import sglang_logs, worker_main, workers
worker_main.worker_handler(sglang_logs.LogWriter(sys.stdout, "info"))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("fastverify"))))
"""
KEPT_OUT = ("fastverify.sim.startup", "fastverify.sim.allreduce_sim", "fastverify.sim.costmodel",
            "fastverify.sim.cli_args", "fastverify.sim.profiler", "fastverify.config")  # fmt: skip


def test_a_worker_starts_without_the_engines_start_up_modules() -> None:
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=clean_env(), cwd=REPO, timeout=60, check=True)  # fmt: skip
    modules = set(json.loads(r.stdout.splitlines()[-1]))
    assert "fastverify.sim.sglang_logs" in modules  # the probe saw the worker's imports
    assert not modules & set(KEPT_OUT), sorted(modules & set(KEPT_OUT))
