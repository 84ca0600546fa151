"""The whole scrape, as a contract: a real fastverifyd serving the sim in EAGLE-3 mode (the
debug profile, so NCCL prints its version, settings and TUNING choices), under load, with
profile windows, the weight cache, a restart behind the front door, a TCP control door that
refused one attempt, recorded baselines, acceptance, a stored plan and a tuning decision, is
scraped once every catalog
series it can publish has appeared. The scrape passes `promtool check metrics`, and its
(sample name, type, label names) set is the committed golden: a renamed, retyped or
relabelled series fails here. Values are not in the golden (they vary)."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastverify.client import ApiError, ControlClient
from fastverify.exporters import catalog
from tests.support.harness import DaemonHarness
from tests.support.net import free_port
from tests.support.traffic import traffic

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "full-scrape.golden"
REGENERATE = (
    "FASTVERIFY_WRITE_GOLDEN=1 python -m pytest -q -p no:cacheprovider "
    "tests/integration/test_exporter_full_scrape.py"
)
HEADER = (
    "# Every series fastverifyd publishes in one scrape of the sim serving EAGLE-3\n"
    "# (tests/integration/test_exporter_full_scrape.py): sample name, type, label names.\n"
    f"# Regenerate: {REGENERATE}\n"
)
# Catalog series the daemon cannot publish in this scenario, and why.
NOT_IN_SCENARIO = {
    "inspector": "the NCCL inspector is followed by the standalone exporter (--inspector-dir)",
}
PROMTOOL = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").is_file()
                                         else None)  # fmt: skip


def shape(text: str) -> list[str]:
    """One line per (sample name, exposition type, label names), sorted: no values."""
    rows = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            rows.add(f"{s.name} {fam.type} {','.join(sorted(s.labels)) or '-'}")
    return sorted(rows)


def missing_series(text: str) -> list[str]:
    """Catalog series of this scenario that the scrape does not hold yet."""
    have = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    return [
        s.name
        for s in catalog.CATALOG
        if s.source not in NOT_IN_SCENARIO and not set(s.sample_names) <= have
    ]


@pytest.mark.skipif(
    PROMTOOL is None,
    reason="NOT RUN: promtool missing (Debian package prometheus, scripts/install-system-deps.sh)",
)
def test_the_full_scrape_is_the_golden_and_promtool_accepts_it(tmp_path: Path) -> None:
    token = "full-scrape-" + "t" * 20
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    tcp = f"127.0.0.1:{free_port()}"
    config = {
        "server": {"mode": "eagle3", "weight_cache": "auto"},
        "frontdoor": {"mode": "hold"},  # its series too (the traffic goes through it)
        "daemon": {"default_profile": "nccl-debug", "trace_period_s": 2, "trace_steps": 3,
                   "tcp_listen": tcp, "token_file": str(token_file)},
    }  # fmt: skip
    with DaemonHarness(tmp_path, tp_size=2, config=config) as d:
        with pytest.raises(ApiError) as refused:
            ControlClient(tcp=tcp, token="wrong-" + "x" * 20, timeout=5).get("/v1/status")
        assert refused.value.status == 401
        # a restart behind the front door: its downtime and the last switch's series
        restart = d.ctl("restart")
        assert restart.returncode == 0, restart.stdout + restart.stderr
        for conc in (1, 2):  # one client: the reading's running requests are 1 (or 2 briefly)
            d.client.post("/v1/baselines", {"profile": "nccl-debug", "tokens_per_second": 80.0,
                                            "per_request_tokens_per_second": 80.0 / conc,
                                            "concurrency": conc})  # fmt: skip
        d.client.post("/v1/decision", {"profile": "nccl-debug", "mode": "eagle3",
                                       "backend": "nccl", "applied": False,
                                       "why": "the full-scrape test"})  # fmt: skip
        argv = d.client.get("/v1/server/argv")["argv"]
        steps = int(argv[argv.index("--speculative-num-steps") + 1])
        d.client.post("/v1/acceptance", {"histogram": [4] + [1] * steps})
        plan = {
            "accept_steps": steps,
            "lower_acceptance": {"accept_length": 1.0},
            "tiers": {"1": {"steps": steps, "break_even_accept_length": {"1": 0.5}}},
        }
        d.client.post(
            "/v1/spec/plan", {"plan": plan, "adaptive_config": {"1": {"candidate_steps": [steps]}}}
        )
        with traffic(d):

            def complete() -> str | None:
                text = httpx.get(d.metrics_url, timeout=10).text
                return None if missing_series(text) else text

            text = d.wait_for(complete, 120, "every series of the scenario on /metrics")
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = HEADER + "\n".join(shape(text)) + "\n"
    if os.environ.get("FASTVERIFY_WRITE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(got, encoding="utf-8")
    want = GOLDEN.read_text(encoding="utf-8") if GOLDEN.is_file() else ""
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                        str(GOLDEN), "this scrape"))  # fmt: skip
    assert got == want, (
        f"the scrape's series differ from {GOLDEN.name} (a renamed, retyped or relabelled "
        f"series, or a new one). If the change is meant, regenerate with:\n  {REGENERATE}\n"
        f"{diff}"
    )


def test_the_golden_names_only_catalog_series() -> None:
    names = catalog.sample_names()
    rows = [line.split() for line in GOLDEN.read_text().splitlines() if not line.startswith("#")]
    assert rows and all(len(r) == 3 for r in rows)
    assert {r[0] for r in rows} <= names, {r[0] for r in rows} - names
    for name, kind, _labels in rows:
        series = next(s for s in catalog.CATALOG if name in s.sample_names)
        assert kind == series.exposed_type, name
