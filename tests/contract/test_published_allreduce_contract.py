"""The per-message all-reduce table fastverify prices with when no host measurement exists
(`fastverify.sglang.allreduce.PUBLISHED_US`, used by `rehearse --shard-of-tp`) is the one
SGLang 0.5.23 publishes in srt/distributed/device_communicators/pcie_ipc_ar.py: read from
the real wheel's module docstring, so a changed table fails here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fastverify.sglang import allreduce

UNITS = {"KiB": 1024, "MiB": 1024 * 1024}
TIME = {"us": 1.0, "ms": 1000.0}
ROW = re.compile(
    r"^(\d+)\s+(KiB|MiB)\s+([\d.]+)\s+(us|ms)\s+([\d.]+)\s+(us|ms)\s+([\d.]+)x\s*$", re.M
)


def test_published_table_matches_sglangs_docstring(sglang_python: Path) -> None:
    doc = subprocess.run(
        [str(sglang_python), "-c", "import sglang.srt.distributed.device_communicators."
         "pcie_ipc_ar as m; print(m.__doc__)"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    rows = [
        (int(n) * UNITS[u], float(fi) * TIME[fu], float(nc) * TIME[nu])
        for n, u, fi, fu, nc, nu, _ in ROW.findall(doc)
    ]
    assert rows == list(allreduce.PUBLISHED_US)
    assert "8x SM120" in doc and "hidden 6144 bf16" in doc
    assert "8x SM120" in allreduce.PUBLISHED_WHERE
