"""What `spec costs` caps its long-prompt prefill point by, against the real SGLang wheel's
source (the venv of scripts/sglang-venv.sh): the scheduler publishes `max_req_input_len` in
the info its server info carries, and refuses a prompt of that many tokens or more. The H100's
server info (tests/fixtures/sglang-0.5.17-h100-spec8b-in1024/server_info.json: 8186 for a
context of 8192) and the sim's (fastverify.sim.engine) carry the key."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastverify.sim.engine import SIM_CONTEXT_LEN, SIM_MAX_REQ_INPUT_LEN
from tests.support.contract import sglang_package

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h100-spec8b-in1024"


def _scheduler(sglang_python: Path) -> str:
    return (sglang_package(sglang_python) / "srt" / "managers" / "scheduler.py").read_text()


def test_sglang_publishes_and_enforces_max_req_input_len(sglang_python: Path) -> None:
    src = _scheduler(sglang_python)
    assert re.search(r'"max_req_input_len":\s*self\.max_req_input_len', src)
    assert re.search(r"len\(req\.origin_input_ids\)\s*>=\s*self\.max_req_input_len", src)


def test_the_h100s_server_info_and_the_sims_carry_it() -> None:
    info = json.loads((FIX / "server_info.json").read_text())
    assert info["max_req_input_len"] == 8186
    assert 0 < SIM_CONTEXT_LEN - SIM_MAX_REQ_INPUT_LEN < 16
