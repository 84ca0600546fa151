"""fastverifyd owns SGLang's weight cache (weight_cache = "auto") on the sim: a profile switch,
a rollback and a crash restart restart the server only (the cache's launcher keeps its pid and
every start maps the cached weights), an EAGLE-3 switch says before anything stops that it
loads from disk and why, a fingerprint SGLang refuses falls back to disk (status says so), and
a killed fastverifyd's successor adopts the cache without leaving an orphan."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil

from tests.support.harness import CACHE_ID_VAR, REPO, DaemonHarness, engines_on_port

AUTO = {"server": {"weight_cache": "auto"}}
REFUSED = (  # the sim's stand-in for a server whose torch differs from the cache's
    "# description: ring-ll, from a server whose torch build differs from the cache's\n"
    "NCCL_ALGO=Ring\nNCCL_PROTO=LL\nFASTVERIFY_SIM_TORCH_VERSION=2.10.0+sim\n"
)


def _cache_pid(d: DaemonHarness) -> int:
    wc = d.status()["weight_cache"]
    assert wc["state"] == "ready", wc
    return int(wc["pid"])


def _switch(d: DaemonHarness, *args: str) -> dict:
    r = d.ctl("profile", "set", *args, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def _metric(url: str, name: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def _cache_processes(d: DaemonHarness) -> dict[str, list[int]]:
    """Live processes carrying any of this harness's cache ids (by id)."""
    ids = {json.loads((d.state_dir / "weight-cache.pid").read_text())["cache_id"]}
    found: dict[str, list[int]] = {}
    for p in psutil.process_iter():
        try:
            cid = p.environ().get(CACHE_ID_VAR)
            if cid and p.status() != psutil.STATUS_ZOMBIE and p.cwd() and cid in ids | set(found):
                found.setdefault(cid, []).append(p.pid)
        except (psutil.Error, OSError):
            continue
    return found


def test_switches_a_rollback_and_a_crash_restart_keep_the_cache_and_eagle3_is_told(
    tmp_path: Path,
) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=2, config=AUTO) as d:
        st = d.status()
        pid = _cache_pid(d)
        assert st["engine"]["weight_load"]["source"] == "cache"
        assert st["weight_cache"]["ranks"] == 2 and len(st["weight_cache"]["rank_pids"]) == 2
        for name in ("ring-ll", "ring-simple", "nccl-default", "ring-ll-8ch", "ring-ll"):
            res = _switch(d, name)
            assert res["result"] == "ok" and res["weight_load"]["source"] == "cache", res
            assert res["weight_load"]["text"].startswith("weights: from the cache (")
            assert _cache_pid(d) == pid
        r = d.ctl("profile", "set", "tree-ll", "--json")  # Tree + CUDA graphs: fails capture
        assert json.loads(r.stdout)["result"] == "rolled_back", r.stdout
        st = d.wait_state("READY")
        assert st["engine"]["weight_load"]["source"] == "cache" and _cache_pid(d) == pid
        os.kill(st["engine"]["pid"], signal.SIGKILL)  # a crash restart
        d.wait_for(lambda: d.status()["restarts"]["total"] == 1, 30, "the crash restart")
        st = d.wait_state("READY", timeout=30)
        assert st["engine"]["weight_load"]["source"] == "cache" and _cache_pid(d) == pid
        # EAGLE-3: told before anything stops, loads from disk, the cache stays for baseline
        r = d.ctl("profile", "set", "ring-ll", "--mode", "eagle3")
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout + r.stderr
        notice = "this switch loads from disk (~"
        assert notice in out and out.index(notice) < out.index("state STOPPING"), out
        assert "SGLang 0.5.23's weight cache does not export draft models" in out
        st = d.status()
        assert st["mode"] == "eagle3" and st["engine"]["weight_load"]["source"] == "disk"
        assert st["engine"]["weight_load"]["fallback"] is False
        assert _cache_pid(d) == pid and st["weight_cache"]["bytes"] == 2 * int(64.21 * (1 << 30))
        hits = _metric(d.metrics_url, "fastverify_weight_cache_hits_total")
        assert hits == {"fastverify_weight_cache_hits_total": 8.0}  # start + 5 + rollback + crash
        assert _metric(d.metrics_url, "fastverify_weight_cache_up") == {
            "fastverify_weight_cache_up": 1.0
        }


def test_a_fingerprint_sglang_refuses_falls_back_to_disk_and_status_says_so(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=1, config=AUTO) as d:
        first = _cache_pid(d)
        (d.profile_dir / "other-torch.env").write_text(REFUSED)
        res = _switch(d, "other-torch")
        load = res["weight_load"]
        assert res["result"] == "ok" and load["source"] == "disk" and load["reason"] == "mismatch"
        assert load["text"].startswith(
            "weights: from disk (the cache refused: fingerprint mismatch (torch_version: "
            "server '2.10.0+sim', cache '2.9.1+sim'), "
        )
        st = d.status()
        assert st["weight_cache"]["state"] == "mismatch"
        assert any("other-torch/baseline: weights: from disk" in f for f in st["findings"])
        shown = d.ctl("status").stdout  # the part's own lines (its section's summary)
        assert f"load:       {load['text']}" in shown, shown
        assert "weight cache: mismatch" in shown and "[weight_cache = auto]" in shown, shown
        assert not psutil.pid_exists(first) or psutil.Process(first).status() == "zombie"
        fb = _metric(d.metrics_url, "fastverify_weight_cache_fallbacks_total")
        assert fb['fastverify_weight_cache_fallbacks_total{reason="mismatch"}'] == 1.0
        res = _switch(d, "ring-ll")  # another profile: a new cache, and from it
        assert res["weight_load"]["source"] == "cache"
        st = d.status()
        assert st["weight_cache"]["state"] == "ready" and st["weight_cache"]["pid"] != first
        assert not any("weights: from disk" in f for f in st["findings"])


def test_kill9_of_the_daemon_during_a_switch_the_next_one_adopts_the_cache(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, sim_load_seconds=3, config=AUTO, metrics=False, start=False)
    try:
        d.start(wait_ready=True, timeout=60)
        pid = _cache_pid(d)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        switch = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), "profile", "set",
             "ring-ll", "-q"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        d.wait_for(lambda: d.status()["state"] == "STARTING", 30, "the switch's start")
        d.kill9()
        switch.wait(30)
        d.restart_daemon(wait_ready=True, timeout=60)
        st = d.status()
        assert st["weight_cache"]["pid"] == pid and st["weight_cache"]["adopted"] is True
        # the engine the killed daemon was starting is adopted when it came up in time, else
        # stopped and started again: then its weights come from the adopted cache
        load = st["engine"]["weight_load"]
        assert st["engine"]["adopted"] or (load or {}).get("source") == "cache", st["engine"]
        port = int(d.server_url.rsplit(":", 1)[1])
        assert list(engines_on_port(port)) == [st["engine"]["pgid"]]
        groups = _cache_processes(d)
        assert list(groups) == [
            json.loads((d.state_dir / "weight-cache.pid").read_text())["cache_id"]
        ]
        assert {psutil.Process(p).pid for p in groups[next(iter(groups))]} >= {pid}
        assert "weight cache: adopting the running cache" in d.log_text()
        res = _switch(d, "ring-simple")  # the adopted cache serves the next start
        assert res["weight_load"]["source"] == "cache" and _cache_pid(d) == pid
    finally:
        d.close()
