"""Environment verification against real processes and NCCL's own confirmations."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fastverify.daemon.verify import (
    check_nccl_debug,
    check_process_env,
    compare_env,
    parse_set_by_env,
)
from tests.support.field import RING_LL
from tests.support.harness import _scrubbed_env

EXPECTED = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}

# Real NCCL 2.28.9 INFO output (H200, one rank), as in the shared fixtures.
NCCL_LOG = """\
vm:442:442 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS
vm:442:442 [0] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 16.
vm:442:442 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.
vm:442:442 [0] NCCL INFO NCCL_NTHREADS set by environment to 512.
vm:442:442 [0] NCCL INFO ENV/Plugin: Could not find: libnccl-env.so
vm:442:442 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
"""


def test_compare_env() -> None:
    assert compare_env({"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "PATH": "/bin"}, EXPECTED).ok
    c = compare_env({"NCCL_ALGO": "Tree", "NCCL_DEBUG": "WARN", "NCCL_VERSION": "2.28.3"}, EXPECTED)
    assert c.missing == ["NCCL_PROTO"]
    assert c.different == {"NCCL_ALGO": ["Ring", "Tree"]}
    assert c.unexpected == {"NCCL_DEBUG": "WARN"}  # NCCL_VERSION is metadata, not tuning


def _tree(env: dict[str, str]) -> subprocess.Popen:
    code = "import os,subprocess,sys,time; subprocess.Popen(['sleep','30']); time.sleep(30)"
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def test_check_process_env_covers_children(tmp_path: Path) -> None:
    base = {"PATH": os.environ["PATH"]}
    good = _tree({**base, **EXPECTED})
    bad = _tree({**base, **EXPECTED, "NCCL_ALGO": "Tree"})
    try:
        import psutil

        for p in (good, bad):
            for _ in range(200):
                if psutil.Process(p.pid).children():
                    break
                import time

                time.sleep(0.01)
        ok = check_process_env(good.pid, EXPECTED)
        assert ok.ok and len(ok.processes) == 2, ok.message
        no = check_process_env(bad.pid, EXPECTED)
        assert not no.ok and "NCCL_ALGO=Tree (profile: Ring)" in no.message
        assert all(not p.ok for p in no.processes)
    finally:
        for p in (good, bad):
            os.killpg(p.pid, 9)
            p.wait()


def test_nccl_confirmations_from_real_log(tmp_path: Path) -> None:
    assert parse_set_by_env(NCCL_LOG.splitlines()) == {
        "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16", "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    }  # fmt: skip
    f = tmp_path / "vm.442.log"
    f.write_text(NCCL_LOG)
    rep = check_nccl_debug([f], RING_LL)
    assert rep["ok"] is True and rep["mismatched"] == {}
    rep = check_nccl_debug([f], dict(RING_LL, NCCL_NTHREADS="256"))
    assert rep["ok"] is False and rep["mismatched"] == {"NCCL_NTHREADS": ["256", "512"]}
    rep = check_nccl_debug([f], {"NCCL_ALGO": "Ring"})
    assert rep["ok"] is True and "NCCL_BUFFSIZE" in rep["not_in_profile"]  # from an nccl.conf
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert check_nccl_debug([empty], RING_LL)["ok"] is None


def test_engine_owned_variables_in_workers() -> None:
    owned = {"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"}
    worker = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_CUMEM_ENABLE": "0"}
    c = compare_env(worker, EXPECTED, owned)
    assert c.ok and c.engine_set == {"NCCL_CUMEM_ENABLE": "0"}
    # A profile value the engine overrode did not take effect: still a mismatch.
    c = compare_env(worker, dict(EXPECTED, NCCL_CUMEM_ENABLE="1"), owned)
    assert not c.ok and c.different == {"NCCL_CUMEM_ENABLE": ["1", "0"]}


def test_engine_owned_is_accepted_in_workers_only(tmp_path: Path) -> None:
    base = {"PATH": os.environ["PATH"], **EXPECTED}
    code = (
        "import os,subprocess,time; "
        "subprocess.Popen(['sleep','30'], env=dict(os.environ, NCCL_NVLS_ENABLE='0')); "
        "time.sleep(30)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], env=base, start_new_session=True)
    try:
        import psutil

        for _ in range(300):
            if psutil.Process(p.pid).children():
                break
            time.sleep(0.01)
        rep = check_process_env(p.pid, EXPECTED, {"NCCL_NVLS_ENABLE"})
        assert rep.ok and "NCCL_NVLS_ENABLE=0" in rep.message, rep.message
        assert not check_process_env(p.pid, EXPECTED).ok  # an engine that does not own it
    finally:
        os.killpg(p.pid, 9)
        p.wait()


FAKE = Path(__file__).resolve().parents[2] / "fixtures" / "proc"


def test_check_process_env_on_a_proc_tree() -> None:
    ok = check_process_env(4242, EXPECTED, ("NCCL_CUMEM_ENABLE",), proc_root=FAKE)
    assert ok.ok, ok.message
    assert [c.pid for c in ok.processes] == [4242, 4243, 4245]  # the zombie is not checked
    assert "NCCL_CUMEM_ENABLE=0" in ok.message  # set by the engine for its workers
    strict = check_process_env(4242, EXPECTED, proc_root=FAKE)
    assert not strict.ok and "pid 4243" in strict.message
    bad = check_process_env(5000, EXPECTED, proc_root=FAKE)
    assert not bad.ok and "NCCL_ALGO=Tree (profile: Ring)" in bad.message
    gone = check_process_env(99999, EXPECTED, proc_root=FAKE)
    assert not gone.ok and "is gone" in gone.message


CHILD = """
import setproctitle, sys, time
setproctitle.setproctitle("sglang::scheduler")
print("ready", flush=True)
time.sleep(600)
"""
SERVER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1]])
time.sleep(600)
"""


