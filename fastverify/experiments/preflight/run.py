"""`fastverifyctl preflight`: check NCCL profiles on the GPUs in seconds, without loading a model.

For each profile a fresh group of N rank processes (`worker.py` beside it, one per GPU)
is started with exactly the environment the daemon would give the server
(`fastverify.profiles.effective.effective_env`), plus the rendezvous variables
(MASTER_ADDR=127.0.0.1, a free MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) and
NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING, NCCL_DEBUG_FILE=<per-rank file>, from
which the algorithm/protocol NCCL chose per message size (TUNING lines) and the variables
it confirmed ("... set by environment to ...") are read back.

The ranks report per message size (hidden_size x tokens, bf16): eager p50/p99 latency,
algbw/busbw, CUDA-graph capture and replay, and whether the sums were exact. The default
sizes are decode/verify sizes (1-64 tokens: 14 KiB to 896 KiB at hidden 7168) and prefill
sizes (128-8192 tokens: 1.75 MiB to 112 MiB, a factor 4 apart); above 1 MiB the workers
run proportionally fewer iterations. The ranks' reports are merged, the fastest profile
per size named (`winners`) and each profile judged (`verdict`) in merge.py; whether the
ranks can run here is hostcheck.py's, the profiles and their environment inputs.py's. This
module never imports torch: it only checks that the workers' interpreter can (`find_spec`).

Verdict per profile: "ok"; "unsafe-cuda-graph" (eager works but capture or replay fails:
a CUDA-graph server would die after its model load; a profile that declares
`requires: cuda-graph=off` stays "ok"); "failed" (init failure, wrong sums, timeout).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.experiments.common import allreduce as allreduce_candidate
from fastverify.experiments.common.ranks import (
    NCCL_DEBUG_ENV,
    RankGroup,
    nccl_digest,
    rank_workdir,
    report_rows,
)
from fastverify.experiments.preflight.hostcheck import (
    SAME_GPU_LABEL,
    SAME_GPU_NOTE,
    PreflightError,
    backend_problem,
    rank_count,
    same_gpu_plan,
    shared_gpus,
)
from fastverify.experiments.preflight.inputs import masked, profile_env
from fastverify.experiments.preflight.merge import merge_sizes, parse_nccl_log, verdict, winners
from fastverify.percentiles import percentile

WORKER = Path(__file__).with_name("worker.py")
DECODE_TOKENS = (1, 2, 3, 4, 8, 16, 32, 64)  # a decode / verify forward
PREFILL_TOKENS = (128, 512, 2048, 8192)  # a prefill chunk: 1.75 MiB .. 112 MiB at 7168
DEFAULT_TOKENS = DECODE_TOKENS + PREFILL_TOKENS
SCALE_BYTES = 1 << 20  # above this, workers run proportionally fewer iterations
DEFAULT_HIDDEN = 7168
ONE_RANK_NOTE = (
    "one rank: NCCL launches no all-reduce kernel with a single rank, so latency and "
    "bandwidth here are not multi-GPU figures (those need 2+ GPUs); init, eager calls, "
    "CUDA-graph capture/replay and the result check still ran"
)

EventFn = Callable[[str], None]
RANK_KEYS = (
    "rank",
    "status",
    "error",
    "returncode",
    "import_s",
    "init_s",
    "measure_s",
    "wall_s",
    "gpu",
    "torch",
    "nccl_version",
    "teardown_error",
    "allreduce",  # a pcie_ipc candidate: FlashInfer's workspace (bound, tuned shapes, cache)
)


@dataclass(frozen=True)
class PreflightConfig:
    nproc: int | None = None  # None: every visible GPU (gloo: 2)
    hidden_size: int = DEFAULT_HIDDEN
    tokens: tuple[int, ...] = DEFAULT_TOKENS
    sizes_bytes: tuple[int, ...] = ()  # explicit message sizes instead of hidden x tokens
    iters: int = 50
    warmup: int = 5
    graph_ops: int = 20  # all-reduces per batch graph (0: skip the batch graph)
    scale_bytes: int = SCALE_BYTES  # fewer iterations above this message size (0: never)
    backend: str = "nccl"  # "gloo" is for testing the orchestration on CPUs
    call: str = "pynccl"  # nccl backend: "pynccl" (SGLang's call path) or "torch" (distributed)
    timeout_s: float = 180.0  # per profile
    python: str = ""  # workers' interpreter ("" = this one)
    extra_env: Mapping[str, str] = field(default_factory=dict)  # on top of the profile
    logs_dir: str = ""  # keep per-rank JSON and NCCL logs here ("" = temporary)
    share_gpu: bool = False  # allow more ranks than GPUs (rank r on GPU r mod gpus)


# ------------------------------------------------------------------ one profile


def run_profile(
    name: str,
    env: Mapping[str, str],
    cfg: PreflightConfig,
    world: int,
    workdir: Path,
    requires: Mapping[str, str] | None = None,
    on_event: EventFn | None = None,
    pcie_ipc_max_numel: int = 0,
    gpus: int = 0,
) -> dict[str, Any]:
    """Start `world` ranks with `env` (+ rendezvous + NCCL debug), wait, merge their reports.
    `pcie_ipc_max_numel` > 0: a pcie_ipc candidate (FlashInfer's kernels up to that size).
    `gpus` > 0: the ranks share that many GPUs (no NCCL communicator: `--no-nccl`)."""
    python = cfg.python or sys.executable
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    elem = 2 if cfg.backend == "nccl" else 4  # bf16 on NCCL, float32 on gloo

    def argv(_rank: int, out: Path) -> list[str]:
        return [
            python, str(WORKER), "--backend", cfg.backend, "--call", cfg.call,
            "--hidden-size", str(cfg.hidden_size),
            "--tokens", ",".join(str(t) for t in cfg.tokens),
            "--numels", ",".join(str(max(1, b // elem)) for b in cfg.sizes_bytes),
            "--iters", str(cfg.iters), "--warmup", str(cfg.warmup), "--out", str(out),
            "--graph-ops", str(cfg.graph_ops), "--scale-bytes", str(cfg.scale_bytes),
            "--pcie-ipc-max-numel", str(pcie_ipc_max_numel),
        ] + (["--no-nccl"] if gpus else [])  # fmt: skip

    with RankGroup(workdir, safe, world) as group:
        group.start({**env, **NCCL_DEBUG_ENV}, argv, gpus)
        waited = group.wait(cfg.timeout_s, name, on_event)
    wall = time.perf_counter() - group.started_at
    timed_out = waited["timed_out"]
    ranks = group.reports(sizes=[])
    nccl_logs = group.nccl_summaries()
    nccl0 = nccl_logs[0] if nccl_logs else parse_nccl_log("")
    sizes = merge_sizes([r for r in ranks if r.get("sizes")] or ranks, world, nccl0["tuning"])

    init_errors = [str(r["error"]) for r in ranks if r.get("error")]
    env_verified, env_mismatch = group.env_delivered(ranks)
    result: dict[str, Any] = {
        "profile": name,
        "world_size": world,
        "wall_s": wall,
        "init_s": max((r.get("init_s") or 0.0) for r in ranks) if ranks else None,
        "nccl": nccl_digest(nccl_logs),
        "env_verified": env_verified,
        "env_mismatch": env_mismatch,
        "sizes": sizes,
        "ranks": report_rows(ranks, RANK_KEYS),
    }
    result.update(
        verdict(sizes, init_errors, timed_out, env_mismatch, requires or {}, cfg.timeout_s)
    )
    return result


# ------------------------------------------------------------------ the whole run


def pcie_ipc_bound(cfg: PreflightConfig) -> int:
    """Elements a pcie_ipc candidate hands to FlashInfer's kernels: SGLang 0.5.23's own bound
    when it has no decode config, 64 rows x hidden (`pcie_ipc_ar._FALLBACK_DECODE_WIDTH`):
    the decode/verify sizes; prefill sizes stay on NCCL. A profile's
    SGLANG_PCIE_IPC_MAX_NUMEL wins (plan() prefers it)."""
    from fastverify.sglang.allreduce import FALLBACK_DECODE_WIDTH

    return FALLBACK_DECODE_WIDTH * cfg.hidden_size


def skipped(name: str, cand: allreduce_candidate.Candidate) -> dict[str, Any]:
    """The entry of a candidate that cannot be measured here (its reason, no figures)."""
    return {
        "profile": name,
        "status": "skipped",
        "allreduce_backend": cand.backend,
        "error": cand.skip,
        "reason": cand.skip,
        "wall_s": 0.0,
        "init_s": None,
        "nccl": {"version": None, "confirmed": {}, "warnings": []},
        "sizes": [],
        "ranks": [],
    }


def run_preflight(
    profiles: Sequence[Any],
    cfg: PreflightConfig,
    on_event: EventFn | None = None,
    env_for: Callable[[Any], dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Preflight every profile in turn; returns the report (see docs/guides/experiments.md)."""
    if problem := backend_problem(cfg.backend):
        raise PreflightError(problem)
    if cfg.call not in ("pynccl", "torch"):
        raise PreflightError(f"unknown call path {cfg.call!r} (pynccl or torch)")
    world = rank_count("preflight", cfg.backend, cfg.nproc, cfg.python, cfg.share_gpu)
    shared = shared_gpus(cfg.backend, world)
    env_for = env_for or (lambda p: profile_env(p, cfg.extra_env))

    with rank_workdir(cfg.logs_dir, "preflight-") as workdir:
        t0 = time.perf_counter()
        results = []
        for i, profile in enumerate(profiles, 1):
            name = getattr(profile, "name", str(profile))
            if on_event:
                on_event(f"[{i}/{len(profiles)}] {name}: {world} rank(s) ...")
            env = env_for(profile)
            cand = allreduce_candidate.plan(
                env, world, cfg.backend, cfg.python, max_numel=pcie_ipc_bound(cfg)
            )
            cand = same_gpu_plan(cand, shared)
            run_cfg, not_run = cfg, None
            if shared and cand.skip is None and cand.job:
                run_cfg, not_run = same_gpu_sizes(cfg, int(cand.job["max_numel"]))
                if not (run_cfg.tokens or run_cfg.sizes_bytes):
                    cand = allreduce_candidate.Candidate(cand.backend, skip=not_run["reason"])
            if cand.skip is not None:  # never a measurement: said why, and moved on
                results.append(skipped(name, cand))
                if on_event:
                    on_event(f"[{i}/{len(profiles)}] {name}: skipped: {cand.skip}")
                continue
            res = run_profile(
                name,
                env,
                run_cfg,
                world,
                workdir,
                requires=getattr(profile, "requires", {}),
                on_event=on_event,
                pcie_ipc_max_numel=int(cand.job["max_numel"]) if cand.job else 0,
                gpus=shared,
            )
            res["allreduce_backend"] = cand.backend
            if not_run and (not_run["tokens"] or not_run["sizes_bytes"]):
                res["sizes_not_run"] = not_run
            res["profile_env"] = {k: v for k, v in getattr(profile, "env", {}).items()}
            warnings = [str(w) for w in getattr(profile, "warnings", None) or []]
            if warnings:  # e.g. LL128 without NVLink: loaded with force, checked all the same
                res["profile_warnings"] = warnings
            if cfg.extra_env:
                res["extra_env"] = masked(cfg.extra_env)
            results.append(res)
            if on_event:
                detail = res.get("error") or res.get("note") or ""
                on_event(
                    f"[{i}/{len(profiles)}] {name}: {res['status']} in {res['wall_s']:.1f} s"
                    + (f" ({detail})" if detail else "")
                )
        total = time.perf_counter() - t0

    ranks = [rk for r in results for rk in r["ranks"]]
    walls = [r["wall_s"] for r in results]
    report: dict[str, Any] = {
        "tool": "fastverifyctl preflight",
        "backend": cfg.backend,
        "call": cfg.call if cfg.backend == "nccl" else "torch",
        "world_size": world,
        "hidden_size": cfg.hidden_size,
        "tokens": None if cfg.sizes_bytes else list(cfg.tokens),
        "sizes_bytes": list(cfg.sizes_bytes) or None,
        "iters": cfg.iters,
        "dtype": "bfloat16" if cfg.backend == "nccl" else "float32",
        "gpu": next((rk["gpu"] for rk in ranks if rk.get("gpu")), None),
        "torch": next((rk["torch"] for rk in ranks if rk.get("torch")), None),
        "nccl_version": next((rk["nccl_version"] for rk in ranks if rk.get("nccl_version")), None),
        "total_wall_s": total,
        "wall_s_per_profile": {
            "median": percentile(walls, 50) if walls else None,
            "max": max(walls) if walls else None,
        },
        "profiles": results,
        "winners": winners(results),
        "summary": {
            s: sorted(r["profile"] for r in results if r["status"] == s)
            for s in ("ok", "unsafe-cuda-graph", "failed", "skipped")
        },
    }
    if world == 1:
        report["note"] = ONE_RANK_NOTE
    if shared:
        report.update(same_gpu_ranks=True, gpus=shared, label=SAME_GPU_LABEL, note=SAME_GPU_NOTE)
    return report


def same_gpu_sizes(cfg: PreflightConfig, max_numel: int) -> tuple[PreflightConfig, dict[str, Any]]:
    """Ranks sharing a GPU have no NCCL: only the sizes FlashInfer's kernels take (up to
    `max_numel` elements) run; the rest are listed with the reason."""
    import dataclasses

    from fastverify.nccl.pynccl import SAME_GPU_NCCL

    sizes = tuple(b for b in cfg.sizes_bytes if max(1, b // 2) <= max_numel)
    tokens = (
        () if cfg.sizes_bytes else tuple(t for t in cfg.tokens if t * cfg.hidden_size <= max_numel)
    )
    not_run = {
        "tokens": [] if cfg.sizes_bytes else [t for t in cfg.tokens if t not in tokens],
        "sizes_bytes": [b for b in cfg.sizes_bytes if b not in sizes],
        "reason": f"above the PCIe-IPC bound of {max_numel} elements these go to NCCL: "
        + SAME_GPU_NCCL,
    }
    return dataclasses.replace(cfg, tokens=tokens, sizes_bytes=sizes), not_run
