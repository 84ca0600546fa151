"""`fastverifyctl spec costs` on the sim, side by side with the sim's published cost table.

One fastverifyd on the sim (`--profile`, `--tp-size`, EAGLE-3 at `--sim-accept-length` with
real weights): a real-weights bench records the acceptance, then the real CLI runs
`spec costs` (trials on dummy weights: the baseline decode, the steps-0 pass and steps
1..`--max-steps` x `--batch-sizes`, bench windows of `--duration` s) and writes a cost file.
In the same run the engine's published table (`sim.cost_model` of its server info: the sim's
cost model, what `spec plan` uses without --costs) is read from the restored server, and
the plan is made from each.

Figures (no asserts): the measured cycle / the table's cycle per (batch, steps), the
measured verify pass, the trials' wall time (loads, windows, traces), and the plan's steps
per tier from each source. The sim is a SIMULATION: these are its cost model's numbers and
how well a bench window reads them back on this machine, never a GPU's.

    python benchmarks/bench_spec_costs.py --profile ring-ll --tp-size 8

Writes benchmarks/results/spec-costs-sim.json (and the cost file beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="ring-ll")
    ap.add_argument("--tp-size", type=int, default=8)
    ap.add_argument("--sim-accept-length", type=float, default=2.0)
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--batch-sizes", default="1,2,4,8,16")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--input-len", type=int, default=16)
    ap.add_argument("--out", default=str(RESULTS / "spec-costs-sim.json"))
    args = ap.parse_args()

    out = Path(args.out)
    cost_file = out.with_name(out.stem + "-costs.json")
    config = {
        "server": {"mode": "eagle3",
                   "extra_args": ["--sim-accept-length", str(args.sim_accept_length)]},
        "daemon": {"trace_period_s": 0, "default_profile": args.profile},
    }  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="bench-spec-costs-"))
    try:
        report, table, plans, status, wall, cmd = _measure(args, tmp, config, cost_file)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _write(args, out, cost_file, report, table, plans, status, wall, cmd)


def _measure(args: Any, tmp: Path, config: dict, cost_file: Path) -> tuple:
    from fastverify.sglang import client as engine_client
    from fastverify.speculation import costs as spec_costs
    from tests.support.harness import DaemonHarness

    with DaemonHarness(tmp, config=config, tp_size=args.tp_size) as d:
        r = d.ctl("bench", "-n", "16", "-c", "4", "--output-len", "64", "--warmup", "0",
                  "--dataset", "fastverify-docs")  # fmt: skip
        if r.returncode != 0:
            raise SystemExit(f"acceptance bench failed: {r.stderr}")
        cmd = ["spec", "costs", "--max-steps", str(args.max_steps), "--batch-sizes",
               args.batch_sizes, "-d", str(args.duration), "--input-len",
               str(args.input_len), "--output-len", str(args.output_len),
               "--output", str(cost_file), "--json"]  # fmt: skip
        t0 = time.monotonic()
        r = d.ctl(*cmd, timeout=3600)
        wall = time.monotonic() - t0
        if r.returncode != 0:
            raise SystemExit(f"spec costs failed ({r.returncode}): {r.stderr[-3000:]}")
        report = json.loads(r.stdout)
        info = engine_client.server_info(d.server_url, timeout=10.0)
        table = spec_costs.from_engine_info(info)
        plans = {}
        top = str(max(int(b) for b in args.batch_sizes.split(",")))
        for name, extra in (
            ("engine table", []),
            ("engine trials", ["--costs", str(cost_file)]),
        ):
            p = d.ctl("spec", "plan", "--max-batch", top, "--concurrency", "1", *extra, "--json")
            if p.returncode != 0:
                raise SystemExit(f"spec plan ({name}) failed: {p.stderr}")
            plan = json.loads(p.stdout)
            per = {b: v for t in plan["tiers"].values() for b, v in t["per_batch_size"].items()}
            plans[name] = {
                "source": plan["costs"]["source"],
                "steps": {b: t["config"]["candidate_steps"] for b, t in plan["tiers"].items()},
                "speedup": {b: v["speedup"] for b, v in per.items()},
            }
        status = d.status()
    return report, table, plans, status, wall, cmd


def _write(
    args: Any, out: Path, cost_file: Path, report: dict, table: Any, plans: dict,
    status: dict, wall: float, cmd: list[str],
) -> int:  # fmt: skip
    rows = []
    cells = [(bs, k, ms) for bs, row in report["cycle_ms"].items() for k, ms in row.items()]
    cells += [(bs, "baseline", ms) for bs, ms in report["baseline_ms"].items()]
    for bs, k, ms in sorted(cells, key=lambda c: (int(c[0]), str(c[1]))):
        published = (table.decode(int(bs)) if k == "baseline"
                     else table.cycle(int(bs), int(k))) * 1e3  # fmt: skip
        rows.append({
            "batch_size": int(bs), "steps": k if k == "baseline" else int(k),
            "measured_cycle_ms": ms,
            "table_cycle_ms": round(published, 4),
            "measured_over_table": round(ms / published, 4),
            "verify_ms": (report.get("verify_ms") or {}).get(bs, {}).get(k),
        })  # fmt: skip
    ratios = [r["measured_over_table"] for r in rows]
    result = {
        "what": "spec costs (engine trials on dummy weights) vs the sim's published cost table",
        "simulation": True,
        "profile": args.profile,
        "tp_size": args.tp_size,
        "sim_accept_length": args.sim_accept_length,
        "command": "fastverifyctl " + " ".join(cmd),
        "rows": rows,
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ratio_median": sorted(ratios)[len(ratios) // 2],
        "trials_wall_s": round(wall, 1),
        "load_s": report.get("load_s"),
        "plans": plans,
        "plans_agree": plans["engine table"]["steps"]
        == {
            b: s
            for b, s in plans["engine trials"]["steps"].items()
            if b in plans["engine table"]["steps"]
        },
        "restored": {k: status.get(k) for k in ("profile", "mode", "trial", "state")},
        "cost_file": str(cost_file.relative_to(REPO))
        if cost_file.is_relative_to(REPO)
        else str(cost_file),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'batch':>5} {'steps':>5} {'measured':>10} {'table':>10} {'ratio':>6} {'verify':>8}")
    for r in rows:
        v = "-" if r["verify_ms"] is None else f"{r['verify_ms']:.2f}"
        print(f"{r['batch_size']:>5} {r['steps']:>5} {r['measured_cycle_ms']:>10.2f} "
              f"{r['table_cycle_ms']:>10.2f} {r['measured_over_table']:>6.3f} {v:>8}")  # fmt: skip
    for name, p in plans.items():
        print(f"plan from {name}: steps {p['steps']}")
    print(f"trials took {wall:.1f} s; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
