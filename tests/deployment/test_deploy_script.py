"""deploy.sh against a temporary --prefix, with `docker` and `systemctl` replaced on PATH by
recording stand-ins (the host's service managers: the only stand-ins in this suite). Every
other command is real: install, groupadd --prefix, python3 -m venv, pip (offline, from the
wheelhouse), fastverifyctl render."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

STANDIN = """#!/usr/bin/env python3
import json, os, sys
log = os.environ["STANDIN_LOG"]
name = os.path.basename(sys.argv[0])
with open(log, "a") as fh:
    fh.write(json.dumps([name, *sys.argv[1:]]) + "\\n")
if name == "systemctl" and "is-enabled" in sys.argv:
    unit = sys.argv[-1]
    with open(log) as fh:
        calls = [json.loads(line) for line in fh]
    enabled = any("enable" in c and c[-1] == unit for c in calls)
    disabled = [i for i, c in enumerate(calls) if "disable" in c and c[-1] == unit]
    enables = [i for i, c in enumerate(calls) if "enable" in c and c[-1] == unit]
    sys.exit(0 if enabled and (not disabled or max(enables) > max(disabled)) else 1)
"""


class Deploy:
    def __init__(self, repo: Path, tmp: Path, wheelhouse: Path):
        self.repo = repo
        self.prefix = tmp / "root"
        self.log = tmp / "calls.jsonl"
        self.wheelhouse = wheelhouse
        self.offset = 0
        bindir = tmp / "standins"
        bindir.mkdir()
        for name in ("docker", "systemctl"):
            (bindir / name).write_text(STANDIN)
            (bindir / name).chmod(0o755)
        etc = self.prefix / "etc"
        etc.mkdir(parents=True)
        for name in ("group", "gshadow", "passwd", "shadow"):
            (etc / name).write_text("root:x:0:\n" if name == "group" else "")
        self.env = {
            "PATH": f"{bindir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "STANDIN_LOG": str(self.log),
            "FASTVERIFY_DEPLOY_LIVE": "1",
            "HOME": str(tmp),
            "LANG": "C.UTF-8",
        }

    def __call__(self, *args: str, expect: int = 0) -> str:
        self.offset = len(self.log.read_text().splitlines()) if self.log.exists() else 0
        proc = subprocess.run(
            [str(self.repo / "deploy.sh"), *args, "--prefix", str(self.prefix),
             "--pip-options", f"--no-index --find-links {self.wheelhouse}"],
            capture_output=True, text=True, env=self.env, timeout=300,
        )  # fmt: skip
        assert proc.returncode == expect, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr

    def calls(self) -> list[list[str]]:
        lines = self.log.read_text().splitlines()[self.offset :]
        return [json.loads(line) for line in lines]

    def tree(self) -> dict[str, tuple[str, int]]:
        """Every path under the prefix -> (content hash or link target, mtime_ns)."""
        out = {}
        for path in sorted(self.prefix.rglob("*")):
            rel = str(path.relative_to(self.prefix))
            if path.is_symlink():
                out[rel] = (f"-> {os.readlink(path)}", 0)
            elif path.is_file():
                out[rel] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
            else:
                out[rel] = ("dir", 0)
        return out


@pytest.fixture
def deploy(repo_snapshot: Path, wheelhouse: Path, tmp_path: Path) -> Deploy:
    return Deploy(repo_snapshot, tmp_path, wheelhouse)


def test_container_mode_install_is_idempotent_and_uninstall_reverts(deploy: Deploy) -> None:
    p = deploy.prefix
    deploy("install", "--mode", "container", "--no-wait")
    calls = deploy.calls()
    build = next(c for c in calls if c[:2] == ["docker", "build"])
    assert build[build.index("--tag") + 1] == "fastverify:0.1.0"
    assert build[-1] == str(deploy.repo)
    assert ["systemctl", "daemon-reload"] in calls
    assert ["systemctl", f"--root={p}", "enable", "fastverify.service"] in calls
    assert calls[-1] == ["systemctl", "start", "fastverify.service"]

    unit = (p / "etc/systemd/system/fastverify.service").read_text()
    assert "ExecStart=/usr/bin/docker compose --project-name fastverify" in unit
    assert "--file /etc/fastverify/compose/docker-compose.yml up" in unit
    compose = p / "etc/fastverify/compose"
    assert (compose / "docker-compose.yml").read_bytes() == (
        deploy.repo / "compose/docker-compose.yml"
    ).read_bytes()
    assert "FASTVERIFY_IMAGE=fastverify:0.1.0" in (compose / ".env").read_text()
    # the container's environment is the env file installed below, not the bundle's own
    assert "FASTVERIFY_ENV_FILE=/etc/fastverify/fastverify.env" in (compose / ".env").read_text()
    assert not (compose / "fastverify.env").exists()
    assert (compose / "grafana/dashboards/fastverify-overview.json").is_file()
    config = (p / "etc/fastverify/fastverifyd.toml").read_text()
    assert 'engine = "sglang"' in config
    group = next(
        g for g in (p / "etc/group").read_text().splitlines() if g.startswith("fastverify:")
    )
    assert f'socket_group = "{group.split(":")[2]}"' in config  # the host's gid, by number
    assert (p / "etc/fastverify/fastverify.env").stat().st_mode & 0o777 == 0o640
    assert (p / "etc/fastverify/profiles").is_dir()
    assert (p / "var/lib/fastverify").is_dir()
    assert any(
        line.startswith("fastverify:x:") for line in (p / "etc/group").read_text().splitlines()
    )
    ctl = p / "usr/local/bin/fastverifyctl"
    assert os.readlink(ctl) == str(p / "opt/fastverify/bin/fastverifyctl")
    version = subprocess.run([str(ctl), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "0.1.0" in version.stdout

    # Second install: nothing changes, no reload or enable issued.
    before = deploy.tree()
    out = deploy("install", "--mode", "container", "--no-wait")
    assert "nothing changed" in out
    assert deploy.tree() == before
    second = deploy.calls()
    assert ["systemctl", "daemon-reload"] not in second
    assert not [c for c in second if "enable" in c]

    # An edited config is kept (new default beside it); an edited unit is backed up.
    config = p / "etc/fastverify/fastverifyd.toml"
    config.write_text(config.read_text().replace("tp_size = 8", "tp_size = 4"))
    unit_path = p / "etc/systemd/system/fastverify.service"
    unit_path.write_text(unit_path.read_text() + "# local edit\n")
    out = deploy("install", "--mode", "container", "--no-wait")
    assert "tp_size = 4" in config.read_text()
    assert "tp_size = 8" in (p / "etc/fastverify/fastverifyd.toml.dist").read_text()
    backups = list(unit_path.parent.glob("fastverify.service.bak.*"))
    assert len(backups) == 1 and backups[0].read_text().endswith("# local edit\n")
    assert "# local edit" not in unit_path.read_text()
    assert ["systemctl", "daemon-reload"] in deploy.calls()

    # Uninstall: what install added goes; state and the operator's edits stay.
    (p / "var/lib/fastverify/state.json").write_text("{}")
    deploy("uninstall")
    calls = deploy.calls()
    assert ["systemctl", "stop", "fastverify.service"] in calls
    assert ["systemctl", f"--root={p}", "disable", "fastverify.service"] in calls
    assert not unit_path.exists()
    assert not (p / "opt/fastverify").exists() and not ctl.is_symlink()
    assert not (p / "etc/fastverify/compose").exists()
    assert not (p / "etc/fastverify/fastverify.env").exists()
    assert (p / "etc/fastverify/fastverifyd.toml.bak.uninstall").read_text().count("tp_size = 4")
    assert (p / "var/lib/fastverify/state.json").exists()
    deploy("uninstall", expect=1)  # nothing left to uninstall


def test_host_mode_install_and_dry_run(deploy: Deploy) -> None:
    p = deploy.prefix
    before = deploy.tree()
    out = deploy("install", "--mode", "host", "--engine", "auto", "--dry-run")
    assert "would run: python3 -m venv" in out
    assert deploy.tree() == before, "--dry-run changed files"
    assert [c for c in deploy.calls() if "is-enabled" not in c] == []

    deploy("install", "--mode", "host", "--engine", "auto", "--no-wait")
    assert not [c for c in deploy.calls() if c[0] == "docker"]
    assert ["systemctl", "start", "fastverifyd.service"] in deploy.calls()
    unit = (p / "etc/systemd/system/fastverifyd.service").read_text()
    assert "Type=notify" in unit
    assert (
        "ExecStart=/opt/fastverify/bin/fastverifyd --config /etc/fastverify/fastverifyd.toml"
        in unit
    )
    config = (p / "etc/fastverify/fastverifyd.toml").read_text()
    assert 'engine = "auto"' in config and 'metrics_listen = "127.0.0.1:9464"' in config
    assert (p / "opt/fastverify/bin/fastverifyd").is_file()
    assert not (p / "etc/fastverify/compose").exists()

    deploy("uninstall", "--purge")
    assert ["systemctl", "stop", "fastverifyd.service"] in deploy.calls()
    assert not (p / "var/lib/fastverify").exists() and not (p / "opt/fastverify").exists()


def test_deploy_refuses_unknown_arguments(deploy: Deploy) -> None:
    out = deploy("install", "--mode", "vm", expect=1)
    assert "--mode must be container or host" in out
    out = deploy("install", "--frobnicate", expect=1)
    assert "unknown argument" in out
