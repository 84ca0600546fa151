"""Cost model: shipped-profile ranking, NCCL knobs, determinism (calibration: see
test_calibration.py)."""

from __future__ import annotations

import pytest

from fastverify.profiles.store import ProfileStore
from fastverify.sim import costmodel
from tests.support.field import RING_LL


def shipped() -> dict[str, tuple[dict[str, str], bool]]:
    """name -> (env, cuda_graph) for the profiles shipped in profiles/."""
    store = ProfileStore(user_dirs=[])
    out = {}
    for p in store.list():
        if p.source == "shipped" and p.name != "nccl-debug":
            out[p.name] = (dict(p.env), p.requires.get("cuda-graph") != "off")
    return out


def tps(env: dict[str, str], graph: bool, mode: str = "eagle3", bs: int = 1) -> float:
    return costmodel.predict(env, mode, 8, bs, graph, 2.0).tokens_per_second


def test_shipped_profile_ranking_with_margins() -> None:
    profiles = shipped()
    assert {
        "nccl-default",
        "ring-ll",
        "ring-ll-8ch",
        "ring-simple",
        "tree-ll",
        "tree-ll-eager",
    } <= set(profiles)
    # nccl-default falls back to SHM through the host (half the bandwidth, 1.8x the hop
    # latency): it pays most where the bytes are, in the 4-token verify all-reduces
    ranking = {
        "baseline": ["ring-ll-8ch", "ring-ll", "tree-ll-eager", "nccl-default", "ring-simple"],
        "eagle3": ["ring-ll-8ch", "ring-ll", "tree-ll-eager", "ring-simple", "nccl-default"],
    }
    for mode, expected in ranking.items():
        rates = [tps(*profiles[name], mode=mode) for name in expected]
        for (hi_name, hi), (lo_name, lo) in zip(
            zip(expected, rates, strict=True),
            zip(expected[1:], rates[1:], strict=True),
            strict=False,
        ):
            assert hi >= lo * 1.03, (mode, hi_name, hi, lo_name, lo)


def test_tree_fails_with_cuda_graphs_and_runs_eager() -> None:
    env, graph = shipped()["tree-ll"]
    assert graph is True
    failed = costmodel.predict(env, "eagle3", 8, 1, True)
    assert not failed.ok and failed.tokens_per_second == 0.0
    assert failed.error.startswith("Capture cuda graph failed")
    eager = costmodel.predict(env, "eagle3", 8, 1, False)
    assert eager.ok and eager.algo == "tree" and eager.tokens_per_second > 0
    # Tree is not "tree only" when Ring is still allowed, so graphs work
    mixed = costmodel.predict(dict(env, NCCL_ALGO="allreduce:tree,ring"), "eagle3", 8, 1, True)
    assert mixed.ok


def test_eager_mode_costs_launch_overhead() -> None:
    graph = costmodel.predict(RING_LL, "eagle3", 8, 1, True)
    eager = costmodel.predict(RING_LL, "eagle3", 8, 1, False)
    extra = eager.verify_seconds - graph.verify_seconds
    per_forward = (
        61 * costmodel.COMPUTE_KERNELS_PER_LAYER * costmodel.EAGER_LAUNCH_US
        + 122 * costmodel.EAGER_NCCL_HOST_US
        - costmodel.GRAPH_LAUNCH_US
    ) * 1e-6
    assert extra == pytest.approx(per_forward, rel=1e-9)
    assert eager.tokens_per_second < graph.tokens_per_second * 0.9


@pytest.mark.parametrize(
    ("change", "slower"),
    [
        ({"NCCL_PROTO": "Simple"}, True),
        ({"NCCL_PROTO": "LL128"}, True),
        ({"NCCL_P2P_LEVEL": "PHB"}, True),  # below SYS: SHM transport
        ({"NCCL_P2P_DISABLE": "1"}, True),
        ({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}, True),
        ({"NCCL_P2P_LEVEL": "4"}, False),  # legacy integer for SYS
        ({"NCCL_MAX_NCHANNELS": "32"}, True),
        ({"NCCL_MAX_NCHANNELS": "4"}, False),
        ({"NCCL_NTHREADS": "128"}, True),
    ],
)
def test_nccl_knobs_move_allreduce_cost(change: dict[str, str], slower: bool) -> None:
    ref = costmodel.predict(RING_LL, "eagle3", 8, 1, True).allreduce_each_seconds
    new = costmodel.predict(dict(RING_LL, **change), "eagle3", 8, 1, True)
    if slower:
        assert new.allreduce_each_seconds > ref
    else:
        assert new.allreduce_each_seconds <= ref


