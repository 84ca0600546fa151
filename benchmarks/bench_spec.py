"""The speculation plan against the sim, side by side in one run: what SGLang's controller does
with the config `spec plan` writes, served, next to what the plan predicted.

Stages (`--stage`, each writes its own results file):
- `robust` (benchmarks/results/spec-robust-sim.json): one EAGLE-3 server at `--steps` K with
  `--accept-length` (the recorded acceptance) benched with the shipped prompt set gives the
  per-request histograms and the engine's costs; `fastverify.speculation.plan` makes the
  plan with the stated lower acceptance `--lower-accept-length`. Then baseline, EAGLE-3 at K
  and adaptive (the plan's config) serve every concurrency of `--concurrency` at the
  recorded acceptance, and adaptive at the lower one, each in a bench window of about three
  request lifetimes at the concurrency (`window`), `--robust-prompt-len`-token prompts (short:
  what the controller does shows in decode; a window that ends inside a prefill burst moves
  a short run's figure by up to the prefill's share of it). Figures: adaptive / the better
  fixed mode at the recorded acceptance, adaptive / baseline at the lower one.
- `e2e` (benchmarks/results/spec-e2e-sim.json): adaptive (and baseline) served at
  `--prompt-lens` (128 and 1024) against the plan's end-to-end prediction of that bench
  window (the plan's `window` prediction: the mean of its replays of the window, and its 95%
  interval).
- `coverage` (benchmarks/results/spec-coverage-sim.json): `--seeds` runs with
  `--sim-accept-spread`: each records acceptance on its own EAGLE-3 server (seed s), plans,
  then serves adaptive on another (seed 1000 + s) at `--coverage-concurrency`; is the served
  tok/s inside the plan's 95% interval?
Every server is the sim (TP 8, `--profile`): the figures are its cost model's, never a
GPU's.

    python benchmarks/bench_spec.py --stage robust
    python benchmarks/bench_spec.py --stage e2e
    python benchmarks/bench_spec.py --stage coverage --seeds 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fastverify.experiments.bench.load import BenchConfig, run_bench  # noqa: E402
from fastverify.profiles.store import ProfileStore  # noqa: E402
from fastverify.sglang import adaptive  # noqa: E402
from fastverify.speculation import costs as spec_costs  # noqa: E402
from fastverify.speculation import plan as spec_plan  # noqa: E402
from fastverify.speculation import serving  # noqa: E402
from fastverify.speculation.acceptance import Acceptance  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


@contextlib.contextmanager
def sim(env: dict[str, str], tp: int, extra: list[str], log: Path) -> Iterator[str]:
    port = free_port()
    fh = open(log, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastverify.sim", "--model-path", "sim/kimi",
         "--tp-size", str(tp), "--port", str(port), "--enable-metrics",
         "--sim-load-seconds", "0.3", *extra],
        env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        while "fired up and ready" not in log.read_text(errors="replace"):
            if proc.poll() is not None:
                raise RuntimeError(f"sim exited {proc.returncode}: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        fh.close()


def eagle_args(args: argparse.Namespace, length: float, seed: int = 0) -> list[str]:
    return [*EAGLE, "--speculative-num-steps", str(args.steps), "--sim-accept-length",
            str(length), "--sim-accept-steps", str(args.steps), "--sim-seed", str(seed),
            "--sim-accept-spread", str(args.spread)]  # fmt: skip


def adaptive_args(args: argparse.Namespace, cfg: Path, launch: int, length: float,
                  seed: int = 0) -> list[str]:  # fmt: skip
    return [*EAGLE, adaptive.FLAG_ADAPTIVE, adaptive.FLAG_ADAPTIVE_CONFIG, str(cfg),
            "--speculative-num-steps", str(launch), "--sim-accept-length", str(length),
            "--sim-accept-steps", str(args.steps), "--sim-seed", str(seed),
            "--sim-accept-spread", str(args.spread)]  # fmt: skip


def record(url: str, args: argparse.Namespace, requests: int, concurrency: int,
           output_len: int) -> tuple[Acceptance, spec_costs.Costs, dict[str, Any]]:  # fmt: skip
    """One real-weights bench with the shipped prompt set: per-request histograms, and the
    engine's own costs from the same server."""
    r = run_bench(BenchConfig(url=url, concurrency=concurrency, duration=None,
                              requests=requests, output_len=output_len, warmup=0,
                              dataset="fastverify-docs"))  # fmt: skip
    acc = Acceptance.from_requests(r.accept_requests or [], args.steps)
    costs = spec_costs.from_engine_info(get_json(f"{url}/server_info"))
    return acc, costs, {"curve": r.accept_curve, "requests": len(acc.requests),
                        "verifies": acc.verifies, "dataset": r.dataset}  # fmt: skip


