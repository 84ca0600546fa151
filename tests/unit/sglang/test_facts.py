"""The per-release facts (fastverify/sglang/facts) and the version policy: a release in the
range gets its own facts, a newer one the newest facts with a warning, an older one is
refused; a feature a release lacks is refused naming the version."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify.sglang import facts as f
from fastverify.sglang.versions import NEW_FLAGS_SINCE, generation_for, is_supported

ROOT = Path(__file__).resolve().parents[3]


def _generator():
    spec = importlib.util.spec_from_file_location("sglang_facts", ROOT / "scripts/sglang_facts.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_data_file_per_release_of_the_range() -> None:
    releases = _generator().RELEASES
    assert f.known_versions() == releases
    assert (f.oldest(), f.newest()) == ("0.5.1.post3", "0.5.23")
    for v in releases:
        data = json.loads((Path(f.DATA_DIR) / f"{v}.json").read_text())
        assert data["version"] == v
        assert data["wheel"]["file"].startswith(f"sglang-{v}-")
        assert set(data) >= {"flags", "metrics", "spans", "endpoints", "log_formats", "env",
                             "features"}  # fmt: skip
        assert "--model-path" in data["flags"] and "--tp-size" in data["flags"]
        assert "sglang:num_running_reqs" in data["metrics"]
        assert {"/health", "/generate", "/flush_cache"} <= set(data["endpoints"])


@pytest.mark.parametrize(
    ("version", "release"),
    [("0.5.10", "0.5.10.post1"), ("0.5.10.post1", "0.5.10.post1"), ("0.5.23", "0.5.23"),
     ("0.5.1", "0.5.1.post3"), ("v0.5.20", "0.5.20")],
)  # fmt: skip
def test_a_release_in_the_range_gets_its_own_facts(version: str, release: str) -> None:
    facts = f.resolve(version)
    assert (facts.facts_version, facts.supported, facts.warning) == (release, True, None)
    assert is_supported(version)


@pytest.mark.parametrize("version", ["0.5.24", "0.6.0rc1", "1.0.0"])
def test_newer_than_the_range_runs_on_the_newest_facts_with_a_warning(version: str) -> None:
    facts = f.resolve(version)
    assert facts.facts_version == f.newest() and facts.supported is False
    assert facts.warning and version in facts.warning and "newer" in facts.warning
    assert facts.summary() == {
        "version": version, "facts_version": "0.5.23", "supported": False,
        "range": ["0.5.1.post3", "0.5.23"], "warning": facts.warning,
    }  # fmt: skip
    assert not is_supported(version)


@pytest.mark.parametrize("version", ["0.5.0", "0.4.10.post2", "0.3.6"])
def test_older_than_the_range_is_refused_with_the_range_and_what_to_do(version: str) -> None:
    with pytest.raises(f.VersionTooOld) as exc:
        f.resolve(version)
    msg = str(exc.value)
    assert version in msg and "0.5.1 .. 0.5.23" in msg and "sglang>=0.5.1" in msg


def test_a_missing_feature_is_refused_naming_the_version() -> None:
    old = f.resolve("0.5.10")
    with pytest.raises(f.FeatureMissing, match=r"^SGLang 0\.5\.10 has no FlashInfer PCIe-IPC"):
        old.require("pcie_ipc_allreduce", "profile pcie-ipc")
    with pytest.raises(f.FeatureMissing, match=r"SGLang 0\.5\.10 has no adaptive speculation"):
        old.require("adaptive_speculation", "mode adaptive")
    f.resolve("0.5.23").require("pcie_ipc_allreduce", "profile pcie-ipc")  # present: no error
    assert f.first_with("pcie_ipc_allreduce") == "0.5.21"
    assert f.first_with("adaptive_speculation") == "0.5.11"


def test_features_follow_the_flags_and_variables_each_wheel_declares() -> None:
    for v in f.known_versions():
        facts = f.resolve(v)
        feats = facts.features
        assert feats["adaptive_speculation"] == ("--speculative-adaptive" in facts.flags)
        assert feats["pcie_ipc_allreduce"] == (
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in facts.env["sglang_vars"]
        )
        per_phase = {"--cuda-graph-backend-decode", "--cuda-graph-backend-prefill"}
        assert (feats["flag_generation"] == "new") == per_phase.issubset(facts.flags)
        # the version threshold (for versions outside the range) agrees with the data
        assert generation_for(v) == feats["flag_generation"]
        assert (f.parse(v) >= NEW_FLAGS_SINCE) == (feats["flag_generation"] == "new")


def test_the_verify_span_naming_changes_where_the_wheels_say() -> None:
    stages = {v: f.resolve(v).verify_stage for v in f.known_versions()}
    assert stages["0.5.10.post1"] is None  # no step spans before 0.5.11
    assert stages["0.5.11"] == stages["0.5.19"] == "TARGET_VERIFY"
    assert stages["0.5.20"] == stages["0.5.23"] == "VERIFY"


def _ctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastverify.ctl", *args], capture_output=True,
                          text=True, timeout=60, check=False, cwd=ROOT)  # fmt: skip


def test_sglang_versions_lists_the_range_with_what_differs() -> None:
    r = _ctl("sglang", "versions", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["oldest"], out["newest"]) == ("0.5.1.post3", "0.5.23")
    rows = {row["version"]: row for row in out["versions"]}
    assert list(rows) == list(f.known_versions())
    assert rows["0.5.21"]["pcie_ipc_allreduce"] and not rows["0.5.20"]["pcie_ipc_allreduce"]
    assert "pcie_ipc_allreduce=True" in rows["0.5.21"]["changed"]
    assert "sets NCCL_GRAPH_REGISTER" in rows["0.5.20"]["changed"]


def test_sglang_facts_prints_one_release_and_refuses_one_below_the_range() -> None:
    r = _ctl("sglang", "facts", "0.5.20", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"version", "flags", "metrics", "spans", "endpoints", "log_formats", "env",
            "features"} <= set(out)  # fmt: skip
    assert set(out["env"]) == {"nccl_added", "sglang_vars", "simulate_acceptance"}
    assert out["env"]["simulate_acceptance"]["methods"] == ["match-expected", "multinomial"]
    assert out["metrics"]["sglang:cuda_graph_passes_total"][-1] == "mode"
    assert out["features"]["adaptive_speculation"] is True
    assert out["features"]["pcie_ipc_allreduce"] is False
    text = _ctl("sglang", "facts", "0.5.20")
    assert "SGLang 0.5.20: facts of 0.5.20 (in the supported range)" in text.stdout
    old = _ctl("sglang", "facts", "0.4.9")
    assert old.returncode == 2 and "older than the oldest release" in old.stderr
    # the range as people read releases; a pattern is not a version, never "older"
    assert "(0.5.1 .. 0.5.23)" in old.stderr, old.stderr
    pattern = _ctl("sglang", "facts", "0.5.x")
    assert pattern.returncode == 2, pattern.stderr
    assert "SGLang version '0.5.x' is not a version (expected X.Y.Z" in pattern.stderr
    assert "older" not in pattern.stderr
    assert "SGLang 0.5.1 .. 0.5.23 " in _ctl("sglang", "versions").stdout


@pytest.mark.parametrize("release", f.known_versions())
def test_the_sglang_variables_read_alone_are_the_files_env_section(release: str) -> None:
    """`sglang_vars` decodes only its part of the file (`profile list`'s start-up): the same
    mapping as the whole file's `env.sglang_vars`."""
    whole = json.loads((Path(f.DATA_DIR) / f"{release}.json").read_text(encoding="utf-8"))
    assert f.resolve(release).sglang_vars == whole["env"]["sglang_vars"]


def test_the_sglang_variables_come_from_env_when_another_section_names_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose text has the key twice is read whole: the value is `env`'s, never the first
    one the text holds."""
    data = {"features": {"sglang_vars": {"SGLANG_DECOY": "int"}},
            "env": {"sglang_vars": {"SGLANG_REAL": "bool"}}}  # fmt: skip
    (tmp_path / "9.9.9.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    monkeypatch.setattr(f, "DATA_DIR", str(tmp_path))
    f._sglang_vars.cache_clear()
    f._data.cache_clear()
    try:
        assert f._sglang_vars("9.9.9") == {"SGLANG_REAL": "bool"}
    finally:
        f._sglang_vars.cache_clear()
        f._data.cache_clear()
