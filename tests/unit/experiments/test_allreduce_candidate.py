"""The `pcie-ipc` experiment candidate: measured where FlashInfer's PCIe-IPC all-reduce
imports, skipped with its reason elsewhere (this machine: no GPU, no FlashInfer).

`plan` is checked with the project's interpreter (no flashinfer: the real skip path) and
with an interpreter whose path holds a module that merely answers the import (to check the
job the workers get; nothing is measured with it). The rehearse CLI on gloo ranks reports
the candidate as skipped, exit 0, and still measures the NCCL candidate beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify.experiments.common import allreduce as cand
from fastverify.experiments.preflight import hostcheck as pf_host

REPO = Path(__file__).resolve().parents[3]
ON = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}


def test_a_profile_without_the_variable_is_plain_nccl() -> None:
    c = cand.plan({"NCCL_ALGO": "Ring"}, 8, "nccl", max_numel=1024)
    assert (c.backend, c.skip, c.job) == ("nccl", None, None)


def test_skip_reasons() -> None:
    assert "gloo test backend" in (cand.plan(ON, 2, "gloo", max_numel=1024).skip or "")
    assert "world size 3" in (cand.plan(ON, 3, "nccl", max_numel=1024).skip or "")
    cand.flashinfer_pcie_ipc.cache_clear()
    c = cand.plan(ON, 8, "nccl", sys.executable, max_numel=1024)
    assert c.backend == "pcie_ipc" and c.job is None
    assert c.skip is not None and "No module named 'flashinfer'" in c.skip, c.skip


def test_job_where_the_import_works(tmp_path: Path) -> None:
    pkg = tmp_path / "site" / "flashinfer" / "comm"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("class PcieIpcAllReduceWorkspace:\n    pass\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    cand.flashinfer_pcie_ipc.cache_clear()
    c = cand.plan(ON, 8, "nccl", str(python), max_numel=4 * 7168)
    assert (c.skip, c.job) == (None, {"backend": "pcie_ipc", "max_numel": 4 * 7168})
    c = cand.plan({**ON, "SGLANG_PCIE_IPC_MAX_NUMEL": "65536"}, 8, "nccl", str(python),
                  max_numel=4 * 7168)  # fmt: skip
    assert c.job == {"backend": "pcie_ipc", "max_numel": 65536}


@pytest.mark.skipif(not pf_host.torch_available(), reason="TORCH IS NOT INSTALLED: not run")
def test_rehearse_reports_the_candidate_skipped_and_measures_the_rest(tmp_path: Path) -> None:
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "rh-nccl.env").write_text("# description: t\nNCCL_PROTO=LL\n")
    res = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "rehearse", "--model-config",
         str(REPO / "examples" / "model-configs" / "tiny-dense.json"), "--backend", "gloo",
         "--steps", "2", "--json", "rh-nccl", "pcie-ipc"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "FASTVERIFY_PROFILE_DIRS": str(d)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = {r["profile"]: r for r in json.loads(res.stdout)["profiles"]}
    assert rows["rh-nccl"]["status"] == "ok"
    assert rows["rh-nccl"]["allreduce_backend"] == "nccl"
    skipped = rows["pcie-ipc"]
    assert (skipped["status"], skipped["allreduce_backend"]) == ("skipped", "pcie_ipc")
    assert "gloo test backend" in skipped["reason"]
    assert "decode_ms" not in skipped and skipped["ranks"] == []  # nothing was measured
    assert "pcie-ipc (default): skipped: FlashInfer" not in res.stderr
    assert "pcie-ipc (default): skipped: " in res.stderr


@pytest.mark.skipif(not pf_host.torch_available(), reason="TORCH IS NOT INSTALLED: not run")
def test_preflight_reports_the_candidate_skipped_and_measures_the_rest(tmp_path: Path) -> None:
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "pf-nccl.env").write_text("# description: t\nNCCL_PROTO=LL\n")
    res = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "preflight", "--backend", "gloo",
         "--tokens", "1,2", "--iters", "3", "--json", "pf-nccl", "pcie-ipc"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "FASTVERIFY_PROFILE_DIRS": str(d)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    rows = {r["profile"]: r for r in report["profiles"]}
    assert rows["pf-nccl"]["status"] == "ok" and rows["pf-nccl"]["allreduce_backend"] == "nccl"
    assert all(s["backend"] == "nccl" for s in rows["pf-nccl"]["sizes"])
    skipped = rows["pcie-ipc"]
    assert (skipped["status"], skipped["sizes"]) == ("skipped", [])
    assert "gloo test backend" in skipped["reason"]
    assert report["summary"]["skipped"] == ["pcie-ipc"]
