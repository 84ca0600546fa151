"""`fastverifyctl rehearse`: does speculation pay with this NCCL profile here? No model load.

For each profile (and transport path: as detected, and/or with NCCL_P2P_DISABLE=1) a fresh
group of N rank processes (`worker.py` beside it, one per GPU) runs with exactly the
environment the daemon would give the server (`profiles.effective.effective_env` plus the
daemon config's extra variables, as preflight does), the rendezvous variables and
NCCL_DEBUG=INFO to a per-rank file. The ranks build the model's real per-rank GEMM shapes
(`modelconfig.plan`) with random weights, capture the decode step, the verify pass, the
drafter forward and its extend pass in CUDA graphs, time replays with CUDA events and take
one torch.profiler window, which the project's own trace analyzer
(`fastverify.traces`) reads, so `allreduce_ms_per_verify` comes from GPU kernel
records as the exporter reports it live. The all-reduce count per verify is checked against
the layer arithmetic (2 x layers + 1 for the vocab-parallel embedding).

Per profile: decode ms, verify ms, verify compute ms (the same pass captured without
collectives), all-reduces and their ms per verify, drafter ms per cycle (K - 1 draft forwards +
one draft-extend forward) and the break-even accept length
`(drafter_ms + verify_ms) / decode_ms`: EAGLE-3 beats the baseline when its accept length
(accepted tokens per verify, bonus included) is above it.

This module never imports torch (the workers do, in their own processes).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastverify.experiments.common import allreduce as allreduce_candidate
from fastverify.experiments.common.ranks import rank_workdir
from fastverify.experiments.preflight.hostcheck import (
    SAME_GPU_LABEL,
    SAME_GPU_NOTE,
    NoGpu,
    PreflightError,
    TorchMissing,
    backend_problem,
    rank_count,
    same_gpu_plan,
    shared_gpus,
)
from fastverify.experiments.preflight.inputs import daemon_extra_env, load_profiles
from fastverify.experiments.rehearse import memory, modelconfig
from fastverify.experiments.rehearse.job import EventFn, job_base
from fastverify.experiments.rehearse.measure import (
    breakeven_accept_length,
    rank_results,
    run_profile,
    throughputs,
)
from fastverify.experiments.rehearse.plot import plot
from fastverify.sglang import eagle

P2P_OFF = {"NCCL_P2P_DISABLE": "1"}
APPROXIMATIONS = (
    "random weights with the real per-rank GEMM shapes, bf16 (a checkpoint with INT4/FP8 "
    "experts moves fewer bytes per expert)",
    "layer weights from a pool (default 8 GB per rank, far beyond the 50 MB L2 of an H200) "
    "used round-robin over the layers",
    "MoE: experts drawn uniformly per token (top-k distinct), fixed per layer and pass; the "
    "router GEMM, routing weights and expert-load imbalance are left out",
    "attention: plain matmul/softmax over a KV cache of --context random tokens per sequence "
    "(MLA absorbed on the latent cache); no RoPE, no causal mask between draft tokens, new "
    "tokens not written",
    "kernels are PyTorch's (no fused MoE/FlashMLA/fused norms): compute time is indicative; "
    "all-reduce counts, sizes and placement follow SGLang's TP layers",
    "NCCL all-reduce for every TP collective (SGLang would use its custom all-reduce on "
    "<= 2 PCIe or NVLink GPUs unless --disable-custom-all-reduce)",
    "drafter per cycle = K - 1 draft forwards (1 token per sequence, topk 1; SGLang's first "
    "draft token is the previous extend's) + one draft-extend "
    "forward over K+1 tokens; sampling, tree building and scheduler overhead excluded",
)


class RehearseError(PreflightError):
    """The rehearsal cannot run at all (bad config, no torch, no GPU, unknown profile)."""


@dataclass(frozen=True)
class RehearseConfig:
    model_config: str
    draft_config: str | None = None
    draft_tokens: int = 3  # K: drafted tokens; the verify pass runs K+1 per sequence
    steps: int = 30  # timed replays per phase
    warmup: int = 3
    batch: int = 1
    context: int = 1024  # KV-cache tokens per sequence
    nproc: int | None = None  # None: every visible GPU (gloo: 2)
    backend: str = "nccl"
    call: str = "pynccl"  # nccl backend: "pynccl" (SGLang's call path) or "torch"
    pool_gb: float = 8.0
    profile_cycles: int = 3
    paths: tuple[str, ...] = ("default",)  # "default" and/or "p2p-off"
    timeout_s: float = 300.0  # per profile and path
    python: str = ""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    logs_dir: str = ""
    seed: int = 0
    accept_length: float | None = None
    accept_length_source: str | None = None
    share_gpu: bool = False  # allow more ranks than GPUs (PCIe-IPC candidates only)


# ------------------------------------------------------------------ the job


def build_job(
    target: modelconfig.ModelSpec,
    drafter: modelconfig.ModelSpec,
    cfg: RehearseConfig,
    world: int,
) -> dict[str, Any]:
    """What every rank receives (--job): the per-rank plans and the run's knobs."""
    return {
        **job_base(cfg, target, drafter, world),
        "draft_tokens": cfg.draft_tokens,
        "draft_forwards": eagle.draft_forwards_per_cycle(cfg.draft_tokens),
        "batch": cfg.batch,
        "profile_cycles": cfg.profile_cycles,
    }


