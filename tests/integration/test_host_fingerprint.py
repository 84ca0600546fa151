"""The host fingerprint on recorded results, through a real fastverifyd on the sim: the daemon
computes it at start (the one tune's inventory computes), stamps it on acceptance records,
`preflight` stamps it on its report; `spec plan` accepts a cost file written before
fingerprints with a note, refuses another host's naming the facts (`--other-host` uses it,
warned); a daemon on the same state dir that plays another SGLang release has another
fingerprint, refuses the first one's acceptance naming SGLang, and `doctor` lists the
recorded results it invalidates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from fastverify.experiments.preflight.hostcheck import torch_available
from fastverify.host import fingerprint, here
from tests.support.harness import REPO, DaemonHarness

OLD_COSTS = REPO / "tests/fixtures/sglang-0.5.17-h200/spec-costs-engine.json"
H200 = fingerprint.record({
    "gpu_model": "NVIDIA H200", "gpu_count": 2, "topology": {"GPU0-GPU1": "NV18"},
    "tp_size": 2, "sglang": "0.5.17", "engine": {"name": "sglang", "simulated": False},
})  # fmt: skip


def _config(**daemon: Any) -> dict[str, Any]:
    return {"server": {"mode": "eagle3", "extra_args": ["--sim-accept-length", "3.2"]},
            "daemon": {"trace_period_s": 0, **daemon}}  # fmt: skip


def _fingerprint(d: DaemonHarness) -> dict[str, Any]:
    return d.wait_for(lambda: d.status()["daemon"]["fingerprint"], 60, "the host fingerprint")


def test_results_carry_the_fingerprint_and_another_hosts_are_named(tmp_path: Path) -> None:
    other = tmp_path / "costs-h200.json"
    other.write_text(json.dumps({**json.loads(OLD_COSTS.read_text()), "fingerprint": H200}))
    with DaemonHarness(tmp_path, config=_config(), tp_size=2) as a:
        fp = _fingerprint(a)
        assert json.loads((a.state_dir / here.FILE).read_text()) == fp
        facts = fp["facts"]
        assert facts["engine"]["name"] == "sim" and facts["engine"]["simulated"] is True
        assert (facts["sglang"], facts["tp_size"]) == ("0.5.23", 2)
        assert fp["id"] == fingerprint.fingerprint_id(facts)

        # one round of 4 requests: a usable acceptance record, keyed to this host
        r = a.ctl("bench", "-n", "4", "-c", "4", "--output-len", "100", "--warmup", "0",
                  "--dataset", "fastverify-docs")  # fmt: skip
        assert r.returncode == 0, r.stderr
        curves = a.client.get("/v1/acceptance")["curves"]
        assert curves and all(c["fingerprint"] == fp for c in curves.values())

        if torch_available():  # preflight's ranks need torch (CPU build: gloo)
            r = a.ctl("preflight", "nccl-default", "--backend", "gloo", "--nproc", "2",
                      "--hidden-size", "64", "--tokens", "1", "--iters", "2",
                      "--config", str(a.config_path), "--json", timeout=180)  # fmt: skip
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["fingerprint"] == fp

        # a cost file from before fingerprints: used, with a one-line note
        r = a.ctl("spec", "plan", "--costs", str(OLD_COSTS), "--concurrency", "1", "--json")
        assert r.returncode == 0, r.stderr
        assert f"note: cost file {OLD_COSTS} carries no host fingerprint" in r.stderr
        assert [c["status"] for c in json.loads(r.stdout)["host"]["checked"]] == [
            "same", "unrecorded"]  # fmt: skip
        # another host's: refused, the facts and both hosts named; --other-host uses it
        r = a.ctl("spec", "plan", "--costs", str(other), "--concurrency", "1")
        assert r.returncode == 1, r.stderr
        assert f"cost file {other} was measured on a host with 2 x NVIDIA H200 (NV18)" in r.stderr
        assert "this host has the sim engine (TP 2, SGLang 0.5.23)" in r.stderr
        assert "GPU model, GPU count, topology, " in r.stderr and "SGLang, engine," in r.stderr
        assert "gpu_model: NVIDIA H200 there, null here" in r.stderr
        assert "--other-host" in r.stderr
        r = a.ctl("spec", "plan", "--costs", str(other), "--concurrency", "1", "--other-host",
                  "--json")  # fmt: skip
        assert r.returncode == 0 and "warning: cost file" in r.stderr, r.stderr
        checked = json.loads(r.stdout)["host"]["checked"]
        assert checked[1]["status"] == "differs" and "gpu_model" in checked[1]["facts"]

        shutil.copy(other, a.state_dir / "costs-h200.json")  # kept beside the daemon's state
        r = a.ctl("doctor", "--no-topology", "--json")
        listed = json.loads(r.stdout)["fingerprint"]
        assert listed["id"] == fp["id"]
        assert [(s["kind"], Path(s["name"]).name) for s in listed["stale"]] == [
            ("cost file", "costs-h200.json")]  # fmt: skip

    # the same state dir, a daemon that plays another SGLang release: another fingerprint
    with DaemonHarness(tmp_path, config=_config(sim_sglang_version="0.5.22"), tp_size=2) as b:
        fp2 = _fingerprint(b)
        changed = fingerprint.diff(fp["facts"], fp2["facts"])
        assert fp2["id"] != fp["id"] and [c["fact"] for c in changed] == ["sglang"]
        r = b.ctl("spec", "plan", "--concurrency", "1")
        assert r.returncode == 1, r.stderr
        assert "acceptance record of model" in r.stderr and "SGLang differ" in r.stderr
        assert "sglang: 0.5.23 there, 0.5.22 here" in r.stderr
        r = b.ctl("doctor", "--no-topology")
        assert f"host fingerprint {fp2['id']}: the sim engine (TP 2, SGLang 0.5.22)" in r.stdout
        assert "recorded result(s) keyed to another fingerprint" in r.stdout
        assert "acceptance record nccl-default/eagle3/3@" in r.stdout
        assert f"(fingerprint {fp['id']}): SGLang differ" in r.stdout


def test_doctor_describes_the_daemons_tp_size(tmp_path: Path) -> None:
    """doctor's two TP lines are the daemon's engine's (TP 2 here), not the TP of a config
    file this shell reads (none here: the default 8), which the daemon, started with its
    own --config, does not run."""
    with DaemonHarness(tmp_path, metrics=False, tp_size=2) as d:
        r = d.ctl("doctor", "--no-topology", timeout=120)
        assert "SGLang's own NCCL settings at TP 2 " in r.stdout, r.stdout
        assert "TP all-reduce backend at TP 2 " in r.stdout, r.stdout
        r = d.ctl("doctor", "--no-topology", "--tp-size", "4", timeout=120)
        assert "SGLang's own NCCL settings at TP 4 " in r.stdout, r.stdout
