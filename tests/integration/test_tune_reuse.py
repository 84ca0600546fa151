"""`fastverifyctl tune --reuse` across sim "hosts", each a real fastverifyd with its own
state dir, through the real CLI: host A tunes (the decision keyed to its fingerprint, in its
decision.json and its decision cache); host B, identical and started with A's decision (as a
fleet rendered from it starts), reuses it with zero loads; host C, which plays another
SGLang release, is refused, the changed fact named, nothing switched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import DaemonHarness

TP = 2
MEASURE = ["--repeats", "2", "--duration", "1", "--output-len", "48", "--input-len", "16"]
CONFIG = {"daemon": {"trace_period_s": 0}}


def _host(tmp: Path, **daemon: Any) -> DaemonHarness:
    cfg = {"daemon": {**CONFIG["daemon"], **daemon.pop("daemon", {})}, **daemon}
    return DaemonHarness(tmp, tp_size=TP, sim_load_seconds=0.3, config=cfg)


@pytest.fixture(scope="module")
def host_a(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("host-a")
    with _host(tmp) as d:
        out = tmp / "tune-out"
        proc = d.ctl("tune", "--profiles", "nccl-default,ring-ll", "--finalists", "1",
                     "--accept-length", "1.05", "--json", *MEASURE, "-o", str(out),
                     timeout=900)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield d, json.loads(proc.stdout), out


def test_a_tune_keys_its_decision_to_the_host_fingerprint(host_a: Any) -> None:
    d, result, out = host_a
    fp = result["fingerprint"]
    assert len(fp["id"]) == 16
    facts = fp["facts"]
    assert facts["sglang"] == "0.5.23" and facts["tp_size"] == TP
    assert facts["engine"]["name"] == "sim" and facts["engine"]["simulated"] is True
    assert facts["acs_iommu"]["status"] == "unknown"  # no lspci on this machine: said
    assert result["evidence"]["ci95"] and result["evidence"]["bench"]["input_len"] == 16
    cached = d.state_dir / "tune" / "decisions" / f"{fp['id']}.json"
    assert json.loads(cached.read_text()) == json.loads((out / "decision.json").read_text())


def test_an_identical_host_reuses_the_decision_with_zero_loads(host_a: Any, tmp_path: Path) -> None:
    _, result, out = host_a
    dec = result["decision"]
    profile = {"daemon": {"default_profile": dec["profile"]}, "server": {"mode": dec["mode"]}}
    with _host(tmp_path, **profile) as b:
        before = len(b.client.get("/v1/history"))
        proc = b.ctl("tune", "--reuse", str(out / "decision.json"), "--json", *MEASURE,
                     "-o", str(tmp_path / "reuse-out"), timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        res = json.loads(proc.stdout)
        assert res["loads"] == {"real": 0, "cached": 0, "disk": 0, "dummy": 0}
        assert [s["name"] for s in res["stages"]] == ["inventory", "preflight", "bench", "decide"]
        assert res["stages"][1]["status"] == "skipped"  # no GPU here: said, not faked
        assert res["check"]["ok"] is True and res["check"]["tokens_per_second"] > 0
        assert res["reused_from"]["fingerprint"] == res["fingerprint"]["id"]
        assert res["decision"]["applied"] is True
        assert (res["decision"]["profile"], res["decision"]["mode"]) == (dec["profile"],
                                                                          dec["mode"])  # fmt: skip
        status = b.status()
        assert status["decision"]["profile"] == dec["profile"]
        kinds = [r.get("kind") for r in b.client.get("/v1/history")[before:]]
        assert "switch" not in kinds and "mode" not in kinds, kinds
        print(f"reuse wall {res['wall_s']:.1f} s")
        # the directory form: this host's cache copied over, the decision found by its id
        cache = host_a[0].state_dir / "tune" / "decisions"
        proc = b.ctl("tune", "--reuse", str(cache), "--json", *MEASURE,
                     "-o", str(tmp_path / "reuse-dir"), timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_reused_decision_stays_simulated(host_a: Any, tmp_path: Path) -> None:
    """A reuse on the sim keeps the engine stamp: its headline says simulated, and
    `render kubernetes --from-decision` refuses it without --force, as it refuses the
    original."""
    from tests.support.harness import run_ctl

    _, result, out = host_a
    dec = result["decision"]
    assert dec["engine"]["simulated"] is True, dec
    profile = {"daemon": {"default_profile": dec["profile"]}, "server": {"mode": dec["mode"]}}
    reused = tmp_path / "reuse-out"
    with _host(tmp_path, **profile) as b:
        proc = b.ctl("tune", "--reuse", str(out / "decision.json"), *MEASURE,
                     "-o", str(reused), timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
    headline = next(x for x in proc.stdout.splitlines() if x.startswith("decision: "))
    assert "(simulated: the sim engine playing SGLang " in headline, headline
    written = json.loads((reused / "decision.json").read_text())["decision"]
    assert written["engine"] == dec["engine"], written
    args = ("render", "kubernetes", "--image", "registry.example.com/fv:1", "--from-decision")
    for path in (out / "decision.json", reused / "decision.json"):
        refused = run_ctl(*args, str(path), "--output-dir", str(tmp_path / "k8s"))
        assert refused.returncode == 2, (path, refused.stderr)
        assert "on the sim engine (simulated" in refused.stderr and "--force" in refused.stderr
    assert not (tmp_path / "k8s").exists()
    # a reuse's record written before decisions carried the stamp: its fingerprint says sim
    old = json.loads((reused / "decision.json").read_text())
    del old["decision"]["engine"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    refused = run_ctl(*args, str(tmp_path / "old.json"), "--output-dir", str(tmp_path / "k8s"))
    assert refused.returncode == 2 and "(simulated" in refused.stderr, refused.stderr


def test_one_fact_changed_refuses_and_names_it(host_a: Any, tmp_path: Path) -> None:
    _, _, out = host_a
    with _host(tmp_path, daemon={"sim_sglang_version": "0.5.22"}) as c:
        before = c.status()
        proc = c.ctl("tune", "--reuse", str(out / "decision.json"), "--json", *MEASURE,
                     "-o", str(tmp_path / "reuse-out"), timeout=600)  # fmt: skip
        assert proc.returncode == 1, proc.stderr[-3000:]
        res = json.loads(proc.stdout)
        changed = [ch["fact"] for ch in res["check"]["changes"]]
        assert changed == ["sglang"], res["check"]["changes"]
        assert "sglang: 0.5.23 there, 0.5.22 here" in res["decision"]["why"]
        assert "tune decision" in res["check"]["changes"][0]["invalidates"]
        assert res["decision"]["applied"] is False
        assert res["loads"] == {"real": 0, "cached": 0, "disk": 0, "dummy": 0}
        after = c.status()
        assert (after["profile"], after["mode"]) == (before["profile"], before["mode"])
        assert after["decision"] is None
