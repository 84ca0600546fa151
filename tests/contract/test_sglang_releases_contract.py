"""The facts of three releases against the releases themselves, installed and run: the
oldest (0.5.1.post3), the last before 0.5.21's PCIe-IPC (0.5.20) and the pinned 0.5.23.

Each release is installed by scripts/sglang-release-venv.sh into a venv that shares the
full venv's dependencies (one torch for all three), so what runs is that release's own
code: its argparse parser (every long flag and its choices equal the facts read from its
source) and its step-span builder (the names the facts and the sim use), or the absence
of one where the facts say there is none. The hooks (CUDA-graph phases, the NCCL variables
set at start-up) run per release in test_sglang_contract.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fastverify.sglang import spans
from fastverify.sglang.facts import resolve
from tests.contract.conftest import RELEASES, release_python

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
    py = str(release_python(version, sglang_python))
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
