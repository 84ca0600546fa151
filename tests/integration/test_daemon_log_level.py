"""fastverifyd on the sim with `--log-level warning` among the server's args, and an fp16 model.

SGLang (and the sim, which logs as SGLang's `configure_logger` does) then prints no INFO
line: no `The server is fired up and ready to roll!`, no PCIe-IPC `enabled`/`workspace
built` lines. The daemon must find the server ready by its own endpoints (`/model_info`,
`/health_generate`) and confirm PCIe-IPC by FlashInfer's JIT-built `pcie_ipc_comm.so` mapped
in every rank's process. A model whose config.json says float16 under `--dtype auto` has
every reduction on NCCL: `profile set pcie-ipc` is refused before anything is stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.harness import DaemonHarness

QUIET = {"server": {"tp_size": 4, "mode": "eagle3", "extra_args": ["--log-level", "warning"]}}


def test_warning_level_reaches_ready_and_confirms_pcie_ipc_by_maps(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, tp_size=4, config=QUIET) as d:
        st = d.status()
        assert st["state"] == "READY" and st["engine"]["ready_by"] == "endpoints", st["engine"]
        log = Path(st["engine"]["log"]).read_text()
        assert "fired up and ready to roll" not in log  # an INFO line: not printed
        r = d.ctl("profile", "set", "pcie-ipc")
        assert r.returncode == 0, r.stdout + r.stderr
        # said up front: what needs SGLang's INFO lines, and what is used instead
        assert "SGLang's INFO lines will not come (--log-level warning" in r.stdout + r.stderr
        st = d.status()
        assert (st["state"], st["profile"]) == ("READY", "pcie-ipc")
        assert st["engine"]["ready_by"] == "endpoints"
        ar = st["engine"]["allreduce"]
        assert (ar["requested"], ar["backend"]) == ("pcie_ipc", "pcie_ipc"), ar
        assert ar["evidence"] == "mapped pcie_ipc_comm.so" and ar["mapped_processes"] == 4
        assert ar["confirmed_ranks"] == 4
        assert ar["log_lines"] == {
            "visible": False,
            "why": "--log-level warning: SGLang logs them at INFO",
        }
        # the bound is SGLang's rule on the engine's own capabilities (no line said it)
        caps = st["engine"]["capabilities"]
        assert ar["max_numel"] == caps["rules"]["pcie_ipc"]["max_numel"] == 32 * 4 * 7168
        log = Path(st["engine"]["log"]).read_text()
        assert "FlashInfer PCIe-IPC all-reduce enabled" not in log
        # a second start finds FlashInfer's JIT output on the state volume and says so
        r = d.ctl("profile", "set", "pcie-ipc", "--restart")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "FlashInfer JIT: reusing" in r.stdout + r.stderr, r.stdout + r.stderr


def test_fp16_model_under_dtype_auto_is_refused_before_the_load(tmp_path: Path) -> None:
    model = tmp_path / "fp16-model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "torch_dtype": "float16"})
    )
    cfg = {"server": {"tp_size": 4, "model_path": str(model)}}
    with DaemonHarness(tmp_path, tp_size=4, config=cfg) as d:
        before = d.status()
        assert before["state"] == "READY"
        r = d.ctl("profile", "set", "pcie-ipc")
        assert r.returncode == 2, r.stdout + r.stderr
        assert "torch_dtype float16" in r.stderr and "NCCL" in r.stderr, r.stderr
        assert "nothing was stopped" in r.stderr
        st = d.status()
        assert st["engine"]["pid"] == before["engine"]["pid"]
        assert st["profile"] == before["profile"]
        # the daemon's engine capabilities say the same for a pcie-ipc environment
        rule = st["engine"]["capabilities"]["rules"]["pcie_ipc"]
        assert rule["serving"] == "nccl" and "float16" in " ".join(rule["fallbacks"])


def test_flashinfer_without_nv_internal_is_recognised(tmp_path: Path) -> None:
    # FlashInfer installed without csrc/nv_internal: tuning skips every tactic and saves 0
    # configs (its own lines are silenced by SGLang's logger setup), so every start re-tunes
    cfg = {"server": {"tp_size": 2, "extra_args": ["--sim-flashinfer", "no-nv-internal"]}}
    with DaemonHarness(tmp_path, tp_size=2, config=cfg) as d:
        for start in range(2):
            r = d.ctl("profile", "set", "pcie-ipc", *(["--restart"] if start else []))
            assert r.returncode == 0, r.stdout + r.stderr
            ar = d.status()["engine"]["allreduce"]
            assert ar["backend"] == "pcie_ipc"  # the kernels serve, on the seed policy
            assert ar["tactics"]["exists"] and ar["tactics"]["empty"], ar["tactics"]
            assert any("nv_internal" in n and "re-tunes" in n for n in ar["notes"]), ar["notes"]
        # the second start saw the empty file before it began, and said what it means
        assert "holds no tactics" in r.stdout + r.stderr, r.stdout + r.stderr
        doc = json.loads(d.ctl("doctor", "--json", "--no-topology").stdout)
        found = [f for f in doc["findings"] if f["check"] == "flashinfer"]
        assert found and "saved 0 configs" in found[0]["what"], doc["findings"]
        assert "nv_internal" in found[0]["fix"]


@pytest.mark.parametrize(
    ("extra", "ready_by"), [([], "ready line + health"), (["--log-level", "warning"], "endpoints")]
)
def test_ready_with_sglangs_own_health_poll(
    tmp_path: Path, extra: list[str], ready_by: str
) -> None:
    """The sim's /health at SGLang's 1 s poll (the suite shortens it elsewhere): READY at
    INFO after the ready line, at warning by the endpoints. The probe's margin over the
    poll is held by tests/contract/test_health_contract.py (a real 0.5.17 on the H200
    answered 1-4 s after each probe; a 1 s probe found it ready 13 s late)."""
    cfg = {"server": {"tp_size": 1, "extra_args": extra}}
    real_poll = {"FASTVERIFY_SIM_HEALTH_POLL_S": "1.0"}
    with DaemonHarness(tmp_path, tp_size=1, config=cfg, env=real_poll) as d:
        st = d.status()
        assert (st["state"], st["engine"]["ready_by"]) == ("READY", ready_by), st["engine"]
        r = d.ctl("restart")
        assert r.returncode == 0, r.stdout + r.stderr
