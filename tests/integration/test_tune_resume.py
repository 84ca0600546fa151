"""`fastverifyctl tune` interrupted and resumed, on the sim through a real fastverifyd: after
SIGKILL of the tune process in the middle of its trial (waits on the journal file), after
the daemon was killed (exit 3), after Ctrl-C (exit 130: the cut run journaled with its time
and loads, counted by the resumed tune); the finished stages are skipped."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.support.harness import DaemonHarness
from tests.support.tune import CONFIG, MEASURE, TP, popen_tune, predicted_tps, read_journal


def test_resume_after_kill_9_in_the_middle_of_the_trial(tmp_path: Path) -> None:
    names = "nccl-default,ring-ll,ring-ll-8ch"
    out = tmp_path / "out"
    with DaemonHarness(tmp_path, tp_size=TP, sim_load_seconds=1.0, config=CONFIG) as d:
        proc = popen_tune(d, "--profiles", names, "--finalists", "1", "--accept-length",
                           "2.0", "--output", str(out), *MEASURE)  # fmt: skip
        results = out / "trial" / "results.jsonl"

        def mid_trial() -> bool:
            started = any(r.get("event") == "stage_started" and r["name"] == "trial"
                          for r in read_journal(d))  # fmt: skip
            return started and results.exists() and '"measurement"' in results.read_text()

        try:
            d.wait_for(mid_trial, timeout=600, what="the tune's trial to measure once")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        kept = results.read_text().splitlines()
        again = d.ctl("tune", "--resume", "--json", timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        res = json.loads(again.stdout)
        journal = read_journal(d)
        st = d.status()
    started = [r["name"] for r in journal if r.get("event") == "stage_started"]
    # finished stages ran once; the interrupted trial ran again and the rest once
    assert started.count("inventory") == 1 and started.count("candidates") == 1
    assert started.count("trial") == 2 and started.count("confirm") == 1
    assert "inventory: finished earlier, not run again" in again.stderr
    assert "resuming the tune" in again.stderr
    # the trial's sweep continued its results file: what was measured before is kept and
    # no (profile, mode) has more than the asked repeats
    after = (out / "trial" / "results.jsonl").read_text().splitlines()
    assert after[: len(kept)] == kept
    meas: dict[tuple[str, str], int] = {}
    for line in after:
        rec = json.loads(line)
        if rec.get("type") == "measurement":
            key = (rec["profile"], rec["mode"])
            meas[key] = meas.get(key, 0) + 1
    assert meas and max(meas.values()) == 2
    assert [s["status"] for s in res["stages"]].count("failed") == 0
    dec = res["decision"]
    assert dec["applied"] and (st["profile"], st["mode"]) == (dec["profile"], dec["mode"])
    assert dec["profile"] == max(names.split(","), key=lambda p: predicted_tps(p, "baseline"))
    assert any(r.get("event") == "end" for r in journal)


def test_resume_after_the_daemon_was_killed_mid_trial(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with DaemonHarness(tmp_path, tp_size=TP, sim_load_seconds=1.0, config=CONFIG) as d:
        # two profiles the cost model sets 1.7x apart (ring-ll is within 11% of ring-ll-8ch:
        # inside what two 1 s windows on a busy machine move a trial's order by)
        proc = popen_tune(d, "--profiles", "nccl-default,ring-ll-8ch", "--finalists", "1",
                           "--accept-length", "2.0", "--output", str(out), *MEASURE)  # fmt: skip
        results = out / "trial" / "results.jsonl"
        try:
            d.wait_for(lambda: results.exists() and '"measurement"' in results.read_text(),
                       timeout=600, what="the tune's trial to measure once")  # fmt: skip
            d.kill9()  # the daemon dies; its engine keeps running
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 3, err[-2000:]  # daemon unreachable: the journal is kept
        assert "--resume" in err
        d.restart_daemon()  # adopts the engine
        again = d.ctl("tune", "--resume", "--json", timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        res = json.loads(again.stdout)
        st = d.status()
    assert res["decision"]["applied"]
    assert (st["profile"], st["mode"]) == (res["decision"]["profile"], res["decision"]["mode"])
    assert res["decision"]["profile"] == "ring-ll-8ch"  # the cost model's faster of the two


def test_ctrl_c_then_resume(tmp_path: Path) -> None:
    """Ctrl-C in the trial: exit 130 without a traceback, what served before the tune is put
    back (real weights, never a trial left serving), the lease released; --resume goes on."""
    out = tmp_path / "out"
    with DaemonHarness(tmp_path, tp_size=TP, sim_load_seconds=1.0, config=CONFIG) as d:
        before = d.status()
        proc = popen_tune(d, "--profiles", "nccl-default,ring-ll-8ch", "--finalists", "1",
                           "--accept-length", "2.0", "--output", str(out), *MEASURE)  # fmt: skip
        results = out / "trial" / "results.jsonl"
        try:
            d.wait_for(lambda: results.exists() and '"measurement"' in results.read_text(),
                       timeout=600, what="the tune's trial to measure once")  # fmt: skip
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 130, err[-2000:]
        assert f"fastverifyctl --socket {d.socket} tune --resume" in err  # the hint acts here
        assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
        what = f"{before['profile']}/{before['mode']}"
        assert f"interrupted: {what} put back (ok)" in err, err[-3000:]
        st = d.wait_state("READY", 120)
        assert (st["profile"], st["mode"], st["trial"], st["lease"]) == (
            before["profile"], before["mode"], False, None,
        )  # fmt: skip
        cut = [r for r in read_journal(d) if r.get("event") == "stage_interrupted"]
        again = d.ctl("tune", "--resume", "--json", timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        res = json.loads(again.stdout)
    assert res["decision"]["profile"] == "ring-ll-8ch" and res["decision"]["applied"]
    assert [s["status"] for s in res["stages"]].count("failed") == 0
    # the cut run is in the journal with what it cost: its time, its dummy load(s) and the
    # put-back's real load; the resumed tune's stages and totals count it
    (rec,) = cut
    assert rec["name"] == "trial" and rec["wall_s"] > 0 and rec["planned_s"] > 0, rec
    assert rec["loads"]["dummy"] >= 1 and rec["loads"]["real"] == 1, rec  # the put-back
    trial = next(s for s in res["stages"] if s["name"] == "trial")
    assert trial["earlier_runs"] == [
        {"status": "interrupted", "wall_s": round(rec["wall_s"], 3), "loads": rec["loads"]}
    ]
    runs = [trial["loads"], rec["loads"]] + [s["loads"] for s in res["stages"] if s is not trial]
    assert res["loads"] == {k: sum(r[k] for r in runs) for k in res["loads"]}
