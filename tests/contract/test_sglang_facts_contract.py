"""The per-release facts are what each release's wheel declares.

- `scripts/sglang_facts.py --check` downloads (once, cached) every release's wheel in the
  range, re-extracts its facts with `ast` and fails on any difference from the data files.
- The extraction is checked against the releases themselves, installed and run, in
  test_sglang_releases_contract.py (flags and span names of 0.5.1.post3, 0.5.20, 0.5.23).
- The hand-written facts in fastverify.sglang (metric labels) equal the pinned release's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fastverify.sglang import metrics as m
from fastverify.sglang.facts import resolve
from fastverify.sglang.versions import PINNED_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_every_release_re_derives_from_its_wheel_with_no_difference() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/sglang_facts.py"), "--check"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-6000:]
    assert out.stderr.count("same: ") == 23


def test_hand_written_metric_labels_equal_the_pinned_release() -> None:
    facts = resolve(PINNED_VERSION)
    names = (*m.SCHEDULER_GAUGES, *m.SCHEDULER_COUNTERS, *m.TOKENIZER_COUNTERS,
             *m.TOKENIZER_GAUGES, *m.HISTOGRAMS)  # fmt: skip
    assert {n: m.label_names(n) for n in names} == {n: facts.metric_labels(n) for n in names}
