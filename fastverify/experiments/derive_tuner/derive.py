"""`fastverifyctl preflight --derive-tuner NAME`: measure every NCCL candidate per message
size on this host's GPUs and write a tuner table + a profile that uses it.

One group of `world` rank processes (`worker.py` beside it, one per GPU) runs with the
base profile's environment (what the daemon would give the server) plus
NCCL_TUNER_PLUGIN=<the fastverify plugin>; inside it the plugin's override forces each
candidate in turn (see the worker's docstring), so no communicator is re-created and
the whole derivation costs one process start plus the measurements.

Choosing (`decide`, then `rows_from`): per size, the fastest available candidate that
passed the result check wins; NCCL's own choice (`default`) is kept whenever it is
within noise of the winner, where noise = max(`noise_floor`, the spread of the winner's
and the default's per-round medians). Sizes where NCCL is kept get no row, so NCCL
decides there. Each measured size s_i covers the bytes from the geometric midpoint with
its lower neighbour to the midpoint with its upper one (the first row starts at 0, the
last ends at the largest measured size); neighbouring rows with the same choice are
merged.

Resumable: with a work directory, each finished size is recorded in
`derive-state.json` (with a fingerprint of the settings); a later run with the same
settings measures only the sizes still missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from fastverify.durable import atomic_write_json, atomic_write_text, read_jsonl
from fastverify.experiments.common.ranks import NCCL_DEBUG_ENV, RankGroup, rank_workdir
from fastverify.tuner.table import TableRow, render

WORKER = Path(__file__).with_name("worker.py")
HIDDEN = 7168
DEFAULT_TOKENS = tuple(2**i for i in range(14))  # 1 .. 8192 tokens: 14 KB .. 117 MB (bf16)
DEFAULT_CANDIDATES = (
    "Ring/LL", "Ring/LL128", "Ring/Simple", "Tree/LL", "Tree/LL128", "Tree/Simple",
)  # fmt: skip
DEFAULT_CHANNELS = (4, 8, 16)  # Ring/Simple with these counts, at sizes >= 1 MiB
NOISE_FLOOR = 0.03
STATE_FILE = "derive-state.json"
EventFn = Callable[[str], None]
SERVER_LIKE_ENV = {"NCCL_GRAPH_REGISTER": "0"}  # what SGLang sets itself with TP > 1
PEER_GRACE_S = 2.0  # a rank died: its peers get this long to notice and report


class DeriveError(RuntimeError):
    """The derivation cannot run (no plugin, no torch, too few GPUs, ranks failed)."""


@dataclass(frozen=True)
class DeriveConfig:
    world: int = 2
    nnodes: int = 1
    sizes: tuple[int, ...] = tuple(HIDDEN * t * 2 for t in DEFAULT_TOKENS)
    candidates: tuple[str, ...] = DEFAULT_CANDIDATES
    channels: tuple[int, ...] = DEFAULT_CHANNELS
    rounds: int = 3
    noise_floor: float = NOISE_FLOOR
    backend: str = "nccl"
    call: str = "pynccl"  # nccl backend: "pynccl" (SGLang's call path) or "torch"
    python: str = ""
    timeout_s: float = 300.0
    workdir: str = ""  # keep state + logs here (resume); "" = temporary
    fake_costs: str = ""  # gloo tests only
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def all_candidates(self) -> list[str]:
        chans = [f"Ring/Simple/{c}" for c in self.channels]
        return ["default", *self.candidates, *chans]

    def fingerprint(self, env: Mapping[str, str]) -> str:
        nccl = {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}
        nccl.pop("NCCL_DEBUG_FILE", None)
        blob = json.dumps(
            [self.world, self.nnodes, self.all_candidates(), self.rounds, self.backend, nccl],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ------------------------------------------------------------------ choosing


def _spread(rounds: Sequence[float]) -> float:
    if len(rounds) < 2:
        return 0.0
    med = median(list(rounds))
    return (max(rounds) - min(rounds)) / med if med > 0 else 0.0


def decide(size_row: Mapping[str, Any], noise_floor: float = NOISE_FLOOR) -> dict[str, Any]:
    """One size: {bytes, best, best_us, default_us, nccl_default, noise, keep_default, ...}."""
    cands = size_row.get("candidates", {})
    usable = {
        c: median(list(m["rounds_us"]))
        for c, m in cands.items()
        if m.get("available") and m.get("correct") is not False and m.get("rounds_us")
    }
    out: dict[str, Any] = {"bytes": size_row["bytes"], "measured_us": usable}
    default = cands.get("default", {})
    out["nccl_default"] = default.get("nccl_default")
    out["unavailable"] = sorted(
        c for c, m in cands.items() if not m.get("available") and c != "default"
    )
    if not usable:
        out.update(best=None, keep_default=True, reason="nothing measured")
        return out
    best = min(usable, key=lambda c: (usable[c], c != "default"))
    out["best"], out["best_us"] = best, usable[best]
    if "default" not in usable:
        out.update(keep_default=True, reason="NCCL's own choice was not measured")
        return out
    d_us = usable["default"]
    noise = max(
        noise_floor,
        _spread(cands[best]["rounds_us"]),
        _spread(cands["default"]["rounds_us"]),
    )
    out.update(default_us=d_us, noise=noise)
    same = _same_as_default(best, out["nccl_default"])
    if best == "default" or same or d_us <= usable[best] * (1.0 + noise):
        out.update(keep_default=True, reason="NCCL's choice is within noise of the best")
    else:
        out.update(keep_default=False, reason=f"{best} beats NCCL by {d_us / usable[best]:.2f}x")
    return out


def _same_as_default(cand: str, nccl_default: str | None) -> bool:
    """'Ring/LL' vs NCCL's 'RING/LL' (no channel count): the same choice."""
    return nccl_default is not None and cand.count("/") == 1 and cand.upper() == nccl_default


