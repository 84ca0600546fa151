"""The host fingerprint on recorded results: a result read back on another host names the
facts that differ (only those that invalidate its kind), one written before fingerprints is
accepted with a note, the daemon's acceptance records carry it, and `stale` lists the
results in a state dir keyed to another fingerprint."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fastverify.daemon import acceptance
from fastverify.daemon.statestore import StateStore
from fastverify.host import fingerprint, here


def _facts(**over: Any) -> dict[str, Any]:
    base = {k: None for k in fingerprint.FACTS}
    base.update(gpu_model="NVIDIA H200", gpu_count=2, driver="570.86", tp_size=2,
                topology={"GPU0-GPU1": "NV18"}, sglang="0.5.23", torch="2.9.1+cu128",
                cuda="cu128", engine={"name": "sglang", "simulated": False},
                model={"config_sha256": "aa"}, drafter={"config_sha256": "bb"})  # fmt: skip
    base.update(over)
    return base


H200 = fingerprint.record(_facts())
PRO6000_TOPO = {"GPU0-GPU1": "NODE", "GPU0-GPU2": "SYS"}
PRO6000_GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
PRO6000 = fingerprint.record(_facts(gpu_model=PRO6000_GPU, gpu_count=8, tp_size=8,
                                    topology=PRO6000_TOPO))  # fmt: skip


def test_another_hosts_cost_file_names_the_facts_and_both_hosts() -> None:
    v = fingerprint.compare(H200, PRO6000, "cost file", "costs.json")
    assert v["status"] == "differs"
    assert [c["fact"] for c in v["changes"]] == ["gpu_model", "gpu_count", "topology", "tp_size"]
    msg = v["message"]
    assert msg.startswith("cost file costs.json was measured on a host with 2 x NVIDIA H200 (NV18)")
    assert "this host has 8 x NVIDIA RTX PRO 6000" in msg and "(NODE/SYS)" in msg
    assert "GPU model, GPU count, topology, TP size differ" in msg
    assert "do not describe this host" in msg and H200["id"] in msg and PRO6000["id"] in msg


def test_only_the_facts_that_invalidate_the_kind_count() -> None:
    newer = fingerprint.record(_facts(sglang="0.5.24", topology={"GPU0-GPU1": "PIX"}))
    # a preflight report measures NCCL under the GPUs: SGLang's release does not touch it
    pf = fingerprint.compare(H200, newer, "preflight report", "preflight.json")
    assert [c["fact"] for c in pf["changes"]] == ["topology"]
    # an acceptance record depends on SGLang and the drafter, not on the links between GPUs
    acc = fingerprint.compare(H200, newer, "acceptance record", "r")
    assert [c["fact"] for c in acc["changes"]] == ["sglang"]
    assert "sglang" not in fingerprint.relevant("preflight report")
    assert "drafter" in fingerprint.relevant("tune decision")  # "tune decision (its ...)"
    assert fingerprint.compare(H200, H200, "cost file", "c")["status"] == "same"


def test_a_result_without_a_fingerprint_is_accepted_with_a_note() -> None:
    v = fingerprint.compare(None, H200, "cost file", "old.json")
    assert v["status"] == "unrecorded" and v["message"].startswith("note: cost file old.json")
    assert "\n" not in v["message"] and "before fingerprints" in v["message"]
    lines, refusal, verdicts = here.check([("cost file", "old.json", None)], H200, False, "--x")
    assert refusal is None and lines == [v["message"]] and verdicts[0]["status"] == "unrecorded"
    unknown = fingerprint.compare(H200, None, "cost file", "c.json")
    assert unknown["status"] == "unknown" and "not checked" in unknown["message"]


def test_check_refuses_another_host_unless_accepted() -> None:
    items = [("cost file", "costs.json", H200), ("acceptance record", "r", H200)]
    lines, refusal, _ = here.check(items, PRO6000, False, "--other-host")
    assert refusal is not None and refusal.endswith("(--other-host: use them anyway)")
    assert "cost file costs.json" in refusal and "acceptance record r" in refusal
    lines, refusal, verdicts = here.check(items, PRO6000, True, "--other-host")
    assert refusal is None and all(line.startswith("warning: ") for line in lines)
    assert verdicts[0]["facts"][:2] == ["gpu_model", "gpu_count"]


def test_acceptance_records_carry_the_daemons_fingerprint(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    argv = ["--model-path", "m", "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", "d", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1"]  # fmt: skip
    handle = SimpleNamespace(serving=True, profile="p", mode="eagle3", argv=argv)
    body = {"histogram": [1, 2, 3], "requests": [[1, 2, 3]]}
    assert acceptance.record(store, handle, body, None)["fingerprint"] is None  # not known yet
    store.save_json(here.FILE, H200)
    rec = acceptance.record(store, handle, {**body, "measured_at": 2.0}, None)
    assert rec["fingerprint"] == H200 and here.load(tmp_path) == H200


def test_stale_lists_results_keyed_to_another_fingerprint(tmp_path: Path) -> None:
    decisions = tmp_path / "tune" / "decisions"
    decisions.mkdir(parents=True)
    (decisions / f"{H200['id']}.json").write_text(json.dumps({"fingerprint": H200}))
    (decisions / f"{PRO6000['id']}.json").write_text(json.dumps({"fingerprint": PRO6000}))
    (tmp_path / "costs.json").write_text(json.dumps({"kind": "engine-trials", "fingerprint": H200}))
    (tmp_path / "old-costs.json").write_text(json.dumps({"kind": "engine-trials"}))
    (tmp_path / "acceptance.json").write_text(json.dumps({
        "a": {"fingerprint": H200}, "b": {"fingerprint": PRO6000}, "c": {}}))  # fmt: skip
    found = here.stale(tmp_path, PRO6000)
    assert [(s["kind"], Path(s["name"]).name) for s in found] == [
        ("tune decision", f"{H200['id']}.json"), ("cost file", "costs.json"),
        ("acceptance record", "a")]  # fmt: skip
    assert found[0]["facts"][:2] == ["gpu_model", "gpu_count"]
    view = here.doctor_view({"daemon": {"state_dir": str(tmp_path), "fingerprint": PRO6000}})
    assert view["lines"][0].startswith(f"host fingerprint {PRO6000['id']}: 8 x NVIDIA RTX")
    assert "3 recorded result(s) keyed to another fingerprint" in view["lines"][1]
    assert here.doctor_view(None)["lines"] == ["host fingerprint: no daemon answered"]
    gone = here.doctor_view({"daemon": {"state_dir": str(tmp_path / "gone"), "fingerprint": H200}})
    assert "cannot read the daemon's state dir" in gone["lines"][1] and gone["stale"] == []


@pytest.mark.parametrize("bad", ["", "not json", "[1]", '{"id": "x"}'])
def test_an_unreadable_fingerprint_file_is_none(tmp_path: Path, bad: str) -> None:
    (tmp_path / here.FILE).write_text(bad)
    assert here.load(tmp_path) is None
