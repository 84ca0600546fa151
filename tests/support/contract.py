"""What the contract suite shares: where it is (`HERE`), the releases it runs for real
(`RELEASES`), the interpreters of SGLang's venvs (`venv_python`, `release_python`), one run of
tests/contract/probe.py (`run_probe`), the tiny Llama config the rule checks load, and any
release's wheel (`facts_script`: scripts/sglang_facts.py, which downloads and caches them;
`wheel_sources`: its SGLang source files as text)."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fastverify.sglang.versions import PINNED_VERSION

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "contract"
# the oldest release in the range, the last before 0.5.21's PCIe-IPC all-reduce, the pinned
RELEASES = ("0.5.1.post3", "0.5.20", PINNED_VERSION)
# a two-layer Llama config.json: enough for SGLang's argument and all-reduce rules to load
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 2,
              "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096,
              "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5}  # fmt: skip


def venv_python() -> Path:
    env = os.environ.get("FASTVERIFY_SGLANG_PYTHON")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "fastverify" / f"sglang-{PINNED_VERSION}" / "bin" / "python"


def sglang_package(python: Path) -> Path:
    """The `sglang` package directory of that interpreter's environment (its source, read by
    the contract tests that check SGLang's own code)."""
    where = "import importlib.util as u; print(u.find_spec('sglang').submodule_search_locations[0])"
    out = subprocess.run([str(python), "-c", where], capture_output=True, text=True, timeout=120,
                         check=True)  # fmt: skip
    return Path(out.stdout.strip())


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


@functools.cache
def facts_script() -> ModuleType:
    """scripts/sglang_facts.py as a module: `RELEASES`, `download(version)` (the wheel's path)."""
    spec = importlib.util.spec_from_file_location("sglang_facts", ROOT / "scripts/sglang_facts.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def wheel_sources(version: str) -> dict[str, str]:
    """Every `sglang/srt/**.py` of that release's wheel, by its path in the wheel, as text."""
    with zipfile.ZipFile(facts_script().download(version)) as whl:
        return {n: whl.read(n).decode("utf-8", "replace") for n in whl.namelist()
                if n.startswith("sglang/srt/") and n.endswith(".py")}  # fmt: skip