def rows_from(
    decisions: Sequence[Mapping[str, Any]], nranks: int, nnodes: int, collective: str = "AllReduce"
) -> list[TableRow]:
    """Table rows from per-size decisions (sorted by size; merged where equal)."""
    ds = sorted(decisions, key=lambda d: d["bytes"])
    rows: list[TableRow] = []
    for i, d in enumerate(ds):
        lo = 0 if i == 0 else math.isqrt(ds[i - 1]["bytes"] * d["bytes"]) + 1
        hi = d["bytes"] if i == len(ds) - 1 else math.isqrt(d["bytes"] * ds[i + 1]["bytes"])
        if d.get("keep_default", True) or not d.get("best"):
            continue
        parts = d["best"].split("/")
        algo, proto = parts[0], parts[1]
        ch = int(parts[2]) if len(parts) == 3 else None
        prev = rows[-1] if rows else None
        if (
            prev
            and prev.max_bytes + 1 == lo
            and (prev.algorithm, prev.protocol, prev.channels) == (algo, proto, ch)
        ):
            rows[-1] = TableRow(collective, prev.min_bytes, hi, algo, proto, ch, nranks, nnodes)
            continue
        rows.append(TableRow(collective, lo, hi, algo, proto, ch, nranks, nnodes))
    return rows


# ------------------------------------------------------------------ running the ranks


