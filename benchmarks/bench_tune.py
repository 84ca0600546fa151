"""`fastverifyctl tune`'s decision beside an exhaustive real-weights sweep of every shipped
profile in both modes, on the same sim daemon, in one run ->
benchmarks/results/tune-vs-exhaustive-sim.json.

    python benchmarks/bench_tune.py [--duration 1] [--repeats 2]

The daemon is the sim at TP 8 (the field's 8-GPU PCIe host it simulates; a SIMULATION);
tune runs with `--accept-length 2.0` and the short measurement windows of the suite's tune
test; then `sweep PROFILES --then-eagle3 N` measures every profile in both modes with the
same windows. Figures: the decision's tok/s in the sweep / the sweep's best (goal >= 0.97),
and each profile's EAGLE-3 / baseline beside the cost model's. On a busy machine the sim's
EAGLE-3 reads lower than its baseline (docs/guides/testing.md): the machine's load average is
recorded with the figures. Figures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from fastverify.profiles.effective import effective_env  # noqa: E402
from fastverify.profiles.store import ProfileStore  # noqa: E402
from fastverify.sim import allreduce_sim  # noqa: E402
from tests.support.harness import DaemonHarness  # noqa: E402

PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.env"))
TP = 8


def predicted(profile: str, mode: str, accept: float) -> float:
    prof = ProfileStore().load(profile)
    graphs = prof.requires.get("cuda-graph", "on") != "off"
    p = allreduce_sim.served_prediction(effective_env(prof), mode, TP, 1, graphs, accept)
    return 0.0 if p.error else p.tokens_per_second


def run(args: argparse.Namespace) -> dict[str, Any]:
    measure = ["--repeats", str(args.repeats), "--duration", str(args.duration),
               "--output-len", "48", "--input-len", "16"]  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="bench-tune-"))
    load = {"before": os.getloadavg()[0]}
    with DaemonHarness(tmp, tp_size=TP, sim_load_seconds=2.0,
                       config={"daemon": {"trace_period_s": 0}}) as d:  # fmt: skip
        t0 = time.monotonic()
        tune = d.ctl("tune", "--accept-length", "2.0", "--json", *measure,
                     "--output", str(tmp / "tune"), timeout=1800)  # fmt: skip
        tune_s = time.monotonic() - t0
        if tune.returncode != 0:
            raise SystemExit(f"tune failed ({tune.returncode}): {tune.stderr[-2000:]}")
        decision = json.loads(tune.stdout)["decision"]
        load["after_tune"] = os.getloadavg()[0]
        t0 = time.monotonic()
        sweep = d.ctl("sweep", *PROFILES, "--then-eagle3", str(len(PROFILES)), *measure,
                      "--output", str(tmp / "sweep"), "--no-plot", "--json",
                      timeout=3600)  # fmt: skip
        sweep_s = time.monotonic() - t0
        load["after_sweep"] = os.getloadavg()[0]
    rows = [r for r in json.loads(sweep.stdout)["results"] if r["status"] == "ok"]
    tps = {(r["profile"], r["mode"]): r["tokens_per_second_mean"] for r in rows}
    best = max(tps, key=tps.__getitem__)
    mine = tps.get((decision["profile"], decision["mode"]))
    per_profile = {
        p: {
            "eagle3_over_baseline": round(tps[(p, "eagle3")] / tps[(p, "baseline")], 4),
            "model": round(predicted(p, "eagle3", 2.0) / predicted(p, "baseline", 2.0), 4),
        }
        for p in PROFILES
        if (p, "eagle3") in tps and (p, "baseline") in tps
    }
    return {
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "simulated": True,
        "measure": measure,
        "decision": {k: decision[k] for k in ("profile", "mode", "backend", "applied")},
        "decision_tokens_per_second": mine,
        "exhaustive_best": {"profile": best[0], "mode": best[1], "tokens_per_second": tps[best]},
        "decision_over_best": round(mine / tps[best], 4) if mine else None,
        "goal": 0.97,
        "per_profile": per_profile,
        "wall_s": {"tune": round(tune_s, 1), "sweep": round(sweep_s, 1)},
        "loadavg_1m": {k: round(v, 2) for k, v in load.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--output", type=Path,
                    default=BENCH / "results" / "tune-vs-exhaustive-sim.json")  # fmt: skip
    args = ap.parse_args()
    res = run(args)
    args.output.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: res[k] for k in ("decision", "exhaustive_best", "decision_over_best",
                                          "loadavg_1m")}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
