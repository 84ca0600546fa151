"""fastverifyd against the SGLang release the server runs: the sim plays 0.5.1.post3 (the
oldest: `Decode batch. ...` lines), 0.5.10, 0.5.20 and 0.5.23 (`--sim-sglang-version`, from
the same facts files), the daemon verifies a switch on
each and reads each one's logs and metrics; a release newer than the range runs with a loud
warning (status, exporter, log); one older is refused before any load; a feature a release
lacks (PCIe-IPC, adaptive speculation) is refused naming the release, nothing restarted."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastverify.sglang import loglines
from fastverify.sglang.facts import resolve
from tests.support.harness import REPO, DaemonHarness


def families(url: str) -> dict[str, Any]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(url: str, name: str) -> list[Any]:
    return [s for f in families(url).values() for s in f.samples if s.name == name]


def generate(base: str, n: int = 3, tokens: int = 120) -> None:
    """`n` requests of `tokens` new tokens each (enough decode steps for decode log lines)."""
    for _ in range(n):
        body = {"text": "a prompt " * 8, "sampling_params": {"max_new_tokens": tokens}}
        req = urllib.request.Request(
            f"{base}/generate", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        json.loads(urllib.request.urlopen(req, timeout=60).read())


def _failed(d: DaemonHarness) -> dict[str, Any] | None:
    st = d.status()
    return st if st.get("last_failure") else None


def decode_records(log_path: str) -> list[dict[str, Any]]:
    recs = (loglines.parse_sglang_line(ln) for ln in Path(log_path).read_text().splitlines())
    return [r for r in recs if r is not None and r["kind"] == "decode"]


@pytest.mark.parametrize("version", ["0.5.1.post3", "0.5.10", "0.5.20", "0.5.23"])
def test_daemon_verifies_a_switch_and_reads_logs_and_metrics_of_each_release(
    tmp_path: Path, version: str
) -> None:
    facts = resolve(version)
    with DaemonHarness(
        tmp_path,
        extra_args=["--sim-sglang-version", version],
        config={"server": {"mode": "eagle3"}},
    ) as d:
        st = d.status()
        assert st["sglang"]["version"] == version and st["sglang"]["supported"] is True
        assert st["sglang"]["facts_version"] == facts.facts_version
        # `sglang facts` without VERSION: the server's, as the daemon reports it
        shown = json.loads(d.ctl("sglang", "facts", "--json").stdout)
        assert (shown["version"], shown["facts_version"]) == (version, facts.facts_version)
        assert shown["features"]["pcie_ipc_allreduce"] == facts.has("pcie_ipc_allreduce")
        assert sorted(shown["flags"]) == sorted(facts.flags)
        # the argv is the release's flag generation (the sim refuses flags the release lacks)
        r = d.ctl("profile", "set", "ring-ll", "--mode", "eagle3")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert (st["state"], st["profile"], st["mode"]) == ("READY", "ring-ll", "eagle3")
        assert st["last_failure"] is None
        # the NCCL variables SGLang adds are this release's: NCCL_GRAPH_REGISTER for any
        # multi-rank capture only where its parallel_hook has that guard (0.5.23)
        added = st["engine"]["engine_env"]["added"]
        broad = "any_capture" in facts.features["graph_register_triggers"]
        assert ("NCCL_GRAPH_REGISTER" in added) == broad
        base = d.server_url
        info = json.loads(urllib.request.urlopen(f"{base}/get_server_info", timeout=10).read())
        assert info["version"].startswith(version)

        generate(base)
        # its logs: decode lines in this release's form, parsed with accept length
        recs = d.wait_for(
            lambda: [r for r in decode_records(st["engine"]["log"]) if r.get("accept_len")],
            timeout=30,
            what="decode log lines with an accept length",
        )
        assert all(r["gen_throughput"] is not None for r in recs)
        assert all((r["accept_rate"] is not None) == facts.decode_accept_rate for r in recs)
        # its metrics: only the series this release declares, with its labels
        sim = families(f"{base}/metrics")
        served = set(sim)
        for fam in sim.values():
            name = fam.name + ("_total" if fam.type == "counter" else "")
            assert name in facts.metrics, f"{name} not declared by SGLang {version}"
            for s in fam.samples:
                extra = set(s.labels) - {"le", "quantile"}
                assert extra <= set(facts.metric_labels(name)), (name, s.labels)
        assert ("sglang:spec_verify_calls" in served) == facts.has_metric(
            "sglang:spec_verify_calls_total"
        )
        # ... and the daemon's exporter read both
        d.wait_for(
            lambda: any(
                s.value > 0
                for s in samples(d.metrics_url, "fastverify_generation_tokens_total")
                if s.labels.get("profile") == "ring-ll"
            ),
            timeout=30,
            what="generation tokens read from SGLang's /metrics",
        )
        logs_up = [
            s
            for s in samples(d.metrics_url, "fastverify_source_up")
            if s.labels["source"] == "logs"
        ]
        assert logs_up and logs_up[0].value == 1.0
        (eng,) = samples(d.metrics_url, "fastverify_engine_info")
        assert eng.labels == {
            "version": version, "facts_version": facts.facts_version, "supported": "true"
        }  # fmt: skip


def test_a_release_newer_than_the_range_runs_with_a_loud_warning(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, extra_args=["--sim-sglang-version", "0.5.24"]) as d:
        st = d.status()
        assert st["state"] == "READY"
        sg = st["sglang"]
        assert (sg["version"], sg["facts_version"], sg["supported"]) == ("0.5.24", "0.5.23", False)
        assert "newer than the newest release fastverify knows (0.5.23)" in sg["warning"]
        text = d.ctl("status").stdout
        assert "NOT SUPPORTED" in text and "WARNING:" in text and "0.5.24" in text
        (eng,) = samples(d.metrics_url, "fastverify_engine_info")
        assert eng.labels == {"version": "0.5.24", "facts_version": "0.5.23", "supported": "false"}
        assert "UNSUPPORTED SGLANG: SGLang 0.5.24 is newer" in d.log_text()
        # a failed switch then names the possible drift
        r = d.ctl("profile", "set", "tree-ll")
        assert r.returncode == 1, r.stdout + r.stderr
        failure = d.status()["last_failure"]
        assert failure["reason"] == "cuda_graph_capture"
        assert "possible drift: SGLang 0.5.24 is newer" in failure["message"]
        assert failure["possible_drift"] == sg["warning"]


def test_a_release_older_than_the_range_is_refused_before_any_load(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, extra_args=["--sim-sglang-version", "0.4.10"], start=False)
    out = subprocess.run(
        d.argv(), capture_output=True, text=True, timeout=60, check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert (
        "SGLang 0.4.10 is older than the oldest release fastverify supports "
        "(0.5.1 .. 0.5.23): install sglang>=0.5.1" in out.stderr
    )
    assert "fastverifyd is not starting (nothing was loaded)" in out.stderr
    assert "fastverify.sim" not in out.stderr  # no engine was launched
    assert not (d.state_dir / "engines").exists() or not any((d.state_dir / "engines").iterdir())


def test_features_a_release_lacks_are_refused_naming_it_before_the_load(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, extra_args=["--sim-sglang-version", "0.5.10"]) as d:
        before = d.status()
        pid = before["engine"]["pid"]
        r = d.ctl("profile", "set", "pcie-ipc")
        assert r.returncode == 2, r.stdout + r.stderr
        assert "SGLang 0.5.10 has no FlashInfer PCIe-IPC all-reduce" in r.stderr
        assert "it came in 0.5.21" in r.stderr
        r = d.ctl("profile", "set", "ring-ll", "--mode", "adaptive")
        assert r.returncode == 2, r.stdout + r.stderr
        assert "SGLang 0.5.10 has no adaptive speculation (--speculative-adaptive)" in r.stderr
        assert "it came in 0.5.11" in r.stderr
        # profile windows need step spans (0.5.11 and later)
        r = d.ctl("trace", "capture")
        assert r.returncode == 2, r.stdout + r.stderr
        assert "SGLang 0.5.10 has no profiler step spans" in r.stderr
        after = d.status()
        assert (after["state"], after["profile"], after["engine"]["pid"]) == (
            "READY", before["profile"], pid
        )  # fmt: skip
    # adaptive speculation: the server argv asks for it; 0.5.10 has no --speculative-adaptive
    cfg = {"server": {"mode": "eagle3", "extra_args": ["--speculative-adaptive"]}}
    with DaemonHarness(
        tmp_path / "adaptive", extra_args=["--sim-sglang-version", "0.5.10"], config=cfg,
        start=False,
    ) as d:  # fmt: skip
        d.start(wait_ready=False)
        st = d.wait_for(lambda: _failed(d), 30, "a refusal")
        assert "SGLang 0.5.10 has no adaptive speculation" in json.dumps(st["last_failure"])
        assert st["engine"]["pid"] is None  # nothing was launched


def test_a_profile_window_on_a_mode_named_release_finds_its_verify_passes(
    tmp_path: Path,
) -> None:
    """0.5.15 names the verify forward `step[TARGET_VERIFY bs=N]` and the drafter's by their
    modes (DECODE, DRAFT_EXTEND_V2): the sim writes those names, and the daemon's trace
    analysis still finds exactly the verify passes and their all-reduces."""
    from tests.support.traffic import traffic

    with DaemonHarness(
        tmp_path,
        extra_args=["--sim-sglang-version", "0.5.15"],
        config={"server": {"mode": "eagle3"}},
    ) as d:
        with traffic(d):
            r = d.ctl("trace", "capture", "--steps", "4", "--json", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        (rank,) = json.loads(r.stdout)["ranks"][:1]
        assert rank["verify_passes"] == 4
        assert rank["allreduce_per_verify"] == 122.0  # 61 layers x 2, the field's figure
