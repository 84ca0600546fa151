"""`fastverifyctl spec costs` through a real fastverifyd on the sim: trials on dummy weights
(a baseline server, adaptive at 0 steps: SGLang's steps-0 pass, then EAGLE-3 at 1..2 steps)
over two batch sizes make a cost file `spec plan --costs` accepts, ordered as
the sim's published table orders its costs; the engine is put back after the trials, after a
trial that cannot start, and after Ctrl-C; the daemon refuses a steps override that is not a
timing trial's before it stops anything; no daemon, a busy one and an SGLang without the
spans the verify times come from each end with their exit code.

Windows are short and few (the sim is fast); nothing asserts the sim's model timings, only
orderings (a busy 2-core machine stretches every figure alike). benchmarks/bench_spec_costs.py
reports the measured-vs-table ratios.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fastverify.client import ApiError
from fastverify.sglang import client as engine_client
from fastverify.sglang import request_stamps
from fastverify.speculation import costs as spec_costs
from tests.support.harness import (
    DaemonHarness,
    ctl_interrupted_at,
    run_ctl,
)

WINDOW = ["-d", "2", "--input-len", "16", "--output-len", "48", "--warmup", "1"]


def _config(mode: str = "eagle3", **server: object) -> dict:
    return {
        "server": {"mode": mode, "extra_args": ["--sim-accept-length", "2.0"], **server},
        "daemon": {"trace_period_s": 0},
    }


def test_trials_make_a_cost_file_the_plan_reads_and_restore_the_engine(tmp_path: Path) -> None:
    out = tmp_path / "costs.json"
    with DaemonHarness(tmp_path, config=_config(), tp_size=2) as d:
        # a real-weights acceptance for the plan (the trials' dummy ones are never used)
        r = d.ctl("bench", "-n", "4", "-c", "2", "--output-len", "40", "--warmup", "0",
                  "--dataset", "fastverify-docs")  # fmt: skip
        assert r.returncode == 0, r.stderr
        fp = d.wait_for(lambda: d.status()["daemon"]["fingerprint"], 60, "the host fingerprint")
        before = d.status()
        r = d.ctl("spec", "costs", "--max-steps", "2", "--batch-sizes", "1,4", *WINDOW,
                  "--trace-steps", "3", "--output", str(out), "--json", timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert json.loads(out.read_text()) == report
        # progress per trial: the load, each window, the verify capture (its figure, or why
        # none: a window on a loaded host may miss its passes), the restore
        for line in ("baseline: loading", "steps 0: loading nccl-default/adaptive",
                     "steps 2: ready in", "steps 1, batch 4: window",
                     "steps 2, batch 1: capturing a profile window", "restored "):  # fmt: skip
            assert line in r.stderr, (line, r.stderr)

        assert report["kind"] == "engine-trials"
        assert report["fingerprint"] == fp  # the host the costs were measured on
        assert report["steps"] == [0, 1, 2] and report["batch_sizes"] == [1, 4]
        for what in ("dummy weights", "profile nccl-default", "SGLang 0.5.23", "SIMULATED"):
            assert what in report["source"], report["source"]
        ok = [t for t in report["trials"] if t["status"] == "ok"]
        assert len(ok) == 8 and {t["weights"] for t in ok} == {"dummy"}
        one = [t for t in ok if t["steps"] in ("baseline", 0)]
        assert len(one) == 4 and all(t["cycle_from"].startswith("one token per") for t in one)
        assert all(t["cycle_from"].startswith("spec cycle") for t in ok if t not in one)
        # the prefill of one prompt per mode, at the window's prompt length, 8x it and 8
        # tokens (whose first token less a decode step holds no forward): the baseline and
        # the steps-0 trial's adaptive server; fixed EAGLE-3 from the 1..K trials' batch-1
        # windows, the baseline's curve moved by their difference at the window's length
        pre = report["prefill_ms"]
        assert set(pre) == {"baseline", "adaptive", "eagle"}
        assert set(pre["adaptive"]) == set(pre["baseline"]) == set(pre["eagle"]), pre
        assert set(pre["baseline"]) == {"8", "16", "128"}, pre
        fixed = sorted(t["ttft_ms_p50"] for t in ok
                       if t["batch_size"] == 1 and t["steps"] not in ("baseline", 0))  # fmt: skip
        at = str(report["bench"]["input_len"])  # the window's prompt length
        extra = max(0.0, (fixed[0] + fixed[1]) / 2 - pre["baseline"][at])
        for tokens, ms in pre["baseline"].items():
            assert pre["eagle"][tokens] == pytest.approx(ms + extra, abs=1e-3), (fixed, pre)
        for tokens in (128, 8):
            line = f"baseline, batch 1: 4 requests of {tokens} prompt tokens (prefill)"
            assert line in r.stderr, r.stderr
        # and a batch of window-length prompts sent at once, as many as one prefill forward
        # takes (the chunked-prefill budget, at most max_running_requests and the largest
        # window's 4 clients), per mode; fixed EAGLE-3's moved as its line is
        info = engine_client.server_info(d.server_url, timeout=10.0)
        n = min(info["chunked_prefill_size"] // 16, info["max_running_requests"], 4)
        batch = report["prefill_batch_ms"]
        assert report["prefill_batch_prompt"] == 16 and set(batch) == set(pre), batch
        assert all(set(row) == {str(16 * n)} for row in batch.values()), (n, batch)
        assert f"baseline, batch 1: 3 rounds of {n} prompts of 16 tokens at once" in r.stderr
        for mode in ("baseline", "adaptive"):  # many prompts take longer than one
            assert batch[mode][str(16 * n)] > pre[mode][at], (mode, batch, pre)
        assert batch["eagle"][str(16 * n)] == pytest.approx(
            batch["baseline"][str(16 * n)] + extra, abs=1e-3
        )
        # each batch point's window keeps its rounds and its mean first token beside the last
        points = [t["ttft_ms_batch"] for t in ok if t.get("ttft_ms_batch")]
        assert len(points) == 2, points  # the baseline's and the steps-0 trial's, at batch 1
        for p in points:
            assert p["ms"] == pytest.approx(sorted(p["rounds_ms"])[1]), p  # the median of 3
            assert 0 < p["mean_ms"] <= max(p["rounds_ms"]), p
            # and the mean's split into SGLang's stages (the sim sends its stamps), whose
            # stages add up to about the mean (medians of each, over the 3 rounds)
            assert list(p["split_ms"]) == list(request_stamps.STAGES), p
            assert p["split_ms"]["prefill"] > 0, p
            # and what the scheduler did with each round: every prompt reached its queue
            # and went into one of the forwards, each after the prompt it took in arrived
            assert len(p["rounds_server"]) == 3, p
            for rnd in p["rounds_server"]:
                arrivals, forwards = rnd["arrivals_ms"], rnd["forwards"]
                assert len(arrivals) == n == sum(k for _at, k, _ms in forwards), rnd
                assert arrivals == sorted(arrivals) and arrivals[0] >= 0, rnd
                starts = [at for at, _k, _ms in forwards]
                assert starts == sorted(starts) and all(ms > 0 for _a, _k, ms in forwards), rnd
                # the k-th forward cannot start before the last of the prompts it holds came
                taken = 0
                for at, k, _ms in forwards:
                    taken += k
                    assert at >= arrivals[taken - 1] - 1e3 * request_stamps.CLOCK_SLACK_S, rnd
                # the tokenizer manager handed each on before the scheduler queued it
                handed = rnd["dispatched_ms"]
                assert len(handed) == n and handed == sorted(handed), rnd
                assert all(h <= a + 1e3 * request_stamps.CLOCK_SLACK_S
                           for h, a in zip(handed, arrivals, strict=True)), rnd  # fmt: skip
        # the front end in front of the scheduler, from the baseline's rounds: a request's
        # share of the shared loop and the spacing of the hand-offs, each a few ms at most
        front = spec_costs.from_file(out).front_end
        assert front is not None and report["front_end_ms"]["source"].startswith("spec costs")
        assert 0 <= front.share_s < 0.05 and 0 <= front.serial_s < 0.05, front
        for t in ok:  # the single-prompt points too
            for key in ("ttft_ms_p50_long", "ttft_ms_p50_short"):
                if t.get(key):
                    assert list(t[key]["split_ms"]) == list(request_stamps.STAGES), t[key]
        base = {int(b): ms for b, ms in report["baseline_ms"].items()}
        # a verify time where the trace gave one, never longer than its window's cycle (the
        # two windows ran under different load: left out, and said)
        for t in (t for t in ok if t["steps"] not in ("baseline", 0)):
            v = report["verify_ms"].get(str(t["batch_size"]), {}).get(str(t["steps"]))
            assert (v is not None and v <= t["cycle_ms"]) or "trace_error" in t, t
        cycle = {int(b): {int(k): ms for k, ms in row.items()} for b, row in
                 report["cycle_ms"].items()}  # fmt: skip

        # the engine is back as it was: profile, mode, real weights, READY
        st = d.status()
        assert (st["profile"], st["mode"], st["trial"], st["state"]) == (
            before["profile"], "eagle3", False, "READY",
        )  # fmt: skip
        assert st["engine"]["pid"] != before["engine"]["pid"]  # it was restarted for it
        assert report["restored"]["result"] == "ok"
        assert "eagle3_steps" not in d.client.get("/v1/history")[-1]  # the restore: configured
        argv = d.client.get("/v1/server/argv")["argv"]
        assert argv[argv.index("--speculative-num-steps") + 1] == "3"  # never persisted

        # ordered as the sim's published table: cost grows with the steps and the batch
        info = engine_client.server_info(d.server_url, timeout=10.0)
        table = spec_costs.from_engine_info(info)
        for bs in (1, 4):
            assert cycle[bs][0] < cycle[bs][1] < cycle[bs][2], cycle
            published = [table.cycle(bs, k) for k in (0, 1, 2)]
            assert published == sorted(published)
            assert base[bs] < cycle[bs][1]  # a decode step is cheaper than a draft cycle
        for k in (0, 1, 2):
            assert cycle[1][k] < cycle[4][k], cycle
            assert table.cycle(1, k) < table.cycle(4, k)

        # the plan reads the file and says where its costs came from
        r = d.ctl("spec", "plan", "--costs", str(out), "--concurrency", "1", "--json")
        assert r.returncode == 0, r.stderr
        plan = json.loads(r.stdout)
        assert plan["costs"]["source"].startswith(f"{out.name}: engine trials on dummy weights")
        assert [c["status"] for c in plan["host"]["checked"]] == ["same", "same"]
        assert plan["costs"]["cycle_ms"] == {
            b: {k: pytest.approx(v, rel=1e-6) for k, v in row.items()}
            for b, row in report["cycle_ms"].items()
        }
        assert plan["costs"]["prefill_batch_ms"] == {
            m: {t: pytest.approx(v, rel=1e-6) for t, v in row.items()} for m, row in batch.items()
        }
        assert plan["costs"]["zero_step_measured"] and plan["tiers"]["1"]["batch_sizes"][0] == 1
        # only what was measured is planned: 2 and 3 pad to captured sizes without a row
        assert {2, 3} <= set(plan["unpriced_batch_sizes"])
        human = d.ctl("spec", "plan", "--costs", str(out), "--concurrency", "1")
        assert human.returncode == 0 and "engine trials" in human.stdout
        assert "not priced (no measured costs" in human.stdout
        bad = d.ctl("spec", "plan", "--costs", str(out), "--allreduce-backend", "pcie_ipc")
        assert bad.returncode == 1 and "measured one backend" in bad.stderr


def test_a_trial_that_cannot_start_is_named_and_the_engine_restored(tmp_path: Path) -> None:
    # an absolute drafter path that does not exist: baseline serves, EAGLE-3 cannot start
    cfg = _config("baseline", draft_model_path=str(tmp_path / "no-such-drafter"))
    out = tmp_path / "partial.json"
    with DaemonHarness(tmp_path, config=cfg, tp_size=2) as d:
        before = d.status()
        r = d.ctl("spec", "costs", "--max-steps", "2", "--batch-sizes", "1", *WINDOW,
                  "--no-traces", "--output", str(out), timeout=600)  # fmt: skip
        assert r.returncode == 1, r.stdout + r.stderr
        assert "the trial at 0 steps failed" in r.stderr and "the engine was restored" in r.stderr
        assert "no-such-drafter" in r.stderr, r.stderr  # the daemon's why, quoted
        partial = json.loads(out.read_text())
        assert partial["failed"]["steps"] == 0
        assert partial["cycle_ms"] == {} and set(partial["baseline_ms"]) == {"1"}
        st = d.status()
        assert (st["profile"], st["mode"], st["trial"], st["state"]) == (
            before["profile"], "baseline", False, "READY",
        )  # fmt: skip
        assert st["lease"] is None


def test_steps_override_is_refused_before_anything_stops(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_config(), tp_size=2) as d:
        pid = d.status()["engine"]["pid"]
        name = d.status()["profile"]
        cases = [
            ({"mode": "eagle3", "load_format": "dummy", "eagle3_steps": 0}, "1..64"),
            ({"mode": "adaptive", "eagle3_steps": 0}, "timing trial only"),
            ({"mode": "eagle3", "load_format": "dummy", "eagle3_steps": 65}, "1..64"),
            ({"mode": "eagle3", "eagle3_steps": 2}, "timing trial only"),
            ({"mode": "baseline", "load_format": "dummy", "eagle3_steps": 2}, "mode baseline"),
            ({"mode": "adaptive", "load_format": "dummy", "eagle3_steps": 2}, "needs mode eagle3"),
            ({"mode": "eagle3", "load_format": "dummy", "eagle3_steps": "2"}, "must be int"),
        ]
        for body, said in cases:
            with pytest.raises(ApiError) as err:
                d.client.post("/v1/profile", {"name": name, **body})
            assert err.value.status == 422 and said in err.value.body["error"], (body, err.value)
        st = d.status()
        assert (st["engine"]["pid"], st["state"]) == (pid, "READY")
        assert d.ctl("spec", "costs", "--max-steps", "0").returncode == 2
        assert d.ctl("spec", "costs", "--batch-sizes", "0").returncode == 2
        r = d.ctl("spec", "costs", "--output", str(tmp_path / "no" / "dir" / "c.json"))
        assert r.returncode == 2 and "does not exist" in r.stderr
        assert d.status()["engine"]["pid"] == pid
        # another experiment's lease: busy (4), nothing switched
        lease = d.client.post("/v1/lease", {"experiment": "sweep", "description": "test"})
        try:
            r = d.ctl("spec", "costs", "--max-steps", "1", "--batch-sizes", "1")
            assert r.returncode == 4, r.stderr
            assert "nothing was switched or measured" in r.stderr
        finally:
            d.client.post("/v1/lease/release", {"id": lease["id"]})
        assert d.status()["engine"]["pid"] == pid


def test_no_daemon_and_an_sglang_without_step_spans(tmp_path: Path) -> None:
    r = run_ctl("--socket", str(tmp_path / "none.sock"), "spec", "costs")
    assert r.returncode == 3, r.stderr
    cfg = _config("baseline")
    cfg["daemon"]["sim_sglang_version"] = "0.5.10.post1"  # before SGLang's step spans
    with DaemonHarness(tmp_path, config=cfg, tp_size=2) as d:
        pid = d.status()["engine"]["pid"]
        r = d.ctl("spec", "costs", "--max-steps", "1", "--batch-sizes", "1")
        assert r.returncode == 2, r.stderr
        assert "SGLang 0.5.10.post1 has no profiler step spans" in r.stderr
        assert "--no-traces" in r.stderr and "nothing was switched" in r.stderr
        assert d.status()["engine"]["pid"] == pid


def _ctrl_c_at(
    d: DaemonHarness, args: list[str], event: str, before: Callable[[], Any] | None = None
) -> tuple[int, str]:
    """`fastverifyctl ARGS` on `d`, a Ctrl-C once its progress shows `event`."""
    return ctl_interrupted_at(["--socket", str(d.socket), *args], event, before)


def test_ctrl_c_puts_the_engine_back(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config=_config(), tp_size=2) as d:
        before = d.status()
        args = ["spec", "costs", "--max-steps", "2", "--batch-sizes", "1", "-d", "30",
                "--output-len", "48", "--warmup", "0", "--no-traces"]  # fmt: skip
        # the event: the first window has begun (a trial serves)
        code, err = _ctrl_c_at(d, args, "baseline, batch 1: window", lambda: d.status()["trial"])
        assert code == 130, err
        assert "interrupted; the engine was put back (ok)" in err
        assert "Traceback" not in err and "Exception ignored" not in err, err
        st = d.status()
        assert (st["profile"], st["mode"], st["trial"], st["state"]) == (
            before["profile"], "eagle3", False, "READY",
        )  # fmt: skip
        assert st["lease"] is None


def test_ctrl_c_at_a_trial_request_and_in_a_profile_window(tmp_path: Path) -> None:
    """Ctrl-C as a trial's load is asked for (its request may still be on its way: the
    restore is answered after it, never `unchanged` beside it) and as a profile window
    starts (its load is stopped, nothing holds up the exit): 130, no traceback, the
    engine put back, the lease released."""
    args = ["spec", "costs", "--max-steps", "1", "--batch-sizes", "1", "--trials", "1",
            "-d", "2", "--output-len", "48", "--warmup", "0", "--trace-steps", "3"]  # fmt: skip
    with DaemonHarness(tmp_path, config=_config(), tp_size=2) as d:
        before = d.status()
        for event in ("steps 1: loading", "capturing a profile window"):
            code, err = _ctrl_c_at(d, args, event)
            assert code == 130, (event, err)
            # ok, or unchanged where the Ctrl-C came before the trial's request was sent
            assert re.search(r"interrupted; the engine was put back \((ok|unchanged)\)", err), (
                event, err,
            )  # fmt: skip
            assert "Traceback" not in err and "Exception ignored" not in err, (event, err)
            st = d.wait_state("READY", 120)  # a trial switch left behind would show here
            assert (st["profile"], st["mode"], st["trial"], st["lease"]) == (
                before["profile"], "eagle3", False, None,
            ), (event, err)  # fmt: skip


def test_a_run_cut_short_resumes_from_its_journal(tmp_path: Path) -> None:
    journal, out = tmp_path / "costs.journal", tmp_path / "costs.json"
    args = ["spec", "costs", "--max-steps", "1", "--batch-sizes", "1,2", *WINDOW, "--no-traces",
            "--journal", str(journal), "--output", str(out)]  # fmt: skip
    with DaemonHarness(tmp_path, config=_config("baseline"), tp_size=2) as d:
        # the event: the first step count's load has begun
        rc, err = _ctrl_c_at(d, args, "steps 0: loading")
        assert rc == 130, err
        assert "Traceback" not in err and "Exception ignored" not in err, err
        kept = [json.loads(x) for x in journal.read_text().splitlines()]
        assert kept[0]["record"] == "plan" and kept[0]["plan"]["trials"] == ["baseline", "0", "1"]
        windows = [r for r in kept if r["record"] == "window"]
        assert [(w["steps"], w["batch_size"]) for w in windows] == [("baseline", 1),
                                                                   ("baseline", 2)]  # fmt: skip

        # another plan is refused before anything switches
        pid = d.status()["engine"]["pid"]
        other = [a if a != "1,2" else "1,4" for a in args]
        r = d.ctl(*other, "--resume", timeout=120)
        assert r.returncode == 2 and "of another plan" in r.stderr, r.stderr
        assert d.status()["engine"]["pid"] == pid
        assert d.ctl(*args[:-4], "--resume").returncode == 2  # --resume without --journal

        # another host's journal is refused before anything switches, naming what differs
        host = next(r for r in kept if r["record"] == "host")
        assert host["fingerprint"]["id"] == d.status()["daemon"]["fingerprint"]["id"]
        host["fingerprint"]["facts"]["gpu_model"] = "NVIDIA H100 80GB HBM3"
        moved = tmp_path / "other-host.journal"
        moved.write_text("".join(json.dumps(r) + "\n" for r in kept))
        elsewhere = [str(moved) if a == str(journal) else a for a in args]
        r = d.ctl(*elsewhere, "--resume", timeout=120)
        assert r.returncode == 2 and "GPU model differ" in r.stderr, r.stderr
        assert "NVIDIA H100 80GB HBM3" in r.stderr and d.status()["engine"]["pid"] == pid

        r = d.ctl(*args, "--resume", "--json", timeout=600)
        assert r.returncode == 0, r.stderr
        assert "resuming from" in r.stderr and "2 window(s) already measured" in r.stderr
        assert "baseline: every window is in the journal (no load)" in r.stderr
        assert "baseline: loading" not in r.stderr
        report = json.loads(r.stdout)
        assert report["journal"]["resumed"] and report["journal"]["windows_from_journal"] == 2
        assert set(report["baseline_ms"]) == {"1", "2"}
        assert set(report["cycle_ms"]["2"]) == {"0", "1"}
        assert set(report["time_s"]) >= {"starts", "windows", "restore"}
        assert report["time_s"]["starts"] > 0 and report["time_s"]["windows"] > 0
        # spec plan reads the resumed cost file like any other
        assert spec_costs.from_file(str(out)).batch_sizes == [1, 2]

        # one trial alone: no other load
        r = d.ctl("spec", "costs", "--max-steps", "1", "--batch-sizes", "1", *WINDOW,
                  "--no-traces", "--trials", "0", "--json", timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr
        only = json.loads(r.stdout)
        assert (
            only["steps"] == [0]
            and only["baseline_ms"] == {}
            and set(only["cycle_ms"]["1"]) == {"0"}
        )
        assert "baseline: loading" not in r.stderr and "steps 1: loading" not in r.stderr
        r = d.ctl("spec", "costs", "--max-steps", "1", "--trials", "3")
        assert r.returncode == 2 and "--trials 3" in r.stderr, r.stderr
