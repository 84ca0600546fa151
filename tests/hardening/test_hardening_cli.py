"""Issue 12, operator doors against real processes: the engine's environment, profile
directories seen through the daemon, CLI exits when the daemon is stopped or resets the
connection, README promises (validate exit code, piped output, progress), cancel."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from tests.harness import DaemonHarness

SECRET = "s3cr3t-hash-9f8e7d"


def test_engine_gets_only_the_hf_variables_the_config_names(tmp_path: Path) -> None:
    daemon_env = {
        "HF_ENDPOINT": "http://mirror.invalid",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_TOKEN": "hf_" + "t" * 24,
    }
    cfg = {"server": {"env_passthrough": ["HF_TOKEN"]}}
    with DaemonHarness(tmp_path, env=daemon_env, config=cfg, metrics=False) as d:
        env = psutil.Process(d.engine_pid()).environ()
        assert env.get("HF_TOKEN") == daemon_env["HF_TOKEN"]
        assert "HF_ENDPOINT" not in env and "HF_HOME" not in env


def test_link_to_a_foreign_file_is_not_quoted_over_the_api(tmp_path: Path) -> None:
    outside = tmp_path / "root-only"
    outside.write_text(f"root:$6${SECRET}:19000:0:99999:7:::\n")
    with DaemonHarness(tmp_path, metrics=False) as d:
        (tmp_path / "profiles" / "leak.env").symlink_to(outside)
        res = d.ctl("profile", "set", "leak", "--json")
        assert res.returncode == 2, res.stdout + res.stderr
        body = json.loads(res.stdout)
        assert "symbolic link" in json.dumps(body)
        assert SECRET not in res.stdout + res.stderr + d.log_text()
