"""`fastverifyctl rehearse --batch-sizes ... --tokens ... [--shard-of-tp N]`: compute per
forward over a grid of batch sizes x tokens per sequence, and the all-reduce time beside it.

The rank workers (`worker.py`, grid mode) build the target's per-rank shapes
(`modelconfig.plan` at TP = `shard_of_tp`) with random weights and time, for every cell, the
target forward with its collectives left out, captured in a CUDA graph (p50 of the replays,
the slowest rank). With `--shard-of-tp N` ONE rank runs the shard one rank of TP N holds, so
a one-GPU box predicts an N-GPU host; without it the grid runs on every rank of TP = nproc.

What the compute leaves out, the all-reduces (2 x layers + 1 per forward at TP > 1, each of
bs x tokens x hidden bf16), is priced per message size from, in this order:
- `--allreduce-from FILE`: a `preflight` report measured on the host (its world size must be
  the TP size; a same-GPU-ranks report is refused: it is not an interconnect measurement);
  the in-graph per-op p50 of one profile (`--allreduce-profile`, else the first `ok` one),
  interpolated log-log between the measured sizes;
- else the backend's published table (`fastverify.sglang.allreduce.PUBLISHED_US`, SGLang
  0.5.23's pcie_ipc_ar.py figures at 8 ranks: `--allreduce-backend nccl|pcie_ipc`), scaled
  by the ring's hop count 2(n-1) when TP is not 8.
Every figure says where it came from (`allreduce.source`, `sources`).

The drafter (`--draft-config`, else the estimate `rehearse` states) is timed beside it: one
draft step (1 token per sequence) and the draft extend over t tokens per sequence, per batch
size, compute only; its all-reduces are priced as the target's, per message, at its own
count per forward.

The JSON (`kind: rehearse-grid`) is what `spec plan` consumes; its top level is exactly
kind, model, shard_of_tp, ranks_run, gpu, batch_sizes, tokens_per_seq, forward_ms,
verify_decode_ratio, drafter, allreduce, sources, command. This module never imports torch.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.experiments.common.ranks import rank_workdir
from fastverify.experiments.rehearse import memory, modelconfig
from fastverify.experiments.rehearse.job import job_base, run_job
from fastverify.interpolate import loglog

EventFn = Callable[[str], None]
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_TOKENS = (1, 2, 3, 4, 5, 6, 7, 8)
BF16 = 2
BACKENDS = ("nccl", "pcie_ipc")


class GridError(ValueError):
    """The grid cannot run as asked (bad sizes, TP, all-reduce source); says what to change."""


@dataclass(frozen=True)
class GridConfig:
    model_config: str
    draft_config: str | None = None  # the EAGLE-3 drafter's config.json; None: estimated
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    tokens: tuple[int, ...] = DEFAULT_TOKENS
    shard_of_tp: int | None = None  # one rank runs the shard of one rank of TP N
    nproc: int | None = None  # without shard_of_tp: TP = the ranks run
    backend: str = "nccl"
    call: str = "pynccl"
    steps: int = 10  # timed replays per cell
    warmup: int = 2
    context: int = 1024
    pool_gb: float = 8.0
    timeout_s: float = 600.0
    python: str = ""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    logs_dir: str = ""
    seed: int = 0
    allreduce_from: str | None = None  # a preflight report measured on the host
    allreduce_profile: str | None = None
    allreduce_backend: str = "nccl"  # the published column when no preflight report
    host_fingerprint: Mapping[str, Any] | None = None  # this host's, to compare the report's


def check(cfg: GridConfig) -> None:
    """Refuse a grid that cannot run, before anything starts."""
    if not cfg.batch_sizes or min(cfg.batch_sizes) < 1:
        raise GridError("--batch-sizes: give positive integers, e.g. 1,2,4,8,16,32,64")
    if not cfg.tokens or min(cfg.tokens) < 1:
        raise GridError("--tokens: give positive integers, e.g. 1,2,3,4,5,6,7,8")
    if 1 not in cfg.tokens:
        raise GridError(
            f"--tokens {','.join(map(str, cfg.tokens))}: include 1, the decode step that the "
            "verify/decode ratio divides by"
        )
    if cfg.shard_of_tp is not None and cfg.shard_of_tp < 1:
        raise GridError(f"--shard-of-tp {cfg.shard_of_tp}: give a TP size >= 1")
    if cfg.allreduce_backend not in BACKENDS:
        raise GridError(f"--allreduce-backend {cfg.allreduce_backend!r}: one of {BACKENDS}")
    if cfg.steps < 1:
        raise GridError("--steps must be >= 1")


# ------------------------------------------------------------------ all-reduce time


def preflight_points(
    report: dict[str, Any], tp: int, profile: str | None, where: str
) -> tuple[list[tuple[float, float]], str]:
    """(bytes, us per all-reduce) of one profile of a preflight report: in-graph per-op p50
    (what a CUDA-graph server sees), else the single-op replay p50, else the back-to-back
    eager mean, of the sizes whose sums were exact. Returns the points and the profile."""
    if report.get("tool") != "fastverifyctl preflight":
        raise GridError(f"{where}: not a preflight report (no tool: fastverifyctl preflight)")
    if report.get("same_gpu_ranks"):
        raise GridError(
            f"{where}: {report.get('label') or 'same-GPU ranks'}; its timings are not the "
            "host's all-reduce: run preflight with one rank per GPU on the host"
        )
    world = report.get("world_size")
    if world != tp:
        raise GridError(
            f"{where}: preflight ran {world} rank(s), the grid predicts TP {tp}: run "
            f"`fastverifyctl preflight --nproc {tp}` on the {tp}-GPU host, or leave out "
            "--allreduce-from to use the published table"
        )
    profiles = [p for p in report.get("profiles", []) if p.get("status") == "ok"]
    if profile:
        profiles = [p for p in report.get("profiles", []) if p.get("profile") == profile]
        if not profiles:
            names = ", ".join(p.get("profile", "?") for p in report.get("profiles", []))
            raise GridError(f"{where}: no profile {profile!r} (it has: {names})")
    if not profiles:
        raise GridError(f"{where}: no profile passed preflight; name one with --allreduce-profile")
    chosen = profiles[0]
    points = []
    for size in chosen.get("sizes", []):
        if not size.get("correct"):
            continue
        graph, eager = size.get("graph") or {}, size.get("eager") or {}
        us = (
            (graph.get("batch") or {}).get("per_op_p50_us")
            or graph.get("p50_us")
            or (eager.get("batch") or {}).get("per_op_mean_us")
        )
        if us and size.get("bytes"):
            points.append((float(size["bytes"]), float(us)))
    if not points:
        raise GridError(f"{where}: profile {chosen.get('profile')!r} measured no size")
    return points, str(chosen.get("profile"))


def published_points(backend: str, tp: int) -> tuple[list[tuple[float, float]], str]:
    """(bytes, us) from SGLang's published 8-rank table for `backend`, scaled to `tp` ranks
    by the ring's hop count 2(n-1) (14 at 8 ranks), and the label saying so."""
    from fastverify.sglang import allreduce

    col = 1 if backend == "pcie_ipc" else 2
    scale = (2 * (tp - 1)) / (2 * (allreduce.PUBLISHED_WORLD - 1))
    pts = [(float(row[0]), row[col] * scale) for row in allreduce.PUBLISHED_US]
    label = f"published:{allreduce.PUBLISHED_WHERE}, {backend} column"
    if tp != allreduce.PUBLISHED_WORLD:
        label += f", scaled x{scale:.3f} to TP {tp} by hop count 2(n-1)"
    return pts, label


