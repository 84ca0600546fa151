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

from typing import Any

import pytest

from fastverify.sglang import spans
from fastverify.sglang.facts import resolve
from tests.support.contract import RELEASES


@pytest.fixture(scope="module", params=RELEASES)
def real(request: pytest.FixtureRequest, release_probe: Any) -> dict:
    """The release's parser (every long flag and its choices) and span names, as probe.py's
    `parser` part reads them with the release's own code."""
    out = release_probe(request.param)
    return {"release": request.param, "version": out["version"], **out["parser"]}


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
