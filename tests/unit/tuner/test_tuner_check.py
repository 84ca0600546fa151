"""The daemon's tuner check (fastverify.daemon.tuner_check) on real NCCL 2.28.9 output
(tests/fixtures/nccl-2.28.9-tuner/) and on what the real plugin itself logs: a started
process carries the table variable, its rank logs lie in the per-start debug dir."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fastverify.daemon import failures
from fastverify.daemon.tuner_check import REASONS, check_engine_tuner, wants_nccl_debug
from fastverify.sim.tunerload import tuner_load_lines
from fastverify.tuner.plugin import not_found_message

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-2.28.9-tuner"
REAL_SO = "/work/main/.gpu-tuner/tree/native/tuner/build/libnccl-tuner-fastverify.so"


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], int]]:
    """engine(env) -> pid of a live process started with `env` (as the engine would be)."""
    procs: list[subprocess.Popen] = []

    def start(env: dict[str, str]) -> int:
        p = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", **env},
        )
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline() == b"up\n"  # exec'd: environ is env
        return p.pid

    yield start
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
        p.stdout.close()


def _debug_dir(tmp_path: Path, *texts: str) -> Path:
    d = tmp_path / "start.nccl"
    d.mkdir()
    for i, t in enumerate(texts):
        (d / f"vm.{1000 + i}.log").write_text(t)
    return d


def test_real_log_of_the_plugin_loaded_gives_name_abi_and_rows(tmp_path, engine) -> None:
    table = "/tmp/tuner-logs/nvlink/tuned.tuner.csv"
    pid = engine({"FASTVERIFY_TUNER_TABLE": table, "NCCL_TUNER_PLUGIN": REAL_SO})
    d = _debug_dir(tmp_path, (FIX / "tuned-nvlink.rank0.nccl.log").read_text(), "")
    failure, tuner = check_engine_tuner(pid, d, "engine.log")
    assert failure is None
    assert tuner == {
        "name": "fastverify",
        "abi_version": 5,
        "path": REAL_SO,
        "rows_applied": 3,
        "rows_total": 3,
        "table": table,
        "files": 2,
    }


def test_real_log_without_the_plugin_fails_not_loaded(tmp_path, engine) -> None:
    # the plugin was not built: the profile's environment has no NCCL_TUNER_PLUGIN
    pid = engine({"FASTVERIFY_TUNER_TABLE": "/p/t.tuner.csv"})
    d = _debug_dir(tmp_path, (FIX / "no-plugin.rank0.nccl.log").read_text())
    failure, tuner = check_engine_tuner(pid, d, "engine.log")
    assert tuner is None and failure is not None
    assert failure.reason == "tuner_not_loaded"
    assert failure.line == "TUNER/Plugin: Could not find: libnccl-tuner.so"
    assert not_found_message() in failure.message and str(d) in failure.message
    assert failure.log == "engine.log"


def test_one_rank_without_the_plugin_fails_the_start(tmp_path, engine) -> None:
    pid = engine({"FASTVERIFY_TUNER_TABLE": "/p/t.tuner.csv", "NCCL_TUNER_PLUGIN": REAL_SO})
    d = _debug_dir(
        tmp_path,
        (FIX / "tuned-p2p-off.rank0.nccl.log").read_text(),
        (FIX / "no-plugin.rank0.nccl.log").read_text(),
    )
    failure, _ = check_engine_tuner(pid, d)
    assert failure is not None and failure.reason == "tuner_not_loaded"
    assert f"NCCL_TUNER_PLUGIN={REAL_SO}" in failure.message


def test_a_process_without_a_communicator_is_not_asked_for_the_tuner(tmp_path, engine) -> None:
    pid = engine({"FASTVERIFY_TUNER_TABLE": "/p/t.tuner.csv", "NCCL_TUNER_PLUGIN": REAL_SO})
    real = (FIX / "tuned-nvlink.rank0.nccl.log").read_text().splitlines(keepends=True)
    no_comm = "".join(real[:5])  # the first lines of the real log, before communicator init
    assert "ncclCommInitRank" not in no_comm and "NCCL version" in no_comm
    failure, tuner = check_engine_tuner(pid, _debug_dir(tmp_path, "".join(real), no_comm))
    assert failure is None and tuner is not None and tuner["name"] == "fastverify"


def test_no_nccl_output_cannot_confirm(tmp_path, engine) -> None:
    pid = engine({"FASTVERIFY_TUNER_TABLE": "/p/t.tuner.csv", "NCCL_TUNER_PLUGIN": REAL_SO})
    failure, _ = check_engine_tuner(pid, _debug_dir(tmp_path, "SGLang says hello\n"))
    assert failure is not None and failure.reason == "tuner_no_nccl_log"
    failure, _ = check_engine_tuner(pid, None)  # adopted without a debug dir
    assert failure is not None and failure.reason == "tuner_no_nccl_log"


def test_engine_without_a_table_is_not_checked(tmp_path, engine) -> None:
    pid = engine({"NCCL_ALGO": "Ring"})
    d = _debug_dir(tmp_path, (FIX / "no-plugin.rank0.nccl.log").read_text())
    assert check_engine_tuner(pid, d) == (None, None)


def test_the_real_plugin_refusing_its_table_fails_refused(
    tmp_path, engine, plugin_so, monkeypatch
) -> None:
    bad = tmp_path / "bad.tuner.csv"
    bad.write_text("collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes\n"
                   "AllReduce,0,100,Ring,NoSuchProto,-1,2,1\n")  # fmt: skip
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(bad))
    env = {"NCCL_TUNER_PLUGIN": str(plugin_so)}
    pre = "vm:1:1 [0] NCCL "
    log = "".join(f"{pre}{lvl} {text}\n" for lvl, text in tuner_load_lines(env, 2))
    assert f"{pre}WARN fastverify tuner: {bad}:2:" in log  # the plugin's own WARN
    pid = engine({"FASTVERIFY_TUNER_TABLE": str(bad), **env})
    failure, tuner = check_engine_tuner(pid, _debug_dir(tmp_path, log))
    assert tuner is None and failure is not None and failure.reason == "tuner_refused"


def test_wrong_plugin_name_fails_wrong_plugin(tmp_path, engine) -> None:
    text = (FIX / "tuned-nvlink.rank0.nccl.log").read_text()
    other = text.replace("TUNER/Plugin: Using fastverify (v5)", "TUNER/Plugin: Using Example (v5)")
    pid = engine({"FASTVERIFY_TUNER_TABLE": "/p/t.tuner.csv", "NCCL_TUNER_PLUGIN": REAL_SO})
    failure, _ = check_engine_tuner(pid, _debug_dir(tmp_path, other))
    assert failure is not None and failure.reason == "tuner_wrong_plugin"
    assert "'Example'" in failure.message


def test_reasons_are_failure_reasons_and_tuner_profiles_force_nccl_info() -> None:
    assert set(REASONS) <= set(failures.REASONS)
    for r in REASONS:
        assert r in (failures.__doc__ or "")

    class P:
        env = {"FASTVERIFY_TUNER_TABLE": "t.tuner.csv"}

    class Q:
        env = {"NCCL_ALGO": "Ring"}

    assert wants_nccl_debug(P()) and not wants_nccl_debug(Q())
