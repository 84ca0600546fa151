"""The facts of three releases against the releases themselves, installed and run: the
oldest (0.5.1.post3), the last before 0.5.21's PCIe-IPC (0.5.20) and the pinned 0.5.23.

Each release is installed by scripts/sglang-release-venv.sh into a venv that shares the
full venv's dependencies (one torch for all three), so what runs is that release's own
code: its argparse parser (every long flag and its choices equal the facts read from its
source) and its step-span builder (the names the facts and the sim use), or the absence
of one where the facts say there is none.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fastverify.sglang import spans
from fastverify.sglang.facts import resolve

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ("0.5.1.post3", "0.5.20", "0.5.23")

PROBE = r"""
import argparse, importlib.metadata, json, types
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
flags = {}
for a in p._actions:
    for o in a.option_strings:
        if o.startswith("--") and o != "--help":
            flags[o] = None if a.choices is None else [str(c) for c in a.choices]
out = {"version": importlib.metadata.version("sglang"), "flags": flags, "spans": None}
try:
    from sglang.srt.utils.profile_utils import build_step_span_name
except ImportError:
    pass
else:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    def fb(mode):
        return types.SimpleNamespace(forward_mode=mode, batch_size=4, extend_num_tokens=7)
    out["spans"] = {
        "verify": build_step_span_name(fb(ForwardMode.TARGET_VERIFY), False),
        "draft": build_step_span_name(fb(ForwardMode.DECODE), False, is_draft_worker=True),
        "decode": build_step_span_name(fb(ForwardMode.DECODE), False),
        "extend": build_step_span_name(fb(ForwardMode.EXTEND), False),
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=RELEASES)
def real(request: pytest.FixtureRequest, sglang_python: Path) -> dict:
    version = request.param
    if version == "0.5.23":
        py = str(sglang_python)
    else:
        env = {**os.environ, "FASTVERIFY_SGLANG_PYTHON": str(sglang_python)}
        built = subprocess.run(
            [str(ROOT / "scripts/sglang-release-venv.sh"), version],
            capture_output=True, text=True, timeout=600, check=False, env=env,
        )  # fmt: skip
        assert built.returncode == 0, built.stderr[-4000:]
        py = built.stdout.strip().splitlines()[-1]
    out = subprocess.run(
        [py, "-W", "ignore", "-c", PROBE], capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    return {"release": version, **json.loads(out.stdout.strip().splitlines()[-1])}


def test_the_venv_runs_the_release(real: dict) -> None:
    assert real["version"] == real["release"]


def test_flags_read_from_source_equal_the_releases_parser(real: dict) -> None:
    ours = resolve(real["release"]).flags
    assert sorted(real["flags"]) == sorted(ours)
    # choices: equal wherever the source spells them (computed ones are None in the data)
    differ = {k: (real["flags"][k], v) for k, v in ours.items()
              if v is not None and real["flags"][k] != v}  # fmt: skip
    assert differ == {}


def test_span_names_are_the_releases_own(real: dict) -> None:
    facts = resolve(real["release"])
    if not facts.has("step_spans") or facts.spans["templates"] == []:
        assert real["spans"] is None
        return
    got = real["spans"]
    assert got["verify"] == spans.step_span_name(facts.verify_stage, 4)
    assert got["draft"] == spans.step_span_name(facts.spans["draft_stage"], 4)
    assert got["decode"] == spans.step_span_name("DECODE", 4)
    assert got["extend"] == spans.step_span_name("EXTEND", 4, 7)
    assert spans.parse_step_span(got["verify"]).is_verify


ENGINE_ENV_PROBE = r"""
import contextlib, io, json, os, sys
from sglang.srt.server_args import prepare_server_args
from sglang.srt.entrypoints.engine import _set_envs_and_config
out = []
for case in json.loads(sys.argv[1]):
    for k in [k for k in os.environ if k.startswith("NCCL_")]:
        del os.environ[k]
    os.environ.update(case["env"])
    args = prepare_server_args(case["argv"])
    with contextlib.redirect_stderr(io.StringIO()):
        _set_envs_and_config(args)
    out.append({k: v for k, v in os.environ.items() if k.startswith("NCCL_")})
print(json.dumps(out))
"""
ENGINE_CASES = [
    {"argv": ["--model-path", "/x", "--tp-size", "2"], "env": {}},
    {"argv": ["--model-path", "/x", "--tp-size", "2"],
     "env": {"NCCL_CUMEM_ENABLE": "1", "NCCL_NVLS_ENABLE": "1", "NCCL_ALGO": "Ring"}},
    {"argv": ["--model-path", "/x", "--tp-size", "2", "--enable-nccl-nvls"],
     "env": {"NCCL_NVLS_ENABLE": "0"}},
]  # fmt: skip


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
def test_the_nccl_variables_the_server_sets_at_start_are_the_releases_own(
    version: str, sglang_python: Path
) -> None:
    """`_set_envs_and_config` (entrypoints/engine.py) of the release, run for real on CPU,
    against fastverify's rules for that release (`envrules.engine_env`, gated by its facts).
    The parallel hook's NCCL_GRAPH_REGISTER is resolution, not start-up: left out here (the
    0.5.23 hook runs in test_sglang_contract.py)."""
    from fastverify.sglang.envrules import engine_env
    from fastverify.sglang.launch import LaunchArgs

    py = str(sglang_python)
    if version != "0.5.23":
        env = {**os.environ, "FASTVERIFY_SGLANG_PYTHON": py}
        built = subprocess.run([str(ROOT / "scripts/sglang-release-venv.sh"), version],
                               capture_output=True, text=True, timeout=600, check=False,
                               env=env)  # fmt: skip
        assert built.returncode == 0, built.stderr[-4000:]
        py = built.stdout.strip().splitlines()[-1]
    out = subprocess.run([py, "-W", "ignore", "-c", ENGINE_ENV_PROBE, json.dumps(ENGINE_CASES)],
                         capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    real = json.loads(out.stdout.strip().splitlines()[-1])
    for case, got in zip(ENGINE_CASES, real, strict=True):
        ours = engine_env(LaunchArgs.from_argv(case["argv"]), case["env"], version)
        predicted = ours.final(case["env"])
        predicted.pop("NCCL_GRAPH_REGISTER", None)  # the hook's, see above
        assert got == predicted, (case, ours.to_dict())
