"""Faults on every door of a real fastverifyd (sim engine): a state dir that stops taking
writes during a crash restart, a deleted active profile, an exporter port that cannot be
bound, bad baselines, a no-op `profile set`, trace captures on an idle engine.

Each test is the regression test of a fault found on that door and fails on the code before its fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from fastverify.client import ApiError
from tests.support.harness import DaemonHarness


@pytest.fixture(scope="module")
def daemon_once(tmp_path_factory: pytest.TempPathFactory):
    """One daemon for the tests that only send requests (each leaves it as it found it)."""
    with DaemonHarness(tmp_path_factory.mktemp("doors"), metrics=False) as d:
        yield d


@contextlib.contextmanager
def immutable(path: Path):
    """`chattr +i` on a directory: nothing in it can be created, renamed or removed (root
    ignores permission bits, so this is how a read-only state dir is made here)."""
    r = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"chattr +i is not supported here: {r.stderr.strip() or r.returncode}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def last_record(d: DaemonHarness, kind: str) -> list[dict]:
    """History once its last record is a finished `kind` (READY comes before the record of
    the operation that reached it is written)."""
    return d.wait_for(
        lambda: (h := d.client.get("/v1/history")) and h[-1]["kind"] == kind and h,
        10,
        f"a {kind} record",
    )


def test_crash_restart_waits_for_an_unwritable_state_dir_and_recovers(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        old = d.status()["engine"]["pid"]
        with immutable(d.state_dir):
            os.kill(old, signal.SIGKILL)

            def waiting() -> dict | None:
                st = d.status()
                found = [f for f in st["findings"] if "not writable" in f]
                return st if found and st["state"] == "BACKOFF" else None

            st = d.wait_for(waiting, 20, "a BACKOFF that names the unwritable state dir")
            finding = next(f for f in st["findings"] if "not writable" in f)
            assert str(d.state_dir) in finding and "crash restart" in finding, finding
            assert st["last_failure"]["reason"] == "state_dir_unwritable"
            assert st["engine"]["pid"] is None  # nothing half-started
            assert "Traceback" not in d.log_text()
            # still retrying: a later attempt is logged again, the state is not stuck elsewhere
            d.wait_for(
                lambda: d.log_text().count("waits for the state dir") >= 2, 20, "a second retry"
            )
        st = d.wait_state("READY", timeout=30)
        assert st["engine"]["pid"] not in (None, old)
        assert not [f for f in st["findings"] if "not writable" in f]
        hist = last_record(d, "crash_restart")
        assert hist[-1]["result"] == "ok"
        assert "Traceback" not in d.log_text()


def test_deleted_active_profile_falls_back_to_the_default_with_a_finding(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        mine = d.profile_dir / "mine.env"
        mine.write_text("# description: mine\nNCCL_ALGO=Ring\nNCCL_PROTO=LL\n")
        r = d.ctl("profile", "set", "mine", "--mode", "eagle3")
        assert r.returncode == 0, r.stdout + r.stderr
        assert d.stop() == 0
        mine.unlink()
        d.restart_daemon()
        st = d.status()
        assert (st["state"], st["profile"], st["mode"]) == ("READY", "nccl-default", "eagle3")
        found = [f for f in st["findings"] if "mine/eagle3" in f]
        assert found and "nccl-default/eagle3 instead" in found[0], st["findings"]
        # READY comes before the start's record is written: wait for the record
        hist = d.wait_for(
            lambda: (h := d.client.get("/v1/history")) and h[-1]["result"] == "ok" and h,
            10,
            "the start record",
        )
        refused = [h for h in hist if h["kind"] == "start" and h["result"] == "failed"]
        assert [(h["profile"], h["reason"]) for h in refused] == [("mine", "invalid_profile")]
        assert refused[0]["fallback_to"] == {"profile": "nccl-default", "mode": "eagle3"}
        assert (hist[-1]["kind"], hist[-1]["result"], hist[-1]["profile"]) == (
            "start",
            "ok",
            "nccl-default",
        )
        # choosing a profile clears the finding
        r = d.ctl("profile", "set", "ring-ll", "-q")
        assert r.returncode == 0, r.stdout + r.stderr
        assert not [f for f in d.status()["findings"] if "mine/eagle3" in f]


def _hold(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", port))
    s.listen(1)
    return s


def test_metrics_port_taken_when_asked_for_explicitly_is_a_start_failure(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, start=False)
    holder = _hold(d.metrics_port)
    try:
        with pytest.raises(AssertionError, match="exited with 1"):
            d.start()
        text = d.log_text()
        assert f"cannot listen on 127.0.0.1:{d.metrics_port}" in text, text
        assert "Address already in use" in text and "not starting" in text, text
        assert "Traceback" not in text
        assert not d.socket.exists()  # nothing left behind
        assert not (d.state_dir / "engine.pid").exists()  # no engine was started
    finally:
        holder.close()
        d.close(check_leaks=False)  # it exited 1, as asserted above


class _DefaultMetrics(DaemonHarness):
    """fastverifyd with no --metrics-listen flag and no metrics_listen key: the default."""

    def argv(self) -> list[str]:
        argv = super().argv()
        i = argv.index("--metrics-listen")
        return argv[:i] + argv[i + 2 :]


def test_default_metrics_port_taken_is_a_finding_and_the_daemon_serves(tmp_path: Path) -> None:
    from fastverify.config import ExporterConfig

    host, port = ExporterConfig().metrics_listen.rsplit(":", 1)
    try:
        holder = _hold(int(port))
    except OSError as exc:  # taken already: the daemon cannot bind it either
        assert exc.errno == errno.EADDRINUSE, exc
        holder = None
    d = _DefaultMetrics(tmp_path, metrics=False, start=False)
    try:
        with d:
            # the exporter is started before the control API answers: hold the shared
            # default port only that long (other test files may run in parallel)
            d.start(wait_ready=False)
            if holder is not None:
                holder.close()
                holder = None
            st = d.wait_state("READY", timeout=30)
            assert st["state"] == "READY"
            found = [f for f in st["findings"] if f"cannot listen on {host}:{port}" in f]
            assert found and "metrics_listen" in found[0], st["findings"]
            r = d.ctl("status")
            assert r.returncode == 0 and f"{host}:{port}" in r.stdout, r.stdout + r.stderr
    finally:
        if holder is not None:
            holder.close()


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"profile": "no-such-profile"}, "profile", "no profile named"),
        ({"profile": "../etc/passwd"}, "profile", "profile"),
        ({"measured_at": -1e18}, "measured_at", "before 2020"),
        ({"measured_at": 1e12}, "measured_at", "in the future"),
        ({"tokens_per_second": -5}, "tokens_per_second", "> 0"),
        ({"per_request_tokens_per_second": 0}, "per_request_tokens_per_second", "> 0"),
        ({"tokens_per_second": float("inf")}, "tokens_per_second", "finite"),
        ({"measured_at": float("nan")}, "measured_at", "finite"),
        # a baseline says which batch size it was measured at (like for like)
        ({"concurrency": None}, "concurrency", "concurrent requests"),
        ({"concurrency": 0}, "concurrency", ">= 1"),
        ({"concurrency": 1.5}, "concurrency", "must be int"),
        ({"concurrency": True}, "concurrency", "must be int"),
    ],
)
def test_bad_baselines_are_422_naming_the_field_and_change_nothing(
    daemon_once: DaemonHarness, change: dict, field: str, words: str
) -> None:
    d = daemon_once
    good = {
        "profile": "ring-ll",
        "tokens_per_second": 80.0,
        "per_request_tokens_per_second": 9.5,
        "concurrency": 1,
    }
    before = d.client.get("/v1/baselines")
    with pytest.raises(ApiError) as err:
        d.client.post("/v1/baselines", {**good, **change})
    assert err.value.status == 422, err.value.body
    msg = err.value.body["error"]
    assert repr(field) in msg and words in msg, msg
    assert d.client.get("/v1/baselines") == before
    rec = d.client.post("/v1/baselines", good)  # the same body without the fault is taken
    assert rec["profile"] == "ring-ll" and rec["tokens_per_second"] == 80.0
    assert d.client.get("/v1/baselines")["ring-ll"]["tokens_per_second"] == 80.0


def test_profile_set_of_what_serves_is_a_no_op_unless_restart(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        st = d.status()
        pid, name, mode = st["engine"]["pid"], st["profile"], st["mode"]
        hist = last_record(d, "start")
        res = d.client.post("/v1/profile", {"name": name, "mode": mode})
        assert res["result"] == "unchanged" and "already serving" in res["message"], res
        res = d.client.post("/v1/mode", {"mode": mode, "stream": True})
        assert res["result"] == "unchanged", res
        r = d.ctl("profile", "set", name)
        assert r.returncode == 0 and "already serving" in r.stdout, r.stdout + r.stderr
        after = d.status()
        assert (after["state"], after["engine"]["pid"]) == ("READY", pid)
        assert d.client.get("/v1/history") == hist  # nothing happened, nothing recorded
        # an edited profile file is not "what serves": the same name restarts with it
        edited = d.profile_dir / f"{name}.env"
        edited.write_text("# description: edited\nNCCL_ALGO=Ring\n")
        res = d.client.post("/v1/profile", {"name": name, "mode": mode})
        assert res["result"] == "ok" and d.status()["engine"]["pid"] != pid
        pid = d.status()["engine"]["pid"]
        res = d.client.post("/v1/profile", {"name": name, "mode": mode, "restart": True})
        assert res["result"] == "ok" and res["kind"] == "switch"
        assert d.status()["engine"]["pid"] != pid
        pid = d.status()["engine"]["pid"]
        r = d.ctl("profile", "set", name, "--restart", "-q")  # sends restart: true
        assert r.returncode == 0, r.stdout + r.stderr
        assert d.status()["engine"]["pid"] != pid
        with pytest.raises(ApiError) as err:
            d.client.post("/v1/profile", {"name": name, "restart": "yes"})
        assert err.value.status == 422 and "'restart'" in err.value.body["error"]


def test_crash_restart_of_a_deleted_profile_falls_back_to_the_default(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        mine = d.profile_dir / "mine.env"
        mine.write_text("# description: mine\nNCCL_ALGO=Ring\n")
        assert d.ctl("profile", "set", "mine", "-q").returncode == 0
        mine.unlink()
        old = d.status()["engine"]["pid"]
        os.kill(old, signal.SIGKILL)
        d.wait_for(
            lambda: d.client.get("/v1/history")[-1]["kind"] == "crash_restart",
            30,
            "the crash restart's record",
        )
        st = d.wait_state("READY", timeout=30)
        assert st["engine"]["pid"] not in (None, old)
        assert (st["profile"], st["mode"]) == ("nccl-default", "baseline")
        found = [f for f in st["findings"] if "mine/baseline no longer loads" in f]
        assert found and "nccl-default/baseline instead" in found[0], st["findings"]
        last = last_record(d, "crash_restart")[-1]
        assert (last["kind"], last["result"], last["profile"]) == (
            "crash_restart",
            "ok",
            "nccl-default",
        )
