"""The per-release facts are what each release's wheel declares.

- `scripts/sglang_facts.py --check` downloads (once, cached) every release's wheel in the
  range, re-extracts its facts with `ast` and fails on any difference from the data files.
- The extraction is checked against the real thing where it runs: the flags and choices
  read from 0.5.23's source equal the option strings of 0.5.23's own argparse parser.
- The hand-written facts in fastverify.sglang (metric labels) equal the pinned release's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fastverify.sglang import metrics as m
from fastverify.sglang.facts import resolve
from fastverify.sglang.versions import PINNED_VERSION

ROOT = Path(__file__).resolve().parents[2]

REAL_FLAGS = r"""
import argparse, json
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
out = {}
for a in p._actions:
    for o in a.option_strings:
        if o.startswith("--") and o != "--help":
            out[o] = None if a.choices is None else [str(c) for c in a.choices]
print(json.dumps(out))
"""


def test_every_release_re_derives_from_its_wheel_with_no_difference() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/sglang_facts.py"), "--check"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-6000:]
    assert out.stderr.count("same: ") == 23


def test_flags_read_from_source_equal_the_real_parser(sglang_python: Path) -> None:
    out = subprocess.run(
        [str(sglang_python), "-W", "ignore", "-c", REAL_FLAGS],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    real = json.loads(out.stdout.strip().splitlines()[-1])
    ours = resolve(PINNED_VERSION).flags
    assert sorted(real) == sorted(ours)
    # choices: equal wherever the source spells them (computed ones are None in the data)
    differ = {k: (real[k], v) for k, v in ours.items() if v is not None and real[k] != v}
    assert differ == {}


def test_hand_written_metric_labels_equal_the_pinned_release() -> None:
    facts = resolve(PINNED_VERSION)
    names = (*m.SCHEDULER_GAUGES, *m.SCHEDULER_COUNTERS, *m.TOKENIZER_COUNTERS,
             *m.TOKENIZER_GAUGES, *m.HISTOGRAMS)  # fmt: skip
    assert {n: m.label_names(n) for n in names} == {n: facts.metric_labels(n) for n in names}
