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


def test_the_hand_written_draft_span_names_follow_the_wheels() -> None:
    """The sim's span names for the mode-named releases (fastverify.sim.traces.
    SpanNaming) are not in one format string: the EAGLE draft steps run DECODE mode
    (`speculative/eagle_draft_cuda_graph_runner.py`), the draft extend DRAFT_EXTEND_V2
    (`speculative/*.py`), and the span is the mode's name. Checked in each such wheel."""
    import importlib.util
    import zipfile

    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts/sglang_facts.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    mode_named = [v for v in gen.RELEASES if resolve(v).verify_stage == "TARGET_VERIFY"]
    assert mode_named[0] == "0.5.11" and mode_named[-1] == "0.5.19"
    for v in mode_named:
        assert "step[{mode.name} bs={bs}]" in resolve(v).spans["templates"]
        with zipfile.ZipFile(gen.download(v)) as whl:
            runner = whl.read("sglang/srt/speculative/eagle_draft_cuda_graph_runner.py")
            assert b"ForwardMode.DECODE" in runner, v
            spec_files = [n for n in whl.namelist() if n.startswith("sglang/srt/speculative/")]
            assert any(b"ForwardMode.DRAFT_EXTEND_V2" in whl.read(n) for n in spec_files), v
