"""A journal written before `spec costs` measured the long-prompt prefill point: the resume
measures its batch-1 baseline and steps-0 windows again, and nothing else."""

import json
from pathlib import Path

from fastverify.experiments.engine_costs.run import _lacks_long_prompt

# spec costs on SGLang 0.5.17 (H100, 8B shape), journaled by the fastverify of that morning,
# which measured one prefill point per mode
OLD_JOURNAL = (
    Path(__file__).parents[2] / "fixtures/sglang-0.5.17-h100-spec8b/spec-costs-8b.journal.jsonl"
)


def windows() -> list[dict]:
    recs = [json.loads(ln) for ln in OLD_JOURNAL.read_text().splitlines() if ln.strip()]
    return [r for r in recs if r.get("record") == "window"]


def test_the_old_journal_gets_its_two_prefill_windows_measured_again() -> None:
    again = [(str(w["steps"]), w["batch_size"]) for w in windows() if _lacks_long_prompt(w)]
    assert sorted(again) == [("0", 1), ("baseline", 1)]


def test_a_window_with_its_long_point_or_without_a_first_token_is_kept() -> None:
    w = next(w for w in windows() if str(w["steps"]) == "baseline" and w["batch_size"] == 1)
    assert not _lacks_long_prompt({**w, "ttft_ms_p50_long": {"tokens": 1024, "ms": 33.3}})
    # measured, but the long prompts failed: None is an answer, not a gap
    assert not _lacks_long_prompt({**w, "ttft_ms_p50_long": None})
    assert not _lacks_long_prompt({k: v for k, v in w.items() if k != "ttft_ms_p50"})
    assert not _lacks_long_prompt({**w, "batch_size": 2})
    assert not _lacks_long_prompt({**w, "steps": 2})
