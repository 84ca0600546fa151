"""fastverify.sglang.launch.without_flags: the one argv filter that drops flags with their
values in either spelling, and switches (the weight-cache flags, a baseline server's argv)."""

from __future__ import annotations

from fastverify.sglang.launch import without_flags
from fastverify.sim.costtable import baseline_argv


def test_drops_a_valued_flag_in_either_spelling_and_a_switch() -> None:
    argv = ["--model-path", "/m", "--tp-size", "2", "--a", "1", "--a=2", "--s", "--port", "1"]
    assert without_flags(argv, ("--a",), ("--s",)) == [
        "--model-path", "/m", "--tp-size", "2", "--port", "1",
    ]  # fmt: skip
    assert without_flags(argv, ()) == argv


def test_a_baseline_server_argv_has_no_speculative_flag() -> None:
    argv = (
        "--model-path", "/m", "--speculative-algorithm", "EAGLE3",
        "--speculative-num-steps=3", "--speculative-adaptive", "--tp-size", "2",
    )  # fmt: skip
    assert baseline_argv(argv) == ("--model-path", "/m", "--tp-size", "2")
