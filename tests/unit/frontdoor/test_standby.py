"""The standby decision: both engines' own memory beside the shared weights, per GPU, read
from SGLang's start-up lines (the formats of SGLang 0.5.23's model_loader, kv_pool_runtime.py,
memory_pool.py and cuda_graph_setup.py; the CUDA context line is an older release's, which
the sim prints)."""

from __future__ import annotations

from pathlib import Path

from fastverify.frontdoor.standby import (
    BESIDE_MARGIN_GIB,
    GIB,
    NOTHING_SHARED,
    EngineMemory,
    Sharing,
    decide,
)

H200 = int(139 * GIB)
ENGINE = {"kv": 9.1, "graphs": 0.4, "context": 0.5, "weights": 0.0}


def _decide(**kw: object):
    args = {"sharing": Sharing(True, bytes=int(2 * 15 * GIB)), "gpu_bytes": H200, "tp": 2,
            "engine": ENGINE, "kv_tokens": 600_000, "free_alone": 120.0}  # fmt: skip
    return decide(**{**args, **kw})


def test_fits_beside_shared_weights_and_says_the_figures() -> None:
    fit = _decide()
    assert fit.mode == "standby" and fit.kv_tokens == 600_000  # the same pool, always said
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
    assert smaller.mode == "standby" and smaller.kv_tokens == round(600_000 * share)
    assert f"{smaller.kv_tokens} tokens" in smaller.why
    assert "fewer tokens in flight until the next cold start" in smaller.why  # the trade-off


def test_the_share_is_of_a_cold_starts_pool_not_the_serving_ones() -> None:
    # the serving engine was itself a standby start at half of a cold start's 600000 tokens
    half = {**ENGINE, "kv": 4.55}
    fit = _decide(engine=half, kv_tokens=300_000, cold_tokens=600_000, kv_share=0.5)
    assert fit.mode == "standby" and fit.kv_tokens == 300_000  # half again would be 150000
    assert fit.cold_tokens == 600_000  # what the new engine's own standby start takes half of
    assert "50% of a cold start's 600000 tokens" in fit.why, fit.why
    # a share of 1 beside an engine a smaller share started: a cold start's pool, said so
    full = _decide(engine=half, kv_tokens=300_000, cold_tokens=600_000)
    assert full.kv_tokens == 600_000 and "the same as a cold start's" in full.why, full.why


def test_nothing_shared_or_no_reading_holds() -> None:
    none = _decide(sharing=None)
    assert none.mode == "hold" and none.why == NOTHING_SHARED
    refused = _decide(sharing=Sharing(False, "the shared weights are down"))
    assert refused.mode == "hold" and refused.why == "the shared weights are down"
    for missing in ({"gpu_bytes": None}, {"engine": None}, {"sharing": Sharing(True)},
                    {"free_alone": None}, {"kv_tokens": None}):  # fmt: skip
        blind = _decide(**missing)
        assert blind.mode == "hold" and "no memory reading" in blind.why


def test_engine_memory_from_sglang_lines() -> None:
    mem = EngineMemory()
    assert mem.figures() is None
    for rank in (0, 1):
        p = f"[2026-01-01 00:00:00 TP{rank}] "
        mem.read(p + "Init torch distributed ends. mem usage=0.53 GB")
        mem.read(p + f"Load weight begin. avail mem={130 - rank:.2f} GB")
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
    assert mem.free_alone == 129.0  # the lowest rank's, as SGLang takes the minimum
    mem.beside = 10.0
    assert mem.free_alone == 139.0
    assert {k: round(v, 2) for k, v in got.items()} == {
        "kv": 9.1, "graphs": 0.4, "context": 0.53, "weights": 0.04}  # fmt: skip


FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "sglang-0.5.17-h100-standby"
# SGLang 0.5.17, one H100 80 GB (nvidia-smi: 81559 MiB), an 8B model mapped from a weight
# cache of 15.6 GiB, --mem-fraction-static 0.35; engines 2-4 each started beside the last
H100 = 81559 << 20
CACHE = Sharing(True, bytes=int(15.6 * GIB))


