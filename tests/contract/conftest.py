"""The contract suite runs SGLang's own code in the venv scripts/sglang-venv.sh builds.

`sglang_python`: that venv's interpreter ($FASTVERIFY_SGLANG_PYTHON, else the cache path the
script uses). Missing, every contract test fails with the command that builds it: a
contract that was not checked is never counted as passing.
`run_probe`: one run of tests/contract/probe.py over every argv the daemon can produce (one
subprocess per release, so the suite stays quick).
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
