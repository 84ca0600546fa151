"""The decision tools against a real SGLang server: `spec costs`, the plan served under SGLang's
own forced acceptance, and the steps-0 pass, on a Llama-3.1-8B-shaped model with an EAGLE-3
head of its shape (dummy weights: config files only, no checkpoint to write or read).

    bash benchmarks/gpu/real_sglang.sh spec8b [--steps a,b] [--journal FILE]
    python benchmarks/gpu/spec_sglang.py --engine sim --work DIR      # the same steps on the sim

SGLang 0.5.17 forces its accept length with SGLANG_SIMULATE_ACC_LEN=L and
SGLANG_SIMULATE_ACC_METHOD=match-expected (srt/speculative/spec_utils.py
`generate_simulated_accept_index`: every verify of a batch accepts floor(L) or ceil(L) tokens,
the bonus included, capped at steps + 1); its controller, histograms, /metrics and timings stay
the real engine's. The steps, in order (each `not run` when the call's time is short; a later
call runs the rest with --steps):

- first_token: the baseline at c = 1, 8, 16 and 32, 128-token prompts, for SGLang's own
  stamps of each request (bench's first-token split: the way in, the hand-off to the
  scheduler, its queue, the forwards, the way out; c = 1 gives the floor of each stage; the
  least a call can measure them with, ~3.5 min with its start; first, since costs8b
  runs to the call's budget);
- costs8b: `spec costs` at steps 0..3 x batch 1..32 with a journal (--journal, kept across
  calls: a call cut short is resumed by the next, and says so);
- accept_fixed3: EAGLE-3 at 3 steps, forced 3.0: SGLang's histogram (the plan's acceptance)
  and the fixed 3-step mode at the concurrencies between the plan's tier keys;
- plan_served: the plan from those costs and that histogram (fastverify.speculation.plan, as
  `spec plan` makes it), served in mode adaptive at forced 3.0: c = 1..32 at two prompt
  lengths beside the prediction, and c = 3, 6, 12, 24;
- adaptive_between: the same plan served between the tier keys only (c = 3, 6, 12, 24);
- lower_accept: the same config with the engine forced to 2.0;
- baseline_c: the baseline server at every c above;
- fixed_k12: EAGLE-3 at 1 and 2 steps (forced 3.0) between the tier keys;
- steps0_skip: the steps-0 pass again with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1;

`--costs-input-len N` (default 128) measures the costs at N-token prompts instead (their own
journal and cost file, spec-costs-8b-inN.*), and plan_served then plans and serves at N-token
prompts only, from those costs: the plan at the workload's context, which `spec plan`'s
`context_note` asks for when the costs were measured at a shorter one.

    bash benchmarks/gpu/real_sglang.sh spec8b --steps costs8b --costs-input-len 1024
    bash benchmarks/gpu/real_sglang.sh spec8b --steps plan_served --costs-input-len 1024

benchmarks/gpu/decision_report.py turns the results files into the figures with their goals.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_sglang as rs  # noqa: E402

from tests.support.harness import _scrubbed_env, ctrl_c_reaches_it  # noqa: E402

PACK = REPO / "benchmarks" / "gpu" / "sglang_pack"
FORCE = "SGLANG_SIMULATE_ACC_LEN"
FORCE_METHOD = {"SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
SKIP_ZERO = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"
PLANNED_ACCEPT = 3.0
LOWER_ACCEPT = 2.0
BATCH_SIZES = (1, 2, 4, 8, 16, 32)
BETWEEN_KEYS = (3, 6, 12, 24)
PROMPTS = (128, 1024)
OUTPUT_LEN = 128
WINDOW_S = 6
FIRST_TOKEN_CS = (1, 8, 16, 32)  # first_token: the floor, and waves of 8 to 32 prompts
COSTS_ARGS = ["--max-steps", "3", "--batch-sizes", ",".join(map(str, BATCH_SIZES)), "-d", "5",
              "--input-len", "128", "--output-len", str(OUTPUT_LEN), "--warmup", "1",
              "--no-traces"]  # fmt: skip
RESTORE_S = 100  # a Ctrl-C'd spec costs puts the engine back: one start and its verification


def eagle3_keys(k: int) -> dict[str, int]:
    """`[server.eagle3]` at k steps, shaped as SGLang's adaptive worker runs k steps (and as
    a timing trial's steps override launches them)."""
    return {"num_steps": k, "topk": 1, "num_draft_tokens": k + 1}


