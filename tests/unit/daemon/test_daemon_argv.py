"""argv of both engines x both modes x both SGLang flag generations, and engine choice."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

from fastverify.config import Eagle3Params, ServerConfig
from fastverify.engines.base import EngineArgError
from fastverify.engines.detect import choose_engine
from fastverify.engines.sglang import SGLangEngine, generation_for
from fastverify.engines.sim_adapter import SimEngine

SERVER = ServerConfig(
    model_path="/models/Kimi-K2.5",
    draft_model_path="/models/Kimi-K2.5-eagle3",
    tp_size=8,
    host="127.0.0.1",
    port=30000,
    eagle3=Eagle3Params(num_steps=3, topk=1, num_draft_tokens=4),
)
PY = "/opt/venv/bin/python3"
COMMON = [
    "--model-path", "/models/Kimi-K2.5", "--tp-size", "8", "--host", "127.0.0.1",
    "--port", "30000", "--enable-metrics", "--decode-log-interval", "40",
]  # fmt: skip
EAGLE = [
    "--speculative-algorithm", "EAGLE3",
    "--speculative-draft-model-path", "/models/Kimi-K2.5-eagle3",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
]  # fmt: skip
# every phase off (0.5.23 captures prefill graphs by default on CUDA); the real parser's
# reading of these is tests/contract/test_sglang_contract.py
GRAPH_OFF = {
    "new": ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"],
    "old": ["--disable-cuda-graph"],
}


@pytest.mark.parametrize("generation", ["new", "old"])
@pytest.mark.parametrize("mode", ["baseline", "eagle3"])
@pytest.mark.parametrize("engine", ["sglang", "sim"])
def test_argv_matrix(engine: str, mode: str, generation: str) -> None:
    server = ServerConfig(**{**SERVER.__dict__, "sglang_flags": generation})
    eng = SGLangEngine(PY) if engine == "sglang" else SimEngine(PY, load_seconds=0.3)
    argv = eng.build_argv(server, mode, {"cuda-graph": "off"})
    module = "sglang.launch_server" if engine == "sglang" else "fastverify.sim"
    expected = [PY, "-m", module, *COMMON]
    expected += EAGLE if mode == "eagle3" else []
    expected += GRAPH_OFF[generation]
    if engine == "sim":
        expected += ["--sim-load-seconds", "0.3"]
    assert argv == expected


def test_requires_and_extra_args() -> None:
    server = ServerConfig(**{**SERVER.__dict__, "sglang_flags": "new", "extra_args": ("--x", "1")})
    argv = SGLangEngine(PY).build_argv(server, "baseline", {"custom-all-reduce": "off"})
    assert argv[-3:] == ["--disable-custom-all-reduce", "--x", "1"]
    assert "--cuda-graph-backend-decode" not in argv and "--disable-cuda-graph" not in argv
    argv = SGLangEngine(PY).build_argv(server, "baseline", {"cuda-graph": "on"})
    assert "disabled" not in argv


@pytest.mark.parametrize(
    ("requires", "server", "mode", "words"),
    [
        ({"nvlink": "yes"}, SERVER, "baseline", "unknown requirement"),
        ({"cuda-graph": "maybe"}, SERVER, "baseline", "expected one of on, off"),
        ({}, ServerConfig(), "baseline", "server.model_path is not set"),
        ({}, ServerConfig(model_path="/m"), "eagle3", "draft_model_path"),
        ({}, SERVER, "turbo", "expected one of baseline, eagle3, adaptive"),
    ],
)
def test_argv_errors_are_actionable(
    requires: dict, server: ServerConfig, mode: str, words: str
) -> None:
    with pytest.raises(EngineArgError, match=words):
        SGLangEngine(PY, flags="new").build_argv(
            ServerConfig(**{**server.__dict__, "sglang_flags": "new"}), mode, requires
        )


def test_sim_fills_model_paths_and_checks_with_its_own_parser() -> None:
    eng = SimEngine(sys.executable, 0.3)
    argv = eng.build_argv(ServerConfig(tp_size=2, port=31999), "eagle3", {})
    assert argv[argv.index("--model-path") + 1].startswith("sim/")
    assert eng.check_argv(argv).ok is True
    bad = eng.check_argv([*argv, "--no-such-flag"])
    assert bad.ok is False and "no-such-flag" in bad.message


@pytest.mark.parametrize(
    ("version", "gen"),
    # 0.5.14's wheel is the first to declare --cuda-graph-backend-decode/-prefill (facts)
    [("0.5.23", "new"), ("0.5.21", "new"), ("0.5.14", "new"), ("0.5.13", "old"),
     ("0.4.10.post2", "old"), ("0.6.0rc1", "new")],
)  # fmt: skip
def test_flag_generation_by_version(version: str, gen: str) -> None:
    assert generation_for(version) == gen


def test_sglang_check_without_sglang_gives_no_verdict() -> None:
    eng = SGLangEngine(sys.executable, flags="new")
    check = eng.check_argv(eng.build_argv(SERVER, "baseline", {}))
    assert check.ok is None and "not installed" in check.message


def test_choose_engine() -> None:
    assert choose_engine("sim") == ("sim", "--engine sim requested")
    assert choose_engine("sglang")[0] == "sglang"
    name, reason = choose_engine("auto", sys.executable)
    if importlib.util.find_spec("sglang") is None:
        assert name == "sim" and "SGLang is not importable" in reason
    with pytest.raises(ValueError):
        choose_engine("vllm")


def test_an_interpreter_that_cannot_run_sglang_is_named(tmp_path: pathlib.Path) -> None:
    missing = SGLangEngine(str(tmp_path / "no-such-python"))
    assert (
        missing.interpreter_problem() == f"server.python {tmp_path}/no-such-python does not exist"
    )
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    assert "is not executable" in (SGLangEngine(str(plain)).interpreter_problem() or "")
    # this suite's own interpreter has no SGLang (the contract venv does)
    assert "SGLang is not installed" in (SGLangEngine(sys.executable).interpreter_problem() or "")
