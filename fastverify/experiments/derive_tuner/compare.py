"""Evidence for a derived tuner: tuned profile vs the fixed profiles, in-graph per-op time.

    python -m fastverify.experiments.derive_tuner.compare --path nvlink --out result.json \
        [--env NCCL_P2P_DISABLE=1] [--profiles nccl-default,ring-ll,...] [--logs DIR]

1. derives a table over `nccl-default` (+ --env) with `derive_tuner.derive`;
2. runs the measure-only worker (candidate `default`: whatever NCCL does in that
   environment, as a server would run) for every fixed profile and for the tuned profile
   (nccl-default + the plugin + the table), each in `--groups` fresh process groups
   (default 3) started in interleaved order (all profiles once, then all again, ...), with
   the profile's effective environment (+ --env), at the same sizes plus off-grid sizes
   between the derivation's points, so the table's ranges are tested, not only its
   measured points. Two process groups of one profile can differ by ~10% at small sizes
   over NVLink (seen on 2 x H200), so a profile's value is the median over its groups;
3. writes `{"world_size", "path", "rows": [{bytes, tuned_us, best_fixed_us,
   best_fixed_profile, tuned_choice, ratio, <profile>_us...}], "goal": {...}}`.

`tuned_choice` is what NCCL really did in the tuned run (its TUNING lines); ratios are
tuned / best fixed. Everything comes from one invocation (one machine state).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

from fastverify.experiments.derive_tuner import derive as dt

FIXED = ("nccl-default", "ring-ll", "ring-simple", "tree-ll", "ring-ll-8ch")
TOKENS = (1, 2, 3, 4, 8, 12, 16, 32, 48, 64, 128, 256, 512, 768, 1024, 2048, 4096, 8192)


def _tuning_by_size(text: str) -> dict[int, str]:
    from fastverify.experiments.preflight.merge import parse_nccl_log

    return {n: f"{c['algo']}/{c['proto']}" for n, c in parse_nccl_log(text)["tuning"].items()}


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def measure(
    name: str, env: dict[str, str], cfg: dt.DeriveConfig, sizes: list[int], workdir: Path
) -> dict[str, Any]:
    run = dt.run_ranks(env, cfg, sizes, ["default"], workdir, name)
    log0 = _read(Path(run["logs"][0])) if run["logs"] else ""
    choices = _tuning_by_size(log0)
    out: dict[str, Any] = {"wall_s": run["wall_s"], "sizes": {}}
    for row in run["sizes"]:
        c = row["candidates"].get("default", {})
        us = median(c["rounds_us"]) if c.get("rounds_us") else None
        out["sizes"][row["bytes"]] = {
            "us": us,
            "correct": c.get("correct"),
            "choice": choices.get(row["bytes"]),
            "spread": dt._spread(c.get("rounds_us") or []),
        }
    return out


def combine_groups(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """One profile's value per size from its process groups: the median of the groups'
    medians; every group's value is kept (`groups_us`) so the spread can be read."""
    out: dict[str, Any] = {"wall_s": sum(g["wall_s"] for g in groups), "sizes": {}}
    for b in groups[0]["sizes"]:
        rows = [g["sizes"][b] for g in groups if b in g["sizes"]]
        values = [r["us"] for r in rows if r["us"] is not None]
        out["sizes"][b] = {
            "us": median(values) if values else None,
            "groups_us": [r["us"] for r in rows],
            "correct": all(r.get("correct") for r in rows),
            "choice": rows[0].get("choice"),
            "spread": dt._spread(values),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from fastverify.experiments.preflight.inputs import load_profiles
    from fastverify.profiles.effective import effective_env
    from fastverify.tuner.loaded import check_tuner_loaded
    from fastverify.tuner.plugin import find_plugin

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True, help="label of the link path (nvlink, p2p-off)")
    p.add_argument("--out", required=True)
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for every run")
    p.add_argument(
        "--base-env",
        action="append",
        default=[],
        help="NAME=VALUE for the tuned profile's base only (knobs the tuner ABI cannot set, "
        "e.g. NCCL_NTHREADS); the fixed profiles stay as shipped",
    )
    p.add_argument("--profiles", default=",".join(FIXED))
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--groups",
        type=int,
        default=3,
        help="fresh process groups per profile, started interleaved; medians compared",
    )
    p.add_argument("--logs", default="")
    p.add_argument("--backend", default="nccl", help="gloo: a CPU dry run of the script")
    p.add_argument("--fake-costs", default="", help="gloo only")
    p.add_argument("--tokens", default="", help="derivation sizes as token counts")
    args = p.parse_args(argv)
    extra = dict(e.split("=", 1) for e in args.env)
    base_extra = dict(e.split("=", 1) for e in args.base_env)
    plugin = find_plugin()
    if plugin is None:
        print("no plugin built", file=sys.stderr)
        return 2
    workdir = Path(args.logs or tempfile.mkdtemp(prefix="tuner-compare-"))
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    base = load_profiles(["nccl-default"])[0]
    kw: dict[str, Any] = {}
    if args.tokens:
        kw["sizes"] = dt.sizes_from_tokens([int(t) for t in args.tokens.split(",")])
    cfg = dt.DeriveConfig(
        world=args.nproc,
        rounds=args.rounds,
        workdir=str(workdir / "derive"),
        backend=args.backend,
        fake_costs=args.fake_costs,
        **kw,
    )
    env0 = effective_env(base, extra={**extra, **base_extra})
    report = dt.derive(env0, cfg, plugin, on_event=lambda m: print(m, flush=True))
    table, _profile = dt.write_outputs(report, "tuned", workdir, "nccl-default")
    print(table.read_text(), flush=True)
    derive_s = time.perf_counter() - t0

    sizes = sorted(set(dt.sizes_from_tokens(TOKENS)) | set(cfg.sizes))
    if args.tokens:
        sizes = sorted(cfg.sizes)
    envs = {
        prof.name: dt.base_env(effective_env(prof, extra=extra), None, None)
        for prof in load_profiles([s for s in args.profiles.split(",") if s])
    }
    envs["tuned"] = dt.base_env(env0, plugin, table)
    groups: dict[str, list[dict[str, Any]]] = {name: [] for name in envs}
    for g in range(max(1, args.groups)):
        for name, env in envs.items():
            groups[name].append(measure(f"{name}.g{g}", env, cfg, sizes, workdir))
            print(f"{name} group {g + 1}/{args.groups}: {groups[name][-1]['wall_s']:.1f} s",
                  flush=True)  # fmt: skip
    runs = {name: combine_groups(gs) for name, gs in groups.items()}
    tuned_logs = [_read(workdir / f"tuned.g0.rank{r}.nccl.log") for r in range(args.nproc)]
    loaded = check_tuner_loaded(tuned_logs)

    rows = []
    for b in sizes:
        fixed = {n: r["sizes"][b] for n, r in runs.items() if n != "tuned" and b in r["sizes"]}
        ok_fixed = {n: v["us"] for n, v in fixed.items() if v["us"] is not None}
        t = runs["tuned"]["sizes"].get(b, {})
        best = min(ok_fixed, key=lambda k: ok_fixed[k]) if ok_fixed else None
        row: dict[str, Any] = {
            "bytes": b,
            "tokens": b // (dt.HIDDEN * 2) if b % (dt.HIDDEN * 2) == 0 else None,
            "in_derivation": b in cfg.sizes,
            "tuned_us": t.get("us"),
            "best_fixed_us": ok_fixed.get(best) if best else None,
            "best_fixed_profile": best,
            "tuned_choice": t.get("choice"),
            "tuned_correct": t.get("correct"),
            "tuned_groups_us": t.get("groups_us"),
        }
        if row["tuned_us"] and row["best_fixed_us"]:
            row["ratio"] = row["tuned_us"] / row["best_fixed_us"]
        for n, v in fixed.items():
            row[f"{n}_us"] = v["us"]
            row[f"{n}_groups_us"] = v["groups_us"]
            row[f"{n}_choice"] = v["choice"]
        rows.append(row)
    ratios = [r["ratio"] for r in rows if r.get("ratio")]

    def beats(name: str, margin: float = 1.0) -> list[int]:
        return [r["bytes"] for r in rows if r.get(f"{name}_us") and r["tuned_us"]
                and r["tuned_us"] * margin < r[f"{name}_us"]]  # fmt: skip

    doc = {
        "world_size": args.nproc,
        "groups_per_profile": max(1, args.groups),
        "path": args.path,
        "env": extra,
        "tuned_base": {"profile": "nccl-default", "extra_env": base_extra},
        "gpu": report["head"].get("gpu"),
        "nccl_version": report["head"].get("nccl_version"),
        "torch": report["head"].get("torch"),
        "method": (
            "in-graph per-op time: N all-reduces (bf16) captured in one CUDA graph, replayed; "
            "per round the median replay / N, slowest rank; a group's value = median of "
            "rounds; a profile's value = median over its process groups, which were started "
            "interleaved with the other profiles' in this one invocation."
        ),
        "table": table.read_text(),
        "derivation": {
            "wall_s": derive_s,
            "measure_wall_s": report["measure_wall_s"],
            "decisions": report["decisions"],
        },
        "tuner_loaded": loaded.to_dict(),
        "rows": rows,
        "goal": {
            "max_ratio": max(ratios) if ratios else None,
            "sizes_over_1.05": [r["bytes"] for r in rows if r.get("ratio", 0) > 1.05],
            "faster_than_ring_ll_at": beats("ring-ll"),
            "faster_than_nccl_default_at": beats("nccl-default"),
            "faster_than_ring_ll_by_5pct_at": beats("ring-ll", 1.05),
            "faster_than_nccl_default_by_5pct_at": beats("nccl-default", 1.05),
        },
        "wall_s": time.perf_counter() - t0,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc["goal"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
