"""A journal written before `spec costs` measured its prefill points (the long prompt, the
short one): the resume measures its batch-1 baseline and steps-0 windows again, and nothing
else."""

import json
from pathlib import Path

from fastverify.experiments.engine_costs.run import _lacks_prefill_points

# spec costs on SGLang 0.5.17 (H100, 8B shape), journaled by the fastverify of that morning,
# which measured one prefill point per mode
OLD_JOURNAL = (
    Path(__file__).parents[2] / "fixtures/sglang-0.5.17-h100-spec8b/spec-costs-8b.journal.jsonl"
)


def windows() -> list[dict]:
    recs = [json.loads(ln) for ln in OLD_JOURNAL.read_text().splitlines() if ln.strip()]
    return [r for r in recs if r.get("record") == "window"]


def test_the_old_journal_gets_its_two_prefill_windows_measured_again() -> None:
    again = [(str(w["steps"]), w["batch_size"]) for w in windows() if _lacks_prefill_points(w)]
    assert sorted(again) == [("0", 1), ("baseline", 1)]


def test_a_window_with_its_points_or_without_a_first_token_is_kept() -> None:
    w = next(w for w in windows() if str(w["steps"]) == "baseline" and w["batch_size"] == 1)
    short = {"tokens": 8, "ms": 15.1}
    # the long point alone (a fastverify of the afternoon): measured again for the short one
    assert _lacks_prefill_points({**w, "ttft_ms_p50_long": {"tokens": 1024, "ms": 33.3}})
    assert not _lacks_prefill_points({**w, "ttft_ms_p50_short": short})
    # measured, but the prompts failed: None is an answer, not a gap
    assert not _lacks_prefill_points({**w, "ttft_ms_p50_long": None, "ttft_ms_p50_short": None})
    assert not _lacks_prefill_points({k: v for k, v in w.items() if k != "ttft_ms_p50"})
    assert not _lacks_prefill_points({**w, "batch_size": 2})
    assert not _lacks_prefill_points({**w, "steps": 2})
