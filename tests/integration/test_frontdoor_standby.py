"""The front door's standby mode on the sim, through fastverifyctl: the new engine starts and
is verified beside the serving one, then takes the traffic (streaming clients: none cut,
none failed, none held; a restart too); a failing profile never takes traffic (the old
engine serves on), nor does a cancelled one; a start the weight cache cannot serve, or no
weight cache, holds and says why; doctor says which mode the memory allows; a crash after a
standby switch is held as any; a stream the old engine's stop cut is named in the switch's
record and not again in the next; a kill -9 of fastverifyd before the cut-over or while the
old engine drains leaves one serving engine and no orphan."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path

import psutil

from tests.support.harness import DaemonHarness
from tests.support.net import free_port
from tests.support.streams import Clients, one_stream, under_clients
from tests.support.switches import last_switch

CLIENTS = 4


def _standby(cache: str = "auto", **more: object) -> dict:
    # two free internal ports: the engines take turns on them
    door = {"mode": "standby", "engine_port": free_port(), "standby_port": free_port(), **more}
    return {"frontdoor": door, "server": {"weight_cache": cache}}


def test_standby_switch_under_streaming_clients(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_standby()) as d:
        fit = d.status()["frontdoor"]["standby"]
        assert fit["mode"] == "standby", fit  # said before any switch
        assert "a switch now: standby: 2 x (KV 4.5 GiB + graphs 0.4 GiB" in d.ctl("status").stdout
        doctor = d.ctl("doctor", "--no-topology", timeout=120).stdout  # what memory allows
        assert f"front door: mode standby; {fit['why']}" in doctor, doctor
        old = d.status()["engine"]
        # every client streams once before the switch and once after it
        r, tally = under_clients(
            d.server_url, CLIENTS, lambda: d.ctl("profile", "set", "ring-ll", "--json")
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert (tally.cut, tally.failed, tally.refused_503) == ([], [], [])
        result = json.loads(r.stdout)
        switch = result["switch"]
        assert switch["mode"] == "standby" and switch["standby"]["mode"] == "standby"
        assert switch["standby"]["why"].startswith("standby: 2 x (KV 4.5 GiB")
        assert (switch["held"], switch["cut"], switch["refused"]) == (0, 0, 0)
        assert switch["downtime_s"] == 0.0  # a cut-over: nothing was held
        new = d.status()["engine"]
        assert new["pid"] != old["pid"] and new["url"] != old["url"]  # the other port
        assert not psutil.pid_exists(old["pid"]) or (
            psutil.Process(old["pid"]).status() == psutil.STATUS_ZOMBIE
        )
        st = d.status()
        assert st["profile"] == "ring-ll" and st["state"] == "READY"
        assert st["frontdoor"]["port"] == int(new["url"].rsplit(":", 1)[1])
        assert "standby 0.0s 0h 0c 0r" in d.ctl("history").stdout
        # verified as any start: the env check and the all-reduce backend ran on it
        assert result["verify"] and result["allreduce"], result
        # the next switch goes back to the first port
        again = json.loads(d.ctl("profile", "set", "ring-simple", "--json").stdout)
        assert again["switch"]["mode"] == "standby", again
        assert d.status()["engine"]["url"] == old["url"]
        assert not (d.state_dir / "engine-standby.pid").exists()
        assert "retiring" not in json.loads((d.state_dir / "engine.pid").read_text())
        restart = json.loads(d.ctl("restart", "--json").stdout)  # a restart: standby too
        assert restart["result"] == "ok" and restart["switch"]["mode"] == "standby", restart
        assert d.status()["engine"]["url"] != old["url"]


def test_a_failing_profile_never_takes_traffic(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_standby()) as d:
        assert d.ctl("profile", "set", "ring-ll").returncode == 0
        serving = d.status()["engine"]
        with Clients(d.server_url, CLIENTS) as clients:
            clients.wait_answers(CLIENTS)
            r = d.ctl("profile", "set", "tree-ll")  # the sim's capture failure
            assert r.returncode == 1, r.stdout + r.stderr
            clients.wait_answers(clients.answers + CLIENTS)
        rec = last_switch(d, "tree-ll")
        assert rec["result"] == "rolled_back", rec
        assert rec["switch"]["mode"] == "standby" and rec["switch"]["kept_serving"]
        assert (rec["switch"]["held"], rec["switch"]["cut"], rec["switch"]["downtime_s"]) == (
            0, 0, 0.0)  # fmt: skip
        assert (clients.tally.cut, clients.tally.failed) == ([], [])
        st = d.status()
        assert st["profile"] == "ring-ll" and st["engine"]["pid"] == serving["pid"]  # never stopped
        assert "never took traffic" in r.stderr, r.stderr
        assert not (d.state_dir / "engine-standby.pid").exists()
        # the failure was the standby's, not the serving engine's: a past one, as after a
        # rollback (status said "last failure:" and doctor warned, exit 1, while all served)
        assert st["last_failure"]["reason"] == "cuda_graph_capture"
        assert st["last_failure"]["current"] is False, st["last_failure"]
        shown = d.ctl("status").stdout
        assert "earlier failure: cuda_graph_capture" in shown, shown
        assert "a standby start; the engine serving now served on)" in shown, shown
        doctor = d.ctl("doctor", "--no-topology", timeout=120)
        assert "the daemon's last failure" not in doctor.stdout, doctor.stdout


def test_a_start_the_cache_cannot_serve_holds_and_says_why(tmp_path: Path) -> None:
    # EAGLE-3 loads from disk (the cache serves baseline starts): two engines would hold two
    # copies of the weights, so that switch holds; the way back to baseline is standby again
    with DaemonHarness(tmp_path, config=_standby()) as d:
        first = d.status()["engine"]["pid"]
        r = d.ctl("profile", "set", "ring-ll", "--mode", "eagle3", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        switch = json.loads(r.stdout)["switch"]
        assert switch["mode"] == "hold" and switch["standby"]["mode"] == "hold"
        assert "cannot serve this start" in switch["standby"]["why"]
        assert "this switch holds" in d.log_text()
        assert d.status()["engine"]["pid"] != first
        back = json.loads(d.ctl("profile", "set", "ring-ll", "--mode", "baseline", "--json").stdout)
        # beside an engine that loaded its own copy of the weights, two do not fit
        assert back["switch"]["mode"] == "hold", back["switch"]
        again = json.loads(d.ctl("profile", "set", "ring-simple", "--json").stdout)
        assert again["switch"]["mode"] == "standby", again["switch"]


def test_without_the_weight_cache_a_standby_switch_holds(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_standby(cache="off")) as d:
        r = d.ctl("profile", "set", "ring-ll", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        switch = json.loads(r.stdout)["switch"]
        assert switch["mode"] == "hold" and "weight_cache = off" in switch["standby"]["why"]


def test_a_cancelled_standby_switch_leaves_the_old_engine_serving(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_standby(), sim_load_seconds=6) as d:
        serving = d.status()["engine"]["pid"]
        out: list = []
        t = threading.Thread(target=lambda: out.append(d.ctl("profile", "set", "ring-ll",
                                                             "--json")))  # fmt: skip
        t.start()
        standby = d.state_dir / "engine-standby.pid"
        d.wait_for(lambda: standby.exists() and "pid" in json.loads(standby.read_text()), 60,
                   "the standby engine's record")  # fmt: skip
        beside = json.loads(standby.read_text())["pid"]
        # frozen, the standby cannot become ready while the cancel's CLI starts (seconds on
        # a busy machine); it goes on, and gets its stop, once the cancel was taken (unless
        # the daemon's stop has ended it already: a kill reaches a stopped process)
        group = os.getpgid(beside)
        assert group == beside, "the daemon starts each engine in a session of its own"
        os.killpg(group, signal.SIGSTOP)
        try:
            assert d.ctl("cancel").returncode == 0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGCONT)
        t.join(120)
        result = json.loads(out[0].stdout)
        assert result["result"] == "cancelled" and result["switch"]["kept_serving"], result
        assert "served on (never stopped)" in result["message"]
        st = d.status()
        assert (st["state"], st["engine"]["pid"]) == ("READY", serving)
        assert not _alive(beside) and not standby.exists()


def test_a_crash_after_a_standby_switch_is_held_and_restarted(tmp_path: Path) -> None:
    # the engine now serves on the standby port; its crash restart starts on the engine port
    with DaemonHarness(tmp_path, config=_standby()) as d:
        first = d.status()["engine"]["url"]
        assert json.loads(d.ctl("profile", "set", "ring-ll", "--json").stdout)["result"] == "ok"
        beside = d.status()["engine"]
        assert beside["url"] != first
        with Clients(d.server_url, CLIENTS) as clients:
            clients.wait_answers(CLIENTS)
            os.kill(beside["pid"], signal.SIGKILL)  # the daemon's own engine
            rec = d.wait_for(lambda: next((r for r in d.client.get("/v1/history")
                                           if r.get("kind") == "crash_restart"), None),
                             60, "the crash restart's record")  # fmt: skip
            clients.wait_answers(clients.answers + CLIENTS)
        assert rec["result"] == "ok" and rec["switch"]["mode"] == "hold", rec
        assert clients.tally.failed == [] and rec["switch"]["cut"] == len(clients.tally.cut)
        st = d.status()
        assert st["engine"]["url"] == first
        assert st["frontdoor"]["port"] == int(first.rsplit(":", 1)[1])


def test_a_stream_a_standby_switch_cut_is_named_in_its_record_only(tmp_path: Path) -> None:
    # no drain time: the old engine's stop after the cut-over cuts the long stream; the
    # switch's record names it, the crash restart's after it (no client then) names none
    long = json.dumps({"model": "sim", "messages": [{"role": "user", "content": "hello"}],
                       "max_tokens": 100_000, "stream": True}).encode()  # fmt: skip
    with DaemonHarness(tmp_path, config=_standby(drain_timeout_s=0)) as d:
        streams: list = []
        t = threading.Thread(target=lambda: streams.append(one_stream(d.server_url, 600, long)),
                             daemon=True)  # fmt: skip
        t.start()
        d.wait_for(lambda: d.status()["frontdoor"]["in_flight"] == 1, 60, "the long stream")
        r = d.ctl("profile", "set", "ring-ll", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        switch = json.loads(r.stdout)["switch"]
        t.join(120)
        assert streams and streams[0][0] == "cut", streams
        assert switch["mode"] == "standby", switch
        assert (switch["cut"], switch["cut_requests"]) == (1, ["POST /v1/chat/completions"])
        os.kill(d.status()["engine"]["pid"], signal.SIGKILL)
        rec = d.wait_for(lambda: next((r for r in d.client.get("/v1/history")
                                       if r.get("kind") == "crash_restart"), None),
                         60, "the crash restart's record")  # fmt: skip
        assert (rec["switch"]["cut"], rec["switch"]["cut_requests"]) == (0, []), rec
        assert d.status()["frontdoor"]["totals"]["cut"] == 1


def test_doctor_says_a_hold_host_has_room_for_standby(tmp_path: Path) -> None:
    config = _standby()
    config["frontdoor"]["mode"] = "hold"
    with DaemonHarness(tmp_path, config=config) as d:
        doctor = d.ctl("doctor", "--no-topology", timeout=120).stdout
        assert "front door: mode hold; standby: 2 x (KV 4.5 GiB" in doctor, doctor
        assert '[frontdoor] mode = "standby" would start the new engine' in doctor, doctor
        r = d.ctl("doctor", "--no-topology", "--json", timeout=120)  # --json says it too
        door = json.loads(r.stdout)["frontdoor"]
        assert door["mode"] == "hold" and door["standby"] == d.status()["frontdoor"]["standby"]
        assert door["standby"]["mode"] == "standby", door


def test_kill9_of_fastverifyd_during_a_standby_switch(tmp_path: Path) -> None:
    # the sim's 6 s load keeps the standby starting while the daemon is killed
    with DaemonHarness(tmp_path, config=_standby(), sim_load_seconds=6) as d:
        serving = d.status()["engine"]["pid"]
        switch = threading.Thread(target=lambda: d.ctl("profile", "set", "ring-ll"), daemon=True)
        switch.start()
        standby = d.state_dir / "engine-standby.pid"
        d.wait_for(lambda: standby.exists() and "pid" in json.loads(standby.read_text()), 60,
                   "the standby engine's record")  # fmt: skip
        beside = json.loads(standby.read_text())["pid"]
        assert one_stream(d.server_url)[0] == "ok"  # the old engine serves meanwhile
        d.kill9()
        d.restart_daemon()
        d.wait_for(lambda: d.status()["state"] == "READY", 120, "READY after adoption")
        st = d.status()
        assert st["engine"]["pid"] == serving  # the serving engine adopted
        gone = d.wait_for(lambda: not _alive(beside), 60, "the standby engine stopped")
        assert gone and not standby.exists()
        assert "standby switch left it before the cut-over" in d.log_text()
        assert one_stream(d.server_url)[0] == "ok"


def test_kill9_of_fastverifyd_while_the_old_engine_drains(tmp_path: Path) -> None:
    # a long stream keeps the old engine draining after the cut-over (engine.pid names the
    # new engine and the old one as retiring); the daemon is killed then
    long = json.dumps({"model": "sim", "messages": [{"role": "user", "content": "hello"}],
                       "max_tokens": 100_000, "stream": True}).encode()  # fmt: skip
    with DaemonHarness(tmp_path, config=_standby()) as d:
        old = d.status()["engine"]["pid"]
        streams: list = []
        t = threading.Thread(target=lambda: streams.append(one_stream(d.server_url, 600, long)),
                             daemon=True)  # fmt: skip
        t.start()
        d.wait_for(lambda: d.status()["frontdoor"]["in_flight"] == 1, 60, "the long stream")
        threading.Thread(target=lambda: d.ctl("profile", "set", "ring-ll"), daemon=True).start()
        record = d.state_dir / "engine.pid"
        d.wait_for(lambda: "retiring" in json.loads(record.read_text()), 120, "the hand-over")
        new = json.loads(record.read_text())["pid"]
        d.kill9()
        d.restart_daemon()
        d.wait_for(lambda: d.status()["state"] == "READY", 120, "READY after adoption")
        assert d.status()["engine"]["pid"] == new  # the new engine adopted
        d.wait_for(lambda: not _alive(old), 60, "the replaced engine stopped")
        assert "the engine a standby switch replaced" in d.log_text()
        t.join(120)
        assert streams and streams[0][0] == "cut", streams  # the old engine's stop cut it
        assert one_stream(d.server_url)[0] == "ok"


def _pool(d: DaemonHarness, profile: str) -> int:
    """The KV pool's tokens the engine of `profile` got (its log's `KV Cache is allocated`)."""
    (log,) = (d.state_dir / "logs").glob(f"*-{profile}-baseline-*.log")
    line = next(ln for ln in log.read_text().splitlines() if "KV Cache is allocated" in ln)
    return int(line.split("#tokens: ")[1].split(",")[0])


def test_standby_switches_keep_the_first_engines_pool(tmp_path: Path) -> None:
    # SGLang sizes a pool from the free memory before its load: beside the serving engine,
    # with the profile's --mem-fraction-static, a standby engine would get a smaller one
    with DaemonHarness(tmp_path, config=_standby()) as d:
        first = _pool(d, d.status()["profile"])
        for profile in ("ring-ll", "ring-simple"):
            r = d.ctl("profile", "set", profile, "--json")
            assert r.returncode == 0, r.stdout + r.stderr
            fit = json.loads(r.stdout)["switch"]["standby"]
            assert fit["mode"] == "standby" and fit["kv_tokens"] == first, fit
            assert f"{first} tokens" in fit["why"] and "the same as the serving one's" in fit["why"]
            assert _pool(d, profile) == first
        assert d.status()["frontdoor"]["standby"]["kv_tokens"] == first


def test_a_smaller_standby_pool_is_the_share_and_says_the_trade_off(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_standby(standby_kv_share=0.5)) as d:
        first = _pool(d, d.status()["profile"])
        half = round(first * 0.5)
        # the share is of a cold start's pool, not of the serving one's: a second standby
        # switch keeps half, never a half of the half
        for profile in ("ring-ll", "ring-simple"):
            r = d.ctl("profile", "set", profile, "--json")
            assert r.returncode == 0, r.stdout + r.stderr
            assert _pool(d, profile) == half
        assert d.status()["frontdoor"]["standby"]["kv_tokens"] == half
        fit = last_switch(d, "ring-ll")["switch"]["standby"]  # the history's record says it
        assert fit["kv_tokens"] == half and fit["kv_gib"] > 0, fit
        assert f"{half} tokens ({fit['kv_gib']:.1f} GiB" in fit["why"], fit
        assert (f"50% of a cold start's {first} tokens: fewer tokens in flight until the "
                "next cold start") in fit["why"], fit  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
