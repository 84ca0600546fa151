"""What the tune tests share: the sim host they tune (TP 8), the short measurement windows,
the daemon config, reading tune's journal and starting `fastverifyctl tune` as a process
that a test can signal."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from typing import Any

from fastverify.profiles.effective import effective_env
from fastverify.profiles.store import ProfileStore
from fastverify.sim import allreduce_sim
from tests.support import host_dirs
from tests.support.harness import REPO, DaemonHarness, ctrl_c_reaches_it

TP = 8
# 16-token prompts: within PCIe's small-message regime, so a 48-token request fits a 1 s
# window (a 64-token prefill moves 896 KiB per all-reduce: 0.39 s on ring-ll in the sim)
MEASURE = ["--repeats", "2", "--duration", "1", "--output-len", "48", "--input-len", "16"]
CONFIG = {"daemon": {"trace_period_s": 0}}
# how far the sim's EAGLE-3 may read from its cost model beside its baseline on a busy
# machine (side by side, pcie-ipc at c=1: EAGLE-3 / baseline 1.10 on a quiet machine, 1.056
# at load average 11): a trial's cycle within it, a mode decided by the model beyond it
EAGLE3_BUSY_REL = 0.15


def predicted_tps(profile: str, mode: str, accept: float | None = None) -> float:
    """The sim's cost model's served tok/s for a shipped profile at TP (0 where it fails)."""
    prof = ProfileStore().load(profile)
    graphs = prof.requires.get("cuda-graph", "on") != "off"
    p = allreduce_sim.served_prediction(effective_env(prof), mode, TP, 1, graphs, accept)
    return 0.0 if p.error else p.tokens_per_second


def read_journal(d: DaemonHarness) -> list[dict[str, Any]]:
    """tune's journal records (a torn last line skipped)."""
    path = d.state_dir / "tune" / "journal.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def popen_tune(d: DaemonHarness, *args: str) -> subprocess.Popen[str]:
    env = host_dirs.clean_env(("FASTVERIFY_", "NCCL_"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), "tune", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=ctrl_c_reaches_it,  # test_ctrl_c_then_resume interrupts it
    )  # fmt: skip
