"""The daemon end to end on the REAL sglang 0.5.23: `engine =
"sglang"`, `server.python` running tests/fixtures/real_sglang_launcher.py in the contract
venv, which parses the daemon's argv with SGLang's own parser, applies SGLang's own NCCL
environment rules in the server process and spawns its "schedulers" as SGLang does. The
daemon must verify the schedulers' real environment (profile + what SGLang added), name the
added variables in status, and get the CUDA-graph phases and EAGLE-3 flags past the real
parser. Only the GPU work is missing (the launcher's docstring says which steps run how).
"""

from __future__ import annotations

import json
import stat
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from fastverify.profiles.store import ProfileStore
from tests.support.harness import REPO, DaemonHarness

START_TIMEOUT = 600.0  # importing sglang on a busy 2-core machine; waits end on READY


def _wrapper(tmp: Path, python: Path) -> Path:
    """The daemon's `server.python`: `-m sglang.launch_server ARGV` runs the launcher
    fixture in the contract venv; anything else (version lookup, `server check`) goes to
    that venv's python unchanged."""
    path = tmp / "sglang-python"
    path.write_text(
        "#!/bin/sh\n"
        f'export PYTHONPATH="{REPO}"\n'
        'if [ "$1" = "-m" ] && [ "$2" = "sglang.launch_server" ]; then\n'
        "  shift 2\n"
        f'  exec "{python}" -m tests.fixtures.real_sglang_launcher "$@"\n'
        "fi\n"
        f'exec "{python}" "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _server_info(d: DaemonHarness) -> dict[str, Any]:
    with urllib.request.urlopen(d.server_url + "/server_info", timeout=30) as r:
        return json.loads(r.read())


def _schedulers(d: DaemonHarness) -> list[dict[str, str]]:
    """NCCL_* of each scheduler child, from /proc (what NCCL in that process would read)."""
    pids = _server_info(d)["scheduler_pids"]
    assert len(pids) == 2
    return [
        {k: v for k, v in psutil.Process(p).environ().items() if k.startswith("NCCL_")}
        for p in pids
    ]


def _profile_env(name: str) -> dict[str, str]:
    prof = ProfileStore().load(name)
    return {k: v for k, v in prof.env.items() if k.startswith("NCCL_")}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, sglang_python: Path) -> Any:
    tmp = tmp_path_factory.mktemp("real-sglang")
    config = {
        "server": {
            "python": str(_wrapper(tmp, sglang_python)),
            "model_path": "/models/not-loaded",
            "draft_model_path": "/models/not-loaded-eagle3",
        },
        "daemon": {"readiness_timeout_s": START_TIMEOUT, "default_profile": "nccl-default"},
    }
    with DaemonHarness(tmp, engine="sglang", tp_size=2, config=config, start=False) as d:
        d.start(timeout=START_TIMEOUT)
        yield d


def _set(d: DaemonHarness, *args: str) -> dict[str, Any]:
    r = d.ctl(*args, timeout=START_TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr + d.log_text()[-3000:]
    return d.status()


def _check_served(d: DaemonHarness, profile: str) -> dict[str, Any]:
    st = d.status()
    assert (st["state"], st["profile"], st["engine"]["name"]) == ("READY", profile, "sglang")
    info = _server_info(d)
    rules = st["engine"]["engine_env"]
    assert rules is not None and rules["version"] == "0.5.23"
    # what the REAL hooks added in the server equals what fastverify's rules predicted
    assert info["nccl_added"] == rules["added"], (info, rules)
    want = {**_profile_env(profile), **info["nccl_added"]}
    for env in _schedulers(d):
        assert env == want
    return st


def test_nccl_default_ready_with_engine_added_vars(daemon: DaemonHarness) -> None:
    st = _check_served(daemon, "nccl-default")
    assert st["engine"]["engine_env"]["added"]["NCCL_GRAPH_REGISTER"] == "0"
    assert "NCCL_GRAPH_REGISTER" in st["engine"]["engine_env"]["summary"]
    assert _server_info(daemon)["cuda_graph"] == {"decode": "full", "prefill": "breakable"}
    rec = daemon.client.get("/v1/history")[-1]
    assert rec["engine_env"]["added"]["NCCL_GRAPH_REGISTER"] == "0"


def test_ring_ll_ready_tp2(daemon: DaemonHarness) -> None:
    _set(daemon, "profile", "set", "ring-ll")
    st = _check_served(daemon, "ring-ll")
    assert st["engine"]["engine_env"]["added"]["NCCL_GRAPH_REGISTER"] == "0"
    for env in _schedulers(daemon):
        assert env["NCCL_PROTO"] == _profile_env("ring-ll")["NCCL_PROTO"]
    rec = daemon.client.get("/v1/history")[-1]
    assert (rec["profile"], rec["result"]) == ("ring-ll", "ok")
    assert rec["engine_env"]["added"]["NCCL_GRAPH_REGISTER"] == "0"


def test_tree_ll_eager_every_phase_off_and_no_graph_register(daemon: DaemonHarness) -> None:
    _set(daemon, "profile", "set", "tree-ll-eager")
    st = _check_served(daemon, "tree-ll-eager")
    assert _server_info(daemon)["cuda_graph"] == {"decode": "disabled", "prefill": "disabled"}
    # nothing captures, so the real parallel hook adds no NCCL_GRAPH_REGISTER
    assert "NCCL_GRAPH_REGISTER" not in st["engine"]["engine_env"]["added"]
    for env in _schedulers(daemon):
        assert "NCCL_GRAPH_REGISTER" not in env


def test_ring_ll_eagle3_through_the_real_parser(daemon: DaemonHarness) -> None:
    _set(daemon, "profile", "set", "ring-ll")
    st = _set(daemon, "mode", "set", "eagle3")
    assert (st["profile"], st["mode"]) == ("ring-ll", "eagle3")
    _check_served(daemon, "ring-ll")
    info = _server_info(daemon)
    assert info["speculative_algorithm"] == "EAGLE3"
    assert info["model_path"] == "/models/not-loaded"