def window(c: int, output_len: int, tps: float, lo: float, hi: float,
           lifetimes: float = 2.5) -> float:  # fmt: skip
    """A bench window covering `lifetimes` request lifetimes at this concurrency (Little's
    law: one client's request takes c x output / throughput), within [lo, hi] seconds."""
    life = c * output_len / max(tps, 1e-9)
    return round(min(hi, max(lo, lifetimes * life)), 1)


def served(url: str, c: int, seconds: float, input_len: int, output_len: int) -> dict:
    r = run_bench(BenchConfig(url=url, concurrency=c, duration=seconds, input_len=input_len,
                              output_len=output_len, warmup=1))  # fmt: skip
    return {"tokens_per_second": round(r.output_tokens_per_second, 3), "completed": r.completed,
            "ttft_ms_p50": r.ttft_ms.get("p50"), "itl_ms_mean": r.itl_ms.get("mean"),
            "window_s": seconds}  # fmt: skip


def predicted_window(plan: spec_plan.Plan, mode: str, c: int, seconds: float,
                     f: float = 1.0) -> dict[str, float]:  # fmt: skip
    """The plan's prediction of one bench window: its replays of the window, mean and sd."""
    runs = [r.tokens_per_second for r in serving.window_runs(
        mode, c, plan.costs, plan.workload, plan.acceptance, config=plan.adaptive_config(),
        steps=plan.acceptance.steps, f=f, window_s=seconds,
        seeds=range(spec_plan.WINDOW_SEEDS))]  # fmt: skip
    mean, sd = serving.mean_sd(runs)
    return {"mean": round(mean, 3), "sd": round(sd, 3)}


def make_plan(acc: Acceptance, costs: spec_costs.Costs, args: argparse.Namespace,
              input_len: int, concurrencies: list[int]) -> spec_plan.Plan:  # fmt: skip
    return spec_plan.make_plan(
        acc, costs, workload=serving.Workload(input_len, args.output_len),
        concurrencies=concurrencies, max_batch=max(concurrencies),
        f_low=acc.factor_for(args.lower_accept_length),
    )  # fmt: skip


