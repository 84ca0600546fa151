"""The standby decision: both engines' own memory beside the shared weights, per GPU, read
from SGLang's start-up lines (the formats of SGLang 0.5.23's model_loader, kv_pool_runtime.py,
memory_pool.py and cuda_graph_setup.py; the CUDA context line is an older release's, which
the sim prints)."""

from __future__ import annotations

from fastverify.frontdoor.standby import GIB, NOTHING_SHARED, EngineMemory, Sharing, decide

H200 = int(139 * GIB)
ENGINE = {"kv": 9.1, "graphs": 0.4, "context": 0.5, "weights": 0.0}


def _decide(**kw: object):
    args = {"sharing": Sharing(True, bytes=int(2 * 15 * GIB)), "gpu_bytes": H200, "tp": 2,
            "engine": ENGINE, "kv_tokens": 600_000}  # fmt: skip
    return decide(**{**args, **kw})


def test_fits_beside_shared_weights_and_says_the_figures() -> None:
    fit = _decide()
    assert fit.mode == "standby" and fit.kv_tokens is None
    assert fit.why.startswith("standby: 2 x (KV 9.1 GiB + graphs 0.4 GiB + context 0.5 GiB)"), (
        fit.why)  # fmt: skip
    assert "15.0 GiB of shared weights" in fit.why and "fits in 139 GiB" in fit.why


def test_too_big_holds_and_names_the_share_that_would_fit() -> None:
    big = {**ENGINE, "kv": 60.0}
    fit = _decide(engine=big)
    assert fit.mode == "hold" and "does not fit" in fit.why
    assert "standby_kv_share = " in fit.why
    share = float(fit.why.split("standby_kv_share = ")[1].split()[0])
    smaller = _decide(engine=big, kv_share=share)
    assert smaller.mode == "standby" and smaller.kv_tokens == int(600_000 * share)
    assert "serves with a KV pool of" in smaller.why  # the trade-off, said


def test_nothing_shared_or_no_reading_holds() -> None:
    none = _decide(sharing=None)
    assert none.mode == "hold" and none.why == NOTHING_SHARED
    refused = _decide(sharing=Sharing(False, "the shared weights are down"))
    assert refused.mode == "hold" and refused.why == "the shared weights are down"
    for missing in ({"gpu_bytes": None}, {"engine": None}, {"sharing": Sharing(True)}):
        blind = _decide(**missing)
        assert blind.mode == "hold" and "no memory reading" in blind.why


def test_engine_memory_from_sglang_lines() -> None:
    mem = EngineMemory()
    assert mem.figures() is None
    for rank in (0, 1):
        p = f"[2026-01-01 00:00:00 TP{rank}] "
        mem.read(p + "Init torch distributed ends. mem usage=0.53 GB")
        mem.read(p + "Load weight end. elapsed=0.06 s, type=LlamaForCausalLM, dtype=torch."
                 "bfloat16, avail mem=120.00 GB, mem usage=0.04 GB.")  # fmt: skip
        mem.read(p + "Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, "
                 "#tokens: 600000, KV size: 9.10 GB, avail mem=10.00 GB")  # fmt: skip
        mem.read(p + "Capture decode CUDA graph end. elapsed=3.10 s, mem usage=0.40 GB, "
                 "avail mem=9.60 GB.")  # fmt: skip
    mem.read(
        "[2026-01-01 00:00:01 TP0] KV Cache VA upper bound. dtype: torch.bfloat16, "
        "#tokens: 900000, KV size: 20.00 GB"
    )  # a reservation, not memory held
    got = mem.figures()
    assert got is not None and mem.kv_tokens == 600_000
    assert {k: round(v, 2) for k, v in got.items()} == {
        "kv": 9.1, "graphs": 0.4, "context": 0.53, "weights": 0.04}  # fmt: skip
