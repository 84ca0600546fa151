"""The suite never reads the machine's fastverify directories (tests/support/host_dirs.py):
fastverify's own default locations resolve into this test's directories, in this process
and in every process a test starts the ways the suite starts them; the profile commands
list this test's profile directory and nothing of /etc/fastverify/profiles; and the guard
that fails a test which read the machine's directories sees such a read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify import paths
from tests.support import host_dirs
from tests.support.harness import REPO, _scrubbed_env, run_ctl

PROBE = """
import json
from fastverify import paths
print(json.dumps({
    "config": str(paths.config_file()), "state": str(paths.state_dir()),
    "socket": str(paths.socket_path()),
    "profiles": [str(p) for p in paths.user_profile_dirs()],
}))
"""

MACHINE = ("/etc/fastverify", "/var/lib/fastverify", "/run/fastverify")


def resolved_here() -> dict[str, object]:
    return {
        "config": str(paths.config_file()), "state": str(paths.state_dir()),
        "socket": str(paths.socket_path()),
        "profiles": [str(p) for p in paths.user_profile_dirs()],
    }  # fmt: skip


def assert_own(found: dict[str, object], base: Path) -> None:
    """Every location fastverify defaults to is below this test's `base`."""
    flat = [found["config"], found["state"], found["socket"], *found["profiles"]]  # type: ignore[misc]
    outside = [p for p in flat if not str(p).startswith(str(base) + "/")]
    assert outside == [], (outside, base)
    assert not any(str(p).startswith(MACHINE) for p in flat), flat


def test_defaults_resolve_into_this_tests_own_directories(own_host_dirs: Path) -> None:
    assert_own(resolved_here(), own_host_dirs)


@pytest.mark.parametrize(
    "make_env",
    [
        pytest.param(lambda: dict(os.environ), id="os.environ"),
        pytest.param(_scrubbed_env, id="harness"),
        pytest.param(lambda: host_dirs.clean_env(("FASTVERIFY_", "NCCL_")), id="clean_env"),
    ],
)
def test_a_started_process_resolves_into_them_too(own_host_dirs: Path, make_env) -> None:
    env = {**make_env(), "PYTHONPATH": str(REPO), "FASTVERIFY_SOME_SETTING": "dropped"}
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=60, check=True)  # fmt: skip
    assert_own(json.loads(r.stdout), own_host_dirs)


def test_clean_env_drops_a_developers_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", "/somewhere/table.json")
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    env = host_dirs.clean_env(("FASTVERIFY_", "NCCL_"))
    assert "FASTVERIFY_TUNER_TABLE" not in env and "NCCL_ALGO" not in env
    assert {v: env[v] for v in host_dirs.ISOLATING} == {
        v: os.environ[v] for v in host_dirs.ISOLATING
    }


def test_profile_list_shows_this_tests_profile_dir_only(own_host_dirs: Path) -> None:
    """The command the host's extra profile once leaked into: it lists the test's own
    profile directory (an operator profile placed there shows) and no other."""
    mine = Path(os.environ["FASTVERIFY_PROFILE_DIRS"])
    (mine / "only-in-this-test.env").write_text(
        "# description: a profile of this test's own host\nNCCL_ALGO=Ring\n"
    )
    r = run_ctl("profile", "list", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    listed = json.loads(r.stdout)
    assert {"only-in-this-test", "ring-ll"} <= {p["name"] for p in listed}
    user = [(p["name"], p["path"]) for p in listed if p["source"] != "shipped"]
    assert user == [("only-in-this-test", str(mine / "only-in-this-test.env"))], user


def test_the_guard_sees_a_read_of_the_machines_directories() -> None:
    """The check can fail: a read under /etc/fastverify (there or not) is recorded, and the
    autouse fixture would fail the test with it; this test takes it back."""
    with pytest.raises(OSError):
        open("/etc/fastverify/profiles/../fastverifyd.toml.no-such-file")  # noqa: SIM115
    with pytest.raises(OSError):
        os.listdir("/var/lib/fastverify/no-such-dir")
    seen = host_dirs.take_reads()
    assert seen == [
        "open /etc/fastverify/fastverifyd.toml.no-such-file",
        "os.listdir /var/lib/fastverify/no-such-dir",
    ], seen
