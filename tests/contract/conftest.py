"""The contract suite runs SGLang's own code in the venv scripts/sglang-venv.sh builds.

`sglang_python`: that venv's interpreter ($FASTVERIFY_SGLANG_PYTHON, else the cache path the
script uses). Missing, every contract test fails with the command that builds it: a
contract that was not checked is never counted as passing.
`release_probe`: `get(version)`, one run of tests/contract/probe.py per release of RELEASES
over every argv the daemon builds for it (tests/contract/daemon_cases.py), shared by the
test files (one subprocess per release and run, so the suite stays quick: under xdist the
workers share the answer through their common base directory): the pinned release answers
every part, the others the parts every release can give (argvs, hooks, parser).
`release_python`: the interpreter of one of RELEASES, the releases the full-install suite
runs for real (the pinned one is the full venv; the others scripts/sglang-release-venv.sh
builds over its site-packages).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fastverify.sglang.versions import PINNED_VERSION
from tests.support.contract import release_python, run_probe, venv_python
from tests.support.shared_run import once


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    py = venv_python()
    if not py.exists():
        pytest.fail(f"{py} is missing: run scripts/sglang-venv.sh (scripts/test does) first")
    return py


@pytest.fixture(scope="session")
def release_probe(sglang_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`get(version)`: probe.py's answer for that release, run once; `by_name` maps each of
    daemon_argvs(version) to its answer, `python` is the release's interpreter."""
    from tests.contract.daemon_cases import daemon_argvs

    seen: dict[str, dict[str, Any]] = {}

    def probe(version: str, path: Path) -> None:
        py = release_python(version, sglang_python)
        request: dict[str, Any] = {
            "argvs": [{"argv": c["argv"], "env": c["env"]} for c in daemon_argvs(version)]
        }
        if version != PINNED_VERSION:
            request["only"] = ["argvs", "hooks", "parser"]
        path.write_text(json.dumps(dict(run_probe(py, request), python=str(py))))

    def get(version: str) -> dict[str, Any]:
        if version not in seen:
            answer = once(tmp_path_factory, f"release-probe-{version}.json",
                          lambda path: probe(version, path))  # fmt: skip
            out = json.loads(answer.read_text())
            cases = daemon_argvs(version)
            out["by_name"] = {c["name"]: r for c, r in zip(cases, out["argvs"], strict=True)}
            seen[version] = out
        return seen[version]

    return get
