"""tests/hardening: faults, concurrency, bad input and security against real processes.

Default suite: a few minutes on 2 cores. FASTVERIFY_FULL=1 runs the long variants (100+
kill -9 iterations, more hypothesis examples); see hardening_support.py for the knobs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT, Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