def test_buffsize_matters_only_for_large_messages() -> None:
    small = dict(RING_LL, NCCL_BUFFSIZE="65536")
    s = costmodel.allreduce_cost(costmodel.ncclenv.resolve(small), 14336, 8)
    r = costmodel.allreduce_cost(costmodel.ncclenv.resolve(RING_LL), 14336, 8)
    assert s.seconds == r.seconds
    big = 64 * 1024 * 1024
    s = costmodel.allreduce_cost(costmodel.ncclenv.resolve(small), big, 8)
    r = costmodel.allreduce_cost(costmodel.ncclenv.resolve(RING_LL), big, 8)
    assert s.seconds > r.seconds


def test_auto_protocol_picks_ll_for_small_and_simple_for_large() -> None:
    settings = costmodel.ncclenv.resolve({"NCCL_P2P_LEVEL": "SYS"})
    assert costmodel.allreduce_cost(settings, 14336, 8).proto == "ll"
    assert costmodel.allreduce_cost(settings, 256 * 1024 * 1024, 8).proto == "simple"


def test_accept_length_scales_throughput_and_is_clamped() -> None:
    a2 = costmodel.predict(RING_LL, "eagle3", 8, 1, True, 2.0)
    a3 = costmodel.predict(RING_LL, "eagle3", 8, 1, True, 3.0)
    assert a3.cycle_seconds == a2.cycle_seconds
    assert a3.tokens_per_second == pytest.approx(a2.tokens_per_second * 1.5)
    assert costmodel.predict(RING_LL, "eagle3", 8, 1, True, 9.0).accept_length == 4.0
    assert costmodel.predict(RING_LL, "eagle3", 8, 1, True).accept_length == 2.0


def test_batching_raises_throughput_and_tp1_has_no_allreduce() -> None:
    rates = [tps(RING_LL, True, "baseline", bs) for bs in (1, 4, 16, 64)]
    assert rates == sorted(rates)
    single = costmodel.predict(RING_LL, "baseline", 1, 1, True)
    assert single.allreduce_count == 0 and single.allreduce_seconds == 0.0


def test_deterministic_and_pure() -> None:
    env = dict(RING_LL)
    a = costmodel.predict(env, "eagle3", 8, 3, True, 2.3)
    b = costmodel.predict(env, "eagle3", 8, 3, True, 2.3)
    assert a == b and env == RING_LL


def test_forward_anatomy_names() -> None:
    spec = costmodel.predict(RING_LL, "eagle3", 8, 2, True, num_steps=3)
    names = [n for n, _ in spec.forwards]
    # 3 steps: 2 drafter forwards (the first draft token is the last extend's), the verify,
    # the draft extend (SGLang's own loop: tests/contract/test_adaptive_contract.py)
    assert names == ["step[DRAFT bs=2]"] * 2 + [
        "step[VERIFY bs=2]",
        "step[DRAFT bs=2]",
    ]
    assert [f.allreduce_count for _, f in spec.forwards] == [2, 2, 122, 2]
    base = costmodel.predict(RING_LL, "baseline", 8, 5, True)
    assert [n for n, _ in base.forwards] == ["step[DECODE bs=5]"]


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="mode"):
        costmodel.predict(RING_LL, "turbo", 8, 1, True)
    with pytest.raises(ValueError):
        costmodel.predict(RING_LL, "baseline", 0, 1, True)


def test_prefill_grows_with_prompt_and_eagle3_adds_draft_extend() -> None:
    short = costmodel.prefill_seconds(RING_LL, 8, 16, "baseline")
    long = costmodel.prefill_seconds(RING_LL, 8, 4096, "baseline")
    assert 0 < short < long
    assert costmodel.prefill_seconds(RING_LL, 8, 16, "eagle3") > short
    # forced LL pays for big prefill messages; letting NCCL pick Simple is cheaper
    auto = dict(RING_LL)
    del auto["NCCL_PROTO"]
    assert costmodel.prefill_seconds(auto, 8, 4096, "baseline") < long


def test_transport_fallbacks_order() -> None:
    p2p = costmodel.predict(RING_LL, "baseline", 8, 1, True).allreduce_each_seconds
    shm = costmodel.predict(dict(RING_LL, NCCL_P2P_DISABLE="1"), "baseline", 8, 1, True)
    net = costmodel.predict(
        dict(RING_LL, NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1"), "baseline", 8, 1, True
    )
    assert p2p < shm.allreduce_each_seconds < net.allreduce_each_seconds
