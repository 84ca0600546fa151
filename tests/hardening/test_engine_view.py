"""`doctor`, `status`, `tune`'s inventory and `profile show --effective`
describe the same engine the daemon serves (one source of truth: the daemon's engine
capabilities in /v1/status), and without a daemon they say whose view they give. Through the
real `fastverifyctl` against a real daemon on the sim at TP 8 (EAGLE-3, 4 draft tokens)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.harness import DaemonHarness

CONFIG = {"server": {"tp_size": 8, "mode": "eagle3"}}
MAX_BYTES = 32 * 4 * 7168 * 2  # the sim's decode max_bs 32 x 4 draft tokens x hidden, bf16


def test_doctor_status_and_effective_describe_the_daemons_engine(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, tp_size=8, config=CONFIG) as d:
        r = d.ctl("profile", "set", "pcie-ipc")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        served = st["engine"]["allreduce"]
        assert (served["requested"], served["backend"]) == ("pcie_ipc", "pcie_ipc")

        # doctor (the CLI's own environment has no SGLANG_ENABLE_PCIE_IPC_ALLREDUCE): it
        # reports what the daemon's engine serves, not what this shell would ask for
        doc = d.ctl("doctor", "--json", "--no-topology")
        assert doc.returncode in (0, 1), doc.stderr
        rep = json.loads(doc.stdout)
        ar = rep["allreduce"]
        assert (ar["requested"], ar["serving"]) == (served["requested"], served["backend"])
        assert ar["description"] == served["description"] and ar["profile"] == "pcie-ipc"
        assert rep["engine"]["from_daemon"] is True
        assert "sim engine's simulated host" in rep["engine"]["view"]
        possible = [b["backend"] for b in ar["possible_backends"] if b["possible"]]
        caps = st["engine"]["capabilities"]
        assert possible == [b["backend"] for b in caps["possible_backends"] if b["possible"]]
        assert "pcie_ipc" in possible
        # recommendations for the engine's host (PCIe-only, 8 GPUs), pcie-ipc first
        assert rep["recommendations"][0]["profile"] == "pcie-ipc", rep["recommendations"]
        text = d.ctl("doctor", "--no-topology").stdout
        assert "(the daemon's engine: the sim engine's simulated host" in text, text
        assert served["description"] in text and "backends possible: nccl, pcie_ipc" in text

        # status says the same backend and the engine's possible backends
        out = d.ctl("status").stdout
        assert f"all-reduce: {served['description']}" in out, out
        assert "backends:   possible: nccl, pcie_ipc (the sim engine's simulated host)" in out

        # profile show --effective: sizes, not a formula, from the daemon's engine
        show = d.ctl("profile", "show", "pcie-ipc", "--effective", "--tp-size", "8")
        assert show.returncode == 0, show.stderr
        assert "all-reduces up to 1.8 MiB (decode and verify" in show.stdout, show.stdout
        assert "x hidden" not in show.stdout.split("bound:")[0], show.stdout
        assert "the daemon's engine: the sim engine's simulated host" in show.stdout
        js = json.loads(
            d.ctl("profile", "show", "pcie-ipc", "--effective", "--tp-size", "8", "--json").stdout
        )
        assert js["allreduce"]["max_bytes"] == MAX_BYTES == served["max_bytes"]
        # another TP size on the same engine: PCIe-IPC builds for 2/4/8 ranks only
        six = d.ctl("profile", "show", "pcie-ipc", "--effective", "--tp-size", "6").stdout
        assert "all all-reduces: NCCL" in six and "2/4/8 ranks only" in six, six


def test_without_a_daemon_they_say_whose_view_it_is(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, tp_size=8, config=CONFIG, start=False)
    try:
        doc = d.ctl("doctor", "--json", "--no-topology")
        rep = json.loads(doc.stdout)
        assert rep["engine"]["from_daemon"] is False
        assert rep["engine"]["view"].startswith("this machine's view, not a daemon's")
        assert "no daemon answers" in rep["engine"]["view"]
        show = d.ctl("profile", "show", "pcie-ipc", "--effective", "--tp-size", "8")
        assert "this machine's view, not a daemon's" in show.stdout, show.stdout
    finally:
        d.close()
