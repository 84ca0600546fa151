"""The standby memory rule on what a real SGLang 0.5.17 printed on an H200
(tests/fixtures/sglang-0.5.17-h200/, its README says which run wrote which file): the KV
pool (K and V sizes apiece in that release), the CUDA graphs and the context are read from
a weight-cache client's start-up lines, and the decision on that H200 follows from them."""

from __future__ import annotations

from pathlib import Path

from fastverify.frontdoor.standby import GIB, EngineMemory, Sharing, decide

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "sglang-0.5.17-h200"


def _memory(name: str) -> EngineMemory:
    mem = EngineMemory()
    for line in (FIX / name).read_text().splitlines():
        mem.read(line)
    return mem


def test_a_cache_clients_own_memory_from_its_lines() -> None:
    mem = _memory("server-info-weight-cache-client.log")
    got = mem.figures()
    assert got is not None and mem.kv_tokens == 606611
    # K 37.02 + V 37.02; prefill 1.37 + decode 0.08 graphs; 0.09 context; mapped weights 0.00
    assert {k: round(v, 2) for k, v in got.items()} == {
        "kv": 74.04, "graphs": 1.45, "context": 0.09, "weights": 0.0}  # fmt: skip


def test_an_eagle3_servers_drafter_counts_as_its_own() -> None:
    got = _memory("server-info-eagle3.log").figures()
    assert got is not None
    assert got["weights"] > 0 and got["kv"] > 0 and got["graphs"] > 0, got


def test_two_such_engines_do_not_fit_an_h200_at_the_same_kv_but_do_at_a_smaller_share() -> None:
    # the 8B model's bf16 weights (~15 GiB) in the cache; an H200 as torch counts it
    mem = _memory("server-info-weight-cache-client.log")
    args = {"sharing": Sharing(True, bytes=int(15 * GIB)), "gpu_bytes": int(139.81 * GIB),
            "tp": 1, "engine": mem.figures(), "kv_tokens": mem.kv_tokens,
            "free_alone": mem.free_alone}  # fmt: skip
    same = decide(**args)
    assert same.mode == "hold" and "standby_kv_share = " in same.why, same.why
    share = float(same.why.split("standby_kv_share = ")[1].split()[0])
    smaller = decide(**args, kv_share=share)
    assert smaller.mode == "standby" and smaller.kv_tokens == round(606611 * share), smaller