def allreduce_table(cfg: GridConfig, tp: int, hidden: int, count: int) -> dict[str, Any]:
    """`allreduce` of the grid JSON: source and ms of all-reduces per forward per cell."""
    if count == 0:
        return {"source": "none: TP 1 has no all-reduce", "count_per_forward": 0,
                "per_forward_ms": {str(b): {str(t): 0.0 for t in cfg.tokens}
                                   for b in cfg.batch_sizes}}  # fmt: skip
    if cfg.allreduce_from:
        path = Path(cfg.allreduce_from)
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise GridError(f"{path}: cannot read ({exc.strerror or exc})") from None
        except json.JSONDecodeError as exc:
            raise GridError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
        points, profile = preflight_points(report, tp, cfg.allreduce_profile, str(path))
        source = f"preflight:{path.name}"
        detail = (
            f"profile {profile}, in-graph per-op p50 on {report.get('gpu')}, "
            f"{len(points)} sizes, log-log between them"
        )
        from fastverify.host import fingerprint

        host = fingerprint.compare(report.get("fingerprint"), cfg.host_fingerprint,
                                   "preflight report", str(path))  # fmt: skip
        detail += f"; {host['message']}" if host["message"] else ""
    else:
        points, source = published_points(cfg.allreduce_backend, tp)
        detail = "log-log between the published sizes; below 12 KiB the 12 KiB figure"

    def per_forward(pts: list[tuple[float, float]]) -> dict[str, dict[str, float]]:
        return {
            str(b): {str(t): count * loglog(pts, b * t * hidden * BF16) / 1e3 for t in cfg.tokens}
            for b in cfg.batch_sizes
        }

    out: dict[str, Any] = {
        "source": source,
        "detail": detail,
        "count_per_forward": count,
        "message_bytes": "batch x tokens x hidden x 2 (bf16)",
        "per_forward_ms": per_forward(points),
    }
    if not cfg.allreduce_from:  # both published columns, so a plan can compare backends
        out["by_backend"] = {}
        for name in BACKENDS:
            pts, label = published_points(name, tp)
            out["by_backend"][name] = {"source": label, "per_forward_ms": per_forward(pts)}
    return out


