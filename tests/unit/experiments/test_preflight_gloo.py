"""preflight's orchestration with real rank processes on CPUs (torch.distributed gloo).

CUDA-graph steps report "skipped" on gloo; the GPU path ran on an H200 (see
benchmarks/results/preflight-h200-1gpu.json). Needs torch: CI installs the CPU build.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fastverify.experiments.preflight import hostcheck as pf_host
from fastverify.experiments.preflight import merge as pf_merge
from tests.support.harness import ctrl_c_reaches_it

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "tests" / "fixtures" / "nccl-2.28.9-h200-1rank" / "nccl-info-ring-ll.log"
HAVE_TORCH = pf_host.torch_available()
needs_torch = pytest.mark.skipif(
    not HAVE_TORCH,
    reason="TORCH IS NOT INSTALLED: preflight's rank processes need it "
    "(pip install torch==2.13.0, the CPU build); these tests did NOT run",
)

WORKER_TAIL = os.path.join("preflight", "worker.py")


def ctl(*args: str, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "preflight", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_parse_real_nccl_info_log() -> None:
    parsed = pf_merge.parse_nccl_log(FIXTURE.read_text())
    assert parsed["version"] == "2.28.9+cuda13.0"
    assert parsed["confirmed"] == {
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    }
    assert parsed["tuning"] == {}  # one rank: NCCL prints no tuning decision


def test_parse_tuning_and_warn_lines() -> None:
    p = "h:1:1 [0] NCCL INFO "
    text = (
        f"{p}AllReduce: 16384 Bytes -> Algo RING proto LL channel{{Lo..Hi}}={{0..1}}\n"
        f"{p}AllReduce: 16384 Bytes -> Algo RING proto LL channel{{Lo..Hi}}={{0..1}}\n"
        f"{p}AllGather: 16384 Bytes -> Algo TREE proto SIMPLE channel{{Lo..Hi}}={{0..1}}\n"
        f"{p}AllReduce: 1048576 Bytes -> Algo TREE proto SIMPLE channel{{Lo..Hi}}={{0..3}}\n"
        "h:1:1 [0] NCCL WARN Invalid NCCL_ALGO token 'Trees'\n"
    )
    parsed = pf_merge.parse_nccl_log(text)
    assert parsed["tuning"] == {
        16384: {"algo": "RING", "proto": "LL"},
        1048576: {"algo": "TREE", "proto": "SIMPLE"},
    }
    assert parsed["warnings"] == ["Invalid NCCL_ALGO token 'Trees'"]


@pytest.fixture
def user_profiles(tmp_path: Path) -> dict[str, str]:
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "pf-test.env").write_text(
        "# description: preflight test profile\nNCCL_PROTO=LL\nNCCL_MAX_NCHANNELS=4\n"
    )
    return {"FASTVERIFY_PROFILE_DIRS": str(d)}


@needs_torch
def test_two_ranks_get_exactly_the_profile_env(tmp_path: Path, user_profiles: dict) -> None:
    logs, out = tmp_path / "logs", tmp_path / "report.json"
    env = {**user_profiles, "NCCL_ALGO": "Tree", "NCCL_SOCKET_IFNAME": "lo"}  # inherited: dropped
    r = ctl("pf-test", "--backend", "gloo", "--nproc", "2", "--hidden-size", "64",
            "--tokens", "1,3", "--iters", "5", "--logs", str(logs), "--output", str(out),
            "--json", env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert json.loads(out.read_text()) == report
    assert report["world_size"] == 2 and "note" not in report  # no one-rank note
    prof = report["profiles"][0]
    assert prof["status"] == "ok" and prof["env_verified"] is True
    assert [s["bytes"] for s in prof["sizes"]] == [64 * 1 * 4, 64 * 3 * 4]  # float32 on gloo
    for s in prof["sizes"]:
        assert s["correct"] is True
        assert s["graph"]["capture"] == "skipped"
        assert s["eager"]["busbw_gbs"] == pytest.approx(s["eager"]["algbw_gbs"])  # 2(n-1)/n = 1
        assert s["eager"]["p99_us"] >= s["eager"]["p50_us"] > 0
    # What each rank process really received (written by the rank itself):
    for rank in (0, 1):
        got = json.loads((logs / f"pf-test.rank{rank}.json").read_text())["nccl_env"]
        got.pop("NCCL_DEBUG_FILE")
        assert got == {"NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": "4", "NCCL_DEBUG": "INFO",
                       "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}  # fmt: skip
    assert "[1/1] pf-test: ok" in r.stderr


@needs_torch
def test_timeout_kills_the_ranks_it_started(tmp_path: Path, user_profiles: dict) -> None:
    logs = tmp_path / "slow-logs"
    r = ctl("pf-test", "--backend", "gloo", "--nproc", "2", "--hidden-size", "256",
            "--tokens", "64", "--iters", "1000000", "--timeout", "4", "--logs", str(logs),
            "--json", env=user_profiles)  # fmt: skip
    assert r.returncode == 1
    prof = json.loads(r.stdout)["profiles"][0]
    assert prof["status"] == "failed" and "timed out after 4 s" in prof["error"]
    leftovers = [
        p.pid for p in psutil.process_iter(["cmdline"])
        if any(str(logs) in part for part in (p.info["cmdline"] or []))
        and any(part.endswith(WORKER_TAIL) for part in (p.info["cmdline"] or []))
    ]  # fmt: skip
    assert leftovers == []


@needs_torch
def test_rank_init_failure_is_reported() -> None:
    # The nccl backend on a machine where torch sees no GPU: init fails in the rank.
    if pf_host.visible_gpus() > 0 or os.path.exists("/dev/nvidia0"):
        pytest.skip("this machine has a GPU")
    # CUDA_VISIBLE_DEVICES names a GPU torch cannot see: past the up-front no-GPU check
    r = ctl("nccl-default", "--nproc", "1", "--tokens", "1", "--iters", "2", "--json",
            env={"CUDA_VISIBLE_DEVICES": "0"})  # fmt: skip
    assert r.returncode == 1
    prof = json.loads(r.stdout)["profiles"][0]
    assert prof["status"] == "failed"
    assert "needs CUDA" in prof["error"]


def test_missing_torch_is_a_distinct_exit_code(tmp_path: Path) -> None:
    # An interpreter that cannot import torch: this Python without site-packages.
    fake = tmp_path / "python-no-site"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    fake.chmod(0o755)
    r = ctl("nccl-default", "--python", str(fake), "--nproc", "1")
    assert r.returncode == 6  # EXIT_MISSING_DEPENDENCY
    assert "pip install 'fastverify[preflight]'" in r.stderr


def test_unknown_profile_is_a_usage_error() -> None:
    r = ctl("no-such-profile", "--nproc", "1")
    assert r.returncode == 2
    assert "no-such-profile" in r.stderr


def test_cli_import_path_stays_light() -> None:
    code = (
        "import sys, fastverify.cli.preflight_cmd, fastverify.experiments.preflight.run, "
        "fastverify.experiments.sweep.run, fastverify.experiments.bench.load; "
        "print(sorted(m for m in ('torch', 'httpx', 'rich', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]"


@needs_torch
def test_ctrl_c_stops_the_ranks(tmp_path: Path, user_profiles: dict) -> None:
    logs = tmp_path / "int-logs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastverify.ctl", "preflight", "pf-test", "--backend", "gloo",
         "--nproc", "2", "--hidden-size", "256", "--tokens", "64", "--iters", "1000000",
         "--logs", str(logs)],
        cwd=REPO, env={**os.environ, **user_profiles}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it,
    )  # fmt: skip

    def ranks() -> list[int]:
        return [
            p.pid for p in psutil.process_iter(["cmdline"])
            if any(str(logs) in part for part in (p.info["cmdline"] or []))
            and any(part.endswith(WORKER_TAIL) for part in (p.info["cmdline"] or []))
        ]  # fmt: skip

    def torch_loaded(pid: int) -> bool:
        try:
            return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            return False

    # The event: both ranks run the worker and have loaded torch, so the CLI has long
    # returned from starting them and is waiting in its loop (not a wall-clock guess). The
    # bound only ends a test that would otherwise hang; a busy machine just takes longer.
    deadline = time.monotonic() + 600
    while not (len(r := ranks()) == 2 and all(torch_loaded(p) for p in r)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the ranks never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert ranks() == []


@needs_torch
def test_daemon_config_env_reaches_the_ranks_and_secrets_stay_masked(
    tmp_path: Path, user_profiles: dict
) -> None:
    cfg = tmp_path / "fastverifyd.toml"
    cfg.write_text(
        '[server]\nenv = {CUDA_DEVICE_MAX_CONNECTIONS = "1"}\nenv_passthrough = ["HF_TOKEN"]\n'
    )
    logs = tmp_path / "cfg-logs"
    r = ctl("pf-test", "--backend", "gloo", "--nproc", "1", "--hidden-size", "32",
            "--tokens", "1", "--iters", "2", "--config", str(cfg), "--logs", str(logs),
            "--json", env={**user_profiles, "HF_TOKEN": "hf_secret_value"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    rank = json.loads((logs / "pf-test.rank0.json").read_text())
    assert {"CUDA_DEVICE_MAX_CONNECTIONS", "HF_TOKEN"} <= set(rank["env_names"])
    prof = json.loads(r.stdout)["profiles"][0]
    assert prof["extra_env"] == {"HF_TOKEN": "***", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert "hf_secret_value" not in r.stdout + r.stderr


def test_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[server]\nno_such_key = 1\n")
    r = ctl("nccl-default", "--config", str(cfg), "--nproc", "1")
    assert r.returncode == 2
    assert "no_such_key" in r.stderr
