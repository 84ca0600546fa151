"""The figures of `frontdoor_sglang.py` runs (one per front-door mode) side by side, each
beside its goal: what clients saw through the switches, each switch's own record, both
engines' GPU memory at the overlap and SGLang's own counters.

    python benchmarks/gpu/frontdoor_report.py DIR [--out benchmarks/results/FILE.json]

DIR holds the calls' `results-frontdoor-MODE-WEIGHTS.json` (what `real_sglang.sh frontdoor`
brings back in $OUT); modes absent from DIR are left out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

MIB = 1 << 20
GIB = 1 << 30
GOALS = {
    "failed": "hold, standby: 0",
    "cut": "hold, standby: 0",
    "standby_ttft_p99_during_over_outside": "<= 2.0",
}


def switch_row(s: dict[str, Any]) -> dict[str, Any]:
    rec = s.get("switch") or {}
    mem = s.get("gpu_memory") or {}
    peak = mem.get("overlap_peak") or mem.get("peak") or {}
    return {
        "profile": s["profile"],
        "exit": s["exit"],
        "result": s["result"],
        "wall_s": s["wall_s"],
        "mode": rec.get("mode"),
        "downtime_s": rec.get("downtime_s"),
        "held": rec.get("held"),
        "longest_wait_s": rec.get("longest_wait_s"),
        "cut": rec.get("cut"),
        "refused": rec.get("refused"),
        "why": (rec.get("standby") or {}).get("why"),
        "message": s.get("message"),
        # nvidia-smi per process at the fullest sample of the switch (both engines at the
        # overlap in standby mode; "other" is the weight cache's process)
        "gpu_used_gib": [round(m * MIB / GIB, 2) for m in peak.get("gpu_used_mib", [])],
        "gib_by_process": {
            k: round(v * MIB / GIB, 2) for k, v in (peak.get("by_process") or {}).items()
        },
        "engines_at_once": len(peak.get("engines") or []),
        "sglang_counters_old_engine": s.get("sglang_counters_old_engine"),
    }


def mode_row(r: dict[str, Any]) -> dict[str, Any]:
    fd = r["frontdoor"]
    c = fd["clients_figures"]
    during = c["during_switches"]["stream_ttft_ms"]
    outside = c["outside_switches"]["stream_ttft_ms"]
    ratio = during["p99"] / outside["p99"] if during.get("n") and outside.get("p99") else None
    return {
        "label": r["label"],
        "clients": fd["clients"],
        "requests": c["requests"],
        "ok": c["ok"],
        "failed": c["failed"],
        "cut": c["cut"],
        "refused": c["refused"],
        "stream_ttft_ms_during_switches": during,
        "stream_ttft_ms_outside_switches": outside,
        "ttft_p99_during_over_outside": None if ratio is None else round(ratio, 2),
        "longest_without_a_completed_request_s": c["longest_without_a_completed_request_s"],
        "switches": [switch_row(s) for s in fd["switches"]],
        "sglang_counters_end": fd.get("sglang_counters_end"),
        "exporter_end": fd.get("exporter"),
    }


def report(folder: Path) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for path in sorted(folder.glob("results-frontdoor-*.json")):
        r = json.loads(path.read_text())
        modes[r["frontdoor"]["mode"]] = {"file": path.name, **mode_row(r)}
    met: dict[str, Any] = {}
    for m in ("hold", "standby"):
        if m in modes:
            met[f"{m}_failed_0"] = modes[m]["failed"] == 0
            met[f"{m}_cut_0"] = modes[m]["cut"] == 0
    if "standby" in modes and modes["standby"]["ttft_p99_during_over_outside"] is not None:
        met["standby_ttft_p99_within_2x"] = modes["standby"]["ttft_p99_during_over_outside"] <= 2
    return {"goals": GOALS, "met": met, "modes": modes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    text = json.dumps(report(a.folder), indent=1) + "\n"
    if a.out:
        a.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