# ------------------------------------------------------------------ the run


def build_job(
    cfg: GridConfig, target: modelconfig.ModelSpec, tp: int, drafter: modelconfig.ModelSpec
) -> dict[str, Any]:
    """What every rank receives: the per-rank plans at TP `tp` and the grid."""
    return {
        **job_base(cfg, target, drafter, tp),
        "grid": {"batch_sizes": list(cfg.batch_sizes), "tokens_per_seq": list(cfg.tokens)},
        # the memory estimate's terms: the largest batch, the widest routing window
        "batch": max(cfg.batch_sizes),
        "draft_tokens": max(cfg.tokens) - 1,
    }


def estimate(job: dict[str, Any], world: int) -> memory.Estimate:
    """Memory per rank: the target (pooled) and the drafter (one slot per kind)."""
    gloo = job["backend"] != "nccl"
    elem = memory.FLOAT32 if gloo else memory.BF16
    tensors = memory.model_bytes(job["target"], int(job["pool_gb"] * memory.GIB), job, elem)
    tensors += memory.model_bytes(job["drafter"], 0, job, elem)
    overhead = memory.HOST_OVERHEAD_BYTES if gloo else memory.GPU_OVERHEAD_BYTES
    return memory.Estimate(job["backend"], world, tensors, overhead)


def merge(ranks: list[dict[str, Any]], cfg: GridConfig) -> dict[str, dict[str, float]]:
    """forward_ms per cell: the slowest rank's p50."""
    out: dict[str, dict[str, float]] = {}
    for b in cfg.batch_sizes:
        for t in cfg.tokens:
            vals = [r["grid"]["cells"][str(b)][str(t)]["p50_ms"] for r in ranks]
            out.setdefault(str(b), {})[str(t)] = max(vals)
    return out


def merge_drafter(ranks: list[dict[str, Any]], cfg: GridConfig) -> dict[str, Any]:
    """The drafter's step and extend ms per cell: the slowest rank's p50."""
    ds = [r["grid"]["drafter"] for r in ranks]
    return {
        "step_ms": {str(b): max(d["step_ms"][str(b)] for d in ds) for b in cfg.batch_sizes},
        "extend_ms": {
            str(b): {str(t): max(d["extend_ms"][str(b)][str(t)] for d in ds) for t in cfg.tokens}
            for b in cfg.batch_sizes
        },
    }


