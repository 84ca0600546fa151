"""Speculation shaped to the host, on the sim: one real-weights load -> the plan -> a two-phase
load served by baseline, fixed EAGLE-3 and adaptive, side by side in one run.

1. One EAGLE-3 load at `--steps` K with `--accept-length` L (the sim's real-weights stand-in):
   bench sums the per-request `spec_correct_drafts_histogram` -> the accept curve L(k), k<=K,
   compared with the sim's ground truth (its chain's L(k)). The engine's own cost table
   (server info) is read from the same server: the plan spends this one load, nothing else.
2. `fastverify.speculation.plan` -> steps per batch-size tier and SGLang's adaptive config.
3. Three servers in turn (same profile, TP, acceptance): baseline, EAGLE-3 at K steps, and
   adaptive (`--speculative-adaptive --speculative-adaptive-config PLAN`, launched at the
   plan's largest step count). Each serves phase 1 (1 concurrent request) then phase 2
   (`--concurrency2` concurrent requests), `--phase-seconds` each, closed loop.
Figures (no asserts): output tok/s per phase and mode, adaptive / the better fixed mode per
phase, and over both phases (tokens / seconds) adaptive / each fixed mode. The sim is a
SIMULATION: these are its cost model's numbers, never a GPU's.

    python benchmarks/bench_spec.py --profile ring-ll --tp-size 8 --accept-length 2.0
    python benchmarks/bench_spec.py --search     # plans over profiles x accept lengths, no load

`--search` plans from the sim's cost table and the chain's expected histogram (no server)
for every shipped profile that serves with CUDA graphs, accept lengths 1.5-3.9 at `--steps`,
and lists where speculation pays at batch 1 but not at the largest tier.
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
from fastverify.speculation.curve import AcceptCurve  # noqa: E402

EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


@contextlib.contextmanager
def sim(env: dict[str, str], tp: int, extra: list[str], log: Path) -> Iterator[str]:
    port = free_port()
    fh = open(log, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastverify.engines.sim", "--model-path", "sim/kimi",
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


def phase(url: str, concurrency: int, seconds: float, output_len: int) -> dict[str, Any]:
    cfg = BenchConfig(url=url, concurrency=concurrency, duration=seconds, requests=None,
                      output_len=output_len, warmup=1)  # fmt: skip
    r = run_bench(cfg)
    return {"concurrency": concurrency, "seconds": r.duration_s, "tokens": r.output_tokens,
            "tokens_per_second": r.output_tokens_per_second,
            "per_request_tokens_per_second": r.per_request_tokens_per_second}  # fmt: skip


def search(args: argparse.Namespace) -> dict[str, Any]:
    from fastverify.engines.sim import allreduce_sim, costmodel
    from fastverify.engines.sim.costtable import engine_costs
    from fastverify.speculation.curve import chain_histogram

    sizes = [int(b) for b in args.batch_sizes.split(",")]
    rows, hits = [], []
    for profile in ProfileStore(user_dirs=[]).list():
        env = dict(profile.env)
        if costmodel.predict(env, "baseline", args.tp_size, 1, True).error:
            continue  # cannot serve with CUDA graphs (tree-ll)
        bound = allreduce_sim.served_bound(env, args.tp_size, ())  # PCIe-IPC as served
        costs = engine_costs(env, tp_size=args.tp_size, batch_sizes=sizes, max_steps=args.steps,
                             pcie_ipc_max_bytes=bound)  # fmt: skip
        for length in (1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 3.9):
            curve = AcceptCurve.from_histogram(chain_histogram(length, args.steps, 100_000))
            tiers = spec_plan.make_plan(curve, costs, sizes).tiers
            row = {"profile": profile.name, "accept_length": length,
                   "steps": {str(b): t.steps for b, t in tiers.items()},
                   "speedup": {str(b): round(t.speedup, 3) for b, t in tiers.items()}}  # fmt: skip
            rows.append(row)
            if tiers[sizes[0]].steps > 0 and tiers[sizes[-1]].steps == 0:
                hits.append({"profile": profile.name, "accept_length": length})
    return {"benchmark": "bench_spec --search", "simulated": True, "tp_size": args.tp_size,
            "steps": args.steps, "batch_sizes": sizes, "plans": rows,
            "pays_at_smallest_not_at_largest": hits}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="ring-ll")
    ap.add_argument("--tp-size", type=int, default=8)
    ap.add_argument("--accept-length", type=float, default=2.0)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--phase-seconds", type=float, default=20.0)
    ap.add_argument("--concurrency2", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=200)
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--plan-only", action="store_true", help="stop after the plan")
    ap.add_argument("--search", action="store_true", help="plans only, no server (see above)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.search:
        res = search(args)
        path = args.out or REPO / "benchmarks" / "results" / f"spec-search-tp{args.tp_size}.json"
        path.write_text(json.dumps(res, indent=2) + "\n")
        for r in res["plans"]:
            print(f"{r['profile']:>14} L={r['accept_length']}: steps by batch {r['steps']}")
        hits = res["pays_at_smallest_not_at_largest"]
        print(f"pays at the smallest tier, not at the largest: {hits}")
        print(f"wrote {path}")
        return 0
    profile = ProfileStore(user_dirs=[]).load(args.profile)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(profile.env)
    env["PYTHONPATH"] = str(REPO)
    work = Path(tempfile.mkdtemp(prefix="fv-bench-spec-"))
    accept = ["--sim-accept-length", str(args.accept_length)]
    fixed = [*EAGLE, "--speculative-num-steps", str(args.steps), "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", str(args.steps + 1)]  # fmt: skip

    # 1. one real-weights load: the histogram, the engine's costs, the sim's ground truth
    t0 = time.monotonic()
    with sim(env, args.tp_size, [*fixed, *accept], work / "measure.log") as url:
        r = run_bench(BenchConfig(url=url, concurrency=8, duration=None, requests=32,
                                  output_len=args.output_len, warmup=0))  # fmt: skip
        info = get_json(url + "/server_info")
    measure_s = time.monotonic() - t0
    assert r.accept_histogram is not None
    curve = AcceptCurve.from_histogram(r.accept_histogram, args.steps)
    truth = info["sim"]["acceptance"]["accept_length_by_steps"]
    curve_err = {k: curve.length(int(k)) / truth[k] - 1 for k in curve.curve()}
    costs = spec_costs.from_engine_info(info)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    plan = spec_plan.make_plan(curve, costs, sizes)
    cfg_path = work / "adaptive-config.json"
    spec_plan.write_adaptive_config(plan, cfg_path)
    out: dict[str, Any] = {
        "benchmark": "bench_spec",
        "simulated": True,
        "profile": args.profile,
        "tp_size": args.tp_size,
        "accept_length_at_steps": {"steps": args.steps, "accept_length": args.accept_length},
        "real_weights_loads": 1,
        "measure_seconds": round(measure_s, 2),
        "accept_histogram": r.accept_histogram,
        "accept_curve": curve.curve(),
        "ground_truth_curve": {k: round(v, 4) for k, v in truth.items() if int(k) <= args.steps},
        "curve_relative_error": {k: round(v, 5) for k, v in curve_err.items()},
        "plan": plan.to_dict(),
        "adaptive_config": json.loads(cfg_path.read_text()),
    }
    print(json.dumps({k: out[k] for k in ("accept_curve", "curve_relative_error")}))
    for bs, t in plan.to_dict()["tiers"].items():
        print(f"batch {bs:>3}: steps {t['steps']}  speedup {t['speedup']:.3f}  "
              f"[{t['ci'][0]:.3f}, {t['ci'][1]:.3f}]  {t['what_would_change']}")  # fmt: skip
    if not args.plan_only:
        if plan.largest_steps < 1:
            out["two_phase"] = "skipped: the plan drafts at no batch size (adaptive = baseline)"
        else:
            modes = {
                "baseline": [],
                f"eagle3-{args.steps}": [*fixed, *accept],
                "adaptive": [*EAGLE, adaptive.FLAG_ADAPTIVE, adaptive.FLAG_ADAPTIVE_CONFIG,
                             str(cfg_path), "--speculative-num-steps", str(plan.largest_steps),
                             "--sim-accept-steps", str(args.steps), *accept],
            }  # fmt: skip
            runs: dict[str, Any] = {}
            for name, extra in modes.items():
                with sim(env, args.tp_size, extra, work / f"{name}.log") as url:
                    p1 = phase(url, 1, args.phase_seconds, args.output_len)
                    p2 = phase(url, args.concurrency2, args.phase_seconds, args.output_len)
                tok = p1["tokens"] + p2["tokens"]
                secs = p1["seconds"] + p2["seconds"]
                runs[name] = {"phase1": p1, "phase2": p2, "overall_tokens_per_second": tok / secs}
                t1, t2 = p1["tokens_per_second"], p2["tokens_per_second"]
                print(f"{name:>10}: phase 1 {t1:.1f} tok/s, phase 2 {t2:.1f} tok/s, "
                      f"both {tok / secs:.1f} tok/s")  # fmt: skip
            fixed_names = [n for n in runs if n != "adaptive"]
            a = runs["adaptive"]
            ratios = {}
            for ph in ("phase1", "phase2"):
                best = max(fixed_names, key=lambda n: runs[n][ph]["tokens_per_second"])
                ratio = a[ph]["tokens_per_second"] / runs[best][ph]["tokens_per_second"]
                ratios[ph] = {"better_fixed": best, "adaptive_over_better_fixed": round(ratio, 4)}
            ratios["overall"] = {
                n: round(a["overall_tokens_per_second"] / runs[n]["overall_tokens_per_second"], 4)
                for n in fixed_names
            }
            out["two_phase"] = {"phase_seconds": args.phase_seconds,
                                "concurrency": [1, args.concurrency2], "runs": runs,
                                "ratios": ratios}  # fmt: skip
            print(json.dumps(ratios))
    path = args.out or REPO / "benchmarks" / "results" / "spec.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
