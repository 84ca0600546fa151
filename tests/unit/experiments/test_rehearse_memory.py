"""`rehearse` and memory: the estimate made before any rank starts is
checked against what real gloo ranks allocate and hold; what cannot fit is refused with
how much it needs and has; a rank the kernel SIGKILLs is reported as probably out of
memory, by its rank, ahead of its peer's "Connection closed by peer"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastverify.cli.output import EXIT_PROBLEMS, EXIT_USAGE
from fastverify.experiments.preflight import hostcheck as pf_host
from fastverify.experiments.rehearse import memory, modelconfig
from fastverify.experiments.rehearse import run as rehearse

REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "examples" / "model-configs"
needs_torch = pytest.mark.skipif(
    not pf_host.torch_available(),
    reason="TORCH IS NOT INSTALLED: rehearse's rank processes need it "
    "(pip install torch==2.13.0, the CPU build); these tests did NOT run",
)
# A Llama-style model large enough that the weight pool, not the layer count, decides how
# many layer slots a rank holds (16 layers; --pool-gb 0.05 holds 5 slots at TP 2).
MID = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
       "intermediate_size": 2816, "num_attention_heads": 16, "num_key_value_heads": 8,
       "head_dim": 64, "num_hidden_layers": 16, "vocab_size": 32000}  # fmt: skip


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fastverify.ctl", "rehearse", *args]


def ctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip


@pytest.fixture
def mid_config(tmp_path: Path) -> Path:
    path = tmp_path / "mid.json"
    path.write_text(json.dumps(MID))
    return path


@needs_torch
@pytest.mark.parametrize(
    ("config", "pool"), [("mid", "0.05"), (str(CONFIGS / "tiny-moe.json"), "0.01")]
)
def test_the_estimate_matches_what_real_ranks_allocate_and_hold(
    mid_config: Path, config: str, pool: str
) -> None:
    path = str(mid_config) if config == "mid" else config
    res = ctl("--model-config", path, "--backend", "gloo", "--steps", "2", "--pool-gb", pool,
              "--json", "nccl-default")  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    est = report["memory_estimate"]
    assert est["world"] == 2 and est["backend"] == "gloo"
    assert "host MemAvailable" in est["checked_against"]
    assert "memory: about" in res.stderr  # said before the ranks start
    (row,) = report["profiles"]
    assert row["status"] == "ok", row.get("error")
    for rank in row["ranks"]:
        b = rank["build"]
        allocated = (b["target_weight_bytes"] + b["drafter_weight_bytes"]) / memory.GIB
        if config == "mid":  # dense: the slot arithmetic is the worker's, byte for byte
            assert b["slot_counts"] == {"dense": 5}
            assert est["tensors_per_rank_gb"] == pytest.approx(allocated, rel=1e-9)
        else:  # MoE: the estimate takes the widest routing window the draw could give
            assert allocated <= est["tensors_per_rank_gb"] <= 1.5 * allocated
        # the process's real peak (tensors + Python/torch + activations) is inside it
        assert rank["max_rss_gb"] <= est["per_rank_gb"], (rank["max_rss_gb"], est)
        assert rank["max_rss_gb"] >= allocated


@needs_torch
def test_what_cannot_fit_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    assert memory.host_available_bytes() is not None
    # Kimi-K2.5's latent KV cache: 61 layers x 576 floats per token, here 16 x 2M tokens =
    # 4.4 TiB per rank, more than any host has (the default 8 GB pool alone: 32 GiB)
    res = ctl("--model-config", str(CONFIGS / "kimi-k2.5.json"), "--backend", "gloo",
              "--batch", "16", "--context", "2000000", "--logs", str(logs),
              "nccl-default")  # fmt: skip
    assert res.returncode == EXIT_USAGE, res.stderr
    err = res.stderr
    assert "not enough host memory for the gloo ranks: they need about" in err, err
    assert "GiB available (MemAvailable)" in err and "lower --pool-gb" in err, err
    assert "rank(s) ..." not in err  # nothing started
    assert not any(logs.glob("*.rank*")) if logs.exists() else True


def test_the_tours_kimi_config_on_gloo_needs_more_than_this_sized_host() -> None:
    # what the tour ran: Kimi-K2.5's shapes, 2 gloo ranks, the default 8 GB pool. In float32
    # that is 16 GiB of layer weights per rank plus the vocab-parallel embedding and head.
    target = modelconfig.load_spec(CONFIGS / "kimi-k2.5.json")
    drafter = modelconfig.load_spec(CONFIGS / "kimi-k2.5-eagle3.json")
    cfg = rehearse.RehearseConfig(model_config="k", backend="gloo")
    est = memory.estimate(rehearse.build_job(target, drafter, cfg, 2), 2)
    assert est.per_rank / memory.GIB > 16
    problem = memory.fit_problem(est, int(21 * memory.GIB), None)
    assert problem is not None and "has 21.0 GiB available" in problem
    assert memory.fit_problem(est, int(est.total * 1.01), None) is None
    # on NCCL it is bf16 on each rank's own GPU
    cfg = rehearse.RehearseConfig(model_config="k", backend="nccl")
    est = memory.estimate(rehearse.build_job(target, drafter, cfg, 2), 2)
    problem = memory.fit_problem(est, None, [int(141 * memory.GIB), int(4 * memory.GIB)])
    assert problem is not None and "GPU 1 has 4.0 GiB free" in problem


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _rss_gb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


@needs_torch
def test_a_rank_killed_by_sigkill_is_reported_as_probably_out_of_memory(
    mid_config: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        _cmd("--model-config", str(mid_config), "--backend", "gloo", "--steps", "100000",
             "--pool-gb", "0.05", "--logs", str(logs), "--json", "nccl-default"),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # rank 1 is the second rank process rehearse started; wait until it holds its
        # weights (past torch's import and the process group), then do what the OOM killer does
        deadline = time.monotonic() + 120
        victim = None
        while victim is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the ranks never built their weights"
            kids = [k for k in _children(proc.pid)
                    if b"worker.py" in Path(f"/proc/{k}/cmdline").read_bytes()]  # fmt: skip
            if len(kids) == 2 and _rss_gb(kids[1]) > 0.55:
                victim = kids[1]
            else:
                time.sleep(0.1)
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_PROBLEMS, err
    (row,) = json.loads(out)["profiles"]
    assert row["status"] == "failed"
    assert row["error"].startswith(
        "rank 1 was killed by SIGKILL (exit -9): probably out of memory"
    ), row["error"]
    assert "GiB per rank" in row["error"]
    assert "failed: rank 1 was killed by SIGKILL" in err
    # rank 0, which rehearse stopped after its peer died, is not blamed
    assert "rank 0 was killed" not in row["error"]


@pytest.mark.parametrize("recorded", ["rehearse-2gpu.json", "rehearse-h200-tp1.json"])
def test_the_estimate_matches_recorded_h200_runs(recorded: str) -> None:
    # real rehearse reports from H200s (bf16 on nccl): rehearse-h200-tp1.json is one rank
    # with the whole model (TP 1, 2026-12-01), rehearse-2gpu.json two ranks (TP 2)
    rec = json.loads((REPO / "benchmarks/results" / recorded).read_text())
    target = modelconfig.load_spec(REPO / rec["model_config"])
    drafter = modelconfig.load_spec(CONFIGS / "kimi-k2.5-eagle3.json")
    cfg = rehearse.RehearseConfig(model_config="k", backend="nccl", batch=rec["batch"],
                                  context=rec["context"], pool_gb=rec["pool_gb"],
                                  draft_tokens=rec["draft_tokens"])  # fmt: skip
    world = rec["world_size"]
    est = memory.estimate(rehearse.build_job(target, drafter, cfg, world), world)
    ranks = [rk for p in rec["profiles"] for rk in p["ranks"]]
    assert ranks
    for rk in ranks:
        b = rk["build"]
        assert est.tensors_per_rank == b["target_weight_bytes"] + b["drafter_weight_bytes"]
        assert rk["max_memory_gb"] * memory.GIB <= est.per_rank


def test_free_gpu_memory_is_read_from_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvidia-smi's real output on an H200 (tests/fixtures/nvidia-smi/README.md), printed by a
    # stand-in only for exactly the query rehearse makes
    fixture = REPO / "tests/fixtures/nvidia-smi/h200-query-gpu-index-free-total.csv"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        f'#!/bin/sh\n[ "$*" = "{" ".join(memory.GPU_QUERY)}" ] || exit 9\ncat {fixture}\n'
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert memory.gpu_free_bytes(1) == [143156 << 20]
    assert memory.gpu_free_bytes(2) is None  # one GPU: no reading for a second rank
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert memory.gpu_free_bytes(1) == [143156 << 20]
