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

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fastverify.sglang.versions import PINNED_VERSION

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# the oldest release in the range, the last before 0.5.21's PCIe-IPC all-reduce, the pinned
RELEASES = ("0.5.1.post3", "0.5.20", PINNED_VERSION)


def venv_python() -> Path:
    env = os.environ.get("FASTVERIFY_SGLANG_PYTHON")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "fastverify" / f"sglang-{PINNED_VERSION}" / "bin" / "python"


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    py = venv_python()
    if not py.exists():
        pytest.fail(f"{py} is missing: run scripts/sglang-venv.sh (scripts/test does) first")
    return py


def run_probe(python: Path, request: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run(
        [str(python), str(HERE / "probe.py")],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        pytest.fail(f"probe failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def release_python(version: str, sglang_python: Path) -> Path:
    """The interpreter that runs SGLang `version`'s own code: the full venv for the pinned
    release, else the venv scripts/sglang-release-venv.sh builds (cached) over it."""
    if version == PINNED_VERSION:
        return sglang_python
    env = {**os.environ, "FASTVERIFY_SGLANG_PYTHON": str(sglang_python)}
    built = subprocess.run(
        [str(ROOT / "scripts/sglang-release-venv.sh"), version],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    if built.returncode != 0:
        pytest.fail(f"scripts/sglang-release-venv.sh {version} failed:\n{built.stderr[-4000:]}")
    return Path(built.stdout.strip().splitlines()[-1])


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
