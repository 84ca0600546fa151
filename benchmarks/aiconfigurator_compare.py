"""AIConfigurator's own predictions on its default systems and on an exported one: its
decode step (static generation: one batch, one new token per sequence, the given context)
and its configuration search, run in AIConfigurator's venv through its Python API
(`aiconfigurator.cli.api.cli_estimate`, the `aiconfigurator cli estimate` code path).

    AIC_PYTHON benchmarks/aiconfigurator_compare.py REQUEST.json

REQUEST: {"systems_paths": [DIR, "default"], "estimates": [{system, model, tp_size,
moe_tp_size, batch_size, isl, backend}], "search": {system, model, total_gpus, isl, osl}};
prints {"aiconfigurator": version, "estimates": [...{tpot_ms, ttft_ms, warning}],
"search": {..., top: the rows of its top-configurations table}}.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any


def estimate(e: dict[str, Any]) -> dict[str, Any]:
    from aiconfigurator.cli.api import cli_estimate

    res = cli_estimate(
        model_path=e["model"],
        system_name=e["system"],
        mode="static_gen",
        backend_name=e.get("backend", "sglang"),
        isl=e["isl"],
        osl=2,
        batch_size=e["batch_size"],
        tp_size=e["tp_size"],
        moe_tp_size=e.get("moe_tp_size"),
    )
    return {
        **e,
        "tpot_ms": res.tpot,
        "backend_version": res.backend_version,
        "warning": res.kv_cache_warning,
    }


def search(s: dict[str, Any]) -> dict[str, Any]:
    """`aiconfigurator cli default` (agg) on the system: how many configurations it scored
    and its best by tokens/s/gpu."""
    from aiconfigurator.main import main as aic_main

    save = Path(s["save_dir"])
    argv = ["cli", "default", "--systems-paths", ",".join(s["systems_paths"]), "--model-path",
            s["model"], "--system", s["system"], "--backend", "sglang", "--total-gpus",
            str(s["total_gpus"]), "--serving-mode", "agg", "--isl", str(s["isl"]), "--osl",
            str(s["osl"]), "--save-dir", str(save)]  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        aic_main(argv)
    top = [ln.strip() for ln in out.getvalue().splitlines()
           if ln.strip().startswith("|") and ln.split("|")[1].strip().isdigit()]  # fmt: skip
    return {**{k: v for k, v in s.items() if k != "systems_paths"}, "top": top}


def main(argv: list[str]) -> None:
    import importlib.metadata as md

    from aiconfigurator_core.sdk import perf_database

    req = json.loads(Path(argv[1]).read_text())
    perf_database.set_systems_paths(req["systems_paths"])
    out: dict[str, Any] = {"aiconfigurator": md.version("aiconfigurator"), "estimates": []}
    with contextlib.redirect_stdout(sys.stderr):
        for e in req.get("estimates", []):
            out["estimates"].append(estimate(e))
    if req.get("search"):
        out["search"] = search({**req["search"], "systems_paths": req["systems_paths"]})
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(sys.argv)
