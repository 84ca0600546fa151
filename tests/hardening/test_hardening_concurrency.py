"""Concurrency and load: 100 concurrent switch requests, 50 scrapers during switches (none
fails; their latency is a figure: benchmarks/bench_scrape_switches.py)."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from fastverify.client import ApiError, ControlClient
from tests.support.hardening import SEED, strict_journal
from tests.support.harness import DaemonHarness

NAMES = ["ring-ll", "ring-simple", "ring-ll-8ch", "nccl-default", "tree-ll-eager"]


@pytest.mark.slow  # long (a fault or load loop); ./scripts/test still runs it
def test_100_concurrent_profile_sets(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    n = 100
    with DaemonHarness(tmp_path, sim_load_seconds=0.3, metrics=False) as d:
        t_start = time.time()
        plan = [(rng.choice(NAMES), rng.choice([0.0, rng.uniform(0, 6)])) for _ in range(n)]
        answers: dict[int, tuple[int, dict]] = {}
        barrier = threading.Barrier(n)

        def call(i: int, name: str, delay: float) -> None:
            c = ControlClient(d.socket, timeout=120)
            barrier.wait()
            time.sleep(delay)
            try:
                answers[i] = (200, c.post("/v1/profile", {"name": name}))
            except ApiError as exc:
                answers[i] = (exc.status, exc.body)
            except Exception as exc:  # no answer at all
                answers[i] = (0, {"error": repr(exc)})

        threads = [threading.Thread(target=call, args=(i, *plan[i])) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert len(answers) == n, f"{n - len(answers)} callers got no answer"
        codes = {i: a[0] for i, a in answers.items()}
        assert set(codes.values()) <= {200, 409}, {
            i: a for i, a in answers.items() if a[0] not in (200, 409)
        }
        oks = [a[1] for a in answers.values() if a[0] == 200]
        busy = [a[1] for a in answers.values() if a[0] == 409]
        assert oks and busy, (len(oks), len(busy))
        assert all(r["result"] in ("ok", "unchanged") for r in oks)
        # asking for what already served at that moment is answered without a switch
        same = [r for r in oks if r["result"] == "unchanged"]
        assert all(r["serving"]["profile"] == r["profile"] for r in same), same
        oks = [r for r in oks if r["result"] == "ok"]

        history = [h for h in d.client.get("/v1/history") if h["started_at"] >= t_start - 1]
        switches = [h for h in history if h["kind"] == "switch"]
        assert sorted(r["id"] for r in oks) == sorted(h["id"] for h in switches)
        for body in busy:  # each refusal names a switch that really was in flight
            fl = body["in_flight"]
            assert fl["id"] in {h["id"] for h in switches}, body
            assert fl["profile"] in body["error"] and "in flight" in body["error"], body
            rec = next(h for h in switches if h["id"] == fl["id"])
            assert rec["profile"] == fl["profile"]
        # One switch at a time: operation intervals do not overlap ...
        ordered = sorted(switches, key=lambda h: h["started_at"])
        for a, b in itertools.pairwise(ordered):
            assert a["finished_at"] <= b["started_at"], (a["id"], b["id"])
        # ... and the journal's transitions form one chain, each op's transitions contiguous.
        journal = strict_journal(d.state_dir)
        trans = [r for r in journal if r.get("type") == "transition"]
        for a, b in itertools.pairwise(trans):
            assert a["to"] == b["from"], (a, b)
        ops = [k for k, _ in itertools.groupby(r["op"] for r in trans if r.get("op"))]
        assert len(ops) == len(set(ops)), "transitions of two operations interleave"
        # Final state consistent with the journal.
        st = d.status()
        last = ordered[-1]
        assert st["state"] == "READY"
        assert (st["profile"], st["mode"]) == (last["profile"], last["mode"])
        saved = json.loads((d.state_dir / "state.json").read_text())
        assert (saved["profile"], saved["mode"]) == (last["profile"], last["mode"])
        print(f"100 concurrent profile set: {len(oks)} switched, {len(busy)} refused (409)")


@pytest.mark.slow  # long (a fault or load loop); ./scripts/test still runs it
def test_50_scrapers_during_switches(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=0.3) as d:
        url = d.metrics_url
        stop = threading.Event()
        scrapes = 0
        errors: list[str] = []
        lock = threading.Lock()

        def scrape() -> None:
            nonlocal scrapes
            while not stop.is_set():
                try:
                    with urllib.request.urlopen(url, timeout=60) as r:
                        body = r.read()
                        ok = r.status == 200 and b"fastverify_up" in body
                    with lock:
                        scrapes += 1
                        if not ok:
                            errors.append(f"status {r.status}, {len(body)} bytes")
                except Exception as exc:
                    with lock:
                        errors.append(repr(exc))

        scrapers = [threading.Thread(target=scrape) for _ in range(50)]
        for t in scrapers:
            t.start()
        try:
            for name in ("ring-ll", "tree-ll", "ring-simple", "nccl-default"):
                r = d.ctl("profile", "set", name, "-q")
                assert r.returncode in (0, 1), r.stdout + r.stderr  # tree-ll rolls back
        finally:
            stop.set()
            for t in scrapers:
                t.join(90)
        assert errors == [], errors[:5]
        assert scrapes > 100
        assert d.status()["state"] == "READY"
