"""doctor: real files in temp dirs for every source that changes what NCCL sees."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fastverify.profiles import doctor
from fastverify.profiles.store import ProfileStore
from tests.support.profiles import DATA, PCIE, SHIPPED, write


def fake_nvidia_smi(bin_dir: Path, topo_file: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = topo ] && [ "$2" = -m ]; then cat {topo_file}; exit 0; fi\n'
        "exit 9\n"
    )
    exe.chmod(0o755)


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    roots = {k: tmp_path / k for k in ("home", "etc", "site", "systemd", "bin", "empty")}
    for p in roots.values():
        p.mkdir()
    return roots


def inputs(host: dict[str, Path], env: dict[str, str] | None = None, **kw) -> doctor.DoctorInputs:
    return doctor.DoctorInputs(
        env={"HOME": str(host["home"]), "PATH": str(host["bin"]), **(env or {})},
        etc_dir=host["etc"],
        systemd_dirs=[host["systemd"]],
        site_dirs=[host["site"]],
        **kw,
    )


def test_clean_host_has_no_warnings(host: dict[str, Path]) -> None:
    report = doctor.run(inputs(host))
    assert [f for f in report.findings if f.severity != "info"] == []
    assert report.worst == "ok"
    assert report.topology is None  # no nvidia-smi on the temp PATH


def test_every_source_found_with_file_and_line(host: dict[str, Path]) -> None:
    write(host["etc"] / "nccl.conf", "# system\nNCCL_ALGO=Tree\n")
    write(host["home"] / ".nccl.conf", "NCCL_PROTO=LL128\n")
    write(host["etc"] / "environment", 'PATH="/usr/bin"\nNCCL_DEBUG=INFO\n')
    write(
        host["site"] / "sitecustomize.py",
        "import os\n\nos.environ.setdefault('NCCL_ALGO', 'Tree')\n",
    )
    write(host["site"] / "usercustomize.py", "print('no nccl here')\n")
    write(host["site"] / "zz-nccl.pth", "import os; os.environ['NCCL_PROTO'] = 'LL'\n")
    user_units = host["home"] / ".config" / "systemd" / "user" / "sglang.service.d"
    user_units.mkdir(parents=True)
    write(user_units / "override.conf", '[Service]\nEnvironment="NCCL_DEBUG=INFO"\n')
    dropin = host["systemd"] / "sglang.service.d"
    dropin.mkdir()
    write(dropin / "nccl.conf", "[Service]\nEnvironment=NCCL_P2P_LEVEL=SYS NCCL_ALGO=Ring\n")
    envfile = write(host["etc"] / "sglang.env", "NCCL_BUFFSIZE=1048576\n")
    write(
        host["systemd"] / "sglang.service", f"[Service]\nEnvironmentFile=-{envfile}\nExecStart=/x\n"
    )
    report = doctor.run(inputs(host, env={"NCCL_NTHREADS": "256", "NCCL_VERSION": "2.28.3-1"}))
    where = {(f.check, f.where) for f in report.findings if f.severity == "warning"}
    assert where == {
        ("nccl-conf", f"{host['etc'] / 'nccl.conf'}:2"),
        ("nccl-conf", f"{host['home'] / '.nccl.conf'}:1"),
        ("environment", "environment"),  # NCCL_NTHREADS; NCCL_VERSION is metadata
        ("environment", f"{host['etc'] / 'environment'}:2"),
        ("python-site", f"{(host['site'] / 'sitecustomize.py').resolve()}:3"),
        ("python-site", f"{(host['site'] / 'zz-nccl.pth').resolve()}:1"),
        ("systemd", f"{dropin / 'nccl.conf'}:2"),
        ("systemd", f"{host['systemd'] / 'sglang.service'}:2"),
        ("systemd", f"{user_units / 'override.conf'}:2"),
    }
    assert report.worst == "warning"
    site = next(f for f in report.findings if f.where.endswith("sitecustomize.py:3"))
    assert "import-sitecustomize" in site.fix
    assert all(f.fix for f in report.findings if f.severity != "info")


def test_nccl_conf_file_env_points_to_missing_file(host: dict[str, Path]) -> None:
    report = doctor.run(inputs(host, env={"NCCL_CONF_FILE": str(host["home"] / "nope.conf")}))
    whats = [f.what for f in report.findings if f.check == "nccl-conf"]
    assert any("does not exist" in w for w in whats)


def test_topology_and_recommendations_from_nvidia_smi(host: dict[str, Path]) -> None:
    fake_nvidia_smi(host["bin"], DATA / "topo-8gpu-pcie.txt")
    store = ProfileStore([], SHIPPED, topology=PCIE)
    report = doctor.run(inputs(host), store)
    assert report.topology is not None and len(report.topology.gpus) == 8
    assert not report.topology.has_nvlink
    # the all-reduce backend first (SGLang 0.5.23's PCIe-IPC), then NCCL tuning
    assert [r.profile for r in report.recommendations][:2] == ["pcie-ipc", "ring-ll"]
    data = report.to_dict()
    assert data["topology"]["crosses_numa"] is True


def test_invalid_and_shadowing_profiles(host: dict[str, Path], tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    write(user / "ring-ll.env", "# description: mine\nNCCL_ALGO=Ring\n")
    write(user / "typo.env", "# description: t\nNCCL_ALGOS=Ring\n")
    report = doctor.run(
        inputs(host, check_topology=False), ProfileStore([user], SHIPPED, topology=PCIE)
    )
    prof = {(f.severity, f.where) for f in report.findings if f.check == "profiles"}
    assert ("error", f"{user / 'typo.env'}:2") in prof
    assert ("info", str(user / "ring-ll.env")) in prof
    assert report.worst == "error"


def test_server_interpreter_site_dirs_without_running_its_sitecustomize(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "ran"
    write(
        site / "sitecustomize.py",
        f"open({str(marker)!r}, 'w').write('x')\nimport os\nos.environ['NCCL_ALGO'] = 'Tree'\n",
    )
    # a wrapper interpreter whose sys.path includes `site` (PYTHONPATH), like a venv's python
    wrapper = tmp_path / "python-server"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    dirs = doctor.interpreter_site_dirs(str(wrapper))
    assert isinstance(dirs, list) and str(site) in dirs
    assert not marker.exists()
    report = doctor.run(
        doctor.DoctorInputs(
            env={"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "")},
            etc_dir=tmp_path / "no-etc",
            systemd_dirs=[],
            interpreters=[str(wrapper)],
            check_topology=False,
        )
    )
    assert not marker.exists()
    hits = [f for f in report.findings if f.check == "python-site"]
    assert [f.where for f in hits] == [f"{(site / 'sitecustomize.py').resolve()}:3"]
    assert str(wrapper) in report.interpreters


def test_profiles_validated_against_detected_topology(
    host: dict[str, Path], tmp_path: Path
) -> None:
    fake_nvidia_smi(host["bin"], DATA / "topo-8gpu-pcie.txt")
    user = tmp_path / "user"
    user.mkdir()
    write(user / "ll128.env", "# description: x\nNCCL_PROTO=LL128\n")
    store = ProfileStore([user], SHIPPED, topology=None)  # would detect via the real PATH
    report = doctor.run(inputs(host), store)
    errors = [f for f in report.findings if f.severity == "error"]
    assert [f.where for f in errors] == [f"{user / 'll128.env'}:2"]
    assert "no NVLink" in errors[0].what
    fake_nvidia_smi(host["bin"], DATA / "topo-8gpu-nv18.txt")
    report = doctor.run(inputs(host), ProfileStore([user], SHIPPED, topology=None))
    assert [f for f in report.findings if f.severity == "error"] == []


GRAPH_REGISTER_ADDED = "will add NCCL_GRAPH_REGISTER=0"


def test_sglang_engine_env_for_tp_size(host: dict[str, Path]) -> None:
    """SGLang's parallel_hook rule (checked against the real package by tests/contract):
    TP > 1 with CUDA graphs adds NCCL_GRAPH_REGISTER=0; TP 1 does not."""
    tp2 = doctor.run(inputs(host, tp_size=2, check_topology=False)).engine_env
    tp1 = doctor.run(inputs(host, tp_size=1, check_topology=False)).engine_env
    assert tp2 is not None and tp1 is not None
    assert any(GRAPH_REGISTER_ADDED in line for line in tp2["lines"])
    assert tp2["added"]["NCCL_GRAPH_REGISTER"] == "0"
    assert not any("NCCL_GRAPH_REGISTER" in line for line in tp1["lines"])
    assert "NCCL_GRAPH_REGISTER" not in tp1["added"]
    # a value already in the environment is kept (SGLang only warns): nothing added
    kept = doctor.run(
        inputs(host, {"NCCL_GRAPH_REGISTER": "1"}, tp_size=2, check_topology=False)
    ).engine_env
    assert kept is not None and "NCCL_GRAPH_REGISTER" not in kept["added"]
    assert "NCCL_GRAPH_REGISTER" in kept["conflicts"]
    # graphs off (the server's extra args): nothing captured, no rule
    off = doctor.run(
        inputs(host, tp_size=2, sglang_args=("--disable-cuda-graph",), check_topology=False)
    ).engine_env
    assert off is not None and "NCCL_GRAPH_REGISTER" not in off["added"]
    assert doctor.run(inputs(host, check_topology=False)).engine_env is None


def test_doctor_cli_shows_sglang_additions(host: dict[str, Path], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fastverify.ctl import cli

    conf = write(tmp_path / "fastverifyd.toml", "[server]\ntp_size = 2\n")
    env = {
        "FASTVERIFY_CONFIG": str(conf),
        "FASTVERIFY_SOCKET": str(tmp_path / "no-daemon.sock"),
        "HOME": str(host["home"]),
        "NCCL_GRAPH_REGISTER": None,  # unset for the command
    }
    base = ["doctor", "--no-topology", "--etc", str(host["etc"]), "--home", str(host["home"]),
            "--systemd-dir", str(host["systemd"]), "--site-dir", str(host["site"])]  # fmt: skip

    def run(*extra: str):
        return CliRunner().invoke(cli, [*base, *extra], env=env, catch_exceptions=False)

    text = run().output  # TP 2 from the daemon config
    assert "at TP 2" in text and GRAPH_REGISTER_ADDED in text
    data = json.loads(run("--json").stdout)
    assert data["engine_env"]["tp_size"] == 2
    assert any(GRAPH_REGISTER_ADDED in line for line in data["engine_env"]["lines"])
    one = run("--tp-size", "1")  # the option wins over the config
    assert "at TP 1" in one.output and "NCCL_GRAPH_REGISTER" not in one.output
    data1 = json.loads(run("--json", "--tp-size", "1").stdout)
    assert data1["engine_env"]["tp_size"] == 1
    assert not any("NCCL_GRAPH_REGISTER" in line for line in data1["engine_env"]["lines"])
