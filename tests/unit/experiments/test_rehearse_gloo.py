"""`fastverifyctl rehearse` end to end on CPUs: real rank processes, torch.distributed gloo.

Exercises what CI can without a GPU: the CLI, profile environments reaching every rank, the
tiny models' forwards (dense GQA; MLA + MoE with a dense first layer), the collective count
per forward against the layer arithmetic, the profiler window read back by the project's own
trace analyzer (`step[VERIFY bs=N]` spans), and the break-even figures. CUDA graphs and
GPU kernel records need the nccl backend: see benchmarks/results/rehearse-2gpu.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify.experiments.preflight import hostcheck as pf_host

REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "examples" / "model-configs"
needs_torch = pytest.mark.skipif(
    not pf_host.torch_available(),
    reason="TORCH IS NOT INSTALLED: rehearse's rank processes need it "
    "(pip install torch==2.13.0, the CPU build); these tests did NOT run",
)


def ctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "rehearse", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.fixture
def user_profiles(tmp_path: Path) -> dict[str, str]:
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "rh-test.env").write_text("# description: rehearse test\nNCCL_PROTO=LL\nNCCL_ALGO=Ring\n")
    return {"FASTVERIFY_PROFILE_DIRS": str(d)}


@needs_torch
def test_moe_model_on_two_gloo_ranks(tmp_path: Path, user_profiles: dict) -> None:
    logs = tmp_path / "logs"
    out = tmp_path / "report.json"
    res = ctl("--model-config", str(CONFIGS / "tiny-moe.json"), "--backend", "gloo",
              "--steps", "2", "--accept-length", "1.8", "--p2p-off", "--logs", str(logs),
              "-o", str(out), "--json", "rh-test", env=user_profiles)  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert json.loads(out.read_text())["profiles"] == report["profiles"]
    assert report["world_size"] == 2 and report["drafter_estimated"] is True
    (row,) = report["profiles"]
    assert row["status"] == "ok", row.get("error")
    assert row["path"] == "p2p-off"
    # the profile and the path's variable reached both ranks, nothing else NCCL_*
    assert row["env_verified"] is True
    for rank in (0, 1):
        doc = json.loads((logs / f"rh-test.p2p-off.rank{rank}.json").read_text())
        env = doc["nccl_env"]
        assert env["NCCL_PROTO"] == "LL" and env["NCCL_ALGO"] == "Ring"
        assert env["NCCL_P2P_DISABLE"] == "1"
    # tiny-moe: 3 layers, TP 2 -> 2 x 3 + 1 (embedding) all-reduces per target forward;
    # the one-layer drafter: 2 + 1; the compute-only verify none; one logits all-gather each
    calls = row["ranks"][0]["collectives_per_forward"]
    assert {k: v["allreduce"] for k, v in calls.items()} == {
        "decode": 7, "verify": 7, "verify_compute": 0, "draft": 3, "draft_extend": 3,
    }  # fmt: skip
    assert {v["allgather"] for k, v in calls.items() if k != "verify_compute"} == {1}
    assert row["allreduce_per_verify"] == 7 and row["allreduce_check"] is True
    # routing: one token picks top_k = 2 distinct experts in each of the 2 MoE layers;
    # 4 tokens (K=3, verify runs K+1 per sequence) hit between 2 and 8
    distinct = row["ranks"][0]["build"]["distinct_experts"]
    assert distinct["1"] == [2, 2]
    assert all(2 <= n <= 8 for n in distinct["4"])
    # the analyzer found one verify span per profiled cycle on each rank (3 cycles)
    assert row["trace"]["verify_passes"] == [3, 3]
    # cycle = K - 1 drafts (SGLang's draft_forward at K = 3) + extend; break-even from the parts
    assert row["drafter_ms"] == pytest.approx(2 * row["draft_ms"] + row["draft_extend_ms"])
    assert row["breakeven_accept_length"] == pytest.approx(
        (row["drafter_ms"] + row["verify_ms"]) / row["decode_ms"]
    )
    assert row["speculation_pays"] == (row["breakeven_accept_length"] < 1.8)
    assert report["accept_length"] == 1.8 and report["accept_length_source"] == "--accept-length"


@needs_torch
def test_dense_model_table_and_plot(tmp_path: Path, user_profiles: dict) -> None:
    png = tmp_path / "rehearse.png"
    res = ctl("--model-config", str(CONFIGS / "tiny-dense.json"), "--backend", "gloo",
              "--steps", "2", "--plot", str(png), "rh-test", env=user_profiles)  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    header = next(ln for ln in lines if ln.startswith("#\tprofile"))
    assert "break-even" in header.split("\t")
    row = next(ln for ln in lines if ln.startswith("1\trh-test\tdefault"))
    assert row.split("\t")[6] == "7"  # AR/verify: 2 x 3 layers + 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "no accept length given" in res.stdout
    assert "[1/1] rh-test (default): 2 rank(s)" in res.stderr  # progress on stderr


def test_bad_model_config_is_a_usage_error_and_starts_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 64}')
    logs = tmp_path / "logs"
    res = ctl("--model-config", str(bad), "--backend", "gloo", "--logs", str(logs), "nccl-default")
    assert res.returncode == 2
    assert str(bad) in res.stderr and "'num_attention_heads'" in res.stderr
    assert not logs.exists()


def test_unknown_profile_is_a_usage_error() -> None:
    res = ctl("--model-config", str(CONFIGS / "tiny-dense.json"), "--backend", "gloo",
              "no-such-profile")  # fmt: skip
    assert res.returncode == 2
    assert "no-such-profile" in res.stderr


def test_rehearse_is_registered_and_imports_no_torch() -> None:
    code = (
        "import sys; from click.testing import CliRunner; from fastverify.ctl import cli; "
        "r = CliRunner().invoke(cli, ['rehearse', '--help']); "
        "print(r.exit_code, 'torch' in sys.modules, '--model-config' in r.output)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "False", "True"]