# ------------------------------------------------------------------ the whole run


def skipped(name: str, path: str, cand: allreduce_candidate.Candidate) -> dict[str, Any]:
    """The row of a candidate that cannot be measured here (its reason, no figures)."""
    return {
        "profile": name,
        "path": path,
        "status": "skipped",
        "allreduce_backend": cand.backend,
        "error": cand.skip,
        "reason": cand.skip,
        "wall_s": 0.0,
        "ranks": [],
        "nccl": {"version": None},
    }


def detect_path_label() -> str:
    """ "nvlink" when nvidia-smi shows NVLink between the GPUs, "p2p" for PCIe, else "default"."""
    from fastverify.profiles import topology

    topo = topology.detect()
    if topo is None or not topo.gpus:
        return "default"
    return "nvlink" if topo.has_nvlink else "p2p"


def load_models(
    model_config: str, draft_config: str | None
) -> tuple[modelconfig.ModelSpec, modelconfig.ModelSpec, bool]:
    """(target, drafter, drafter_estimated); ModelConfigError for a bad file."""
    target = modelconfig.load_spec(model_config)
    if target.eagle3:
        raise modelconfig.ModelConfigError(
            f"{model_config}: this is an EAGLE-3 drafter config; pass the target's "
            "config.json to --model-config and this one to --draft-config"
        )
    if draft_config:
        return target, modelconfig.load_spec(draft_config), False
    return target, modelconfig.estimated_drafter(target), True