def stage_robust(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> dict:
    concs = [int(c) for c in args.concurrency.split(",")]
    with sim(env, args.tp_size, eagle_args(args, args.accept_length), tmp / "rec.log") as url:
        acc, costs, rec = record(url, args, 48, 16, 128)
    inp, out = args.robust_prompt_len, args.robust_output_len
    p = spec_plan.make_plan(
        acc, costs, workload=serving.Workload(inp, out), concurrencies=concs,
        max_batch=max(concs), f_low=acc.factor_for(args.lower_accept_length),
    )  # fmt: skip
    cfg = tmp / "adaptive.json"
    spec_plan.write_adaptive_config(p, cfg)
    base_pred = {c: p.predictions[c]["baseline"]["tokens_per_second"] for c in concs}
    windows = {c: window(c, out, base_pred[c], args.min_window, args.max_window, 3.0)
               for c in concs}  # fmt: skip
    rows: dict[int, dict[str, Any]] = {c: {"window_s": windows[c]} for c in concs}
    servers = [
        ("baseline", [], 1.0),
        ("eagle", eagle_args(args, args.accept_length), 1.0),
        ("adaptive", adaptive_args(args, cfg, p.launch_steps, args.accept_length), 1.0),
        ("adaptive_lower", adaptive_args(args, cfg, p.launch_steps, args.lower_accept_length),
         p.f_low),
    ]  # fmt: skip
    for name, extra, f in servers:
        with sim(env, args.tp_size, extra, tmp / f"{name}.log") as url:
            for c in concs:
                got = served(url, c, windows[c], inp, out)
                mode = "adaptive" if name.startswith("adaptive") else name
                got["predicted"] = predicted_window(p, mode, c, windows[c], f)
                rows[c][name] = got
                print(
                    f"{name:>15} c={c:<3} served {got['tokens_per_second']:8.2f} tok/s, "
                    f"predicted {got['predicted']['mean']:8.2f} ({windows[c]} s)",
                    flush=True,
                )
    for row in rows.values():
        best = max(row["baseline"]["tokens_per_second"], row["eagle"]["tokens_per_second"])
        row["adaptive_over_better_fixed"] = round(row["adaptive"]["tokens_per_second"] / best, 4)
        row["lower_adaptive_over_baseline"] = round(
            row["adaptive_lower"]["tokens_per_second"] / row["baseline"]["tokens_per_second"], 4
        )
    keys = [t.key for t in p.tiers]
    return {
        "recorded": rec,
        "accept_length": args.accept_length,
        "lower_accept_length": args.lower_accept_length,
        "workload": {"input_len": inp, "output_len": out},
        "plan": {
            "tiers": {str(t.key): t.entry for t in p.tiers},
            "launch_steps": p.launch_steps,
            "keys": keys,
            "between_keys": [c for c in concs if c not in keys],
            "predictions": {str(c): v for c, v in p.predictions.items()},
        },
        "rows": {str(c): v for c, v in rows.items()},
        "min_adaptive_over_better_fixed": min(
            r["adaptive_over_better_fixed"] for r in rows.values()
        ),
        "min_lower_adaptive_over_baseline": min(
            r["lower_adaptive_over_baseline"] for r in rows.values()
        ),
    }


def stage_e2e(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> dict:
    concs = [int(c) for c in args.concurrency.split(",")]
    with sim(env, args.tp_size, eagle_args(args, args.accept_length), tmp / "rec.log") as url:
        acc, costs, rec = record(url, args, 48, 16, 128)
    out: dict[str, Any] = {"recorded": rec, "prompt_lens": {}}
    for input_len in [int(x) for x in args.prompt_lens.split(",")]:
        p = make_plan(acc, costs, args, input_len, concs)
        cfg = tmp / f"adaptive-{input_len}.json"
        spec_plan.write_adaptive_config(p, cfg)
        rows: dict[str, Any] = {}
        for name, extra in (("adaptive", adaptive_args(args, cfg, p.launch_steps,
                                                       args.accept_length)),
                            ("baseline", [])):  # fmt: skip
            with sim(env, args.tp_size, extra, tmp / f"e2e-{name}-{input_len}.log") as url:
                for c in concs:
                    tps = p.predictions[c]["baseline"]["tokens_per_second"]
                    w = window(c, args.output_len, tps, args.min_window, args.max_window)
                    got = served(url, c, w, input_len, args.output_len)
                    if name == "adaptive":
                        pr = spec_plan.predict(p, c, window_s=w)["window"]
                        got["predicted"] = pr["adaptive_tokens_per_second"]
                        got["ci"] = pr["ci"]
                    else:
                        got["predicted"] = predicted_window(p, "baseline", c, w)["mean"]
                    got["served_over_predicted"] = round(
                        got["tokens_per_second"] / got["predicted"], 4)  # fmt: skip
                    rows.setdefault(str(c), {})[name] = got
                    print(
                        f"e2e {input_len:>5} {name:>9} c={c:<3} served "
                        f"{got['tokens_per_second']:8.2f}, predicted {got['predicted']:8.2f} "
                        f"x{got['served_over_predicted']:.3f} ({w} s)",
                        flush=True,
                    )
        ratios = [r["adaptive"]["served_over_predicted"] for r in rows.values()]
        out["prompt_lens"][str(input_len)] = {
            "rows": rows,
            "tiers": {str(t.key): t.entry for t in p.tiers},
            "worst_adaptive_ratio": max(ratios, key=lambda x: abs(x - 1.0)),
        }
    return out


def stage_coverage(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> dict:
    c = args.coverage_concurrency
    runs = []
    for seed in range(args.seeds):
        with sim(env, args.tp_size, eagle_args(args, args.accept_length, seed),
                 tmp / f"cov-rec-{seed}.log") as url:  # fmt: skip
            acc, costs, rec = record(url, args, args.coverage_requests, 4, 128)
        p = make_plan(acc, costs, args, 128, [c])
        cfg = tmp / f"cov-{seed}.json"
        spec_plan.write_adaptive_config(p, cfg)
        pr = spec_plan.predict(p, c, window_s=args.coverage_window)["window"]
        with sim(env, args.tp_size,
                 adaptive_args(args, cfg, p.launch_steps, args.accept_length, 1000 + seed),
                 tmp / f"cov-serve-{seed}.log") as url:  # fmt: skip
            got = served(url, c, args.coverage_window, 128, args.output_len)
        lo, hi = pr["ci"]
        inside = lo <= got["tokens_per_second"] <= hi
        runs.append({"seed": seed, "recorded_L": rec["curve"], "requests": rec["requests"],
                     "tiers": {str(t.key): t.entry for t in p.tiers},
                     "predicted": pr["adaptive_tokens_per_second"], "ci": pr["ci"],
                     "served": got["tokens_per_second"], "inside": inside})  # fmt: skip
        print(
            f"coverage seed {seed}: served {got['tokens_per_second']:.2f}, predicted "
            f"{pr['adaptive_tokens_per_second']:.2f} [{lo:.2f}, {hi:.2f}] "
            f"{'inside' if inside else 'OUTSIDE'}",
            flush=True,
        )
    covered = sum(r["inside"] for r in runs)
    return {"concurrency": c, "window_s": args.coverage_window, "spread": args.spread,
            "runs": runs, "covered": covered, "of": len(runs)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", choices=("robust", "e2e", "coverage"), required=True)
    ap.add_argument("--profile", default="ring-ll")
    ap.add_argument("--tp-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--accept-length", type=float, default=3.0)
    ap.add_argument("--lower-accept-length", type=float, default=2.0)
    ap.add_argument("--spread", type=float, default=0.0, help="--sim-accept-spread")
    ap.add_argument("--concurrency", default="1,2,4,8,12,16,24,32,64")
    ap.add_argument("--prompt-lens", default="128,1024")
    ap.add_argument("--output-len", type=int, default=64, help="e2e and coverage stages")
    ap.add_argument("--robust-prompt-len", type=int, default=16)
    ap.add_argument("--robust-output-len", type=int, default=128)
    ap.add_argument("--min-window", type=float, default=20.0)
    ap.add_argument("--max-window", type=float, default=180.0)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--coverage-concurrency", type=int, default=1)
    ap.add_argument("--coverage-requests", type=int, default=24)
    ap.add_argument("--coverage-window", type=float, default=40.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    env = dict(os.environ)
    env.update(ProfileStore(user_dirs=[]).load(args.profile).env)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-spec-") as d:
        tmp = Path(d)
        res = {"robust": stage_robust, "e2e": stage_e2e, "coverage": stage_coverage}[args.stage](
            args, env, tmp
        )
    name = "spec-coverage-sim.json" if args.stage == "coverage" else f"spec-{args.stage}-sim.json"
    path = args.out or RESULTS / name
    res.update({
        "benchmark": f"bench_spec.py --stage {args.stage}", "simulated": True,
        "profile": args.profile, "tp_size": args.tp_size, "steps": args.steps,
        "output_len": args.output_len, "wall_s": round(time.monotonic() - t0, 1),
        "host": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })  # fmt: skip
    path.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {path} ({res['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
