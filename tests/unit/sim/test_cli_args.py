"""argv parsing: SGLang's flag names, both CUDA-graph flag generations, defaults, errors."""

from __future__ import annotations

import pytest

from fastverify.sim import cli_args

BASE = [
    "--model-path",
    "sim/m",
    "--tp-size",
    "8",
    "--host",
    "127.0.0.1",
    "--port",
    "30001",
    "--enable-metrics",
]
EAGLE = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "sim/d",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]


def test_baseline_defaults() -> None:
    a = cli_args.parse(BASE)
    assert (a.mode, a.tp_size, a.port, a.enable_metrics, a.cuda_graph) == (
        "baseline",
        8,
        30001,
        True,
        True,
    )
    assert a.decode_log_interval == 40 and a.load_seconds == 3.0 and a.log_level == "info"


def test_eagle3_flags() -> None:
    a = cli_args.parse([*BASE, *EAGLE, "--sim-accept-length", "2.5"])
    assert (a.mode, a.num_steps, a.topk, a.num_draft_tokens) == ("eagle3", 3, 1, 4)
    assert a.accept_length == 2.5 and a.draft_model_path == "sim/d"
    auto = cli_args.parse(
        [*BASE, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d"]
    )
    assert auto.num_draft_tokens == 4  # auto: steps + 1 for topk 1


@pytest.mark.parametrize(
    "flags",
    [
        ["--disable-cuda-graph"],
        ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"],
        ["--cuda-graph-backend-decode=disabled", "--cuda-graph-backend-prefill=disabled"],
        ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"],
    ],
)
def test_cuda_graph_off_both_generations(flags: list[str]) -> None:
    assert cli_args.parse([*BASE, *flags]).cuda_graph is False


@pytest.mark.parametrize(
    "flags", [["--cuda-graph-backend-decode", "disabled"], ["--disable-decode-cuda-graph"]]
)
def test_decode_off_alone_leaves_prefill_graphs_on(flags: list[str]) -> None:
    # SGLang 0.5.23 on CUDA captures prefill graphs (breakable) unless that phase is off too
    # (tests/contract checks this against the real parser)
    assert cli_args.parse([*BASE, *flags]).cuda_graph is True


def test_other_sglang_flags_and_prefix() -> None:
    a = cli_args.parse(
        [
            "--model-path",
            "m",
            "--tp",
            "4",
            "--disable-custom-all-reduce",
            "--decode-log-interval",
            "5",
            "--log-level",
            "warning",
            "--mem-fraction-static",
            "0.8",
            "--cuda-graph-max-bs-decode",
            "16",
        ]
    )
    assert a.tp_size == 4 and a.disable_custom_all_reduce and a.decode_log_interval == 5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*BASE, "--nope"], "unrecognized arguments: --nope"),
        (["--tp-size", "2"], "--model-path"),
        ([*BASE, "--speculative-algorithm", "NGRAM"], "simulates EAGLE, EAGLE3 only"),
        ([*BASE, "--speculative-algorithm", "EAGLE3"], "needs --speculative-draft-model-path"),
        ([*BASE, *EAGLE, "--sim-accept-length", "5"], "--sim-accept-length must be in 1..4"),
        ([*BASE, "--log-level", "loud"], "invalid choice"),
    ],
)
def test_errors_exit_2_with_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_args.parse(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
