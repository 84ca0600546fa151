"""This host's measured collectives (the committed 2 x H200 preflight reports, NVLink and
P2P off) exported as AIConfigurator custom systems, read by AIConfigurator 0.12.0's own
loader (its compiled engine, in its own venv: scripts/aiconfigurator-venv.sh), whose decode
estimate and configuration search then run on them.

What proves AIConfigurator used the exported numbers: between the two exports only the
all-reduce table differs, and its decode-step difference for Kimi-K2.5 at TP 2 (one token,
hidden 7168: 14 336-byte all-reduces) equals the number of TP all-reduces in a forward
times the exported per-op difference at that size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "benchmarks" / "results"
KIMI = {"model": "moonshotai/Kimi-K2.5", "tp_size": 2, "moe_tp_size": 2, "batch_size": 1,
        "isl": 1024}  # fmt: skip


@pytest.fixture(scope="module")
def aic_python() -> str:
    proc = subprocess.run([str(ROOT / "scripts" / "aiconfigurator-venv.sh")],
                          capture_output=True, text=True, check=False, timeout=1800)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def export(tmp: Path, aic: str, path: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "aiconfigurator", "export",
         str(RESULTS / f"preflight-h200x2-2gpu-{path}.json"), "--name", f"h200x2_{path}",
         "--out", str(tmp / "systems"), "--python", aic, "--json"],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def aic(tmp: Path, aic_python: str, request: dict) -> dict:
    req = tmp / "request.json"
    req.write_text(json.dumps({"systems_paths": [str(tmp / "systems"), "default"], **request}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [aic_python, str(ROOT / "benchmarks" / "aiconfigurator_compare.py"), str(req)],
        capture_output=True, text=True, env=env, check=False, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_aiconfigurator_reads_the_export_and_its_search_runs(
    aic_python: str, tmp_path: Path
) -> None:
    written = {p: export(tmp_path, aic_python, p) for p in ("nvlink", "p2poff")}
    for w in written.values():
        assert w["tables"]["nccl_perf"]["fastverify_rows"] == 12  # 12 sizes, CUDA graphs
        assert w["tables"]["custom_allreduce_perf"]["fastverify_rows"] == 24  # + eager
    out = aic(tmp_path, aic_python, {
        "estimates": [{**KIMI, "system": f"h200x2_{p}"} for p in ("nvlink", "p2poff")],
        "search": {"system": "h200x2_nvlink", "model": "Qwen/Qwen3-32B", "total_gpus": 2,
                   "isl": 1024, "osl": 256, "save_dir": str(tmp_path / "search")},
    })  # fmt: skip
    assert out["aiconfigurator"] == "0.12.0"
    nvlink, p2poff = (e["tpot_ms"] for e in out["estimates"])
    reports = {p: json.loads((RESULTS / f"preflight-h200x2-2gpu-{p}.json").read_text())
               for p in ("nvlink", "p2poff")}  # fmt: skip

    def per_op_us(report: dict, nbytes: int) -> float:
        prof = next(p for p in report["profiles"] if p["profile"] == "nccl-default")
        size = next(s for s in prof["sizes"] if s["bytes"] == nbytes)
        return size["graph"]["batch"]["per_op_p50_us"]

    exported = per_op_us(reports["p2poff"], 14336) - per_op_us(reports["nvlink"], 14336)
    # 61 layers x 2 TP all-reduces (attention out, MLP/MoE out) + the embedding's
    ars = 2 * 61 + 1
    assert (p2poff - nvlink) * 1000 == pytest.approx(ars * exported, rel=0.15), (
        nvlink, p2poff, exported)  # fmt: skip
    assert out["search"]["top"], "AIConfigurator's search scored no configuration"
    assert all("sglang" in row for row in out["search"]["top"])


def test_the_command_refuses_what_is_no_preflight_report_and_writes_nothing(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bench.json"
    bad.write_text(json.dumps({"tokens_per_second": 80.0}))
    out = tmp_path / "systems"
    proc = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "aiconfigurator", "export", str(bad),
         "--name", "myhost", "--out", str(out), "--python", sys.executable],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{bad}: not a preflight report" in proc.stderr, proc.stderr
    assert not out.exists()
