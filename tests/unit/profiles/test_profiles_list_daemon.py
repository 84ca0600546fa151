"""`profile list` against a real fastverifyd (sim engine): the active profile is marked."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.harness import DaemonHarness


def test_list_marks_active_profile(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=0.2) as d:
        active = d.status()["profile"]
        res = d.ctl("profile", "list", "--json")
        assert res.returncode == 0, res.stderr
        rows = json.loads(res.stdout)
        assert [r["name"] for r in rows if r["active"]] == [active]
        assert all(r["active"] is False for r in rows if r["name"] != active)
        target = "ring-ll-8ch" if active != "ring-ll-8ch" else "ring-ll"
        assert d.ctl("profile", "set", target, "--quiet").returncode == 0
        rows = json.loads(d.ctl("profile", "list", "--json").stdout)
        assert [r["name"] for r in rows if r["active"]] == [target]
        text = d.ctl("profile", "list").stdout
        assert any(line.startswith("*\t" + target + "\t") for line in text.splitlines())
