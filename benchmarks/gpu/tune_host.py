"""`fastverifyctl tune` on a GPU host whose server is the sim engine: the GPU stages
(preflight, rehearse, the tuner derivation with 2+ GPUs) run for real on the host's GPUs,
the trial and confirmation on the sim (no SGLang, no checkpoint needed).

    python benchmarks/gpu/tune_host.py OUTDIR [tune options...]

Starts a fastverifyd (sim engine, TP = the visible GPUs, at least 2) in a temporary
directory, runs `fastverifyctl tune --json` with the given options, and copies the
decision document, the report and the preflight/rehearse reports into OUTDIR. The sim's
trial figures are the sim's; only the GPU stages' figures are measurements of the host.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fastverify.experiments.preflight.hostcheck import visible_gpus  # noqa: E402
from tests.support.harness import DaemonHarness  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="tune-host-"))
    tp = max(2, visible_gpus())
    with DaemonHarness(tmp, tp_size=tp, sim_load_seconds=2.0,
                       config={"daemon": {"trace_period_s": 0}}) as d:  # fmt: skip
        t0 = time.monotonic()
        proc = d.ctl("tune", "--json", "--output", str(tmp / "tune"), *sys.argv[2:],
                     timeout=3000, env={"FASTVERIFY_CONFIG": str(d.config_path)})  # fmt: skip
        wall = time.monotonic() - t0
        (out / "tune-stderr.txt").write_text(proc.stderr)
        (out / "tune-stdout.json").write_text(proc.stdout)
        print(f"tune rc={proc.returncode} wall {wall:.1f} s (TP {tp} sim, {visible_gpus()} GPU)")
        for name in ("report.md", "preflight.json", "rehearse.json", "decision.json"):
            src = tmp / "tune" / name
            if src.exists():
                shutil.copy(src, out / name)
        if proc.stdout.strip():
            res = json.loads(proc.stdout)
            for s in res["stages"]:
                print(
                    f"  {s['name']:<13} {s['status']:<8} {s['wall_s']:8.1f} s  {s['reason'] or ''}"
                )
            print("decision:", res["decision"])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
