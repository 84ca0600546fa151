"""fastverifyd switching on the sim engine: env delivery, rollback, validation, concurrency."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from fastverify.client import ApiError, ControlClient
from tests.support.field import RING_LL
from tests.support.harness import DaemonHarness


def engine_tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def nccl_env(proc: psutil.Process) -> dict[str, str]:
    return {k: v for k, v in proc.environ().items() if k.startswith("NCCL_")}


def held(st: dict, proc: psutil.Process, profile: dict[str, str]) -> dict[str, str]:
    """What `proc` of the serving engine must hold: the profile exactly in the server;
    in its TP workers also what the pinned SGLang adds by its own rules (the sim applies
    them before starting its workers; status names them)."""
    if proc.pid == st["engine"]["pid"]:
        return profile
    return {**profile, **st["engine"]["engine_env"]["added"]}


def test_switch_delivers_env_rolls_back_and_runs_eager(tmp_path: Path) -> None:
    polluted = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_DEBUG": "WARN"}
    with DaemonHarness(tmp_path, env=polluted, tp_size=4) as d:
        assert d.status()["profile"] == "nccl-default"  # default profile at first start

        r = d.ctl("profile", "set", "ring-ll")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert (st["state"], st["profile"], st["mode"]) == ("READY", "ring-ll", "baseline")
        procs = engine_tree(st["engine"]["pid"])
        assert len(procs) == 4  # server + 3 TP workers
        assert st["engine"]["engine_env"]["added"]["NCCL_GRAPH_REGISTER"] == "0"
        for p in procs:
            assert nccl_env(p) == held(st, p, RING_LL), f"pid {p.pid} {p.cmdline()}"
        assert nccl_env(procs[-1])["NCCL_GRAPH_REGISTER"] == "0"

        r = d.ctl("profile", "set", "tree-ll")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "cuda_graph_capture" in r.stderr and "rolled" in r.stderr
        st = d.status()
        assert (st["state"], st["profile"], st["last_good"]) == ("READY", "ring-ll", "ring-ll")
        assert st["last_failure"]["reason"] == "cuda_graph_capture"
        rec = d.client.get("/v1/history")[-1]
        assert rec["profile"] == "tree-ll" and rec["result"] == "rolled_back"
        assert rec["reason"] == "cuda_graph_capture"
        assert "Capture cuda graph failed" in Path(rec["log"]).read_text()
        assert rec["log"] in r.stderr
        journal = [json.loads(x) for x in (d.state_dir / "journal.jsonl").read_text().splitlines()]
        assert any(
            j.get("type") == "switch"
            and j.get("result") == "rolled_back"
            and j["log"] == rec["log"]
            for j in journal
        )
        for p in engine_tree(st["engine"]["pid"]):
            assert nccl_env(p) == held(st, p, RING_LL)

        cur = json.loads(d.ctl("profile", "current", "--json").stdout)
        assert cur == {"profile": "ring-ll", "mode": "baseline", "state": "READY",
                       "last_good": "ring-ll", "last_good_mode": "baseline"}  # fmt: skip
        assert d.ctl("profile", "current").stdout.split() == ["ring-ll", "(baseline)", "READY"]

        r = d.ctl("profile", "set", "tree-ll-eager", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["result"] == "ok"
        st = d.status()
        cmdline = psutil.Process(st["engine"]["pid"]).cmdline()
        assert cmdline[cmdline.index("--cuda-graph-backend-decode") + 1] == "disabled"
        assert "NCCL_GRAPH_REGISTER" not in st["engine"]["engine_env"]["added"]  # no graphs
        for p in engine_tree(st["engine"]["pid"]):
            assert nccl_env(p) == held(st, p, dict(RING_LL, NCCL_ALGO="Tree"))

        hist = json.loads(d.ctl("history", "--json").stdout)
        assert [(h["profile"], h["result"]) for h in hist] == [
            ("nccl-default", "ok"),
            ("ring-ll", "ok"),
            ("tree-ll", "rolled_back"),
            ("tree-ll-eager", "ok"),
        ]
        assert all(h["finished_at"] >= h["started_at"] and h["duration_s"] > 0 for h in hist)


def test_invalid_profiles_are_refused_without_touching_the_server(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path) as d:
        pid = d.engine_pid()
        with pytest.raises(ApiError) as exc:
            d.client.post("/v1/profile", {"name": "no-such-profile"})
        assert exc.value.status == 422
        (d.profile_dir / "typo.env").write_text("NCCL_ALGOS=Ring\n")
        with pytest.raises(ApiError) as exc:
            d.client.post("/v1/profile", {"name": "typo"})
        assert exc.value.status == 422
        assert any("NCCL_ALGOS" in p for p in exc.value.body["problems"])
        r = d.ctl("profile", "set", "typo")
        assert r.returncode == 2 and "NCCL_ALGOS" in r.stderr
        r = d.ctl("profile", "set", "../etc/passwd")
        assert r.returncode == 2
        st = d.status()
        assert st["state"] == "READY" and st["engine"]["pid"] == pid
        assert st["profile"] == "nccl-default"
        assert d.client.get("/v1/history")[-1]["kind"] == "start"  # nothing was attempted


def _has_group(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def raw_http(sock_path: Path, request: bytes) -> tuple[int, dict]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(sock_path))
    s.sendall(request)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def post(path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def test_api_answers_bad_requests_with_clear_4xx(tmp_path: Path) -> None:
    import grp

    group = next((g for g in ("daemon", "adm", "users") if _has_group(g)), None)
    cfg = {"daemon": {"socket_group": group or "fastverify-no-such-group"}}
    with DaemonHarness(tmp_path, metrics=False, config=cfg) as d:
        if group is not None and os.geteuid() == 0:
            assert d.socket.stat().st_gid == grp.getgrnam(group).gr_gid
        pid = d.engine_pid()
        cases = [
            (post("/v1/profile", b"{not json"), 400, "malformed JSON"),
            (post("/v1/profile", b"[1,2]"), 400, "JSON object"),
            (post("/v1/profile", b'{"name": 5}'), 422, "'name' must be str"),
            (post("/v1/profile", b'{"name": "x", "wait": "yes"}'), 422, "'wait' must be bool"),
            (post("/v1/profile", b"{}"), 422, "missing field 'name'"),
            (post("/v1/profile", b'{"name": "ring-ll", "bogus": 1}'), 422, "unknown field"),
            (post("/v1/mode", b'{"mode": "turbo"}'), 422, '"turbo" is not allowed'),
            (post("/v1/nope", b"{}"), 404, "unknown path"),
            (b"GET /v1/profile HTTP/1.1\r\nHost: x\r\n\r\n", 405, "GET not allowed"),
            (post("/v1/profile", b"{}", "X: y\r\n").replace(b"Length: 2", b"Length: 9999999"), 413,
             "exceeds"),
        ]  # fmt: skip
        for req, status, words in cases:
            got, body = raw_http(d.socket, req)
            assert got == status, (req, body)
            assert words in body["error"], (req, body)
        st = d.status()
        assert st["engine"]["pid"] == pid and st["state"] == "READY"
        assert oct(d.socket.stat().st_mode & 0o777) == "0o660"


def test_concurrent_switches_one_at_a_time_every_caller_answered(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=0.5, metrics=False) as d:
        names = ["ring-ll", "ring-simple", "ring-ll-8ch", "tree-ll-eager"]
        results: dict[str, tuple[int, dict]] = {}
        barrier = threading.Barrier(len(names) + 1)

        def call(key: str, name: str, queue: bool, delay: float) -> None:
            c = ControlClient(d.socket, timeout=60)
            barrier.wait()
            time.sleep(delay)
            try:
                results[key] = (200, c.post("/v1/profile", {"name": name, "queue": queue}))
            except ApiError as exc:
                results[key] = (exc.status, exc.body)

        threads = [threading.Thread(target=call, args=(n, n, False, 0.0)) for n in names]
        # A caller that asks to wait, arriving while the winner is in flight.
        threads.append(threading.Thread(target=call, args=("queued", "ring-ll", True, 0.1)))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == len(names) + 1, results  # every caller answered
        winners = [n for n in names if results[n][0] == 200]
        assert len(winners) == 1, results
        for n in names:
            if n == winners[0]:
                continue
            status, body = results[n]
            assert status == 409, results
            assert body["in_flight"]["profile"] == winners[0]
            assert "in flight" in body["error"] and winners[0] in body["error"]
        assert results["queued"][0] == 200 and results["queued"][1]["profile"] == "ring-ll"
        switches = [h for h in d.client.get("/v1/history") if h["kind"] == "switch"]
        assert len(switches) == 2  # the winner, then the queued one
        assert switches[0]["finished_at"] <= switches[1]["started_at"]
        assert d.status()["profile"] == "ring-ll"


def test_cli_busy_exit_code_and_mode_switch(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=1.0, metrics=False) as d:
        d.client.post("/v1/profile", {"name": "ring-ll", "wait": False})
        r = d.ctl("profile", "set", "ring-simple")
        assert r.returncode == 4, r.stdout + r.stderr
        assert "ring-ll" in r.stderr
        d.wait_state("READY")
        assert d.ctl("mode", "get").stdout.strip() == "baseline"
        r = d.ctl("mode", "set", "eagle3", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        st = d.status()
        assert (st["profile"], st["mode"]) == ("ring-ll", "eagle3")
        cmd = psutil.Process(st["engine"]["pid"]).cmdline()
        assert cmd[cmd.index("--speculative-algorithm") + 1] == "EAGLE3"
        r = d.ctl("server", "check", "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["check"]["ok"] is True and "--speculative-draft-model-path" in out["argv"]


def test_nccl_debug_confirmations_and_auto_engine(tmp_path: Path) -> None:
    cfg = {"daemon": {"nccl_debug": True}}
    with DaemonHarness(tmp_path, engine="auto", config=cfg, metrics=False) as d:
        first = d.log_text().splitlines()[0]
        assert "engine sim (auto: " in first and "SGLang is not importable" in first
        st = d.status()
        assert st["engine"]["simulated"] is True and st["engine"]["reason"].startswith("auto: ")
        res = d.client.post("/v1/profile", {"name": "ring-ll"})
        assert res["result"] == "ok"
        nccl = res["verify"]["nccl"]
        assert nccl["ok"] is True and nccl["files"], nccl
        assert nccl["confirmed"]["NCCL_BUFFSIZE"] == "16777216"
        env = psutil.Process(d.engine_pid()).environ()
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,TUNING"
        assert env["NCCL_DEBUG_FILE"].endswith("%h.%p.log")


def test_failed_switch_without_a_loadable_last_good_ends_failed_not_stuck(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        (d.profile_dir / "mine.env").write_text("NCCL_ALGO=Ring\nNCCL_PROTO=LL\n")
        assert d.ctl("profile", "set", "mine", "-q").returncode == 0
        (d.profile_dir / "mine.env").write_text("NCCL_ALGO=Ringg\n")  # broken since
        r = d.ctl("profile", "set", "tree-ll", "--json")
        assert r.returncode == 1
        res = json.loads(r.stdout)
        assert res["result"] == "failed" and res["reason"] == "cuda_graph_capture"
        assert res["rollback_failure"]["reason"] == "invalid_profile"
        st = d.status()
        assert st["state"] == "FAILED" and st["engine"]["pid"] is None
        assert d.client.get("/v1/history")[-1]["result"] == "failed"
        assert d.ctl("profile", "set", "ring-ll", "-q").returncode == 0
        assert d.status()["state"] == "READY"


def test_cancel_stops_a_loading_switch_and_puts_the_previous_profile_back(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=2.0, metrics=False) as d:
        before = d.status()
        assert d.client.cancel() is None  # nothing in flight: 404 -> None
        old_pid = before["engine"]["pid"]
        d.client.post("/v1/profile", {"name": "ring-simple", "wait": False})
        st = d.wait_for(
            lambda: (s := d.status())["state"] == "STARTING" and s["engine"]["pid"] and s,
            15,
            "the new engine to be loading",
        )
        loading_pid = st["engine"]["pid"]
        answer = d.client.cancel()
        assert answer["result"] == "cancelled"
        assert answer["operation"]["profile"] == "ring-simple"
        st = d.wait_state("READY", timeout=30)
        assert (st["profile"], st["mode"]) == (before["profile"], before["mode"])
        assert st["engine"]["pid"] not in (old_pid, loading_pid)
        d.wait_for(lambda: not _alive(loading_pid), 10, "the loading engine to be stopped")
        last = d.client.get("/v1/history")[-1]
        assert (last["kind"], last["result"], last["profile"]) == (
            "switch", "cancelled", "ring-simple"
        )  # fmt: skip
        assert last["rolled_back_to"] == {"profile": before["profile"], "mode": before["mode"]}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_closed_stdout_pipe_is_not_a_lost_daemon(tmp_path: Path) -> None:
    # `fastverifyctl profile set ring-ll | head -1`: the pipe's reader leaves after the first
    # line. The daemon's connection is fine, so the CLI must not say it lost it (exit 5): it
    # follows the switch to its end quietly and exits with its result.
    import subprocess
    import sys

    from tests.support.harness import REPO

    with DaemonHarness(tmp_path) as d:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket),
             "profile", "set", "ring-ll"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # what `head -1` does after its line
        err = proc.stderr.read()
        rc = proc.wait(timeout=120)
        assert "accepted" in first
        assert "lost the connection" not in err, err
        assert rc == 0, err
        st = d.status()
        assert (st["state"], st["profile"]) == ("READY", "ring-ll")


def test_ll128_on_the_sims_pcie_only_host_is_refused_without_force(tmp_path: Path) -> None:
    """The sim plays one host kind, PCIe-only without NVLink (what `doctor` shows of it): a
    profile forcing LL128 there is refused without --force (exit 2, nothing stopped), as
    profiles.md and `profile set --help` say, and served with the warning said with it."""
    with DaemonHarness(tmp_path, metrics=False) as d:
        (d.profile_dir / "ll128.env").write_text(
            "# description: LL128 everywhere\nNCCL_PROTO=LL128\nNCCL_ALGO=Ring\n"
        )
        doctor = d.ctl("doctor", "--json")
        assert "PCIe-only GPUs with P2P, no NVLink" in json.loads(doctor.stdout)["engine"]["host"]
        before = d.status()
        refused = d.ctl("profile", "set", "ll128")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "LL128" in refused.stderr and "no NVLink" in refused.stderr, refused.stderr
        assert "--force" in refused.stderr
        after = d.status()
        assert after["engine"]["pid"] == before["engine"]["pid"] and after["profile"] != "ll128"
        forced = d.ctl("profile", "set", "ll128", "--force")
        assert forced.returncode == 0, forced.stdout + forced.stderr
        said = forced.stdout + forced.stderr
        assert "LL128 without NVLink" in said and "accepted because of --force" in said, said
        assert d.status()["profile"] == "ll128"
