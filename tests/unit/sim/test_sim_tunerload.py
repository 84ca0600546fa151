"""The sim loads NCCL_TUNER_PLUGIN as NCCL 2.28.9 does and prints the same lines: compared
with the real run in tests/fixtures/nccl-2.28.9-tuner/ (same plugin source, same table),
and NCCL's texts for a plugin it cannot use (src/plugin/plugin_open.cc, tuner.cc)."""

from __future__ import annotations

import _ctypes
import re
import shutil
import subprocess
from pathlib import Path

from fastverify.sim import ncclenv, sglang_logs
from fastverify.sim.tunerload import tuner_load_lines

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "nccl-2.28.9-tuner"
BODY = re.compile(r"^\S+ \[\d+\] NCCL (INFO|WARN) (.*)$")
# the real run's paths (fixture README)
REAL_SO = "/work/main/.gpu-tuner/tree/native/tuner/build/libnccl-tuner-fastverify.so"
REAL_TABLE = "/tmp/tuner-logs/nvlink/tuned.tuner.csv"


def _real_tuner_lines() -> list[tuple[str, str]]:
    out = []
    for line in (FIX / "tuned-nvlink.rank0.nccl.log").read_text().splitlines():
        m = BODY.match(line)
        if m and ("TUNER" in m.group(2) or "tuner" in m.group(2)) and "Closing" not in line:
            out.append((m.group(1), m.group(2)))
    return out


def test_loaded_plugin_lines_equal_the_real_nccl_run(plugin_so, tmp_path, monkeypatch) -> None:
    table = tmp_path / "tuned.tuner.csv"
    shutil.copy(FIX / "tuned-nvlink.tuner.csv", table)
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(table))
    got = tuner_load_lines({"NCCL_TUNER_PLUGIN": str(plugin_so)}, 2)
    want = [
        (lvl, text.replace(REAL_SO, str(plugin_so)).replace(REAL_TABLE, str(table)))
        for lvl, text in _real_tuner_lines()
    ]
    assert len(want) == 4 and got == want


def test_rows_for_another_rank_count_are_left_out(plugin_so, tmp_path, monkeypatch) -> None:
    table = tmp_path / "tuned.tuner.csv"
    shutil.copy(FIX / "tuned-nvlink.tuner.csv", table)  # measured for nranks=2
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(table))
    got = tuner_load_lines({"NCCL_TUNER_PLUGIN": str(plugin_so)}, 4)
    assert got[-1] == (
        "INFO",
        f"fastverify tuner: {table} has 3 rows, none for nranks=4 nnodes=1: "
        "NCCL chooses for this communicator",
    )


def test_unset_plugin_prints_what_the_real_run_without_it_printed() -> None:
    real = [
        (m.group(1), m.group(2))
        for line in (FIX / "no-plugin.rank0.nccl.log").read_text().splitlines()
        if (m := BODY.match(line)) and m.group(2).startswith("TUNER/")
    ]
    assert (
        tuner_load_lines({}, 2)
        == real
        == [("INFO", "TUNER/Plugin: Could not find: libnccl-tuner.so")]
    )


def test_plugins_nccl_cannot_use(tmp_path: Path) -> None:
    missing = str(tmp_path / "libnccl-tuner-fastverify.so")
    assert tuner_load_lines({"NCCL_TUNER_PLUGIN": missing}, 2) == [
        ("INFO", f"NCCL_TUNER_PLUGIN set by environment to {missing}"),
        ("INFO", f"TUNER/Plugin: Could not find: {missing}"),
    ]
    not_elf = tmp_path / "text.so"
    not_elf.write_text("not a library\n" * 100)
    got = tuner_load_lines({"NCCL_TUNER_PLUGIN": str(not_elf)}, 2)
    assert got[1][1].startswith(f"TUNER/Plugin: {not_elf}: {not_elf}: ")  # NAME: dlerror
    other = str(Path(_ctypes.__file__).resolve())  # a shared object without tuner symbols
    assert tuner_load_lines({"NCCL_TUNER_PLUGIN": other}, 2)[1:] == [
        ("INFO", f"External tuner plugin {other} is unsupported")
    ]
    assert tuner_load_lines({"NCCL_TUNER_PLUGIN": "none"}, 2) == [
        ("INFO", "NCCL_TUNER_PLUGIN set by environment to none")
    ]


def test_another_tuner_is_named_as_nccl_names_it(tmp_path: Path) -> None:
    src = tmp_path / "other.c"
    src.write_text(
        "struct t { const char *name; void *init, *get, *fin; };\n"
        '__attribute__((visibility("default"))) const struct t ncclTunerPlugin_v4 = '
        '{"Example", 0, 0, 0};\n'
    )
    so = tmp_path / "libnccl-tuner-example.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    assert tuner_load_lines({"NCCL_TUNER_PLUGIN": str(so)}, 2)[1:] == [
        ("INFO", "TUNER/Plugin: Using Example (v4)"),
        ("INFO", f"Successfully loaded external tuner plugin {so}"),
    ]


def test_init_lines_carry_the_tuner_once_and_follow_subsys(plugin_so, tmp_path, monkeypatch):
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(tmp_path / "none.csv"))
    env = {"NCCL_DEBUG": "INFO", "NCCL_TUNER_PLUGIN": str(plugin_so)}
    lines = sglang_logs.nccl_init_lines(env, 1, 2, ncclenv.resolve(env))
    assert sum("NCCL_TUNER_PLUGIN set by environment" in ln for ln in lines) == 1
    using = [ln for ln in lines if "TUNER/Plugin: Using fastverify (v5)" in ln]
    assert len(using) == 1 and " [1] NCCL INFO " in using[0]
    warn = [ln for ln in lines if " NCCL WARN fastverify tuner: " in ln]
    assert len(warn) == 1 and "none.csv" in warn[0]  # the plugin cannot open the table
    assert lines.index(using[0]) < next(
        i for i, ln in enumerate(lines) if "coll channels" in ln
    )  # where NCCL loads it: before the channel summary
    quiet = dict(env, NCCL_DEBUG_SUBSYS="COLL")  # neither INIT, ENV nor TUNING
    lines = sglang_logs.nccl_init_lines(quiet, 0, 2, ncclenv.resolve(quiet))
    tuner = [ln for ln in lines if "TUNER" in ln or "tuner" in ln]
    assert len(tuner) == 1 and " [0] NCCL WARN fastverify tuner: " in tuner[0]  # WARN always
