"""The contract suite runs SGLang's own code in the venv scripts/sglang-venv.sh builds.

`sglang_python`: that venv's interpreter ($FASTVERIFY_SGLANG_PYTHON, else the cache path the
script uses). Missing, every contract test fails with the command that builds it: a
contract that was not checked is never counted as passing.
`release_probe`: `get(version)`, one run of tests/contract/probe.py per release of RELEASES
over every argv the daemon builds for it (tests/contract/daemon_cases.py), shared by the
test files (one subprocess per release, so the suite stays quick): the pinned release
answers every part, the others the parts every release can give (argvs, hooks, parser).
`release_python`: the interpreter of one of RELEASES, the releases the full-install suite
runs for real (the pinned one is the full venv; the others scripts/sglang-release-venv.sh
builds over its site-packages).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fastverify.sglang.versions import PINNED_VERSION
from tests.support.contract import release_python, run_probe, venv_python


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    py = venv_python()
    if not py.exists():
        pytest.fail(f"{py} is missing: run scripts/sglang-venv.sh (scripts/test does) first")
    return py


@pytest.fixture(scope="session")
def release_probe(sglang_python: Path) -> Any:
    """`get(version)`: probe.py's answer for that release, run once; `by_name` maps each of
    daemon_argvs(version) to its answer, `python` is the release's interpreter."""
    from tests.contract.daemon_cases import daemon_argvs

    seen: dict[str, dict[str, Any]] = {}

    def get(version: str) -> dict[str, Any]:
        if version not in seen:
            py = release_python(version, sglang_python)
            cases = daemon_argvs(version)
            request: dict[str, Any] = {
                "argvs": [{"argv": c["argv"], "env": c["env"]} for c in cases]
            }
            if version != PINNED_VERSION:
                request["only"] = ["argvs", "hooks", "parser"]
            out = run_probe(py, request)
            out["by_name"] = {c["name"]: r for c, r in zip(cases, out["argvs"], strict=True)}
            out["python"] = str(py)
            seen[version] = out
        return seen[version]

    return get
