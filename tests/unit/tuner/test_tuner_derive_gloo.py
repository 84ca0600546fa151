"""The derivation end to end on the gloo backend (two CPU ranks) with a fake timing
source: the ranks really rendezvous and run, the launcher merges and decides, the table
and profile are written and are valid, and a second run resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastverify.experiments.derive_tuner import derive as dt
from fastverify.tuner.table import check_table, lookup

pytest.importorskip("torch")

MiB = 1 << 20
# [latency_us, us_per_MiB]: LL wins small, Simple wins big; NCCL's "default" is LL-like
# up to its switch and pays for Simple's latency below it (a crossover it gets wrong).
FAKE = {
    "default": [18.0, 40.0],
    "Ring/LL": [16.0, 120.0],
    "Ring/Simple": [30.0, 36.0],
    "Tree/LL": [40.0, 200.0],
    "_jitter": 0.005,
}


@pytest.fixture()
def fake(tmp_path: Path) -> str:
    p = tmp_path / "fake.json"
    p.write_text(json.dumps(FAKE))
    return str(p)


def _cfg(tmp_path: Path, fake: str, sizes: tuple[int, ...]) -> dt.DeriveConfig:
    return dt.DeriveConfig(
        world=2,
        sizes=sizes,
        candidates=("Ring/LL", "Ring/Simple", "Tree/LL", "Tree/LL128"),
        channels=(),
        backend="gloo",
        fake_costs=fake,
        workdir=str(tmp_path / "work"),
        timeout_s=240,
    )


def test_derive_on_gloo_writes_a_valid_table_and_resumes(tmp_path: Path, fake: str) -> None:
    sizes = (14336, 114688, 917504, 8 * MiB, 64 * MiB)
    events: list[str] = []
    report = dt.derive({"PATH": "/usr/bin:/bin"}, _cfg(tmp_path, fake, sizes), None, events.append)
    by = {d["bytes"]: d for d in report["decisions"]}
    # 14 KB: Ring/LL 17.6 vs default 18.6: 5% better, beyond the 3% floor -> a row
    assert by[14336]["best"] == "Ring/LL" and not by[14336]["keep_default"]
    # 917 KB: default (18+35=53) vs Ring/Simple (30+31.5=61.5): keep NCCL's
    assert by[917504]["keep_default"] and by[917504]["best"] == "default"
    # 64 MiB: Ring/Simple 2334 vs default 2578 -> row
    assert by[64 * MiB]["best"] == "Ring/Simple"
    # Tree/LL128 has no fake cost: reported unavailable, never chosen
    assert "Tree/LL128" in by[14336]["unavailable"]
    assert any(e.startswith("[5/5]") for e in events), events
    table, profile = dt.write_outputs(report, "mytuned", tmp_path / "out", "nccl-default")
    check = check_table(table)
    assert check.ok, check.problems
    assert lookup(check.rows, "AllReduce", 14336, 2, 1).choice == "RING/LL"
    assert lookup(check.rows, "AllReduce", 917504, 2, 1) is None  # NCCL decides
    assert lookup(check.rows, "AllReduce", 64 * MiB, 2, 1).choice == "RING/SIMPLE"
    assert lookup(check.rows, "AllReduce", 14336, 4, 1) is None  # other rank count
    assert "FASTVERIFY_TUNER_TABLE=mytuned.tuner.csv" in profile.read_text()
    assert "# extends: nccl-default" in profile.read_text()

    # resume: the same settings again measure nothing new
    events.clear()
    again = dt.derive({"PATH": "/usr/bin:/bin"}, _cfg(tmp_path, fake, sizes), None, events.append)
    assert any("resuming: 5 of 5" in e for e in events), events
    assert again["measure_wall_s"] == 0.0
    assert [r["choice"] for r in again["rows"]] == [r["choice"] for r in report["rows"]]


def test_resume_measures_only_missing_sizes(tmp_path: Path, fake: str) -> None:
    dt.derive({"PATH": "/usr/bin:/bin"}, _cfg(tmp_path, fake, (14336, 917504)), None)
    events: list[str] = []
    rep = dt.derive(
        {"PATH": "/usr/bin:/bin"}, _cfg(tmp_path, fake, (14336, 917504, 64 * MiB)), None,
        events.append,
    )  # fmt: skip
    assert any("resuming: 2 of 3" in e for e in events), events
    assert any("measuring 1 sizes" in e for e in events), events
    assert [d["bytes"] for d in rep["decisions"]] == [14336, 917504, 64 * MiB]


def test_cli_derive_tuner_on_gloo(tmp_path: Path, fake: str, monkeypatch) -> None:
    from click.testing import CliRunner

    from fastverify.ctl import cli

    monkeypatch.setenv("FASTVERIFY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FASTVERIFY_PROFILE_DIRS", str(tmp_path / "profiles"))
    args = ["preflight", "--derive-tuner", "mine", "--backend", "gloo", "--fake-costs", fake,
            "--nproc", "2", "--tokens", "1,64,4096", "--json",
            "--nccl-csv", str(tmp_path / "nccl_tuner.conf")]  # fmt: skip
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [row["choice"] for row in doc["rows"]] == ["RING/LL", "RING/SIMPLE"]
    assert (tmp_path / "profiles" / "mine.tuner.csv").is_file()
    # the same rows in NCCL's example-plugin format (nNodes before nRanks, lowercase)
    from fastverify.tuner import nccl_csv

    exported = (tmp_path / "nccl_tuner.conf").read_text()
    assert doc["nccl_csv"]["rows"] == 2 and nccl_csv.ONE_CHANNEL_NOTE in doc["nccl_csv"]["notes"]
    assert [ln.split(",")[3:5] for ln in exported.splitlines() if not ln.startswith("#")] == [
        ["ring", "ll"], ["ring", "simple"]]  # fmt: skip
    back = nccl_csv.parse(exported)
    assert [r.choice for r in back.rows] == ["RING/LL", "RING/SIMPLE"]
    assert {(r.nranks, r.nnodes) for r in back.rows} == {(2, 1)}
    assert "[3/3]" in r.stderr
    r = CliRunner().invoke(cli, args)
    assert "resuming: 3 of 3" in r.stderr, r.stderr
    r = CliRunner().invoke(cli, ["preflight", "--derive-tuner", "bad/name", "--backend", "gloo"])
    assert r.exit_code == 2 and "not a profile name" in r.output