def _retitled_child(extra: dict[str, str]) -> subprocess.Popen:
    """A server whose child retitles itself with the real setproctitle, as SGLang's
    scheduler does (`setproctitle.setproctitle("sglang::scheduler")`); returns once the
    child has said so on the inherited stdout."""
    env = {"PATH": os.environ["PATH"], "FASTVERIFY_ENGINE_ID": "e1", **EXPECTED, **extra}
    p = subprocess.Popen(
        [sys.executable, "-c", SERVER, CHILD],
        env=env, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def test_a_retitled_process_is_unverifiable_unless_its_environ_is_kept() -> None:
    """setproctitle writes the title over the memory /proc/PID/environ shows: the child's
    environment reads as empty. The daemon must say it cannot verify it (never "no NCCL
    variables, verified"), and with SPT_NOENV=1 (what the daemon gives its engines) verify it."""
    for extra, verified in (({}, False), ({"SPT_NOENV": "1"}, True)):
        p = _retitled_child(extra)
        try:
            rep = check_process_env(p.pid, EXPECTED)
            assert len(rep.processes) == 2, rep.message
            assert rep.ok is verified, rep.message
            if not verified:
                (bad,) = [c for c in rep.processes if c.error]
                assert rep.reason == "env_mismatch" and "setproctitle" in bad.error
                # a profile without NCCL variables (nccl-default) once read as verified here
                assert not check_process_env(p.pid, {}).ok
        finally:
            os.killpg(p.pid, 9)
            p.wait()


def test_a_retitled_process_is_named_by_its_whole_title() -> None:
    p = _retitled_child({"SPT_NOENV": "1"})
    try:
        names = [c.name for c in check_process_env(p.pid, EXPECTED).processes]
        assert names[1] == "sglang::scheduler", names  # comm alone: "sglang::schedul"
    finally:
        os.killpg(p.pid, 9)
        p.wait()


def test_a_process_without_the_profiles_sglang_variable_fails_verification() -> None:
    """The check behind pcie-ipc's verify line reads each process's /proc environ: a real process
    without SGLANG_ENABLE_PCIE_IPC_ALLREDUCE fails it, naming the variable."""
    from fastverify.daemon import verify

    env = {k: v for k, v in _scrubbed_env().items() if not k.startswith("SGLANG_")}
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, env=env)  # fmt: skip
    try:
        bad = verify.check_process_env(child.pid, {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"})
        good = verify.check_process_env(child.pid, {})
    finally:
        child.communicate(timeout=30)
    assert not bad.ok and bad.reason == "env_mismatch"
    assert "missing SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in bad.message, bad.message
    assert good.ok and good.message == "1 process(es) hold exactly no NCCL variables"
