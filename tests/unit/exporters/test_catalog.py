"""The metric catalog is the one declaration: the collectors describe themselves with it and
emit nothing else (name, type, help, label names), a feed of every source makes every
catalog series appear and passes `promtool check metrics`, and docs/reference/exporter.md's table is
the catalog's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fastverify.exporters import catalog, collectors
from fastverify.exporters.collectors.scrape import ScrapeSource
from fastverify.exporters.hub import MetricsHub
from tests.support.hub import full_feed

DOC = Path(__file__).resolve().parents[3] / "docs" / "reference" / "exporter.md"


def _exposition(hub: MetricsHub) -> str:
    reg = CollectorRegistry()
    collectors.register(reg, hub)
    return generate_latest(reg).decode()


def test_each_collector_describes_exactly_its_share_of_the_catalog() -> None:
    described = []
    for c in collectors.collectors(MetricsHub()):
        fams = list(c.describe())
        assert fams and all(not f.samples for f in fams), c.SOURCE
        assert [f.name for f in fams] == [s.family_name for s in catalog.of_source(c.SOURCE)]
        described += fams
    assert [(f.name, f.type, f.documentation) for f in described] == [
        (s.family_name, s.type, s.help) for s in catalog.CATALOG
    ]
    assert len(catalog.BY_NAME) == len(catalog.CATALOG)  # no name declared twice


def test_registering_reads_describe_and_never_collects() -> None:
    class NoCollect(ScrapeSource):
        def run(self, name: str) -> list:
            raise AssertionError("collect() ran at register time")

    hub = MetricsHub()
    hub.scrape = NoCollect(hub)  # every collector runs its source through hub.scrape
    reg = CollectorRegistry()
    collectors.register(reg, hub)
    # the registry knows every sample name from describe(): a second exporter clashes
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        collectors.register(reg, MetricsHub())


def test_a_feed_of_every_source_shows_every_catalog_series_as_declared() -> None:
    text = _exposition(full_feed())
    seen = {}
    for fam in text_string_to_metric_families(text):
        labels = {k for s in fam.samples for k in s.labels} - {"le"}
        seen[fam.name] = (fam.type, fam.documentation, labels)
    expected = {}
    for s in catalog.CATALOG:
        # the text format: a counter's family is named without _total, an info is a gauge
        key = s.family_name if s.type == "counter" else s.name
        expected[key] = (s.exposed_type, s.help, set(s.labels), s.open)
    assert set(seen) == set(expected)
    for name, (kind, doc, labels) in seen.items():
        want_kind, want_doc, want_labels, is_open = expected[name]
        assert (kind, doc) == (want_kind, want_doc), name
        if is_open:
            assert want_labels <= labels, name  # profile_info: + the profile's settings
        else:
            assert labels == want_labels, name


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="NOT RUN: promtool missing (Debian package prometheus, scripts/install-system-deps.sh)",
)
def test_promtool_accepts_the_full_exposition() -> None:
    proc = subprocess.run([shutil.which("promtool") or "promtool", "check", "metrics"],
                          input=_exposition(full_feed()), capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_docs_table_is_the_catalogs() -> None:
    committed = DOC.read_text(encoding="utf-8")
    assert catalog.with_table(committed) == committed, (
        f"docs/reference/exporter.md's metrics table is stale: run `{catalog.WRITE_COMMAND}`"
    )
    for s in catalog.CATALOG:
        assert f"| `{s.name}` | {s.type} |" in committed


def test_the_sglang_series_are_read_from_the_engines_declaration() -> None:
    names = {s.name: s for s in catalog.SGLANG}
    assert names["sglang:inter_token_latency_seconds"].type == "histogram"
    assert names["sglang:generation_tokens_total"].type == "counter"
    assert "tp_rank" in names["sglang:num_running_reqs"].labels
    assert not set(names) & set(catalog.BY_NAME)
