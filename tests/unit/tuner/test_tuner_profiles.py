"""Tuner profiles: validation of the table a profile names (file:line), the plugin's
presence, the engine environment (absolute paths), `profile show --effective`, and
doctor's warning about a NCCL_TUNER_PLUGIN set elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastverify.profiles.doctor import DoctorInputs, Finding
from fastverify.profiles.doctor import run as doctor_run
from fastverify.profiles.doctor_tuner import check_tuner
from fastverify.profiles.effective import effective_env, effective_view
from fastverify.profiles.model import ProfileError
from fastverify.profiles.store import ProfileStore
from fastverify.profiles.validate import Topology

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "profiles"
PCIE = Topology(has_nvlink=False, source="test: PCIe only")
NVLINK = Topology(has_nvlink=True, source="test: NVLink")
GOOD = (
    "collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes\n"
    "AllReduce,0,327679,Ring,LL,-1,2,1\n"
    "AllReduce,327680,134217728,Ring,Simple,-1,2,1\n"
)
PROFILE = "# description: test tuner\n# extends: nccl-default\nFASTVERIFY_TUNER_TABLE=t.tuner.csv\n"


@pytest.fixture()
def user_dir(tmp_path: Path, plugin_so: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FASTVERIFY_TUNER_SO", str(plugin_so))
    d = tmp_path / "profiles"
    d.mkdir()
    return d


def _store(d: Path, topo: Topology = PCIE) -> ProfileStore:
    return ProfileStore([d], SHIPPED, topology=topo)


def test_tuner_profile_loads_and_engine_env_has_absolute_paths(user_dir, plugin_so) -> None:
    (user_dir / "t.tuner.csv").write_text(GOOD)
    (user_dir / "t.env").write_text(PROFILE)
    prof = _store(user_dir).load("t")
    env = effective_env(prof, base_env={"PATH": "/bin"})
    assert env["FASTVERIFY_TUNER_TABLE"] == str((user_dir / "t.tuner.csv").resolve())
    assert env["NCCL_TUNER_PLUGIN"] == str(plugin_so.resolve())
    view = {v.name: v for v in effective_view(prof, base_env={"PATH": "/bin"})}
    assert view["NCCL_TUNER_PLUGIN"].source == "tuner"
    assert view["FASTVERIFY_TUNER_TABLE"].value.startswith("/")


def test_inherited_table_resolves_beside_the_base(user_dir, tmp_path) -> None:
    (user_dir / "t.tuner.csv").write_text(GOOD)
    (user_dir / "t.env").write_text(PROFILE)
    (user_dir / "child.env").write_text(
        "# description: child\n# extends: t\nNCCL_BUFFSIZE=8388608\n"
    )
    env = effective_env(_store(user_dir).load("child"), base_env={})
    assert env["FASTVERIFY_TUNER_TABLE"] == str((user_dir / "t.tuner.csv").resolve())


@pytest.mark.parametrize(
    "table,line,needle",
    [
        ("AllReduce,0,100,Ring,LL,-1,2,1\nAllReduce,50,200,Ring,Simple,-1,2,1\n", 2, "overlaps"),
        ("# x\nAllReduce,0,100,Ring,LL128,-1,2,1\n", 2, "LL128 but the GPUs have no NVLink"),
        ("AllReduce,0,100,Rng,LL,-1,2,1\n", 1, "unknown algorithm 'Rng'"),
    ],
)
def test_bad_table_fails_validation_with_file_line(user_dir, table, line, needle) -> None:
    (user_dir / "t.tuner.csv").write_text(table)
    (user_dir / "t.env").write_text(PROFILE)
    with pytest.raises(ProfileError) as exc:
        _store(user_dir).load("t")
    msgs = [str(p) for p in exc.value.errors]
    assert any(f"t.tuner.csv:{line}: " in m and needle in m for m in msgs), msgs


def test_ll128_accepted_with_nvlink_or_force(user_dir) -> None:
    (user_dir / "t.tuner.csv").write_text("AllReduce,0,100,Ring,LL128,-1,2,1\n")
    (user_dir / "t.env").write_text(PROFILE)
    _store(user_dir, NVLINK).load("t")
    prof = _store(user_dir).load("t", force=True)
    assert any("accepted because of --force" in str(w) for w in prof.warnings)


def test_missing_table_and_missing_plugin_are_errors(user_dir, monkeypatch, tmp_path) -> None:
    (user_dir / "t.env").write_text(PROFILE)
    with pytest.raises(ProfileError) as exc:
        _store(user_dir).load("t")
    assert any("no tuner table at" in p.message and p.line == 3 for p in exc.value.errors)
    (user_dir / "t.tuner.csv").write_text(GOOD)
    monkeypatch.setenv("FASTVERIFY_TUNER_SO", str(tmp_path / "nope.so"))
    monkeypatch.setattr("fastverify.tuner.plugin.candidates", lambda: [tmp_path / "nope.so"])
    with pytest.raises(ProfileError) as exc:
        _store(user_dir).load("t")
    assert any("tuner plugin is not built" in p.message for p in exc.value.errors)


def test_profile_show_effective_prints_the_table(user_dir, monkeypatch) -> None:
    from fastverify.ctl import cli as main

    (user_dir / "t.tuner.csv").write_text(GOOD)
    (user_dir / "t.env").write_text(PROFILE)
    monkeypatch.setenv("FASTVERIFY_PROFILE_DIRS", str(user_dir))
    monkeypatch.setattr("fastverify.profiles.store._detect_topology", lambda: PCIE)
    r = CliRunner().invoke(main, ["profile", "show", "t", "--effective", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert [row["choice"] for row in data["tuner"]["rows"]] == ["RING/LL", "RING/SIMPLE"]
    r = CliRunner().invoke(main, ["profile", "show", "t", "--effective"])
    assert "AllReduce 0..327679 B -> RING/LL (nranks=2)" in r.output, r.output


def test_doctor_warns_about_tuner_plugin_set_elsewhere(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".nccl.conf").write_text("NCCL_TUNER_PLUGIN=/opt/other/libnccl-tuner-x.so\n")
    env = {"HOME": str(home), "NCCL_TUNER_CONFIG_FILE": "/tmp/rules.conf"}
    found = [f for f in check_tuner(env, home, tmp_path, Finding) if f.severity == "warning"]
    wheres = sorted(f.where for f in found)
    assert wheres == [f"{home / '.nccl.conf'}:1", "environment"]
    assert all("outside the profiles" in f.what for f in found)
    report = doctor_run(
        DoctorInputs(
            env=env,
            home=home,
            etc_dir=tmp_path,
            systemd_dirs=(),
            site_dirs=[],
            check_topology=False,
        )
    )
    assert any(f.check == "tuner" and f.severity == "warning" for f in report.findings)
