"""SGLang's forced acceptance (fastverify.sglang.forced) against the real wheels.

- Every release's facts (`env.simulate_acceptance`): the variables' names, kinds and defaults
  and the methods its source accepts are read again from that release's wheel here, with
  plain text patterns over its files (not scripts/sglang_facts.py's `ast` walk), and
  `forced.of` reads the variable each release reads.
- The draws: SGLang's own sampler (`spec_utils.py`, 0.5.17 and the pinned release, run by
  tests/contract/forced_probe.py in the real venv) and `forced.sample` give each accept
  length the same share, and SGLang's error for a method it does not accept is the sim's.
"""

from __future__ import annotations

import ast
import json
import random
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fastverify.sglang import forced
from fastverify.sglang.facts import resolve
from fastverify.sglang.versions import PINNED_VERSION
from tests.support.contract import facts_script, wheel_sources

HERE = Path(__file__).resolve().parent
CASES = [[2.3, "match-expected", 4, 20000], [3.0, "match-expected", 4, 2000],
         [5.0, "match-expected", 3, 2000], [2.0, "multinomial", 4, 20000],
         [3.6, "multinomial", 4, 20000]]  # fmt: skip
ENVFIELD = re.compile(r"^\s+((?:SGLANG_)?SIMULATE_ACC_[A-Z_]+) = Env(\w+)\(([^)]*)\)", re.M)
GETENV = re.compile(r'os\.environ\.get\(\s*"(SIMULATE_ACC_[A-Z_]+)"(?:\s*,\s*"([^"]*)")?')
METHOD = re.compile(r'acc_method\s*==\s*"([\w-]+)"', re.I)


GEN = facts_script()


@pytest.mark.parametrize("version", GEN.RELEASES)
def test_each_releases_forced_acceptance_facts_are_its_wheels(version: str) -> None:
    files = wheel_sources(version)
    declared: dict[str, dict[str, Any]] = {}
    environ = files.get("sglang/srt/environ.py")
    if environ is not None:
        for name, kind, arg in ENVFIELD.findall(environ):
            declared[name] = {"kind": kind.lower(), "default": ast.literal_eval(arg)}
    else:
        for text in files.values():
            for name, default in GETENV.findall(text):
                declared[name] = {"kind": "str", "default": default or None}
    methods = sorted({m for text in files.values() if "SIMULATE_ACC" in text
                      for m in METHOD.findall(text)})  # fmt: skip
    facts = resolve(version)
    spec = forced.spec(facts)
    assert spec is not None, version
    got = {v["name"]: {"kind": v["kind"], "default": v["default"]} for v in spec["vars"].values()}
    assert got == declared, version
    assert spec["methods"] == methods == ["match-expected", "multinomial"], version
    name = spec["vars"]["length"]["name"]
    f = forced.of({name: "2"}, facts)
    assert f is not None and f.method == declared[spec["vars"]["method"]["name"]]["default"]
    assert f.label == f"forced ({name}=2)"


def _sglang_shares(python: Path, version: str) -> dict[str, Any]:
    text = wheel_sources(version)["sglang/srt/speculative/spec_utils.py"]
    tree = ast.parse(text)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
              and n.name.lstrip("_") == "sample_simulated_acc_len")  # fmt: skip
    request = {"source": ast.get_source_segment(text, fn), "name": fn.name, "cases": CASES}
    out = subprocess.run([str(python), str(HERE / "forced_probe.py")], input=json.dumps(request),
                         capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    if out.returncode != 0:
        pytest.fail(f"forced_probe failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("version", ["0.5.17", PINNED_VERSION])
def test_the_draws_are_sglangs(sglang_python: Path, version: str) -> None:
    answer = _sglang_shares(sglang_python, version)
    for (length, method, max_len, n), theirs in zip(CASES, answer["shares"], strict=True):
        f = forced.Forced("SGLANG_SIMULATE_ACC_LEN", length, method)
        rng = random.Random(99)
        counts: dict[str, int] = {}
        for _ in range(n):
            k = str(forced.sample(f, max_len, rng))
            counts[k] = counts.get(k, 0) + 1
        ours = {k: v / n for k, v in counts.items()}
        case = f"{version} {method} L={length} max {max_len}"
        assert set(ours) == set(theirs), case
        for k in theirs:
            assert ours[k] == pytest.approx(theirs[k], abs=0.02), (case, k)
        mean = sum(int(k) * p for k, p in theirs.items())
        assert forced.expected_length(f, max_len) == pytest.approx(mean, abs=0.03), case
    with pytest.raises(ValueError) as exc:
        forced.sample(forced.Forced("X", 2.0, "exact"), 4, random.Random(0))
    assert str(exc.value) == answer["bad_method"]