class SpecRun(rs.Run):
    # ------------------------------------------------------------------ helpers
    def costs_len(self) -> int:
        return int(self.args.costs_input_len)

    def costs_name(self, suffix: str) -> str:
        """spec-costs-8b.SUFFIX, or spec-costs-8b-inN.SUFFIX for costs at N-token prompts."""
        n = self.costs_len()
        return f"spec-costs-8b{'' if n == 128 else f'-in{n}'}.{suffix}"

    def costs_args(self) -> list[str]:
        args = list(COSTS_ARGS)
        args[args.index("--input-len") + 1] = str(self.costs_len())
        return args

    def prompts(self) -> tuple[int, ...]:
        """The prompt lengths planned and served: both, or only the costs' own when they were
        measured at a longer context."""
        return PROMPTS if self.costs_len() == 128 else (self.costs_len(),)

    def forced(self, length: float | None, **more: str) -> dict[str, str]:
        env = dict(more)
        if length is not None:
            env.update({FORCE: f"{length:g}", **FORCE_METHOD})
        return env

    # A restart of the 8B shape costs ~60 s of a 10-minute call, so the call's first start
    # already serves what its first step asks for (the engine, its env and server keys).
    serving: tuple[str, str] | None = None

    def engine_of(self, step: str) -> tuple[str, dict[str, str], dict[str, Any]] | None:
        """The engine a step serves first: (mode, server.env, other server keys)."""
        if step == "accept_fixed3":
            return "eagle3", self.forced(PLANNED_ACCEPT), {}
        if step == "plan_served":
            plan = self._plan()
            mode = "adaptive" if plan["plans"][str(self.prompts()[0])].get("drafts") else "baseline"
            return mode, self.forced(PLANNED_ACCEPT), {"adaptive_config": plan["path"]}
        if step in ("adaptive_between", "lower_accept"):
            forced = PLANNED_ACCEPT if step == "adaptive_between" else LOWER_ACCEPT
            return "adaptive", self.forced(forced), {"adaptive_config": self._plan()["path"]}
        if step == "costs8b":  # its first trial to load; the cost run puts it back when done
            return self._costs_opening()
        if step in ("baseline_c", "first_token"):
            return "baseline", {}, {}
        if step == "fixed_k12":
            return "eagle3", self.forced(PLANNED_ACCEPT), {"eagle3": eagle3_keys(1)}
        return None

    def _costs_opening(self) -> tuple[str, dict[str, str], dict[str, Any]]:
        """The engine of spec costs' first trial still to measure: a resumed journal's first
        EAGLE-3 trial is then served by the call's start (no load of its own, ~60 s); the
        baseline, and steps 0 (mode adaptive at 0 steps), open on the baseline as a fresh
        run does."""
        from fastverify.experiments.engine_costs.run import pending_trials

        journal = Path(self.args.journal or self.work / self.costs_name("journal.jsonl"))
        pending = pending_trials(journal) if journal.exists() else []
        first = pending[0] if pending else "baseline"
        if not first.isdigit() or int(first) == 0:
            return "baseline", {}, {}
        return "eagle3", {}, {"eagle3": eagle3_keys(int(first))}

    def opening(self) -> dict[str, Any]:
        """The engine the call's first step serves (`engine_of`), served by its start."""
        first = next((s for s, *_ in STEPS if s in self.args.steps and s != "start"), "")
        opening = self.engine_of(first) if first else None
        if not opening:
            return {}
        mode, env, server = opening
        self.serving = self.serving_key(mode, env, server)
        return {"mode": mode, "env": env, **server}

    @staticmethod
    def serving_key(mode: str, env: dict[str, str], server: dict[str, Any]) -> tuple[str, str]:
        """What an engine serves: its mode, env and server keys, an adaptive config by content."""
        keys = dict(server)
        if keys.get("adaptive_config"):
            keys["adaptive_config"] = Path(keys["adaptive_config"]).read_text()
        return mode, json.dumps([env, keys], sort_keys=True)

    def reconfigure(self, **server: Any) -> None:
        self.serving = None
        super().reconfigure(**server)

    def serve(self, mode: str, env: dict[str, str], **server: Any) -> dict[str, Any]:
        """Reconfigure (server.env and keys) and (re)start the engine in `mode`; the switch's
        wall time and result. An engine already serving exactly that is kept."""
        if self.serving == self.serving_key(mode, env, server):
            st = self.status()
            rs.check(st["mode"] == mode and st["state"] == "READY", f"serving {st['mode']}")
            return {"switch_wall_s": 0.0, "engine_env_forced": env.get(FORCE),
                    "kept_first_start": True}  # fmt: skip
        self.reconfigure(env=env, **server)
        t = time.monotonic()
        rc, out, err = self.ctl("mode", "set", mode, "--json")
        if rc == 0 and isinstance(out, dict) and out.get("result") == "unchanged":
            rc, out, err = self.ctl("restart", "--json")
        wall = round(time.monotonic() - t, 1)
        rs.check(rc == 0, f"{mode} with {env} exit {rc}: {err[-800:]}", result=rs._trim(out))
        st = self.status()
        rs.check(st["mode"] == mode and st["state"] == "READY", f"serving {st['mode']}")
        self.serving = self.serving_key(mode, env, server)
        return {"switch_wall_s": wall, "engine_env_forced": env.get(FORCE)}

    def bench(self, tag: str, c: int, input_len: int = 128) -> dict[str, Any]:
        name = f"{tag}-c{c}-in{input_len}"
        rc, out, err = self.ctl(
            "bench", "-c", str(c), "-d", str(WINDOW_S), "--input-len", str(input_len),
            "--output-len", str(OUTPUT_LEN), "--warmup", "1", "--json",
            "--timeline", str(self.raw / f"timeline-{name}.jsonl"), timeout=300,
        )  # fmt: skip
        if isinstance(out, dict) and self.serving:  # what served it, beside what it measured
            env, keys = json.loads(self.serving[1])
            if keys.get("adaptive_config"):
                keys["adaptive_config"] = json.loads(keys["adaptive_config"])
            out["served_by"] = {"mode": self.serving[0], "env": env, "server": keys}
        self.dump(f"bench-{name}.json", out)
        rs.check(rc == 0 and isinstance(out, dict), f"bench {tag} c={c} exit {rc}: {err[-600:]}")
        return rs._bench_summary(out)

    def sweep(self, tag: str, cs: tuple[int, ...], prompts: tuple[int, ...] = (128,)) -> dict:
        return {f"c{c}-in{n}": self.bench(tag, c, n) for n in prompts for c in cs}

    # ------------------------------------------------------------------ the steps
    def s_costs8b(self) -> dict[str, Any]:
        journal = Path(self.args.journal or self.work / self.costs_name("journal.jsonl"))
        costs = self.work / self.costs_name("json")
        self.serving = None  # the cost run switches the engine (and puts the first back)
        resume = journal.exists() and journal.stat().st_size > 0
        args = [*self.costs_args(), "--journal", str(journal), "--output", str(costs), "--json"]
        if resume:
            args.append("--resume")
        err_path = self.raw / self.costs_name("stderr.txt")
        env = {**_scrubbed_env(), "PYTHONPATH": str(REPO)}
        with open(err_path, "a") as err_f:  # progress, kept also when the call is cut
            proc = subprocess.Popen(
                [sys.executable, "-m", "fastverify.ctl", "--socket", str(self.daemon.socket),
                 "spec", "costs", *args],
                stdout=subprocess.DEVNULL, stderr=err_f, text=True, env=env,
                preexec_fn=ctrl_c_reaches_it,  # its Ctrl-C below also under `cmd &`
            )  # fmt: skip
            cut = False
            try:
                proc.communicate(timeout=max(30.0, self.left() - RESTORE_S))
            except subprocess.TimeoutExpired:
                cut = True  # Ctrl-C: the engine is put back, the journal keeps every window
                proc.send_signal(signal.SIGINT)
                try:
                    proc.communicate(timeout=RESTORE_S + 60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
        shutil_copy(journal, self.raw / journal.name)
        windows = sum('"record":"window"' in ln for ln in journal.read_text().splitlines())
        ev: dict[str, Any] = {"exit": proc.returncode, "resumed": resume, "cut_at_budget": cut,
                              "journal_windows": windows, "journal": str(journal)}  # fmt: skip
        if costs.exists() and proc.returncode == 0:
            shutil_copy(costs, self.raw / costs.name)
            report = json.loads(costs.read_text())
            ev.update({k: report.get(k) for k in ("baseline_ms", "cycle_ms", "prefill_ms",
                                                   "load_s", "time_s", "journal", "restored",
                                                   "cuda_graph_bs", "sglang_version")})  # fmt: skip
        rs.check(proc.returncode == 0, f"spec costs exit {proc.returncode}"
                 + (" (cut at the call's budget; resume with the journal)" if cut else ""),
                 stderr=err_path.read_text()[-2000:], **ev)  # fmt: skip
        return ev

    def _costs(self) -> Path:
        for p in (self.work / self.costs_name("json"), Path(self.args.costs or "/nonexistent")):
            if p.exists():
                return p
        raise rs.StepFailed("no cost file: run costs8b first (or give --costs)")

    def s_accept_fixed3(self) -> dict[str, Any]:
        ev = self.serve("eagle3", self.forced(PLANNED_ACCEPT))
        ev["benches"] = self.sweep("fixed3", (6, *[c for c in BETWEEN_KEYS if c != 6]))
        hist = ev["benches"]["c6-in128"].get("accept_histogram")
        rs.check(hist and sum(hist) > 0, "no accepted-drafts histogram", **ev)
        self.dump("accept-histogram-forced-3.json", {"histogram": hist, "steps": 3})
        ev["histogram"] = hist
        return ev

    def _plan(self) -> dict[str, Any]:
        """The plan `spec plan --costs` makes from this run's costs and SGLang's histogram."""
        from fastverify.speculation import costs as spec_costs
        from fastverify.speculation import plan as spec_plan
        from fastverify.speculation import serving
        from fastverify.speculation.acceptance import Acceptance

        # this call's accept_fixed3, else an earlier call's (carried into the work dir)
        name = "accept-histogram-forced-3.json"
        hist_path = next((p for p in (self.raw / name, self.work / name) if p.exists()), None)
        rs.check(hist_path is not None, f"no {name}: run accept_fixed3 first")
        if hist_path.parent != self.raw:  # the raw dir holds what its plan was made from
            shutil_copy(hist_path, self.raw / name)
        h = json.loads(hist_path.read_text())
        acc = Acceptance.from_requests([h["histogram"]], int(h["steps"]))
        costs_path = self._costs()
        if not (self.raw / costs_path.name).exists():
            shutil_copy(costs_path, self.raw / costs_path.name)
        costs = spec_costs.from_file(costs_path)
        plans = {}
        for n in self.prompts():
            p = spec_plan.make_plan(acc, costs, workload=serving.Workload(n, OUTPUT_LEN),
                                    concurrencies=[*BATCH_SIZES, *BETWEEN_KEYS])  # fmt: skip
            plans[str(n)] = p.to_dict()
            if n == self.prompts()[0]:
                cfg_path = spec_plan.write_adaptive_config(p, self.work / "plan-adaptive.json")
        self.dump("plan.json", plans)
        return {"config": json.loads(Path(cfg_path).read_text()), "plans": plans,
                "path": str(cfg_path)}  # fmt: skip

    def s_plan_served(self) -> dict[str, Any]:
        plan = self._plan()
        # a plan that drafts at no batch size is "serve baseline" (the daemon refuses such an
        # adaptive config, rightly): its prediction is then compared with the baseline served
        drafts = plan["plans"][str(self.prompts()[0])].get("drafts")
        mode = "adaptive" if drafts else "baseline"
        ev = self.serve(mode, self.forced(PLANNED_ACCEPT), adaptive_config=plan["path"])
        ev.update(config=plan["config"], served_mode=mode, plan_drafts=drafts,
                  costs_input_len=self.costs_len())  # fmt: skip
        ev["benches"] = self.sweep("adaptive3", BATCH_SIZES, self.prompts())
        if self.costs_len() == 128:
            ev["benches"].update(self.sweep("adaptive3", BETWEEN_KEYS))
        ev["predicted"] = {str(n): {c: (p.get("predictions") or {}).get(str(c))
                                    for c in (*BATCH_SIZES, *BETWEEN_KEYS)}
                           for n, p in plan["plans"].items()}  # fmt: skip
        self.keep_engine_log("server-adaptive-forced3.log")
        return ev

    def s_adaptive_between(self) -> dict[str, Any]:
        """The plan served at forced 3.0 between its tier keys only (plan_served's last four
        windows): adaptive beside the fixed modes when a call has no room for plan_served."""
        plan = self._plan()
        ev = self.serve("adaptive", self.forced(PLANNED_ACCEPT), adaptive_config=plan["path"])
        ev["benches"] = self.sweep("adaptive3", BETWEEN_KEYS)
        return ev

    def s_lower_accept(self) -> dict[str, Any]:
        # the plan plan_served serves (made again when an earlier call served it: the same
        # costs and histogram give the same plan)
        plan = self._plan()
        rs.check(plan["plans"][str(self.prompts()[0])].get("drafts"),
                 "the plan drafts at no batch size")  # fmt: skip
        ev = self.serve("adaptive", self.forced(LOWER_ACCEPT), adaptive_config=plan["path"])
        ev["benches"] = self.sweep("adaptive2", BATCH_SIZES)
        return ev

    def s_baseline_c(self) -> dict[str, Any]:
        ev = self.serve("baseline", {})
        ev["benches"] = self.sweep("baseline", (*BATCH_SIZES, *BETWEEN_KEYS))
        ev["benches"].update(self.sweep("baseline", BATCH_SIZES, PROMPTS[1:]))
        return ev

    def s_first_token(self) -> dict[str, Any]:
        ev = self.serve("baseline", {})
        ev["benches"] = self.sweep("baseline", FIRST_TOKEN_CS)
        return ev

    def s_fixed_k12(self) -> dict[str, Any]:
        ev: dict[str, Any] = {}
        for k in (1, 2):
            eagle3 = eagle3_keys(k)
            ev[f"k{k}"] = self.serve("eagle3", self.forced(PLANNED_ACCEPT), eagle3=eagle3)
            ev[f"k{k}"]["benches"] = self.sweep(f"fixed{k}", BETWEEN_KEYS)
        self.reconfigure(eagle3=eagle3_keys(3))
        return ev

    def s_steps0_skip(self) -> dict[str, Any]:
        self.reconfigure(env={SKIP_ZERO: "1"})
        out = self.work / "spec-costs-steps0-skip.json"
        rc, rep, err = self.ctl("spec", "costs", *COSTS_ARGS, "--trials", "0", "--output",
                                str(out), "--json", timeout=max(60, self.left() - 20))  # fmt: skip
        self.dump("spec-costs-steps0-skip-stderr.txt", err)
        rs.check(
            rc == 0 and isinstance(rep, dict), f"spec costs --trials 0 exit {rc}: {err[-800:]}"
        )
        shutil_copy(out, self.raw / out.name)
        return {"cycle_ms_steps0_skip": {b: v.get("0") for b, v in rep["cycle_ms"].items()},
                "time_s": rep.get("time_s")}  # fmt: skip

    def s_prefill_points(self) -> dict[str, Any]:
        """The prefill points alone (spec costs' baseline and steps-0 trials at batch 1 and
        32, at each prompt length: one prompt of 8, N and 8N tokens, and a batch of N-token
        prompts sent at once), beside a cost file measured before the batch point existed."""
        ev: dict[str, Any] = {}
        # batch 1 holds the points; the largest size sizes the batch point (as many prompts as
        # that many clients ever have waiting)
        sizes = f"1,{max(BATCH_SIZES)}"
        args = [a if a != ",".join(map(str, BATCH_SIZES)) else sizes for a in COSTS_ARGS]
        trials = self.args.prefill_trials
        lengths = [int(n) for n in self.args.prefill_lengths.split(",")]
        for n in lengths:
            args[args.index("--input-len") + 1] = str(n)
            out = self.work / f"prefill-points-in{n}.json"
            rc, rep, err = self.ctl("spec", "costs", *args, "--trials", trials,
                                    "--output", str(out), "--json",
                                    timeout=max(60, self.left() - 20))  # fmt: skip
            self.dump(f"prefill-points-in{n}-stderr.txt", err)
            rs.check(rc == 0 and isinstance(rep, dict),
                     f"spec costs --trials {trials} at {n} tokens exit {rc}: {err[-800:]}",
                     **ev)  # fmt: skip
            shutil_copy(out, self.raw / out.name)
            ev[f"in{n}"] = {k: rep.get(k) for k in ("prefill_ms", "prefill_batch_ms", "time_s")}
        return ev  # spec costs put back the engine it found: what serves is unchanged


def shutil_copy(src: Path, dst: Path) -> None:
    import shutil

    with contextlib.suppress(OSError):
        shutil.copy(src, dst)


STEPS: list[tuple[str, str, float]] = [
    ("start", "s_start", 240),  # the first start pays the JIT builds (~130 s on the H200)
    # short, and before costs8b, which runs to the call's budget: one call can take both
    ("first_token", "s_first_token", 45),
    ("costs8b", "s_costs8b", 150),  # resumable: runs to the budget, then Ctrl-C
    ("accept_fixed3", "s_accept_fixed3", 110),
    ("plan_served", "s_plan_served", 200),
    ("adaptive_between", "s_adaptive_between", 90),
    ("lower_accept", "s_lower_accept", 90),
    ("baseline_c", "s_baseline_c", 160),
    ("fixed_k12", "s_fixed_k12", 130),
    ("steps0_skip", "s_steps0_skip", 160),
    # its least (the baseline alone at one length, ~40 s); it bounds its own runs by the
    # call's time left (both trials at both lengths: ~5 min)
    ("prefill_points", "s_prefill_points", 60),
    ("stop", "s_stop", 5),
]


def main() -> int:
    def extra(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--journal", default="", help="spec costs' journal (kept across calls)")
        ap.add_argument("--costs", default="", help="a cost file of an earlier call")
        ap.add_argument("--shape", default="spec8b")
        ap.add_argument(
            "--prefill-trials",
            default="baseline,0",
            help="prefill_points: spec costs' trials (baseline alone: no load)",
        )
        ap.add_argument("--prefill-lengths", default="1024,128",
                        help="prefill_points: prompt lengths, in order (the longer first: "
                        "where one prompt's line fails)")  # fmt: skip
        ap.add_argument(
            "--costs-input-len",
            type=int,
            default=128,
            help="prompt tokens of the costs (and of the plan served from them)",
        )

    args = rs.arguments(extra)
    args.sglang_args = rs.REALISTIC_SGLANG_ARGS
    return rs.run_steps(SpecRun(args), STEPS)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryDirectory():
        sys.exit(main())
