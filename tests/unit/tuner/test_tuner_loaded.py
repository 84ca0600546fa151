"""`fastverify.tuner.loaded` on real NCCL 2.28.9 output (tests/fixtures/nccl-2.28.9-tuner/):
the plugin loaded and named, not loaded, and the choices NCCL made follow the table."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from fastverify.experiments.preflight.merge import parse_nccl_log
from fastverify.tuner.loaded import (
    REASON_NO_LOG,
    REASON_NOT_LOADED,
    REASON_REFUSED,
    REASON_UNSUPPORTED,
    REASON_WRONG_PLUGIN,
    check_tuner_loaded,
    tuner_load_status,
)
from fastverify.tuner.table import check_table, lookup
from tests.support.tuner_abi import v5_session

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-2.28.9-tuner"


@pytest.mark.parametrize("path", ["nvlink", "p2p-off"])
def test_real_log_shows_the_plugin_loaded(path: str) -> None:
    st = tuner_load_status((FIX / f"tuned-{path}.rank0.nccl.log").read_text())
    assert st.loaded and st.reason is None
    assert (st.name, st.abi_version) == ("fastverify", 5)
    assert st.path is not None and st.path.endswith("/libnccl-tuner-fastverify.so")
    assert st.requested == st.path
    rows = check_table(FIX / f"tuned-{path}.tuner.csv").rows
    assert st.rows_applied == st.rows_total == len(rows)


@pytest.mark.parametrize("path", ["nvlink", "p2p-off"])
def test_nccl_choices_in_the_real_log_follow_the_table(path: str) -> None:
    rows = check_table(FIX / f"tuned-{path}.tuner.csv").rows
    assert rows
    tuning = parse_nccl_log((FIX / f"tuned-{path}.rank0.nccl.log").read_text())["tuning"]
    covered = 0
    for nbytes, choice in tuning.items():
        row = lookup(rows, "AllReduce", nbytes, 2, 1)
        if row is not None:
            covered += 1
            assert f"{choice['algo']}/{choice['proto']}" == row.choice, nbytes
    assert covered >= len(rows)


def test_real_log_without_plugin_is_not_loaded() -> None:
    st = tuner_load_status((FIX / "no-plugin.rank0.nccl.log").read_text())
    assert not st.loaded and st.reason == REASON_NOT_LOADED
    assert "Could not find: libnccl-tuner.so" in st.detail


def _without(pattern: str) -> str:
    text = (FIX / "tuned-nvlink.rank0.nccl.log").read_text()
    return "\n".join(line for line in text.splitlines() if not re.search(pattern, line))


def test_load_line_missing_means_not_loaded() -> None:
    st = tuner_load_status(_without(r"TUNER/Plugin: Using|Successfully loaded"))
    assert not st.loaded and st.reason == REASON_NOT_LOADED
    assert "NCCL_TUNER_PLUGIN=/" in st.detail  # it was asked for


def test_unsupported_and_wrong_name() -> None:
    text = _without(r"TUNER/Plugin: Using|Successfully loaded")
    # NCCL's own text (src/plugin/tuner.cc) when no ncclTunerPlugin_vN symbol matches
    unsupported = text + "\nvm:1:1 [0] NCCL INFO External tuner plugin /x.so is unsupported\n"
    assert tuner_load_status(unsupported).reason == REASON_UNSUPPORTED
    other = (
        (FIX / "tuned-nvlink.rank0.nccl.log")
        .read_text()
        .replace("Using fastverify (v5)", "Using example (v4)")
    )
    st = tuner_load_status(other)
    assert st.reason == REASON_WRONG_PLUGIN and st.name == "example"
    assert tuner_load_status(other, expect_name=None).reason is None


def test_refused_table_is_reported(plugin_so: Path, tmp_path: Path, monkeypatch) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("AllReduce,0,100,Ring,LL256,-1,2,1\n")
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(bad))
    _, _, logs = v5_session(ctypes.CDLL(str(plugin_so)))
    (warn,) = logs.warns()  # the real plugin's own message, as NCCL's logger prints it
    text = (FIX / "tuned-nvlink.rank0.nccl.log").read_text() + f"vm:1:1 [0] NCCL WARN {warn}\n"
    st = tuner_load_status(text)
    assert st.loaded and st.reason == REASON_REFUSED and "table ignored" in st.detail


def test_every_rank_must_show_it() -> None:
    good = (FIX / "tuned-nvlink.rank0.nccl.log").read_text()
    bad = (FIX / "no-plugin.rank0.nccl.log").read_text()
    assert check_tuner_loaded([good, good]).reason is None
    assert check_tuner_loaded([good, bad]).reason == REASON_NOT_LOADED
    assert check_tuner_loaded(["", ""]).reason == REASON_NO_LOG
