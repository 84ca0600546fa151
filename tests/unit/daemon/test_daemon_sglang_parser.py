"""SGLangEngine against a stand-in `sglang` package on disk: the check subprocess's mechanics,
its verdicts, and `sglang_flags = "auto"` reading the installed version from package
metadata. The real parser's facts are tests/contract/ (the real sglang 0.5.23)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fastverify.config import ServerConfig
from fastverify.engines import sglang as sg
from fastverify.engines.sglang import SGLangEngine

SERVER_ARGS = """
import argparse
BACKENDS = ["full", "breakable", "disabled"]

def prepare_server_args(argv):
    p = argparse.ArgumentParser(prog="launch_server.py")
    for flag in ("--model-path", "--host", "--speculative-algorithm",
                 "--speculative-draft-model-path"):
        p.add_argument(flag)
    for flag in ("--tp-size", "--port", "--decode-log-interval", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        p.add_argument(flag, type=int)
    for flag in ("--enable-metrics", "--disable-custom-all-reduce"):
        p.add_argument(flag, action="store_true")
    if GENERATION == "new":
        for phase in ("decode", "prefill"):
            p.add_argument(f"--cuda-graph-backend-{phase}", choices=BACKENDS)
    else:
        p.add_argument("--disable-cuda-graph", action="store_true")
    return p.parse_args(argv)
"""


def fake_sglang(root: Path, version: str, generation: str) -> Path:
    pkg = root / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "server_args.py").write_text(f"GENERATION = {generation!r}\n" + SERVER_ARGS)
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return root


@pytest.mark.parametrize(("version", "generation"), [("0.5.23", "new"), ("0.4.9", "old")])
def test_auto_flags_follow_installed_version_and_parser_agrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, generation: str
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(fake_sglang(tmp_path, version, generation)))
    sg.installed_version.cache_clear()
    eng = SGLangEngine(sys.executable, flags="auto")
    server = ServerConfig(model_path="/models/m", tp_size=8)
    assert eng.flag_generation(server) == generation
    argv = eng.build_argv(server, "baseline", {"cuda-graph": "off"})
    verdict = eng.check_argv(argv)
    assert verdict.ok is True, verdict.message
    # The other generation's spelling is refused by this version's parser, with its message.
    other = "old" if generation == "new" else "new"
    wrong = eng.build_argv(ServerConfig(model_path="/m", sglang_flags=other), "baseline",
                           {"cuda-graph": "off"})  # fmt: skip
    verdict = eng.check_argv(wrong)
    assert verdict.ok is False
    assert "unrecognized arguments" in verdict.message
    sg.installed_version.cache_clear()


# Before 0.5.19 (no resolve_once): prepare_server_args = the parser + ServerArgs(**parsed),
# whose __post_init__ resolves at once (0.5.1.post3's shape; the real one runs in
# tests/contract/test_sglang_contract.py).
SERVER_ARGS_POST_INIT = """
import argparse, dataclasses

@dataclasses.dataclass
class ServerArgs:
    model_path: str = None
    tp_size: int = 1
    device: str = None
    disable_cuda_graph: bool = False

    def __post_init__(self):
        if self.tp_size < 1:
            raise ValueError("tp_size must be 1 or more")
        if self.device is None:
            raise RuntimeError("No accelerator (CUDA, XPU, HPU) is available.")

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path")
        parser.add_argument("--tp-size", "--tensor-parallel-size", dest="tensor_parallel_size",
                            type=int, default=1)
        parser.add_argument("--device")
        parser.add_argument("--disable-cuda-graph", action="store_true")

    @classmethod
    def from_cli_args(cls, args):
        args.tp_size = args.tensor_parallel_size
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})

def prepare_server_args(argv):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))
"""


def test_check_before_resolve_once_parses_then_resolves_in_post_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fake_sglang(tmp_path, "0.5.1.post3", "old")
    (root / "sglang" / "srt" / "server_args.py").write_text(SERVER_ARGS_POST_INIT)
    eng = SGLangEngine(sys.executable, flags="old")
    monkeypatch.setenv("PYTHONPATH", str(root))
    base = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/m", "--tp-size", "2"]
    # no accelerator here: resolution could not run, the argv is not refused for it
    here = eng.check_argv(base)
    assert here.ok is True, here.message
    steps = {s["step"]: s for s in here.steps}
    assert steps["parse"]["ok"] is True and "tp_size=2" in steps["parse"]["message"]
    assert steps["resolve"]["ok"] is None
    assert "ServerArgs.__post_init__ could not run here: __post_init__ " in here.message
    assert "(sglang/srt/server_args.py:" in here.message
    # a value resolution refuses: rejected, with the line
    bad = eng.check_argv([*base[:-1], "0", "--device", "cuda"])
    assert bad.ok is False and "ServerArgs.__post_init__ refused it in __post_init__" in (
        bad.message
    )
    # resolved: the CUDA-graph switch as the release holds it
    ok = eng.check_argv([*base, "--device", "cuda", "--disable-cuda-graph"])
    assert ok.ok is True and ok.cuda_graph == {"decode": "disabled"}, ok.message
    assert eng.check_argv([*base, "--no-such-flag"]).ok is False
