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