def run_rehearsal(
    profiles: Sequence[Any],
    cfg: RehearseConfig,
    on_event: EventFn | None = None,
    env_for: Callable[[Any], dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Rehearse every profile on every path in turn; returns the report
    (docs/guides/rehearse.md)."""
    if problem := backend_problem(cfg.backend):
        raise RehearseError(problem)
    if cfg.draft_tokens < 1 or cfg.batch < 1 or cfg.steps < 1:
        raise RehearseError("--draft-tokens, --batch and --steps must be >= 1")
    bad_paths = [p for p in cfg.paths if p not in ("default", "p2p-off")]
    if bad_paths or not cfg.paths:
        raise RehearseError(f"unknown path {bad_paths or cfg.paths!r} (default, p2p-off)")
    try:
        target, drafter, estimated = load_models(cfg.model_config, cfg.draft_config)
    except modelconfig.ModelConfigError as exc:
        raise RehearseError(str(exc)) from None
    try:
        world = rank_count("rehearse", cfg.backend, cfg.nproc, cfg.python, cfg.share_gpu)
    except (TorchMissing, NoGpu):
        raise
    except PreflightError as exc:
        raise RehearseError(str(exc)) from None
    try:
        job = build_job(target, drafter, cfg, world)
    except modelconfig.ModelConfigError as exc:
        raise RehearseError(str(exc)) from None
    need = memory.estimate(job, world)
    problem, host, gpus = memory.check_fit(need)
    if problem:  # refused before any rank starts: nothing to kill, nothing half-written
        raise RehearseError(problem)
    job["memory_per_rank_gb"] = need.per_rank / memory.GIB
    checked = (
        f"host MemAvailable {host / memory.GIB:.1f} GiB" if host is not None
        else f"GPU free {min(gpus) / memory.GIB:.1f} GiB" if gpus
        else "not checked (no MemAvailable / nvidia-smi reading)"
    )  # fmt: skip
    if on_event:
        on_event(f"memory: about {need.per_rank / memory.GIB:.1f} GiB per rank x {world} "
                 f"({checked})")  # fmt: skip
    if env_for is None:
        from fastverify.profiles.effective import effective_env

        def env_for(p: Any) -> dict[str, str]:
            return effective_env(p, extra=dict(cfg.extra_env) or None)

    shared = shared_gpus(cfg.backend, world)
    default_label = (
        "same-gpu" if shared else detect_path_label() if cfg.backend == "nccl" else "default"
    )
    runs = [(p, path) for p in profiles for path in cfg.paths]
    with rank_workdir(cfg.logs_dir, "rehearse-") as workdir:
        t0 = time.perf_counter()
        results = []
        for i, (profile, path) in enumerate(runs, 1):
            name = getattr(profile, "name", str(profile))
            label = "p2p-off" if path == "p2p-off" else default_label
            if on_event:
                on_event(f"[{i}/{len(runs)}] {name} ({label}): {world} rank(s) ...")
            env = env_for(profile)
            if path == "p2p-off":
                env = {**env, **P2P_OFF}
            cand = allreduce_candidate.plan(
                env,
                world,
                cfg.backend,
                cfg.python,
                max_numel=cfg.batch * (cfg.draft_tokens + 1) * target.hidden_size,
            )
            cand = same_gpu_plan(cand, shared)
            if cand.skip is not None:  # never a measurement: said why, and moved on
                results.append(skipped(name, label, cand))
                if on_event:
                    on_event(f"[{i}/{len(runs)}] {name} ({label}): skipped: {cand.skip}")
                continue
            run_job = {**job, "allreduce": dict(cand.job)} if cand.job else job
            if shared:  # no NCCL communicator; the LM head's all-gather is placed locally
                run_job = {**run_job, "nccl": False, "gpus": shared}
            res = run_profile(name, label, env, run_job, world, workdir, cfg, on_event)
            res["allreduce_backend"] = cand.backend
            res.update(
                throughputs(res["decode_ms"], res["cycle_ms"], cfg.batch, cfg.accept_length)
                if res["status"] == "ok"
                else {}
            )
            results.append(res)
            if on_event:
                if res["status"] == "ok":
                    on_event(
                        f"[{i}/{len(runs)}] {name} ({label}): decode {res['decode_ms']:.2f} "
                        f"ms, verify {res['verify_ms']:.2f} ms, break-even accept length "
                        f"{res['breakeven_accept_length']:.2f} ({res['wall_s']:.1f} s)"
                    )
                else:
                    on_event(f"[{i}/{len(runs)}] {name} ({label}): failed: {res.get('error')}")
        total = time.perf_counter() - t0

    ranks = [rk for r in results for rk in r["ranks"]]
    report: dict[str, Any] = {
        "tool": "fastverifyctl rehearse",
        "backend": cfg.backend,
        "world_size": world,
        "model": target.name or target.model_type,
        "model_config": str(cfg.model_config),
        "drafter": drafter.name,
        "drafter_estimated": estimated,
        "draft_tokens": cfg.draft_tokens,
        "verify_tokens_per_sequence": cfg.draft_tokens + 1,
        "batch": cfg.batch,
        "context": cfg.context,
        "steps": cfg.steps,
        "pool_gb": cfg.pool_gb,
        "memory_estimate": {**need.to_dict(), "checked_against": checked},
        "dtype": "bfloat16" if cfg.backend == "nccl" else "float32",
        "gpu": next((rk["gpu"] for rk in ranks if rk.get("gpu")), None),
        "nccl_version": next((r["nccl"]["version"] for r in results if r["nccl"]["version"]), None),
        "accept_length": cfg.accept_length,
        "accept_length_source": cfg.accept_length_source,
        "allreduce_expected_per_verify": job["target"]["allreduce_per_forward"],
        "shapes": {"target": job["target"], "drafter": job["drafter"]},
        "profiles": rank_results(results, cfg.accept_length),
        "wall_s": total,
        "wall_s_per_profile": max((r["wall_s"] for r in results), default=None),
        "approximations": list(APPROXIMATIONS),
    }
    if shared:
        report.update(
            same_gpu_ranks=True,
            gpus=shared,
            label=SAME_GPU_LABEL,
            note=SAME_GPU_NOTE + "; the LM head's all-gather (NCCL) does not run: each rank "
            "places its own logits",
        )
    if estimated:
        report["drafter_note"] = (
            "no --draft-config: the drafter is an estimate (one Llama layer with the target's "
            "hidden size, heads of 128, the target's intermediate_size and vocabulary)"
        )
    return report


# ------------------------------------------------------------------ live accept length


_ACCEPT = re.compile(r"^fastverify_spec_accept_length(?:\{[^}]*\})?\s+(\S+)", re.M)


def accept_length_from_metrics(url: str, timeout: float = 5.0) -> float | None:
    """`fastverify_spec_accept_length` from the exporter's /metrics text, or None."""
    import httpx

    if not url.rstrip("/").endswith("/metrics"):
        url = url.rstrip("/") + "/metrics"
    try:
        text = httpx.get(url, timeout=timeout).text
    except httpx.HTTPError:
        return None
    values = [float(m.group(1)) for m in _ACCEPT.finditer(text)]
    values = [v for v in values if v == v and v > 0]  # drop NaN and the 0 of "not yet seen"
    return max(values) if values else None


__all__ = [
    "RehearseConfig",
    "RehearseError",
    "TorchMissing",
    "breakeven_accept_length",
    "daemon_extra_env",
    "load_profiles",
    "plot",
    "rank_results",
    "run_rehearsal",
    "throughputs",
]