def ratios(forward_ms: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """verify/decode ratio per cell: forward at t tokens per sequence over the 1-token one."""
    return {b: {t: ms / row["1"] for t, ms in row.items()} for b, row in forward_ms.items()}


def run_grid(cfg: GridConfig, command: str = "", on_event: EventFn | None = None) -> dict:
    """Run the grid (see the module docstring); returns the `rehearse-grid` JSON."""
    from fastverify.experiments.preflight.hostcheck import rank_count
    from fastverify.experiments.rehearse import run as rh

    check(cfg)
    try:
        target, drafter, estimated = rh.load_models(cfg.model_config, cfg.draft_config)
    except modelconfig.ModelConfigError as exc:
        raise GridError(str(exc)) from None
    world = rank_count("rehearse", cfg.backend, 1 if cfg.shard_of_tp else cfg.nproc, cfg.python)
    tp = cfg.shard_of_tp or world
    try:
        job = build_job(cfg, target, tp, drafter)
    except modelconfig.ModelConfigError as exc:
        raise GridError(str(exc)) from None
    count = modelconfig.allreduces_per_forward(target, tp)
    allreduce = allreduce_table(cfg, tp, target.hidden_size, count)  # refused before a rank
    need = estimate(job, world)
    problem, _, _ = memory.check_fit(need)
    if problem:
        raise GridError(problem)
    cells = len(cfg.batch_sizes) * len(cfg.tokens)
    if on_event:
        on_event(
            f"grid: {target.name or target.model_type} shard of TP {tp} on {world} rank(s), "
            f"{cells} cells x {cfg.steps} replays; memory about "
            f"{need.per_rank / memory.GIB:.1f} GiB per rank"
        )
    env = {**os.environ, **cfg.extra_env}
    with rank_workdir(cfg.logs_dir, "grid-") as workdir:
        group, waited = run_job(env, world, workdir, "grid", job, cfg, "grid", on_event)
        wall = time.perf_counter() - group.started_at
        ranks = group.reports()
    bad = [r for r in ranks if r.get("status") != "ok" or not r.get("grid")]
    if bad or waited["timed_out"]:
        why = "timed out" if waited["timed_out"] else bad[0].get("error") or "a rank failed"
        raise GridRunFailed(f"grid: rank {bad[0].get('rank') if bad else '?'}: {why}")
    forward_ms = merge(ranks, cfg)
    drafter_doc = {
        "model": drafter.name or drafter.model_type,
        "estimated": estimated,
        "count_per_forward": job["drafter"]["allreduce_per_forward"],
        **merge_drafter(ranks, cfg),
    }
    gpu = next((r.get("gpu") for r in ranks if r.get("gpu")), None) or "cpu (gloo)"
    dtype = "bfloat16" if cfg.backend == "nccl" else "float32"
    return {
        "kind": "rehearse-grid",
        "model": target.name or target.model_type,
        "shard_of_tp": tp,
        "ranks_run": world,
        "gpu": gpu,
        "batch_sizes": list(cfg.batch_sizes),
        "tokens_per_seq": list(cfg.tokens),
        "forward_ms": forward_ms,
        "verify_decode_ratio": ratios(forward_ms),
        "drafter": drafter_doc,
        "allreduce": allreduce,
        "sources": {
            "forward_ms": (
                f"rehearse grid: the target forward with its collectives left out, one CUDA "
                f"graph per cell, p50 of {cfg.steps} replays after {cfg.warmup} (slowest of "
                f"{world} rank(s)), {dtype}, random weights of the per-rank shapes at TP {tp}"
                if cfg.backend == "nccl"
                else f"rehearse grid on gloo (CPU, eager, {dtype}): a test of the orchestration"
            ),
            "verify_decode_ratio": "forward_ms at t tokens per sequence / forward_ms at 1",
            "drafter": (
                "the EAGLE-3 drafter timed as the target, collectives left out: step_ms = one "
                "draft step (1 token per sequence), extend_ms = the draft extend over t tokens "
                "per sequence; "
                + (
                    "an estimate from the target's config (no --draft-config)"
                    if estimated
                    else f"shapes of {cfg.draft_config}"
                )
            ),
            "shapes": f"modelconfig.plan({cfg.model_config}, tp={tp})",
            "allreduce": allreduce.get("detail"),
            "model_config": str(cfg.model_config),
            "context": cfg.context,
            "pool_gb": cfg.pool_gb,
            "steps": cfg.steps,
            "memory_estimate_gb_per_rank": need.per_rank / memory.GIB,
            "max_memory_gb": [r.get("max_memory_gb") for r in ranks],
            "p90_ms": {
                str(b): {
                    str(t): max(r["grid"]["cells"][str(b)][str(t)]["p90_ms"] for r in ranks)
                    for t in cfg.tokens
                }
                for b in cfg.batch_sizes
            },
            "distinct_experts_mean": {
                str(b): {
                    str(t): ranks[0]["grid"]["cells"][str(b)][str(t)]["distinct_experts_mean"]
                    for t in cfg.tokens
                }
                for b in cfg.batch_sizes
            },
            "wall_s": wall,
            "approximations": list(rh.APPROXIMATIONS[:5]),
        },
        "command": command,
    }


class GridRunFailed(RuntimeError):
    """A rank failed or timed out (exit 1): the message names the rank and its error."""
