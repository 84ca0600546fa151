"""`fastverifyctl tune` against a real SGLang 0.5.17 server on one GPU (TP 1), resumed across
device calls of at most 10 minutes with `tune --resume`.

    CALL_S=570 bash benchmarks/gpu/real_sglang.sh tune8b      # carry .sglpack .whl .gpucarry
    python benchmarks/gpu/tune_sglang.py --engine sim --work DIR --load-format auto  # the sim

The server: the realistic shape's random checkpoint (/tmp/llama8b-random, written once per
machine by write_checkpoint.py) behind fastverifyd's weight cache (`weight_cache = "auto"`:
a baseline start maps the cached weights, a speculative one reads the checkpoint from disk,
since the cache exports no draft model), the EAGLE-3 head of its shape
(sglang_pack/llama8b-eagle3, `--speculative-draft-load-format dummy`: the pack has no draft
checkpoint), and SGLang's forced accept length in every engine's environment
(SGLANG_SIMULATE_ACC_LEN=L, SGLANG_SIMULATE_ACC_METHOD=match-expected; fastverify labels
what such a server accepts `forced (SGLANG_SIMULATE_ACC_LEN=L)`).

The steps:

- start: the daemon's first start (the cache's load of the checkpoint, then the engine);
- tune: a new `fastverifyctl tune` (TUNE_ARGS, the shape's config.json files for rehearse),
  or `tune --resume` of the tune carried in (WORK/tune-state.tar.gz: the tune's journal dir
  `<daemon state dir>/tune/` and its output dir WORK/tune-out), until it decides or the
  call's time runs short: then Ctrl-C (SIGINT; tune puts back what served before and keeps
  its journal), at a stage boundary when the next stage cannot get anywhere in the time
  left, else when only an engine load, the put-back and the stop still fit. The state is
  saved into WORK/tune-state.tar.gz whatever happened (real_sglang.sh copies it into $OUT:
  put it into .gpucarry/ for the next call). A tune that finished in an earlier call is
  not run again;
- stop.

results.json's "tune": this call's command, exit code, resumed or not, the Ctrl-C (when, why,
seconds to exit), and from the journal (every call so far) each stage's planned and actual
seconds and its loads by kind (cached, disk, dummy), the runs Ctrl-C cut, and the decision.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_sglang as rs  # noqa: E402

from tests.support.harness import _scrubbed_env, ctrl_c_reaches_it  # noqa: E402

PACK = REPO / "benchmarks" / "gpu" / "sglang_pack"
ACCEPT = 3.0  # SGLang's forced accept length, also tune's --accept-length
FORCED = {"SGLANG_SIMULATE_ACC_LEN": f"{ACCEPT:g}", "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
PROFILES = "nccl-default,ring-ll,tree-ll"  # at TP 1 one group: NCCL variables only
REPEATS, DURATION_S = 1, 10.0
TUNE_ARGS = [
    "--profiles", PROFILES, "--finalists", "1", "--repeats", str(REPEATS),
    "--duration", f"{DURATION_S:g}", "--accept-length", f"{ACCEPT:g}",
    "--input-len", "128", "--output-len", "128",
    # no multicast (the lent machines' rule; one GPU has no all-reduce anyway)
    "--env", "NCCL_NVLS_ENABLE=0", "--env", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1",
    "--env", "NVSHMEM_DISABLE_NVLS=1",
]  # fmt: skip
DRAFT_DUMMY = ["--speculative-draft-load-format", "dummy"]
STATE = "tune-state.tar.gz"
KEEP_BYTES = 2 << 20  # a file of the tune's state bigger than this stays behind (logs)

# Seconds on the 8B shape at TP 1, measured on one H100 (benchmarks/results/
# gpu-2026-12-06-tune8b/ and gpu-2026-12-06-frontdoor/, SGLang 0.5.17): the daemon's first
# start 115-122 s on a warm machine (the cache's read of the checkpoint 21 s, then the
# engine's first start with its kernel builds), 138 s on a fresh one; a switch mapping the
# cached weights 47-54 s, a dummy EAGLE-3 load 45 s, a real one from disk 43 s (the page
# cache holds the checkpoint); inventory 1.7 s, preflight 2.6 s, rehearse 4.2 s.
START_S = 150
LOAD_S = {"cached": 55, "dummy": 50, "disk": 50}
TRACE_S = 5  # a profile window under load
PUT_BACK_S = LOAD_S["cached"] + 5  # Ctrl-C: tune puts back nccl-default (a cached load)
STOP_S = 20  # the engine's and the cache's stop, the logs


def measure_s() -> float:
    """One trial or confirmation row: its windows plus a warm-up request each."""
    return REPEATS * (DURATION_S + 3)


def stage_need() -> dict[str, float]:
    """What each stage of this tune needs here (the driver's plan, beside tune's own)."""
    one = measure_s() + TRACE_S
    return {
        "inventory": 5,  # doctor, versions and torch's NCCL asked of the server's python
        "candidates": 1,
        "derive_tuner": 1,  # skipped: one GPU
        "preflight": 5,  # one profile left at TP 1 (the others stand with it)
        "rehearse": 10,  # the 8B shapes and the EAGLE-3 head, one profile
        "trial": one + LOAD_S["dummy"] + one,  # the serving baseline first: no load
        "confirm": LOAD_S["disk"] + measure_s(),  # the trial's row; +1 EAGLE-3 from disk
        "decide": 5,  # the winner is the EAGLE-3 load confirm ran last; else a cached load
    }


def first_progress(stage: str) -> float:
    """The least a stage needs to keep anything a --resume does not redo: its first row."""
    if stage == "trial":
        return measure_s() + TRACE_S  # the serving baseline: no load
    return stage_need()[stage]


def plan(budget_s: float, done: Sequence[str] = (), start: float | None = START_S) -> str:
    """The planned seconds per step against the budget (`done`: stages an earlier call
    finished; `start`: None once the daemon serves)."""
    need = {n: v for n, v in stage_need().items() if n not in done}
    rows = ([("start", start)] if start else []) + list(need.items()) + [("stop", STOP_S)]
    total = sum(s for _n, s in rows)
    lines = [f"   {n:<13} ~{s:.0f} s" for n, s in rows]
    lines.append(f"   total         ~{total:.0f} s of {budget_s:.0f} s"
                 + (f" (over by ~{total - budget_s:.0f} s: Ctrl-C, then --resume in the "
                    "next call)" if total > budget_s else ""))  # fmt: skip
    lines.append(f"   Ctrl-C costs ~{PUT_BACK_S} s (tune puts back what served before)")
    head = "plan (seconds, the 8B shape at TP 1" + (f"; done earlier: {', '.join(done)}" if done
                                                      else "") + "):"  # fmt: skip
    return "\n".join([head, *lines])


class TuneRun(rs.Run):
    def config(self) -> dict[str, Any]:
        cfg = super().config()
        a = self.args
        cfg["server"]["extra_args"] = [*a.sglang_args, *DRAFT_DUMMY]
        cfg["server"]["weight_cache"] = a.weight_cache
        cfg["server"]["env"] = dict(FORCED)
        return cfg

    # ------------------------------------------------------------------ the carried state
    @property
    def out(self) -> Path:
        return self.work / "tune-out"

    @property
    def tune_dir(self) -> Path:
        return self.daemon.state_dir / "tune"

    refused: str | None = None  # why the carried tune cannot continue here

    def restore(self) -> dict[str, Any]:
        """The carried tune (WORK/tune-state.tar.gz) into this daemon's state dir and the
        output dir; what it holds. One that writes into another output dir is left out
        (`refused`: the tune step then runs nothing)."""
        src = self.work / STATE
        if not src.exists():
            return {"carried": False}
        tmp = Path(tempfile.mkdtemp(dir=self.work))
        try:
            with tarfile.open(src) as tar:
                tar.extractall(tmp, filter="data")
            journal = _read_jsonl(tmp / "tune" / "journal.jsonl")
            start = next((r for r in journal if r.get("event") == "start"), {})
            where = (start.get("config") or {}).get("output_dir")
            if where and Path(where) != self.out:
                self.refused = (f"the carried tune writes into {where}, this call's output dir "
                                f"is {self.out}: run with WORK={Path(where).parent}")  # fmt: skip
                raise rs.StepFailed(self.refused)
            for sub, dst in (("tune", self.tune_dir), ("tune-out", self.out)):
                shutil.rmtree(dst, ignore_errors=True)
                if (tmp / sub).is_dir():
                    shutil.copytree(tmp / sub, dst)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return {"carried": True, "bytes": src.stat().st_size, "records": len(journal),
                "finished_stages": self.finished(journal)}  # fmt: skip

    def save_state(self) -> dict[str, Any]:
        """The tune's journal dir and output dir into WORK/tune-state.tar.gz (files over
        KEEP_BYTES left out: logs; a sweep's results file is far smaller)."""
        left_out: list[str] = []

        def small(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            if info.isfile() and info.size > KEEP_BYTES:
                left_out.append(f"{info.name} ({info.size} bytes)")
                return None
            return info

        dst = self.work / STATE
        tmp = dst.with_suffix(".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            if self.tune_dir.is_dir():
                tar.add(self.tune_dir, "tune", filter=small)
            if self.out.is_dir():
                tar.add(self.out, "tune-out", filter=small)
        os.replace(tmp, dst)
        shutil.copy(dst, self.raw / STATE)
        return {"file": str(dst), "bytes": dst.stat().st_size, "left_out": left_out}

    def journal(self) -> list[dict[str, Any]]:
        return _read_jsonl(self.tune_dir / "journal.jsonl")

    @staticmethod
    def finished(journal: list[dict[str, Any]]) -> list[str]:
        done: dict[str, bool] = {}
        for r in journal:
            if r.get("event") == "stage_finished":
                done[r["name"]] = r.get("status") in ("done", "skipped")
        return [n for n, ok in done.items() if ok]

    # ------------------------------------------------------------------ the steps
    def s_start(self) -> dict[str, Any]:
        ev = super().s_start()
        ev["weight_cache"] = self.status().get("weight_cache")
        ev["tune_state"] = self.restore()
        return ev

    def s_tune(self) -> dict[str, Any]:
        rs.check(self.refused is None, f"not run: {self.refused}")
        journal = self.journal()
        ev: dict[str, Any] = {}
        self.results["tune"] = ev
        if any(r.get("event") == "end" for r in journal) and not self.args.fresh:
            ev.update(status="finished in an earlier call", **self.summary())
            return ev
        if self.resumable() and not self.args.fresh:
            argv = ["tune", "--resume", "--json"]
        else:
            argv = ["tune", "--json", "--output", str(self.out), *TUNE_ARGS, *self.configs()]
            if self.args.fresh:
                argv.append("--force")
        ev.update(command="fastverifyctl " + " ".join(argv), resumed="--resume" in argv)
        done = self.finished(journal) if ev["resumed"] else []
        ev["plan"] = {
            "left_s": round(self.left(), 1),
            "done_earlier": done,
            "need_s": {n: v for n, v in stage_need().items() if n not in done},
        }
        print(plan(self.left(), done, start=None), flush=True)
        print(f"   {ev['command']}", flush=True)
        err_path = self.raw / "tune-stderr.txt"
        env = {**_scrubbed_env(), "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "FASTVERIFY_CONFIG": str(self.daemon.config_path)}  # fmt: skip
        t0 = time.monotonic()
        with open(err_path, "a") as err_f, open(self.raw / "tune-stdout.json", "w") as out_f:
            err_f.write(f"\n==== {time.strftime('%H:%M:%S')} {ev['command']}\n")
            err_f.flush()
            proc = subprocess.Popen(
                [sys.executable, "-m", "fastverify.ctl", "--socket", str(self.daemon.socket),
                 *argv],
                stdout=out_f, stderr=err_f, text=True, env=env,
                preexec_fn=ctrl_c_reaches_it,  # SIGINT reaches it under nohup / `cmd &`
            )  # fmt: skip
            try:
                ev["interrupt"] = self.drive(proc)
            finally:  # also when the call's SIGTERM ends this step: the journal is kept
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(5)
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                ev["exit"] = proc.returncode
                ev["wall_s"] = round(time.monotonic() - t0, 1)
                ev["state"] = self.save_state()
        ev["stderr_tail"] = err_path.read_text()[-3000:]
        ev.update(self.summary())
        st = self.status()
        ev["serving_after"] = {k: st.get(k) for k in ("profile", "mode", "state", "trial", "lease")}
        self.save()
        if ev["exit"] == 130:
            rs.check(self.resumable(), "Ctrl-C left nothing to resume", **ev)
            ev["status"] = "interrupted, resumable: the next call runs tune --resume"
            return ev
        rs.check(ev["exit"] == 0, f"tune exit {ev['exit']}", **ev)
        ev["status"] = "decided"
        return ev

    def configs(self) -> list[str]:
        """rehearse's inputs: the shape's config.json files (the pack's for the sim)."""
        model = Path(self.args.model or "")
        target = model / "config.json" if (model / "config.json").exists() else None
        target = target or PACK / "llama8b-shape" / "config.json"
        draft = PACK / "llama8b-eagle3" / "config.json"
        return ["--model-config", str(target), "--draft-config", str(draft)]

    def resumable(self) -> bool:
        j = self.journal()
        return any(r.get("event") == "start" for r in j) and not any(
            r.get("event") == "end" for r in j
        )

    def drive(self, proc: subprocess.Popen) -> dict[str, Any] | None:
        """Wait for the tune; Ctrl-C it (once) when the call's time runs short; what was done
        and how long the tune took to exit after it. The rules (`stop_reason`) keep room for
        what a Ctrl-C costs at that moment: nothing while the engine that served before the
        tune serves, else putting it back (a cached load); a switch in flight finishes first."""
        seen: set[str] = set()
        sent: dict[str, Any] | None = None
        while proc.poll() is None:
            time.sleep(1.0)
            if sent is not None:
                if time.monotonic() - sent["t"] > sent["wait_s"]:
                    proc.kill()  # past the budget: the journal keeps the finished stages
                    sent["killed"] = True
                    break
                continue
            journal = self.journal()
            finished = [r["name"] for r in journal if r.get("event") == "stage_finished"]
            boundary = bool(set(finished) - seen)
            seen.update(finished)
            try:
                st = dict(self.daemon.client.status(timeout=10))
            except Exception:  # the tune says what became of the daemon
                continue
            why = stop_reason(self.left(), journal, st, boundary)
            if why:
                print(f"   Ctrl-C: {why}", flush=True)
                proc.send_signal(signal.SIGINT)
                sent = {"t": time.monotonic(), "why": why, "stage": _running(journal),
                        "left_s": round(self.left(), 1), "wait_s": max(30.0, self.left() - STOP_S),
                        "killed": False}  # fmt: skip
        proc.wait()
        if sent is None:
            return None
        return {k: v for k, v in sent.items() if k != "t"} | {
            "seconds_to_exit": round(time.monotonic() - sent["t"], 1)
        }

    def summary(self) -> dict[str, Any]:
        """From the journal (every call so far): each stage's runs with their planned and
        actual seconds and loads by kind, the totals, and the decision when there is one."""
        journal = self.journal()
        stages: dict[str, dict[str, Any]] = {}
        totals = {"real": 0, "cached": 0, "disk": 0, "dummy": 0}
        for r in journal:
            if r.get("event") not in ("stage_finished", "stage_interrupted"):
                continue
            run = {
                "status": "interrupted" if r["event"] == "stage_interrupted" else r["status"],
                "planned_s": r.get("planned_s"),
                "wall_s": round(float(r.get("wall_s") or 0), 1),
                "planned_loads": r.get("planned_loads"),
                "loads": r.get("loads"),
                "reason": r.get("reason"),
            }
            stages.setdefault(r["name"], {"runs": []})["runs"].append(run)
            for k in totals:
                totals[k] += int((r.get("loads") or {}).get(k) or 0)
        decision = None
        path = self.out / "decision.json"
        if path.exists() and any(r.get("event") == "end" for r in journal):
            doc = json.loads(path.read_text())
            decision = {k: doc.get(k) for k in ("decision", "loads", "wall_s", "warnings")}
            decision["stages"] = doc.get("stages")
            for name in ("decision.json", "report.md"):
                shutil.copy(self.out / name, self.raw / name)
        plans = [r["plan"] for r in journal if r.get("event") == "plan"]
        return {
            "stages": stages,
            "loads_all_calls": totals,
            "plan_at_start": _plan_view(plans[0]) if plans else None,
            "decision": decision,
        }


LOAD_STAGES = ("trial", "confirm", "decide")


def stop_reason(
    left: float, journal: list[dict[str, Any]], status: dict[str, Any], boundary: bool
) -> str | None:
    """Why to Ctrl-C the tune now (None: go on). `left`: seconds of the budget; `status`: the
    daemon's; `boundary`: a stage finished since the last look.

    - a switch in flight: when only it, the put-back and the stop still fit;
    - in (or between) the loading stages: when one more load (any row may start one), the
      put-back and the stop no longer fit;
    - at a boundary (a stage just started, or is next): when it cannot finish (a stage
      before the trial) or get its first row (a loading stage) in what is left; decide,
      at most one cached load, when that no longer fits;
    - in a stage before the trial: when only the put-back and the stop still fit."""
    before = next((r.get("serving") for r in journal if r.get("event") == "serving"), None) or {}
    op = status.get("switch_in_flight")
    serving = (status.get("profile"), status.get("mode"))
    home = not op and not status.get("trial") and serving == (before.get("profile"),
                                                              before.get("mode"))  # fmt: skip
    put_back = 0 if home else PUT_BACK_S
    longest = max(LOAD_S.values())
    running = _running(journal)
    done = {r["name"] for r in journal if r.get("event") == "stage_finished"
            and r.get("status") in ("done", "skipped")}  # fmt: skip
    nxt = next((n for n in stage_need() if n not in done), None)
    if op:
        rest = max(0.0, longest - float(op.get("elapsed_s") or 0))
        if left < rest + PUT_BACK_S + STOP_S:
            return (f"{op.get('kind')} to {op.get('profile')}/{op.get('mode')} in flight: "
                    f"{left:.0f} s left, ~{rest:.0f} s of it + put-back {PUT_BACK_S} s + stop "
                    f"{STOP_S} s")  # fmt: skip
        return None
    if running is None and nxt is None:
        return None  # every stage done: the report and decision.json take seconds
    stage = running or nxt
    if stage == "decide":  # at most one cached load, and it ends the tune
        if left < stage_need()["decide"] + LOAD_S["cached"] + STOP_S:
            return f"in decide: {left:.0f} s left, a cached load + stop {STOP_S} s"
        return None
    if stage in LOAD_STAGES and left < longest + PUT_BACK_S + STOP_S:
        return (f"in {stage}: {left:.0f} s left, one more load (~{longest} s) + put-back "
                f"{PUT_BACK_S} s + stop {STOP_S} s")  # fmt: skip
    if boundary and stage is not None:  # it started within the last second, or is next
        if stage in LOAD_STAGES:
            need = first_progress(stage) + PUT_BACK_S
        else:
            need = stage_need()[stage] + put_back
        if left < need + STOP_S:
            return (f"at the start of {stage}: {left:.0f} s left, it needs ~{need:.0f} s "
                    f"(put-back included) + stop {STOP_S} s")  # fmt: skip
    if stage not in LOAD_STAGES and left < put_back + STOP_S + 10:
        return f"in {stage}: {left:.0f} s left, put-back {put_back} s + stop {STOP_S} s"
    return None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """tune's journal records (a torn last line skipped)."""
    out: list[dict[str, Any]] = []
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def _running(journal: list[dict[str, Any]]) -> str | None:
    """The stage started and not yet finished (None between stages)."""
    running = None
    for r in journal:
        if r.get("event") == "stage_started":
            running = r["name"]
        elif r.get("event") in ("stage_finished", "stage_interrupted"):
            running = None
    return running


def _plan_view(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "total_s": p.get("total_s"),
        "loads": p.get("loads"),
        "cached": p.get("cached"),
        "stages": {s["name"]: s["estimate_s"] for s in p.get("stages", [])},
    }


def steps(args: argparse.Namespace) -> list[tuple[str, str, float]]:
    start = START_S if args.engine == "sglang" else 30  # the sim starts in seconds
    return [("start", "s_start", start), ("tune", "s_tune", 30), ("stop", "s_stop", 0)]


def main() -> int:
    def extra(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--weight-cache", choices=["off", "auto", "on"], default="auto")
        ap.add_argument(
            "--fresh", action="store_true", help="a new tune (--force) over a carried one"
        )
        ap.add_argument("--shape", default="tune8b")

    args = rs.arguments(extra)
    args.sglang_args = rs.REALISTIC_SGLANG_ARGS
    if not args.draft:  # the sim takes any name
        args.draft = str(PACK / "llama8b-eagle3") if args.engine == "sglang" else "sim/eagle3"
    args.label = f"{args.label or args.engine}, tune (TP 1, weight cache {args.weight_cache})"
    print(plan(args.budget_s, start=steps(args)[0][2]), flush=True)
    return rs.run_steps(TuneRun(args), steps(args))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryDirectory():
        sys.exit(main())
