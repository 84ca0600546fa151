"""A journal written before `spec costs` measured its prefill points (the long prompt, the
short one, the batch of window-length prompts): the resume measures its batch-1 baseline and
steps-0 windows again, and nothing else."""

import json
from pathlib import Path

from fastverify.experiments.engine_costs.run import (
    _lacks_prefill_points,
    _server_record_stale,
    pending_trials,
)

# spec costs on SGLang 0.5.17 (H100, 8B shape), journaled by the fastverify of that morning,
# which measured one prefill point per mode
OLD_JOURNAL = (
    Path(__file__).parents[2] / "fixtures/sglang-0.5.17-h100-spec8b/spec-costs-8b.journal.jsonl"
)


# the same at 1024-token prompts, journaled before spec costs recorded the server's prompt
# limit (SGLang 0.5.17 refuses a prompt of max_req_input_len = 8186 tokens or more here)
JOURNAL_1024 = (
    OLD_JOURNAL.parents[1] / "sglang-0.5.17-h100-spec8b-in1024/spec-costs-8b-in1024.journal.jsonl"
)


def records(path: Path = OLD_JOURNAL) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def windows() -> list[dict]:
    return [r for r in records() if r.get("record") == "window"]


def test_a_journal_without_the_prompt_limit_has_its_server_read_again_on_resume() -> None:
    """Its batch-1 windows are measured again with a long prompt of 8 x 1024 tokens: from
    the journal's server record alone that prompt went uncapped to a server that refuses it."""
    journaled = [r["server"] for r in records(JOURNAL_1024) if r.get("record") == "server"]
    assert journaled and all(_server_record_stale(s) for s in journaled)
    assert _server_record_stale(None)
    limits = {"max_req_input_len": 8186, "chunked_prefill_size": 8192}
    assert not _server_record_stale({**journaled[0], **limits})
    # the chunked-prefill budget sizes the batch point: a record without it is read again
    assert _server_record_stale({**journaled[0], "max_req_input_len": 8186})


def test_the_old_journal_gets_its_two_prefill_windows_measured_again() -> None:
    again = [(str(w["steps"]), w["batch_size"]) for w in windows() if _lacks_prefill_points(w)]
    assert sorted(again) == [("0", 1), ("baseline", 1)]


def test_a_window_with_its_points_or_without_a_first_token_is_kept() -> None:
    w = next(w for w in windows() if str(w["steps"]) == "baseline" and w["batch_size"] == 1)
    short = {"tokens": 8, "ms": 15.1}
    batch = {"prompts": 32, "tokens": 4096, "ms": 60.2}
    # the long point alone (a fastverify of the afternoon): measured again for the short one
    assert _lacks_prefill_points({**w, "ttft_ms_p50_long": {"tokens": 1024, "ms": 33.3}})
    # the short one without the batch (a fastverify of 2026-12-07): measured again
    assert _lacks_prefill_points({**w, "ttft_ms_p50_short": short})
    assert not _lacks_prefill_points({**w, "ttft_ms_p50_short": short, "ttft_ms_batch": batch})
    # measured, but the prompts failed: None is an answer, not a gap
    assert not _lacks_prefill_points({**w, "ttft_ms_p50_long": None, "ttft_ms_p50_short": None,
                                      "ttft_ms_batch": None})  # fmt: skip
    assert not _lacks_prefill_points({k: v for k, v in w.items() if k != "ttft_ms_p50"})
    assert not _lacks_prefill_points({**w, "batch_size": 2})
    assert not _lacks_prefill_points({**w, "steps": 2})


def test_a_resume_loads_only_the_trials_with_a_window_still_to_measure(tmp_path: Path) -> None:
    """The real 1024-token journal holds every window, but its batch-1 baseline and steps-0
    windows lack their prefill points: those two trials load again, in run order. Cut after
    the first steps-1 window, the rest of steps 1 and every later trial are pending too."""
    assert pending_trials(JOURNAL_1024) == ["baseline", "0"]
    cut: list[str] = []
    for ln in JOURNAL_1024.read_text().splitlines():
        cut.append(ln)
        rec = json.loads(ln)
        if rec.get("record") == "window" and (rec["steps"], rec["batch_size"]) == (1, 1):
            break
    journal = tmp_path / "cut.jsonl"
    journal.write_text("\n".join(cut) + "\n")
    assert pending_trials(journal) == ["baseline", "0", "1", "2", "3"]
    journal.write_text("")
    assert pending_trials(journal) == []
