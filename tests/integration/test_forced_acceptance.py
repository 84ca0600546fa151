"""Acceptance SGLang forces (SGLANG_SIMULATE_ACC_LEN in the server's environment), end to end:
the sim forces it as SGLang does (one accept length per pass, by SGLANG_SIMULATE_ACC_METHOD,
the drafter overridden; a method SGLang does not accept fails the first verify pass), and
through fastverifyd from `[server.env]` or a profile every place that shows acceptance labels
it `forced (SGLANG_SIMULATE_ACC_LEN=L)`: status, bench, the acceptance record, the exporter,
`spec plan` (which refuses it, exit 2, unless --allow-forced); a value SGLang would not honour
is refused before anything running is touched."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from fastverify.experiments.bench.load import BenchConfig, run_bench
from fastverify.profiles.store import ProfileStore
from tests.support.harness import DaemonHarness
from tests.support.sim import sim_server

EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/d",
         "--speculative-num-steps", "3"]  # fmt: skip
PCIE_IPC = dict(ProfileStore().load("pcie-ipc").env)  # short verify passes on the sim
LABEL = "forced (SGLANG_SIMULATE_ACC_LEN=2)"


def _bench(url: str, output_len: int = 120) -> object:
    return run_bench(BenchConfig(url=url, concurrency=8, duration=None, requests=8,
                                 output_len=output_len, warmup=0))  # fmt: skip


def test_the_sim_forces_the_accept_length_as_sglang_does(tmp_path: Path) -> None:
    """match-expected at 2.4 with 3 steps: every pass accepts 2 or 3 tokens (1 or 2 drafts),
    pooled to 2.4, whatever the drafter (--sim-accept-length 3.5) would have accepted; a
    whole number is exact."""
    env = {**PCIE_IPC, "SGLANG_SIMULATE_ACC_LEN": "2.4"}
    with sim_server(tmp_path, *EAGLE, "--sim-accept-length", "3.5", env=env) as url:
        r = _bench(url, output_len=360)
        truth = httpx.get(f"{url}/server_info").json()["sim"]["acceptance"]
    hist = (r.accept_histogram or []) + [0] * 4
    assert hist[0] == 0 and hist[3] == 0 and hist[1] and hist[2]
    # one draw per batch (8 requests share it): 2 or 3 tokens, sd 0.49 a draw; 4 sd of the
    # mean of the batches' draws (~150 here: +-0.16), never a fixed 2 or 3
    draws = sum(hist) / 8
    assert r.accept_length == pytest.approx(2.4, abs=4 * 0.49 / draws**0.5)
    assert truth["accept_length_by_steps"]["3"] == pytest.approx(2.4)
    env["SGLANG_SIMULATE_ACC_LEN"] = "2"
    with sim_server(tmp_path, *EAGLE, "--sim-accept-length", "3.5", env=env) as url:
        r = _bench(url)
    assert r.accept_histogram is not None and r.accept_histogram[1] == sum(r.accept_histogram)


def test_the_sim_fails_a_method_sglang_does_not_accept_and_ignores_a_bad_length(
    tmp_path: Path,
) -> None:
    env = {**PCIE_IPC, "SGLANG_SIMULATE_ACC_LEN": "2", "SGLANG_SIMULATE_ACC_METHOD": "exact"}
    with sim_server(tmp_path, *EAGLE, env=env) as url:
        # the first verify pass raises, as SGLang's _sample_simulated_acc_len does
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"{url}/generate", json={"text": "go", "sampling_params":
                       {"max_new_tokens": 20}}, timeout=30).raise_for_status()  # fmt: skip
        log = next(tmp_path.glob("sim-*.log")).read_text()
    assert "Invalid simulate_acc_method: exact" in log
    env = {**PCIE_IPC, "SGLANG_SIMULATE_ACC_LEN": "two"}
    with sim_server(tmp_path, *EAGLE, "--sim-accept-length", "3.0", env=env) as url:
        r = _bench(url)
        logs = "".join(p.read_text() for p in tmp_path.glob("sim-*.log"))
    assert 'Invalid value for SGLANG_SIMULATE_ACC_LEN: "two"' in logs
    assert r.accept_length == pytest.approx(3.0, abs=0.15)  # the drafter's own


def test_forced_acceptance_is_labelled_everywhere_and_planned_with_only_when_allowed(
    tmp_path: Path,
) -> None:
    config = {"server": {"mode": "eagle3", "extra_args": ["--sim-accept-length", "3.2"],
                         "env": {"SGLANG_SIMULATE_ACC_LEN": "2"}}}  # fmt: skip
    with DaemonHarness(tmp_path, config=config, tp_size=2) as d:
        st = json.loads(d.ctl("status", "--json").stdout)
        assert st["engine"]["acceptance_source"] == LABEL
        assert st["engine"]["forced_acceptance"]["method"] == "match-expected"
        text = d.ctl("status").stdout
        assert f"acceptance: {LABEL} (match-expected): SGLang sets the accept length" in text
        r = d.ctl("bench", "-n", "8", "-c", "4", "--output-len", "60", "--warmup", "0",
                  "--dataset", "fastverify-docs", "--json")  # fmt: skip
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["acceptance_source"] == LABEL and out["accept_length"] == pytest.approx(2.0)
        assert f"{LABEL}: SGLang set the accept length" in r.stderr  # the record's note
        (rec,) = d.client.get("/v1/acceptance")["curves"].values()
        assert rec["acceptance_source"] == LABEL and rec["forced"]["accept_length"] == 2.0
        assert rec["usable"] is False and rec["usable_forced"] is True
        metrics = httpx.get(d.metrics_url, timeout=10).text
        info = (f'fastverify_spec_acceptance_source_info{{mode="eagle3",'
                f'profile="{st["profile"]}",source="{LABEL}"}} 1.0')  # fmt: skip
        assert info in metrics
        profile_info = metrics.split("fastverify_profile_info{")[1].split("\n")[0]
        assert "acceptance_source=" not in profile_info  # not a profile setting

        # never silently: refused (exit 2), saying how to allow it; then planned with it
        r = d.ctl("spec", "plan", "--max-batch", "4", "--concurrency", "1")
        assert r.returncode == 2 and "--allow-forced" in r.stderr and LABEL in r.stderr
        r = d.ctl("spec", "plan", "--max-batch", "4", "--concurrency", "1", "--allow-forced")
        assert r.returncode == 0, r.stderr
        assert f"acceptance: {LABEL.upper()}" in r.stdout
        plan = json.loads(d.ctl("spec", "plan", "--max-batch", "4", "--concurrency", "1",
                                "--allow-forced", "--json").stdout)  # fmt: skip
        assert plan["acceptance"]["acceptance_source"] == LABEL
        assert plan["accept_curve"]["3"] == pytest.approx(2.0)


def test_a_forced_method_sglang_would_fail_on_is_refused_before_the_load(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config={"server": {"mode": "eagle3"}}, tp_size=2) as d:
        (tmp_path / "profiles" / "forced-bad.env").write_text(
            "# extends: ring-ll\nSGLANG_SIMULATE_ACC_LEN=2\nSGLANG_SIMULATE_ACC_METHOD=exact\n"
        )
        before = d.status()
        r = d.ctl("profile", "set", "forced-bad")
        assert r.returncode != 0
        assert "SGLANG_SIMULATE_ACC_METHOD='exact'" in r.stderr and "match-expected" in r.stderr
        assert f"set in {tmp_path / 'profiles' / 'forced-bad.env'}:3" in r.stderr, r.stderr
        after = d.status()
        assert (after["engine"]["pid"], after["profile"]) == (before["engine"]["pid"],
                                                              before["profile"])  # fmt: skip
        # a profile that forces it as SGLang reads it serves, and says so
        (tmp_path / "profiles" / "forced.env").write_text(
            "# extends: ring-ll\nSGLANG_SIMULATE_ACC_LEN=2.5\n"
        )
        r = d.ctl("profile", "set", "forced")
        assert r.returncode == 0, r.stderr
        assert d.status()["engine"]["acceptance_source"] == "forced (SGLANG_SIMULATE_ACC_LEN=2.5)"


def test_an_adopted_engine_keeps_its_forced_label(tmp_path: Path) -> None:
    """A daemon killed and restarted adopts the engine: its acceptance is still forced (the
    engine.pid record carries what its environment forced)."""
    config = {"server": {"mode": "eagle3", "env": {"SGLANG_SIMULATE_ACC_LEN": "2"}}}
    with DaemonHarness(tmp_path, config=config, tp_size=2) as d:
        pid = d.status()["engine"]["pid"]
        d.kill9()
        d.restart_daemon(wait_ready=True, timeout=60)
        st = d.status()
        assert st["engine"]["adopted"] is True and st["engine"]["pid"] == pid
        assert st["engine"]["acceptance_source"] == LABEL
