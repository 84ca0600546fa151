"""AIConfigurator's decode-step prediction for the field's model (Kimi-K2.5) on its default
per-SKU databases and on this host's export, beside fastverify's own figure and the sim's
served value, in one run -> benchmarks/results/aiconfigurator-compare.json.

    python benchmarks/bench_aiconfigurator.py [--sim-seconds 8]

- AIConfigurator 0.12.0 (scripts/aiconfigurator-venv.sh), static generation, one sequence,
  1024 tokens of context, backend sglang: TP 2 on rtx_pro_6000_server, h200_sxm (its
  defaults) and on the 2 x H200 exports (NVLink, P2P off: the committed preflight reports,
  fastverify.experiments.aiconfigurator.export); TP 8 on rtx_pro_6000_server (the SKU of
  the field's 8-GPU PCIe host);
- fastverify's own: `rehearse` of Kimi-K2.5 at TP 2 on 2 x H200 (rehearse-2gpu.json:
  decode step, its all-reduce time), and the sim's cost-model prediction;
- the sim's served value: a sim daemon at TP 2 and TP 8 (the field's host it simulates),
  `fastverifyctl bench -c 1` on nccl-default and p2p-off: ms per generated token.
Figures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
sys.path.insert(0, str(REPO))
KIMI = {"model": "moonshotai/Kimi-K2.5", "batch_size": 1, "isl": 1024}


def _aic_python() -> str:
    proc = subprocess.run([str(REPO / "scripts" / "aiconfigurator-venv.sh")], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return proc.stdout.strip().splitlines()[-1]


def _aic(aic: str, systems: Path, request: dict) -> dict:
    req = systems.parent / "request.json"
    req.write_text(json.dumps({"systems_paths": [str(systems), "default"], **request}))
    proc = subprocess.run(
        [aic, str(REPO / "benchmarks" / "aiconfigurator_compare.py"), str(req)],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    return json.loads(proc.stdout)


def _sim(tmp: Path, tp: int, seconds: float) -> list[dict[str, Any]]:
    from tests.support.harness import DaemonHarness

    out = []
    with DaemonHarness(tmp / f"sim-tp{tp}", tp_size=tp, config={"daemon": {"trace_period_s": 0}},
                       sim_load_seconds=0.3) as d:  # fmt: skip
        for profile in ("nccl-default", "p2p-off"):
            r = d.ctl("profile", "set", profile, timeout=120)
            if r.returncode != 0:
                raise SystemExit(f"profile set {profile}: {r.stderr}")
            r = d.ctl("bench", "-c", "1", "-d", str(seconds), "--input-len", "128",
                      "--output-len", "64", "--json", timeout=600)  # fmt: skip
            res = json.loads(r.stdout)
            itl = (res.get("itl_ms") or {}).get("mean")
            out.append(
                {
                    "tp": tp,
                    "profile": profile,
                    "ms_per_token": itl,  # the served decode step: inter-token latency
                    "per_request_tokens_per_second": res.get("per_request_tokens_per_second"),
                    "completed": res.get("completed"),
                }
            )
    return out


def _sim_prediction(tp: int) -> list[dict[str, Any]]:
    from fastverify.profiles.effective import effective_env
    from fastverify.profiles.store import ProfileStore
    from fastverify.sim import allreduce_sim

    out = []
    for profile in ("nccl-default", "p2p-off"):
        prof = ProfileStore().load(profile)
        p = allreduce_sim.served_prediction(effective_env(prof), "baseline", tp, 1, True, None)
        tps = p.tokens_per_second
        out.append({"tp": tp, "profile": profile, "tokens_per_second": tps,
                    "ms_per_token": 1000.0 / tps if tps else None})  # fmt: skip
    return out


def main() -> int:
    from fastverify.experiments.aiconfigurator.system import export

    ap = argparse.ArgumentParser()
    ap.add_argument("--sim-seconds", type=float, default=8.0)
    args = ap.parse_args()
    t0 = time.monotonic()
    aic = _aic_python()
    tmp = Path(tempfile.mkdtemp(prefix="fv-aic-"))
    systems = tmp / "systems"
    written = {}
    for path in ("nvlink", "p2poff"):
        written[path] = export(RESULTS / f"preflight-h200x2-2gpu-{path}.json", f"h200x2_{path}",
                               systems, aic, "h200_sxm", "nccl-default")  # fmt: skip
    names = ("rtx_pro_6000_server", "h200_sxm", "h200x2_nvlink", "h200x2_p2poff")
    tp2 = [{**KIMI, "tp_size": 2, "moe_tp_size": 2, "system": s} for s in names]
    tp8 = [{**KIMI, "tp_size": 8, "moe_tp_size": 8, "system": "rtx_pro_6000_server"}]
    predicted = _aic(aic, systems, {"estimates": tp2 + tp8})
    rehearse = json.loads((RESULTS / "rehearse-2gpu.json").read_text())
    own = [
        {"profile": p["profile"], "path": p["path"], "decode_ms": p["decode_ms"],
         "allreduce_ms_per_forward": p["allreduce_ms_per_verify"],
         "exposed_comm_ms": p["exposed_comm_ms"], "compute_ms_verify": p["compute_ms"]}
        for p in rehearse["profiles"] if p["profile"] == "nccl-default"
    ]  # fmt: skip
    sim = _sim(tmp, 2, args.sim_seconds) + _sim(tmp, 8, args.sim_seconds)
    doc = {
        "what": "decode step (ms per token, one sequence) of Kimi-K2.5: AIConfigurator on its "
        "default databases and on this host's export, fastverify's rehearse, the sim",
        "aiconfigurator": predicted["aiconfigurator"],
        "export": written,
        "aiconfigurator_estimates": predicted["estimates"],
        "fastverify_rehearse_2xh200": {
            "source": "benchmarks/results/rehearse-2gpu.json",
            "approximations": rehearse["approximations"],
            "rows": own,
        },
        "sim_prediction": _sim_prediction(2) + _sim_prediction(8),
        "sim_served": sim,
        "wall_s": round(time.monotonic() - t0, 1),
        "commands": [
            "scripts/aiconfigurator-venv.sh",
            "fastverifyctl aiconfigurator export "
            "benchmarks/results/preflight-h200x2-2gpu-nvlink.json --name h200x2_nvlink --out "
            "SYSTEMS --python AIC_PYTHON  (and -p2poff)",
            "aiconfigurator cli estimate --systems-paths SYSTEMS,default --model-path "
            "moonshotai/Kimi-K2.5 --system SYSTEM --backend sglang --tp-size 2 --moe-tp-size 2 "
            "--batch-size 1 --isl 1024 --osl 2 --estimate-mode static_gen",
            "python benchmarks/bench_aiconfigurator.py",
        ],
    }
    out = RESULTS / "aiconfigurator-compare.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
