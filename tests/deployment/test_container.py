"""The real image, built from the Dockerfile on a local Debian base (no SGLang, no GPU), run by
a real dockerd with the image's own entrypoint and baked config; `--engine auto` (the only
override) makes the daemon pick the sim engine. The host drives it with `fastverifyctl`
through the bind-mounted socket directory and scrapes the exporter inside the container's
network namespace (the container runs with --network none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.containers import Docker, run

pytestmark = [pytest.mark.container, pytest.mark.slow]


def ctl(socket: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "fastverify.ctl", "--socket", str(socket), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def status(socket: Path) -> dict:
    proc = ctl(socket, "status", "--json", timeout=10)
    return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else {}


def wait_for(predicate, timeout: float, what: str, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def scrape_in_netns(pid: int, url: str) -> str:
    code = (
        f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).read().decode())"
    )
    return run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", sys.executable, "-c", code], timeout=30
    ).stdout


@pytest.fixture
def container(dockerd: Docker, fastverify_image: str, tmp_path: Path) -> Iterator[dict]:
    run_dir, state, models = tmp_path / "run", tmp_path / "state", tmp_path / "models"
    for d in (run_dir, state, models / "model", models / "draft"):
        d.mkdir(parents=True)
    name = f"fastverify-test-{os.getpid()}-{tmp_path.name[-12:]}"
    dockerd(
        "run", "--detach", "--name", name, "--network", "none",
        "--health-interval", "1s", "--health-start-period", "60s",
        "-v", f"{run_dir}:/run/fastverify", "-v", f"{state}:/var/lib/fastverify",
        "-v", f"{models}:/models:ro",
        fastverify_image, "--config", "/etc/fastverify/fastverifyd.toml", "--engine", "auto",
        "--sim-load-seconds", "1",
    )  # fmt: skip
    try:
        yield {"name": name, "socket": run_dir / "control.sock", "state": state}
    finally:
        logs = dockerd("logs", "--tail", "40", name, check=False)
        print(logs.stdout[-4000:], logs.stderr[-4000:])
        dockerd("rm", "--force", name, check=False)


def test_image_layout_and_metadata(dockerd: Docker, fastverify_image: str) -> None:
    info = json.loads(dockerd("image", "inspect", fastverify_image).stdout)[0]["Config"]
    assert info["Entrypoint"] == ["/opt/fastverify/bin/fastverifyd"]
    assert info["Cmd"] == ["--config", "/etc/fastverify/fastverifyd.toml"]
    assert info["StopSignal"] == "SIGTERM"
    assert info["Healthcheck"]["Test"][0] == "CMD"
    assert info["Labels"]["org.opencontainers.image.title"] == "fastverify"
    listing = dockerd(
        "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", fastverify_image, "-c",
        "ls /etc/fastverify/profiles/; grep '^engine' /etc/fastverify/fastverifyd.toml",
    ).stdout.split()  # fmt: skip
    assert "tree-ll.env" in listing and "nccl-default.env" in listing
    assert listing[listing.index("engine") :][:3] == ["engine", "=", '"sglang"']
    # No sitecustomize sets NCCL variables: the interpreter starts with none, and whatever
    # sitecustomize the base ships (Debian's) does not mention NCCL.
    probe = (
        "import importlib.util, json, os; s = importlib.util.find_spec('sitecustomize');"
        "o = s.origin if s else None;"
        "print(json.dumps({'origin': o, 'nccl': sorted(k for k in os.environ if 'NCCL' in k),"
        " 'mentions': bool(o) and 'NCCL' in open(o).read()}))"
    )
    out = json.loads(
        dockerd(
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "/opt/fastverify/bin/python",
            fastverify_image,
            "-c",
            probe,
        ).stdout
    )
    assert out["nccl"] == [] and out["mentions"] is False, out
    assert not (out["origin"] or "").startswith("/opt/fastverify"), out


def test_host_cli_drives_the_daemon_in_the_container(dockerd: Docker, container: dict) -> None:
    sock: Path = container["socket"]
    first = wait_for(lambda: (s := status(sock)).get("state") == "READY" and s, 60, "daemon READY")
    assert first["engine"]["name"] == "sim" and first["engine"]["simulated"] is True
    assert first["profile"] == "nccl-default"
    assert oct(sock.stat().st_mode & 0o777) == "0o660"

    # tree-ll fails CUDA-graph capture (as NCCL_ALGO=Tree does on real SGLang): rollback.
    proc = ctl(sock, "profile", "set", "tree-ll")
    assert proc.returncode != 0, proc.stdout
    assert "rolled" in (proc.stdout + proc.stderr)
    after = status(sock)
    assert after["state"] == "READY" and after["profile"] == "nccl-default"
    assert after["last_failure"]["reason"] == "cuda_graph_capture"

    proc = ctl(sock, "profile", "set", "ring-ll")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert status(sock)["profile"] == "ring-ll"

    pid = int(dockerd("inspect", "-f", "{{.State.Pid}}", container["name"]).stdout)
    metrics = scrape_in_netns(pid, "http://127.0.0.1:9464/metrics")
    assert "fastverify_up 1.0" in metrics
    info = next(m for m in metrics.splitlines() if m.startswith("fastverify_profile_info{"))
    assert 'profile="ring-ll"' in info and 'nccl_algo="Ring"' in info
    switches = {
        line.split('"')[1]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("fastverify_profile_switches_total{")
    }
    assert switches.get("rolled_back") == 1.0 and switches.get("ok", 0) >= 1.0, switches
    sglang = scrape_in_netns(pid, "http://127.0.0.1:30000/metrics")
    assert "sglang:num_running_reqs" in sglang

    health = wait_for(
        lambda: dockerd("inspect", "-f", "{{.State.Health.Status}}", container["name"])
        .stdout.strip() == "healthy",
        30, "HEALTHCHECK healthy",
    )  # fmt: skip
    assert health

    # The state survives in the bind-mounted state dir.
    assert json.loads((container["state"] / "state.json").read_text())["profile"] == "ring-ll"

    # docker stop: SIGTERM -> the daemon stops the engine and exits 0 inside the grace (a
    # SIGKILL at its end would read 137).
    dockerd("stop", "--time", "60", container["name"])
    assert dockerd("inspect", "-f", "{{.State.ExitCode}}", container["name"]).stdout.strip() == "0"
    logs = dockerd("logs", container["name"]).stderr
    assert "STOPPING -> STOPPED" in logs