def merge_ranks(per_rank: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One size as seen by every rank -> one row: per round, the slowest rank's time; a
    candidate is available/correct only when it is on every rank."""
    first = per_rank[0]
    out = {k: v for k, v in first.items() if k != "candidates"}
    out["candidates"] = {}
    for cand, m0 in first["candidates"].items():
        ms = [r["candidates"].get(cand, {}) for r in per_rank]
        entry = {k: v for k, v in m0.items() if k != "rounds_us"}
        entry["available"] = all(m.get("available") for m in ms)
        if any(m.get("correct") is False for m in ms):
            entry["correct"] = False
        rounds = [m.get("rounds_us") or [] for m in ms]
        if entry["available"] and all(rounds):
            entry["rounds_us"] = [max(v) for v in zip(*rounds, strict=False)]
        out["candidates"][cand] = entry
    if any(r.get("error") for r in per_rank):
        out["error"] = next(r["error"] for r in per_rank if r.get("error"))
    return out


def run_ranks(
    env: Mapping[str, str],
    cfg: DeriveConfig,
    sizes: Sequence[int],
    candidates: Sequence[str],
    workdir: Path,
    tag: str,
    on_size: Callable[[dict[str, Any]], None] | None = None,
    on_event: EventFn | None = None,
) -> dict[str, Any]:
    """Start the ranks, stream finished sizes (merged) to `on_size`, return
    {head, sizes, logs, wall_s}. Ranks are started in their own sessions and only they
    are stopped on timeout or interrupt."""
    python = cfg.python or sys.executable
    pkg_root = str(Path(__file__).resolve().parents[3])  # the folder holding fastverify/
    pythonpath = os.pathsep.join([pkg_root, *filter(None, [env.get("PYTHONPATH", "")])])

    def argv(_rank: int, out: Path) -> list[str]:
        return [
            python, str(WORKER), "--backend", cfg.backend, "--call", cfg.call,
            "--sizes", ",".join(str(s) for s in sizes),
            "--candidates", ",".join(candidates),
            "--rounds", str(cfg.rounds), "--out", str(out),
        ] + (["--fake-costs", cfg.fake_costs] if cfg.fake_costs else [])  # fmt: skip

    merged: list[dict[str, Any]] = []
    docs: list[list[dict[str, Any]]] = []

    def collect() -> None:
        """Merge every size all ranks have finished since the last look; stream it."""
        docs[:] = [read_jsonl(o) for o in group.reports_paths]
        sizes_by_rank = [[d["size"] for d in doc if "size" in d] for doc in docs]
        ready = min(len(s) for s in sizes_by_rank)
        while len(merged) < ready:
            row = merge_ranks([s[len(merged)] for s in sizes_by_rank])
            merged.append(row)
            if on_size:
                on_size(row)

    with RankGroup(workdir, tag, cfg.world, report_suffix=".jsonl") as group:
        group.start({**env, "PYTHONPATH": pythonpath}, argv)
        waited = group.wait(cfg.timeout_s, tag, peer_grace_s=PEER_GRACE_S, on_poll=collect)
    if waited["timed_out"]:
        raise DeriveError(f"ranks did not finish within {cfg.timeout_s:.0f} s")
    collect()
    heads: list[dict[str, Any]] = [
        next((d["head"] for d in doc if "head" in d), {}) for doc in docs
    ]
    errors = [h.get("error") for h in heads if h.get("error")]
    if errors or len(merged) < len(sizes):
        tails = []
        for rank in range(cfg.world):
            with contextlib.suppress(OSError):
                text = group.stdout(rank).read_text(errors="replace")
                tails.append(text.strip().splitlines()[-1:] if text.strip() else [])
        detail = errors[0] if errors else f"last output: {tails}"
        raise DeriveError(
            f"{tag}: ranks finished {len(merged)} of {len(sizes)} sizes ({detail}); "
            f"logs in {workdir}"
        )
    return {
        "head": heads[0] if heads else {},
        "sizes": merged,
        "logs": [str(group.nccl_log(r)) for r in range(cfg.world)],
        "wall_s": time.perf_counter() - group.started_at,
        "returncodes": [p.returncode for p in group.procs],
    }


def base_env(env: Mapping[str, str], plugin: Path | None, table: Path | None) -> dict[str, str]:
    """The ranks' environment: the profile's effective env, NCCL debug output (the
    TUNING lines say what NCCL chose), SGLang's own NCCL_GRAPH_REGISTER default and the
    plugin (with `table`, or an empty table during derivation)."""
    out = dict(env)
    for k, v in SERVER_LIKE_ENV.items():
        out.setdefault(k, v)
    out.update(NCCL_DEBUG_ENV)
    if plugin is not None:
        out["NCCL_TUNER_PLUGIN"] = str(plugin)
        if table is not None:
            out["FASTVERIFY_TUNER_TABLE"] = str(table)
    return out


def derive(
    env: Mapping[str, str],
    cfg: DeriveConfig,
    plugin: Path | None,
    on_event: EventFn | None = None,
) -> dict[str, Any]:
    """Measure and decide; returns the report (decisions, rows, timings, measurements)."""
    if cfg.backend == "nccl" and plugin is None:
        from fastverify.tuner.plugin import not_found_message

        raise DeriveError(not_found_message())
    with rank_workdir(cfg.workdir, "derive-") as workdir:
        empty = workdir / "empty.tuner.csv"
        empty.write_text("# no rows: NCCL chooses unless the derivation forces a candidate\n")
        rank_env = base_env(env, plugin, empty)
        fp = cfg.fingerprint(rank_env)
        state_path = workdir / STATE_FILE
        done: dict[int, dict[str, Any]] = {}
        if cfg.workdir and state_path.exists():
            try:
                state = json.loads(state_path.read_text())
            except ValueError:
                state = {}
            if state.get("fingerprint") == fp:
                done = {int(r["bytes"]): r for r in state.get("sizes", [])}
                if on_event and done:
                    on_event(f"resuming: {len(done)} of {len(cfg.sizes)} sizes already measured")
            elif on_event and state:
                on_event("settings changed since the saved state: measuring every size again")
        todo = [s for s in cfg.sizes if s not in done]
        n_total = len(cfg.sizes)

        def on_size(row: dict[str, Any]) -> None:
            done[int(row["bytes"])] = row
            state = {"fingerprint": fp, "sizes": list(done.values())}
            atomic_write_json(state_path, state, indent=None, sort_keys=False, mode=0o644)
            if on_event:
                d = decide(row, cfg.noise_floor)
                verdict = "keep NCCL's" if d.get("keep_default") else f"use {d.get('best')}"
                best = d.get("best_us")
                dflt = d.get("default_us")
                on_event(
                    f"[{len(done)}/{n_total}] {row['bytes']} B: best {d.get('best')} "
                    f"{best:.1f} us, NCCL ({d.get('nccl_default')}) "
                    + (f"{dflt:.1f} us" if dflt is not None else "n/a")
                    + f" -> {verdict}"
                    if best is not None
                    else f"[{len(done)}/{n_total}] {row['bytes']} B: nothing measured"
                )

        run: dict[str, Any] = {"head": {}, "wall_s": 0.0, "logs": []}
        if todo:
            if on_event:
                on_event(
                    f"measuring {len(todo)} sizes x {len(cfg.all_candidates())} candidates "
                    f"on {cfg.world} rank(s) ..."
                )
            run = run_ranks(
                rank_env, cfg, todo, cfg.all_candidates(), workdir, "derive", on_size, on_event
            )
        decisions = [decide(done[s], cfg.noise_floor) for s in sorted(done)]
        rows = rows_from(decisions, cfg.world, cfg.nnodes)
        nccl_logs = {}
        for p in run.get("logs", []):
            with contextlib.suppress(OSError):
                nccl_logs[p] = Path(p).read_text(errors="replace")
    from fastverify.tuner.loaded import tuner_load_status

    loaded = [tuner_load_status(t).to_dict() for t in nccl_logs.values()]
    return {
        "tool": "fastverifyctl preflight --derive-tuner",
        "world_size": cfg.world,
        "nnodes": cfg.nnodes,
        "backend": cfg.backend,
        "candidates": cfg.all_candidates(),
        "rounds": cfg.rounds,
        "noise_floor": cfg.noise_floor,
        "head": run.get("head", {}),
        "measure_wall_s": run.get("wall_s"),
        "decisions": decisions,
        "rows": [r.to_dict() for r in rows],
        "table_rows": rows,
        "plugin_loaded": loaded,
        "measurements": [done[s] for s in sorted(done)],
    }


def write_outputs(
    report: Mapping[str, Any],
    name: str,
    out_dir: Path,
    base_profile: str,
    comments: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Write NAME.tuner.csv and NAME.env (extends the base profile, names the table)."""
    from fastverify.profiles.tuner import profile_text

    out_dir.mkdir(parents=True, exist_ok=True)
    table = out_dir / f"{name}.tuner.csv"
    profile = out_dir / f"{name}.env"
    head = report.get("head", {})
    notes = [
        f"derived by fastverifyctl preflight --derive-tuner on {head.get('host', '?')}: "
        f"{report['world_size']} rank(s), {head.get('gpu', '?')}, NCCL "
        f"{head.get('nccl_version', '?')}, base profile {base_profile}",
        f"{len(report['decisions'])} sizes measured in CUDA graphs; rows only where a "
        f"candidate beat NCCL's own choice by more than the noise "
        f"(floor {report['noise_floor']:.0%})",
        *comments,
    ]
    atomic_write_text(table, render(report["table_rows"], notes), mode=0o644)
    text = profile_text(
        table.name,
        f"NCCL tuner table measured on this host ({len(report['rows'])} rows) over {base_profile}",
        base_profile,
    )
    atomic_write_text(profile, text, mode=0o644)
    return table, profile


def sizes_from_tokens(tokens: Sequence[int], hidden: int = HIDDEN, elem: int = 2) -> tuple:
    return tuple(hidden * t * elem for t in tokens)