def _engine(name: str) -> EngineMemory:
    mem = EngineMemory()
    for line in next(FIXTURE.glob(f"engine-*-{name}.log")).read_text().splitlines():
        mem.read(line)
    return mem


def test_real_standby_start_gets_the_serving_pool() -> None:
    first, second = _engine("b1ea64"), _engine("93c94f")  # cold, then beside the first
    assert (first.free_alone, first.kv_tokens) == (62.89, 179634)
    fit = decide(sharing=CACHE, gpu_bytes=H100, tp=1, engine=first.figures(),
                 kv_tokens=first.kv_tokens, free_alone=first.free_alone)  # fmt: skip
    assert fit.mode == "standby" and fit.kv_tokens == 179634
    assert fit.mem_fraction is not None and fit.kv_gib is not None
    # the estimate of the free memory before its load is no more than what it found
    second_free = second.free_alone
    assert second_free == 38.55
    estimate = 62.89 - fit.beside - BESIDE_MARGIN_GIB
    assert estimate <= second_free
    # SGLang 0.5.17's budget on what the second engine found covers the pool (its 0.35 did not)
    budget = second_free * fit.mem_fraction - 0.09  # 0.09: the first engine's budget - pool
    assert budget >= fit.kv_gib > second_free * 0.35
    assert "179634 tokens (21.9 GiB, the same as the serving one's)" in fit.why
    assert f"--mem-fraction-static {fit.mem_fraction:g} for this start only" in fit.why


def test_a_standby_beside_a_standby_measures_from_the_memory_it_found() -> None:
    # the second engine found the first beside it; with it gone, the third finds more
    second, third = _engine("93c94f"), _engine("49a385")
    first = _engine("b1ea64").figures()
    assert first is not None
    second.beside = sum(first.values())
    fit = decide(sharing=CACHE, gpu_bytes=H100, tp=1, engine=second.figures(),
                 kv_tokens=second.kv_tokens, free_alone=second.free_alone)  # fmt: skip
    assert fit.mode == "standby" and fit.kv_tokens == 109835
    alone = second.free_alone
    assert alone is not None and alone - fit.beside - BESIDE_MARGIN_GIB <= 47.08
    assert third.free_alone == 47.08


def test_preloaded_weights_raise_the_fraction() -> None:
    # 0.5.19+: the shared bytes join the pre-load base, so the slack grows with them
    plain = _decide()
    added = _decide(sharing=Sharing(True, bytes=int(2 * 15 * GIB), preloaded=True))
    assert plain.mem_fraction is not None and added.mem_fraction is not None
    assert added.mem_fraction > plain.mem_fraction
    free, shared = 120.0 - sum(ENGINE.values()) - BESIDE_MARGIN_GIB, 15.0
    budget = (free - 0.0) - (free + shared) * (1 - added.mem_fraction)
    assert budget >= ENGINE["kv"]


def test_a_fraction_above_the_clamp_holds_and_says_why() -> None:
    fit = _decide(free_alone=20.0)  # little free memory: the pool needs nearly all of it
    assert fit.mode == "hold" and fit.mem_fraction is None
    assert "needs --mem-fraction-static" in fit.why and "above 0.95" in fit.why
    assert "standby_kv_share = " in fit.why
    share = float(fit.why.split("standby_kv_share = ")[1].split()[0])
    assert _decide(free_alone=20.0, kv_share=share).mode == "standby"


def test_the_pool_flags_are_added_for_the_start_and_set_aside_for_adoption() -> None:
    from fastverify.frontdoor.standby import with_pool, without_pool

    fit = _decide()
    argv = ["sglang", "serve", "--mem-fraction-static", "0.35", "--port", "1"]
    started = [*with_pool(argv, fit), "--weight-cache-mode", "client"]
    # SGLang's parser keeps the last value: the profile's own stays, overridden for this start
    assert started[-6:-2] == ["--max-total-tokens", "600000", "--mem-fraction-static",
                              f"{fit.mem_fraction:g}"]  # fmt: skip
    assert without_pool(started) == [*argv, "--weight-cache-mode", "client"]
    assert without_pool(argv) == argv
