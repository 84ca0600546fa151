"""fastverifyd on the sim at TP 8 with SGLang 0.5.23's FlashInfer PCIe-IPC all-reduce.

The daemon decides nothing from a profile's name: the backend is what the engine's
environment asks for and what every rank's SGLang log lines confirm. With
`--enable-deterministic-inference` among the server's args SGLang leaves PCIe-IPC off
(its own warning); the switch fails with `allreduce_backend_fallback` and rolls back.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from fastverify.sglang import flashinfer_facts
from tests.support.harness import DaemonHarness

# The sim at TP 8 with EAGLE-3 (4 draft tokens), decode graphs up to bs 32, hidden 7168:
# SGLang's bound is max_bs x draft tokens x hidden = 32 x 4 x 7168 elements, bf16.
MAX_NUMEL = 32 * 4 * 7168
MAX_BYTES = MAX_NUMEL * 2
CONFIG = {"server": {"tp_size": 8, "mode": "eagle3"}}


def _metrics(d: DaemonHarness) -> str:
    with urllib.request.urlopen(d.metrics_url, timeout=10) as resp:
        return resp.read().decode()


def _backend_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith("fastverify_allreduce_backend_info")]


def test_pcie_ipc_is_confirmed_on_every_rank_and_published(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, tp_size=8, config=CONFIG) as d:
        # a profile whose name says nothing about the backend
        (d.profile_dir / "plain.env").write_text(
            "# description: backend by variable only\nSGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1\n"
        )
        for i, name in enumerate(("pcie-ipc", "plain")):
            r = d.ctl("profile", "set", name)
            assert r.returncode == 0, r.stdout + r.stderr
            shown = r.stdout + r.stderr
            # the autotune phase, and whether FlashInfer measures or reuses its tactics
            assert "FlashInfer PCIe-IPC workspace built; tuning its all-reduce tactics" in shown
            assert ("no cached tactics for 8 ranks yet" if i == 0 else "reusing the tactics") in (
                shown
            ), shown
            st = d.status()
            assert (st["state"], st["profile"]) == ("READY", name)
            ar = st["engine"]["allreduce"]
            assert ar["requested"] == "pcie_ipc" and ar["backend"] == "pcie_ipc", ar
            assert (ar["max_numel"], ar["hidden"], ar["max_bytes"]) == (MAX_NUMEL, 7168, MAX_BYTES)
            assert ar["confirmed_ranks"] == 8
            assert "FlashInfer PCIe-IPC; above: NCCL" in ar["description"]
            text = d.ctl("status").stdout
            assert "all-reduce: all-reduces up to 1.8 MiB (decode and verify" in text, text
            rec = d.client.get("/v1/history")[-1]
            assert (rec["profile"], rec["result"]) == (name, "ok")
            assert rec["allreduce"]["backend"] == "pcie_ipc"
            lines = d.wait_for(
                lambda name=name: (
                    [x for x in _backend_lines(_metrics(d)) if f'profile="{name}"' in x] or None
                ),
                30,
                "the backend info metric of the new profile",
            )
            assert 'backend="pcie_ipc"' in lines[0] and f'max_bytes="{MAX_BYTES}"' in lines[0]
        # FlashInfer's tactics were measured once and persisted in the daemon's state dir
        cache = d.state_dir / "flashinfer" / "autotune" / "pcie_ipc_all_reduce_ws8.json"
        keys = flashinfer_facts.cache_keys(cache)
        assert keys and flashinfer_facts.covers(keys, world=8, max_numel=MAX_NUMEL)
        # ... and the JIT-built library too: the second start compiled nothing
        ar = d.status()["engine"]["allreduce"]
        assert ar["jit"]["reused"] is True and ar["jit"]["library"].endswith("pcie_ipc_comm.so")
        assert ar["evidence"] == "log lines and mapped pcie_ipc_comm.so", ar
        assert ar["mapped_processes"] == 8

        # a daemon killed and restarted adopts the engine and still names its backend
        d.kill9()
        d.restart_daemon(wait_ready=True, timeout=60)
        st = d.wait_for(
            lambda: (s := d.status())["engine"].get("allreduce") and s, 30, "adopted backend"
        )
        assert st["engine"]["adopted"] is True and st["profile"] == "plain"
        assert st["engine"]["allreduce"]["backend"] == "pcie_ipc"

        # a profile without the variable: NCCL, reported as such
        r = d.ctl("profile", "set", "nccl-default")
        assert r.returncode == 0, r.stdout + r.stderr
        ar = d.status()["engine"]["allreduce"]
        assert (ar["requested"], ar["backend"], ar["max_bytes"]) == ("nccl", "nccl", None)
        lines = d.wait_for(
            lambda: [x for x in _backend_lines(_metrics(d)) if "nccl-default" in x] or None,
            30,
            "the backend info metric of nccl-default",
        )
        assert 'backend="nccl"' in lines[0]


def test_deterministic_inference_makes_the_switch_fail_and_roll_back(tmp_path: Path) -> None:
    # Deterministic inference also sets NCCL_ALGO=allreduce:tree (SGLang's attention hook),
    # which the sim (like the field's PCIe box) cannot capture in a CUDA graph: the server
    # runs eager so that the profile that was serving can serve again.
    eager = ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    cfg = {
        "server": {
            "tp_size": 8,
            "mode": "eagle3",
            "extra_args": ["--enable-deterministic-inference", *eager],
        }
    }
    with DaemonHarness(tmp_path, tp_size=8, config=cfg) as d:
        before = d.status()
        assert before["state"] == "READY"
        # known before the load: refused, the serving engine untouched
        r = d.ctl("profile", "set", "pcie-ipc")
        assert r.returncode == 2, r.stdout + r.stderr
        assert "--enable-deterministic-inference" in r.stderr and "nothing was stopped" in (
            r.stderr
        ), r.stderr
        assert d.status()["engine"]["pid"] == before["engine"]["pid"]
        # --force starts it anyway: SGLang's own warning then fails it, and it rolls back
        r = d.ctl("profile", "set", "pcie-ipc", "--force")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "allreduce_backend_fallback" in r.stderr and "rolled" in r.stderr, r.stderr
        st = d.status()
        assert (st["state"], st["profile"]) == ("READY", before["profile"])
        failure = st["last_failure"]
        assert failure["reason"] == "allreduce_backend_fallback"
        assert "FlashInfer PCIe-IPC" in failure["message"]
        assert (
            "Deterministic inference is on; leaving PCIe-IPC all-reduce off." in (failure["line"])
        )
        rec = d.client.get("/v1/history")[-1]
        assert (rec["profile"], rec["result"], rec["reason"]) == (
            "pcie-ipc",
            "rolled_back",
            "allreduce_backend_fallback",
        )
        assert st["engine"]["allreduce"]["backend"] == "nccl"  # the rolled-back engine's
