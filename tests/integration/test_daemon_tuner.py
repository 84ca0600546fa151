"""fastverifyd with a tuner profile on the sim: NCCL's INFO output proves the plugin loaded.

The plugin is the project's own, built by scripts/build-tuner.sh; the sim dlopens it as
NCCL 2.28.9 does (sim/tunerload.py) and the plugin's own init writes its rows
line. A plugin NCCL cannot use fails the switch with its own reason and rolls back.
"""

from __future__ import annotations

import _ctypes
import json
import urllib.request
from pathlib import Path

import psutil

from tests.support.harness import DaemonHarness

TABLE = (
    "collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes\n"
    "AllReduce,0,327679,Ring,LL,-1,2,1\n"
    "AllReduce,327680,134217728,Ring,Simple,-1,2,1\n"
    "AllReduce,0,134217728,Ring,Simple,-1,4,1\n"  # another rank count: not applied at tp 2
)
TUNED = "# description: tuner test\n# extends: nccl-default\nFASTVERIFY_TUNER_TABLE=t.tuner.csv\n"


def _profiles(d: Path, not_ours: str) -> None:
    (d / "t.tuner.csv").write_text(TABLE)
    (d / "tuned.env").write_text(TUNED)
    # a shared object that is not a tuner plugin (NCCL: "... is unsupported")
    (d / "notours.env").write_text(TUNED + f"NCCL_TUNER_PLUGIN={not_ours}\n")
    # a bare name NCCL cannot find on the library path ("Could not find: ...")
    (d / "missing.env").write_text(TUNED + "NCCL_TUNER_PLUGIN=fastverify-missing\n")


def test_tuner_profile_is_confirmed_and_a_bad_plugin_rolls_back(
    tmp_path: Path, plugin_so: Path
) -> None:
    not_ours = str(Path(_ctypes.__file__).resolve())
    with DaemonHarness(tmp_path, env={"FASTVERIFY_TUNER_SO": str(plugin_so)}) as d:
        _profiles(d.profile_dir, not_ours)

        r = d.ctl("profile", "set", "tuned", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert (st["state"], st["profile"]) == ("READY", "tuned")
        tuner = st["engine"]["tuner"]
        assert tuner["name"] == "fastverify" and tuner["abi_version"] == 5
        assert (tuner["rows_applied"], tuner["rows_total"]) == (2, 3)
        assert tuner["path"] == str(plugin_so.resolve())
        assert tuner["table"] == str((d.profile_dir / "t.tuner.csv").resolve())
        rec = d.client.get("/v1/history")[-1]
        assert (rec["profile"], rec["result"]) == ("tuned", "ok")
        assert rec["tuner"] == tuner
        journal = [json.loads(x) for x in (d.state_dir / "journal.jsonl").read_text().splitlines()]
        assert [
            j["tuner"]
            for j in journal
            if j.get("profile") == "tuned" and j.get("type") != "request"
        ] == [tuner]
        # every rank's process had NCCL_DEBUG forced (the daemon's config leaves it off)
        for p in [
            psutil.Process(st["engine"]["pid"]),
            *psutil.Process(st["engine"]["pid"]).children(),
        ]:
            env = p.environ()
            assert env["NCCL_DEBUG"] == "INFO" and "INIT" in env["NCCL_DEBUG_SUBSYS"]
            assert env["NCCL_TUNER_PLUGIN"] == str(plugin_so.resolve())
        debug_dir = Path(env["NCCL_DEBUG_FILE"]).parent

        def both_ranks() -> list[Path] | None:  # rank 1 writes its own, maybe a moment later
            found = sorted(debug_dir.glob("*.log"))
            return found if len(found) == 2 else None

        logs = d.wait_for(both_ranks, 30, "both ranks' NCCL debug files")
        for f in logs:
            assert "TUNER/Plugin: Using fastverify (v5)" in f.read_text()

        for name, reason, quoted in (
            ("notours", "tuner_unsupported", f"External tuner plugin {not_ours} is unsupported"),
            (
                "missing",
                "tuner_not_loaded",
                "TUNER/Plugin: Could not find: fastverify-missing "
                "libnccl-tuner-fastverify-missing.so",
            ),
        ):
            r = d.ctl("profile", "set", name)
            assert r.returncode == 1, r.stdout + r.stderr
            assert reason in r.stderr and "rolled" in r.stderr, r.stderr
            st = d.status()
            assert (st["state"], st["profile"], st["last_good"]) == ("READY", "tuned", "tuned")
            assert st["last_failure"]["reason"] == reason
            assert st["last_failure"]["line"] == quoted
            assert st["engine"]["tuner"]["name"] == "fastverify"  # the rolled-back engine's
            rec = d.client.get("/v1/history")[-1]
            assert (rec["profile"], rec["result"], rec["reason"]) == (name, "rolled_back", reason)
            with urllib.request.urlopen(d.server_url + "/health", timeout=10) as resp:
                assert resp.status == 200  # the rolled-back engine serves
        # the previous profile keeps serving
        r = d.ctl("status", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["profile"] == "tuned"


def test_profile_without_tuner_has_no_tuner_check(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path) as d:
        st = d.status()
        assert st["engine"]["tuner"] is None
        env = psutil.Process(st["engine"]["pid"]).environ()
        assert "NCCL_DEBUG" not in env  # only tuner profiles force NCCL's INFO output
        assert d.client.get("/v1/history")[-1]["tuner"] is None
