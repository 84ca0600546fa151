"""The real compose file brought up by a real Compose (Debian's docker-compose) on the private
dockerd: the fastverify service from the test image, with the host's socket directory,
state directory, operator profile directory, config and env file bind-mounted exactly as
the file says, and its ports published on the host's loopback. Changes to the file, for what
this machine lacks: no GPU, so the NVIDIA device reservation is dropped; and where the test
cannot raise a resource limit (no CAP_SYS_RESOURCE in a sandbox), memlock/nofile are capped
at the current hard limit. Prometheus and Grafana are not
started (their images come from a registry this machine cannot reach); their configuration
is checked by promtool and the dashboard tests."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.containers import REPO, Docker, free_port, run, unavailable

pytestmark = [pytest.mark.container, pytest.mark.slow]

OPERATOR_PROFILE = """# description: ring-ll with 4 channels (an operator's own profile)
# extends: ring-ll
NCCL_MAX_NCHANNELS=4
"""


def status(sock: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "--socket", str(sock), "status", "--json"],
        capture_output=True, text=True, timeout=20,
    )  # fmt: skip
    return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else {}


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def test_compose_up_serves_the_host_cli_and_published_ports(
    dockerd: Docker, fastverify_image: str, tmp_path: Path
) -> None:
    compose = shutil.which("docker-compose")
    if compose is None:
        unavailable("docker-compose missing: run scripts/install-system-deps.sh")
    stack = tmp_path / "stack"
    stack.mkdir()
    doc = yaml.safe_load((REPO / "compose/docker-compose.yml").read_text())
    service = doc["services"]["fastverify"]
    del service["deploy"]  # no GPU on this machine
    limits = {"memlock": resource.RLIMIT_MEMLOCK, "stack": resource.RLIMIT_STACK,
              "nofile": resource.RLIMIT_NOFILE}  # fmt: skip
    expected = {}
    for name, value in service["ulimits"].items():
        hard = resource.getrlimit(limits[name])[1]
        want = value["hard"] if isinstance(value, dict) else value
        if hard != resource.RLIM_INFINITY and (want == -1 or want > hard):
            want = hard  # cannot be raised here (no CAP_SYS_RESOURCE)
        service["ulimits"][name] = want
        expected[name] = want
    (stack / "docker-compose.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copy(REPO / "compose/prometheus.yml", stack / "prometheus.yml")

    dirs = {name: tmp_path / name for name in ("run", "state", "profiles", "models", "hf")}
    for d in dirs.values():
        d.mkdir()
    (dirs["models"] / "model").mkdir()
    (dirs["models"] / "draft").mkdir()
    (dirs["profiles"] / "ops-ring-4ch.env").write_text(OPERATOR_PROFILE)
    config = tmp_path / "fastverifyd.toml"
    config.write_text(
        (REPO / "compose/fastverifyd.container.toml")
        .read_text()
        .replace('engine = "sglang"', 'engine = "auto"')
        + "\n[sim]\nload_seconds = 1.0\n"
    )
    env_file = tmp_path / "fastverify.env"
    env_file.write_text("FASTVERIFY_TEST_MARKER=from-env-file\n")
    exporter_port, sglang_port = free_port(), free_port()
    project = f"fvtest{tmp_path.name[-8:].replace('_', '').lower()}"
    env = {
        **dockerd.env,
        "COMPOSE_PROJECT_NAME": project,
        "FASTVERIFY_IMAGE": fastverify_image,
        "FASTVERIFY_ENV_FILE": str(env_file),
        "FASTVERIFY_CONFIG_FILE": str(config),
        "FASTVERIFY_MODEL_DIR": str(dirs["models"]),
        "FASTVERIFY_HF_CACHE": str(dirs["hf"]),
        "FASTVERIFY_STATE_DIR": str(dirs["state"]),
        "FASTVERIFY_PROFILE_DIR": str(dirs["profiles"]),
        "FASTVERIFY_SOCKET_DIR": str(dirs["run"]),
        "FASTVERIFY_EXPORTER_PORT": str(exporter_port),
        "FASTVERIFY_SGLANG_PORT": str(sglang_port),
        "FASTVERIFY_RESTART": "no",
    }

    def compose_cmd(*args: str, check: bool = True, timeout: float = 180):
        return run(
            [compose, "--ansi", "never", *args], cwd=stack, env=env, check=check, timeout=timeout
        )

    sock = dirs["run"] / "control.sock"
    try:
        compose_cmd("up", "-d", "--no-build", "fastverify")
        deadline = time.monotonic() + 60
        while status(sock).get("state") != "READY":
            assert time.monotonic() < deadline, compose_cmd("logs", check=False).stdout[-3000:]
            time.sleep(0.3)

        # The operator's profile directory on the host is the daemon's profiles.d.
        switch = subprocess.run(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(sock),
             "profile", "set", "ops-ring-4ch"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert switch.returncode == 0, switch.stdout + switch.stderr
        assert status(sock)["profile"] == "ops-ring-4ch"

        # Published on the host's loopback, as Prometheus (or an operator) scrapes them.
        metrics = get(f"http://127.0.0.1:{exporter_port}/metrics")
        info = next(m for m in metrics.splitlines() if m.startswith("fastverify_profile_info{"))
        assert 'profile="ops-ring-4ch"' in info and 'nccl_max_nchannels="4"' in info
        assert "sglang:gen_throughput" in get(f"http://127.0.0.1:{sglang_port}/metrics")

        name = compose_cmd("ps", "-q", "fastverify").stdout.strip()
        inspect = json.loads(dockerd("inspect", name).stdout)[0]
        assert inspect["HostConfig"]["IpcMode"] == "host"
        assert "FASTVERIFY_TEST_MARKER=from-env-file" in inspect["Config"]["Env"]
        ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in inspect["HostConfig"]["Ulimits"]}
        assert ulimits == {name: (v, v) for name, v in expected.items()}

        down = compose_cmd("down", "--timeout", "60")
        assert down.returncode == 0
        assert not sock.exists() or status(sock) == {}
        state = json.loads((dirs["state"] / "state.json").read_text())
        assert state["profile"] == "ops-ring-4ch"
    finally:
        compose_cmd("down", "--volumes", "--timeout", "10", check=False)
