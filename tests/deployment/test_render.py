"""`fastverifyctl render`: the units it writes pass `systemd-analyze verify` and carry the
promised settings; the compose `.env` it writes is what a real Compose reads."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.containers import run


def ctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def unit_sections(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser


def verify(unit: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("NOT RUN: systemd-analyze missing (scripts/install-system-deps.sh)")
    proc = run(["systemd-analyze", "verify", "--man=no", str(unit)], check=False)
    # Unknown keys and bad values are only warnings: any output is a failure too.
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


def test_host_unit_is_valid_and_a_notify_service(tmp_path: Path) -> None:
    daemon = tmp_path / "bin" / "fastverifyd"
    daemon.parent.mkdir()
    daemon.write_text("#!/bin/sh\n")
    daemon.chmod(0o755)
    unit = tmp_path / "fastverifyd.service"
    proc = ctl("render", "systemd", "--mode", "host", "--fastverifyd", str(daemon),
               "--watchdog-sec", "20", "--output", str(unit))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    verify(unit)
    u = unit_sections(unit.read_text())
    svc = u["Service"]
    assert svc["Type"] == "notify" and svc["NotifyAccess"] == "main"
    assert svc["ExecStart"].split()[:3] == [
        str(daemon),
        "--config",
        "/etc/fastverify/fastverifyd.toml",
    ]
    assert svc["WatchdogSec"] == "20"
    assert int(svc["TimeoutStartSec"]) >= 600
    assert svc["Restart"] == "on-failure"
    assert svc["KillMode"] == "mixed"
    assert svc["RuntimeDirectory"] == "fastverify" and svc["StateDirectory"] == "fastverify"
    assert svc["EnvironmentFile"] == "-/etc/fastverify/fastverify.env"
    assert svc["LimitMEMLOCK"] == "infinity"
    assert svc["ProtectSystem"] == "full" and svc["NoNewPrivileges"] == "yes"
    assert "StartLimitIntervalSec" in u["Unit"] and "StartLimitBurst" in u["Unit"]
    assert "StartLimitBurst" not in svc


def test_container_unit_is_valid_and_stops_the_stack(tmp_path: Path) -> None:
    compose = shutil.which("docker-compose") or shutil.which("docker")
    if compose is None:
        pytest.skip("NOT RUN: no docker/docker-compose for ExecStart (setup script)")
    cmd = compose if compose.endswith("docker-compose") else f"{compose} compose"
    unit = tmp_path / "fastverify.service"
    proc = ctl("render", "systemd", "--mode", "container", "--compose-cmd", cmd,
               "--compose-dir", str(tmp_path), "--output", str(unit))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    verify(unit)
    u = unit_sections(unit.read_text())
    assert "docker.service" in u["Unit"]["After"] and "docker.service" in u["Unit"]["Requires"]
    svc = u["Service"]
    compose_file = f"{tmp_path}/docker-compose.yml"
    assert svc["ExecStart"] == (
        f"{cmd} --project-name fastverify --file {compose_file} up --remove-orphans --no-color"
    )
    assert svc["ExecStop"].startswith(f"{cmd} --project-name fastverify --file {compose_file} down")
    assert svc["Restart"] == "on-failure"
    assert "StartLimitBurst" in u["Unit"]
    assert "cgroup" in unit.read_text()  # the unit says why systemd cannot see the engine


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mode", "vm"], "Invalid value for '--mode'"),
        (["--fastverifyd", "bin/fastverifyd"], "absolute path"),
        (["--watchdog-sec", "1"], "watchdog"),
        (["--user", "svc"], "--group"),
    ],
)
def test_render_refuses_bad_options(args: list[str], message: str) -> None:
    proc = ctl("render", "systemd", *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_render_compose_bundle_is_read_by_compose(tmp_path: Path) -> None:
    out = tmp_path / "stack"
    proc = ctl("render", "compose", "--output-dir", str(out), "--image", "fastverify:9.9",
               "--model-dir", str(tmp_path / "models"), "--grafana-port", "3300",
               "--env-file", str(tmp_path / "fv.env"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for rel in ("docker-compose.yml", "prometheus.yml", "fastverify-rules.yml", ".env",
                "grafana/provisioning/datasources/prometheus.yml",
                "grafana/dashboards/fastverify-overview.json"):  # fmt: skip
        assert (out / rel).is_file(), rel
    env = dict(
        line.split("=", 1)
        for line in (out / ".env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert env["FASTVERIFY_IMAGE"] == "fastverify:9.9"
    assert env["FASTVERIFY_GRAFANA_PORT"] == "3300"
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip("NOT RUN: docker-compose missing (scripts/install-system-deps.sh)")
    (tmp_path / "fv.env").write_text("")
    resolved = yaml.safe_load(
        run([compose, "config"], cwd=out, env={"PATH": "/usr/bin:/bin"}).stdout
    )
    assert resolved["services"]["fastverify"]["image"] == "fastverify:9.9"
    assert "127.0.0.1:3300:3000/tcp" in resolved["services"]["grafana"]["ports"]
    assert f"{tmp_path / 'models'}:/models:ro" in resolved["services"]["fastverify"]["volumes"]


def test_the_rendered_stack_starts_without_an_env_file_of_the_operators(tmp_path: Path) -> None:
    """As the unit's `EnvironmentFile=-`: without --env-file the container's environment is
    the bundle's own fastverify.env, written (comments only, 0640) where there is none and
    never overwritten, so Debian's docker-compose 1.29 (no optional env_file) resolves the
    stack with no file anywhere else; --env-file names another, which the .env carries."""
    out = tmp_path / "stack"
    args = ("render", "compose", "--output-dir", str(out), "--image", "fastverify:9.9")
    proc = ctl(*args)
    assert proc.returncode == 0, proc.stderr
    own = out / "fastverify.env"
    assert f"wrote {own}" in proc.stderr
    assert own.stat().st_mode & 0o777 == 0o640  # it is where HF_TOKEN goes
    assert all(x.startswith("#") or not x.strip() for x in own.read_text().splitlines())
    assert "FASTVERIFY_ENV_FILE" not in (out / ".env").read_text()
    own.write_text("HF_TOKEN_PLACEHOLDER=1\n")  # the operator's edit survives a re-render
    again = ctl(*args)
    assert again.returncode == 0 and f"wrote {own}" not in again.stderr, again.stderr
    assert own.read_text() == "HF_TOKEN_PLACEHOLDER=1\n"
    other = tmp_path / "other"
    named = ctl("render", "compose", "--output-dir", str(other), "--env-file", "/srv/fv.env")
    assert named.returncode == 0 and not (other / "fastverify.env").exists()
    assert "FASTVERIFY_ENV_FILE=/srv/fv.env" in (other / ".env").read_text().splitlines()
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip("NOT RUN: docker-compose missing (scripts/install-system-deps.sh)")
    proc = run([compose, "config"], cwd=out, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert proc.returncode == 0, proc.stderr
    fv = yaml.safe_load(proc.stdout)["services"]["fastverify"]
    assert fv["environment"]["HF_TOKEN_PLACEHOLDER"] == "1"  # the bundle's file was read


@pytest.mark.parametrize("door", ["--socket", "FASTVERIFY_SOCKET"])
def test_a_unit_on_stdout_is_the_same_under_any_socket(tmp_path: Path, door: str) -> None:
    """The CLI's hints carry the socket it was given; a rendered file is no hint: it goes to
    another host, whose daemon listens on its own socket, so `-o -` prints it as rendered."""
    args = ("render", "systemd", "--mode", "container", "-o", "-")
    plain = ctl(*args)
    assert plain.returncode == 0, plain.stderr
    assert "Rendered by `fastverifyctl render systemd --mode container`" in plain.stdout
    sock = str(tmp_path / "control.sock")
    if door == "--socket":
        other = ctl("--socket", sock, *args)
    else:
        other = ctl(*args, env={**os.environ, "FASTVERIFY_SOCKET": sock})
    assert other.returncode == 0, other.stderr
    assert other.stdout == plain.stdout


def test_render_compose_refuses_values_env_files_cannot_carry() -> None:
    proc = ctl("render", "compose", "--image", "fast verify:$x")
    assert proc.returncode == 2 and "cannot carry" in proc.stderr


def test_render_module_keeps_jinja2_off_the_cli_path() -> None:
    code = (
        "import sys, fastverify.ctl, fastverify.cli.render_cmd;"
        "sys.exit(1 if 'jinja2' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0
