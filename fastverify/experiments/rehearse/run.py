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

import json
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastverify.experiments.common import allreduce as allreduce_candidate
from fastverify.experiments.common.ranks import NCCL_DEBUG_ENV, RankGroup, rank_workdir
from fastverify.experiments.preflight.hostcheck import (
    SAME_GPU_LABEL,
    SAME_GPU_NOTE,
    NoGpu,
    PreflightError,
    TorchMissing,
    rank_count,
    same_gpu_plan,
    shared_gpus,
)
from fastverify.experiments.preflight.inputs import daemon_extra_env, load_profiles
from fastverify.experiments.rehearse import memory, modelconfig
from fastverify.sglang import eagle

WORKER = Path(__file__).with_name("worker.py")
EventFn = Callable[[str], None]
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


# ------------------------------------------------------------------ maths


def breakeven_accept_length(drafter_ms: float, verify_ms: float, decode_ms: float) -> float:
    """Accept length (tokens per verify, bonus included) at which an EAGLE-3 cycle makes
    tokens as fast as plain decoding: baseline 1 token per decode_ms, speculation A tokens
    per (drafter_ms + verify_ms)."""
    from fastverify.speculation import breakeven

    if decode_ms <= 0:
        raise ValueError(f"decode_ms must be > 0, got {decode_ms}")
    return breakeven.breakeven_accept_length((drafter_ms + verify_ms) / 1000.0, 1000.0 / decode_ms)


def throughputs(
    decode_ms: float, cycle_ms: float, batch: int, accept_length: float | None
) -> dict[str, float | bool | None]:
    """Tokens/s of the baseline and (at `accept_length`) of EAGLE-3, for `batch` sequences."""
    base = batch * 1000.0 / decode_ms
    if accept_length is None:
        return {
            "baseline_tokens_per_s": base,
            "eagle3_tokens_per_s": None,
            "speculation_pays": None,
            "speedup": None,
        }
    spec = batch * accept_length * 1000.0 / cycle_ms
    return {
        "baseline_tokens_per_s": base,
        "eagle3_tokens_per_s": spec,
        "speculation_pays": spec > base,
        "speedup": spec / base,
    }


def rank_results(results: list[dict[str, Any]], accept_length: float | None) -> list[dict]:
    """Measured rows first, best first: by the better of baseline and EAGLE-3 tokens/s at the
    given accept length; without one, by the verify cycle (drafter + verify) time."""
    ok = [r for r in results if r.get("status") == "ok"]
    bad = [r for r in results if r.get("status") != "ok"]
    if accept_length is not None:
        ok.sort(key=lambda r: -max(r["baseline_tokens_per_s"], r["eagle3_tokens_per_s"] or 0.0))
    else:
        ok.sort(key=lambda r: r["cycle_ms"])
    for i, r in enumerate(ok, 1):
        r["rank"] = i
    return ok + bad


# ------------------------------------------------------------------ job + trace analysis


def build_job(
    target: modelconfig.ModelSpec,
    drafter: modelconfig.ModelSpec,
    cfg: RehearseConfig,
    world: int,
) -> dict[str, Any]:
    """What every rank receives (--job): the per-rank plans and the run's knobs."""
    return {
        "backend": cfg.backend,
        "call": cfg.call,
        "target": modelconfig.plan(target, world),
        "drafter": modelconfig.plan(drafter, world),
        "draft_tokens": cfg.draft_tokens,
        "draft_forwards": eagle.draft_forwards_per_cycle(cfg.draft_tokens),
        "batch": cfg.batch,
        "context": cfg.context,
        "steps": cfg.steps,
        "warmup": cfg.warmup,
        "pool_gb": cfg.pool_gb,
        "profile_cycles": cfg.profile_cycles,
        "seed": cfg.seed,
    }


VERIFY_SPAN = "step[VERIFY"  # SGLang 0.5.23's target verify range, `step[VERIFY bs=N]`
DECODE_SPAN = "step[DECODE"


def analyze_window(trace_dir: Path) -> dict[str, Any]:
    """Run the exporter's analyzer on the window's per-rank traces.

    The analyzer's default span is what the live exporter matches; when it finds no verify
    pass (an analyzer that only knows the pre-0.5.2x `TARGET_VERIFY` name), the 0.5.23 name
    is passed explicitly through the same public API."""
    from fastverify import traces

    analysis = traces.analyze_path(trace_dir)
    source = "analyzer default span"
    if not any(r["verify_passes"] for r in analysis["ranks"]):
        analysis = traces.analyze_path(trace_dir, span=VERIFY_SPAN)
        source = f"analyzer span={VERIFY_SPAN!r}"
    decode = traces.analyze_path(trace_dir, span=DECODE_SPAN)
    return {"verify": analysis, "decode": decode, "span_source": source}


# ------------------------------------------------------------------ one profile


REPORT_GRACE_S = 10.0  # a rank that wrote its report may linger this long in teardown


def run_ranks(
    env: Mapping[str, str],
    world: int,
    workdir: Path,
    tag: str,
    job_path: Path,
    cfg: Any,
    label: str,
    on_event: EventFn | None = None,
    gpus: int = 0,
) -> tuple[RankGroup, dict[str, Any]]:
    """Start the rehearsal workers on `job_path` (each writes its profiler window under
    TAG-traces/), wait for them (ranks that reported get REPORT_GRACE_S to leave), return
    the group and its wait's outcome. `cfg`: timeout_s and python."""
    python = cfg.python or sys.executable
    traces = workdir / f"{tag}-traces"

    def argv(rank: int, out: Path) -> list[str]:
        trace = traces / f"rehearse-TP-{rank}.trace.json.gz"
        return [python, str(WORKER), "--job", str(job_path), "--out", str(out),
                "--trace", str(trace)]  # fmt: skip

    with RankGroup(workdir, tag, world) as group:
        group.start({**env, **NCCL_DEBUG_ENV}, argv, gpus)
        waited = group.wait(cfg.timeout_s, label, on_event, report_grace_s=REPORT_GRACE_S)
    return group, waited


def killed_from_outside(
    ranks: list[dict[str, Any]], stopped: Sequence[int], per_rank_gb: float | None = None
) -> list[str]:
    """One sentence per rank that died by SIGKILL which rehearse did not send: on a host
    that ran short of memory that is the kernel's OOM killer, and the peers' errors
    ("Connection closed by peer") are only its consequence."""
    out = []
    for r in ranks:
        if r.get("returncode") == -signal.SIGKILL and r.get("rank") not in stopped:
            need = f" (the estimate was {per_rank_gb:.1f} GiB per rank)" if per_rank_gb else ""
            out.append(
                f"rank {r.get('rank')} was killed by SIGKILL (exit -9): probably out of "
                f"memory, killed by the kernel's OOM killer (see `dmesg`){need}; lower "
                "--pool-gb, --context or --batch"
            )
    return out


def _max(ranks: list[dict[str, Any]], phase: str, key: str = "p50_ms") -> float | None:
    vals = [r["timings"][phase][key] for r in ranks if r.get("timings")]
    return max(vals) if vals else None


def run_profile(
    name: str,
    path: str,
    env: Mapping[str, str],
    job: dict[str, Any],
    world: int,
    workdir: Path,
    cfg: RehearseConfig,
    on_event: EventFn | None = None,
) -> dict[str, Any]:
    """One profile on one transport path: start the ranks, wait, merge, analyze the trace."""
    tag = re.sub(r"[^A-Za-z0-9._-]", "_", f"{name}.{path}")
    job_path = workdir / f"{tag}.job.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    (workdir / f"{tag}-traces").mkdir(exist_ok=True)
    gpus = job.get("gpus", 0) if job.get("nccl") is False else 0
    group, waited = run_ranks(
        env, world, workdir, tag, job_path, cfg, f"{name} ({path})", on_event, gpus
    )
    timed_out = waited["timed_out"]
    wall = time.perf_counter() - group.started_at

    ranks = group.reports()
    for i, r in enumerate(ranks):
        r.setdefault("rank", i)
    wall_reported = max((r.get("wall_s") or 0.0) for r in ranks)
    logs = group.nccl_summaries()
    mismatch = group.nccl_env_mismatch(ranks)
    result: dict[str, Any] = {
        "profile": name,
        "path": path,
        "status": "ok",
        "wall_s": wall,
        "rank_wall_s": wall_reported,  # process start to report, the slowest rank
        "stopped_after_report": waited["stopped_after_report"],
        "init_s": max((r.get("init_s") or 0.0) for r in ranks),
        "env_verified": bool(ranks)
        and all(r.get("nccl_env") is not None for r in ranks)
        and not mismatch,
        "nccl": {
            "version": logs[0]["version"],
            "confirmed": logs[0]["confirmed"],
            "tuning": {str(k): v for k, v in logs[0]["tuning"].items()},
            "warnings": sorted({w for lg in logs for w in lg["warnings"]})[:10],
        },
        "ranks": [
            {
                k: r.get(k)
                for k in (
                    "rank",
                    "status",
                    "error",
                    "returncode",
                    "gpu",
                    "init_s",
                    "import_s",
                    "wall_s",
                    "max_memory_gb",
                    "max_rss_gb",
                    "graphs",
                    "build",
                    "timings",
                    "collectives_per_forward",
                    "allreduce",
                )
                if r.get(k) is not None
            }
            for r in ranks
        ],
    }
    errors = [r.get("error") for r in ranks if r.get("error")]
    errors += [
        f"{ph}: {g['error']}"
        for r in ranks
        for ph, g in (r.get("graphs") or {}).items()
        if g.get("error")
    ]
    if mismatch:
        errors.insert(0, f"environment not delivered as resolved: {', '.join(mismatch)}")
    if timed_out:
        errors.insert(0, f"timed out after {cfg.timeout_s:.0f} s")
    # the rank that died first, not its peers' "Connection closed by peer"
    errors[:0] = killed_from_outside(ranks, waited["stopped"], job.get("memory_per_rank_gb"))
    if errors or any(r.get("status") != "ok" for r in ranks):
        result["status"] = "failed"
        result["error"] = errors[0] if errors else "a rank failed"
        return result

    decode, verify = _max(ranks, "decode"), _max(ranks, "verify")
    compute = _max(ranks, "verify_compute")
    draft, extend = _max(ranks, "draft"), _max(ranks, "draft_extend")
    drafter = job["draft_forwards"] * draft + extend
    expected = job["target"]["allreduce_per_forward"]
    result.update(
        decode_ms=decode,
        verify_ms=verify,
        compute_ms=compute,
        exposed_comm_ms=verify - compute,
        draft_ms=draft,
        draft_extend_ms=extend,
        drafter_ms=drafter,
        cycle_ms=drafter + verify,
        verify_ms_p90=_max(ranks, "verify", "p90_ms"),
        decode_ms_p90=_max(ranks, "decode", "p90_ms"),
        breakeven_accept_length=breakeven_accept_length(drafter, verify, decode),
        allreduce_expected=expected,
    )
    calls = ranks[0]["collectives_per_forward"]["verify"]["allreduce"]
    trace_dir = workdir / f"{tag}-traces"
    try:
        window = analyze_window(trace_dir)
    except Exception as exc:  # the analyzer's own errors (TraceError, ...) are reported
        window = None
        result["trace_error"] = f"{type(exc).__name__}: {exc}"
    if window is not None:
        vranks = window["verify"]["ranks"]
        result["trace"] = {
            "span_source": window["span_source"],
            "verify_passes": [r["verify_passes"] for r in vranks],
            "verify_ms_p50": [r["verify_ms_p50"] for r in vranks],
            "allreduce_per_verify": [r["allreduce_per_verify"] for r in vranks],
            "allreduce_ms_per_verify": [r["allreduce_ms_per_verify"] for r in vranks],
            "allreduce_share": [r["allreduce_share"] for r in vranks],
            "allreduce_per_decode": [r["allreduce_per_verify"] for r in window["decode"]["ranks"]],
            "span_kind": [r.get("span_source") for r in vranks],
        }
    if (
        job["backend"] == "nccl"
        and window is not None
        and all(r["verify_passes"] for r in window["verify"]["ranks"])
    ):
        vranks = window["verify"]["ranks"]
        per = [r["allreduce_per_verify"] for r in vranks]
        result["allreduce_per_verify"] = max(per)
        result["allreduce_ms_per_verify"] = max(r["allreduce_ms_per_verify"] for r in vranks)
        result["allreduce_share"] = max(r["allreduce_share"] for r in vranks)
        result["allreduce_source"] = "GPU kernel records in the profiler window (traces.py)"
    else:
        result["allreduce_per_verify"] = calls
        result["allreduce_ms_per_verify"] = None
        result["allreduce_share"] = None
        result["allreduce_source"] = (
            "collective calls per forward (gloo runs no GPU kernels)"
            if job["backend"] != "nccl"
            else "collective calls per forward (no verify span in the trace)"
        )
    result["allreduce_check"] = result["allreduce_per_verify"] == expected
    if not result["allreduce_check"]:
        result["status"] = "failed"
        result["error"] = (
            f"all-reduces per verify: measured {result['allreduce_per_verify']}, the layer "
            f"arithmetic says {expected} (2 x {job['target']['num_layers']} layers + 1)"
        )
    return result


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
    """Rehearse every profile on every path in turn; returns the report (docs/rehearse.md)."""
    if cfg.backend not in ("nccl", "gloo"):
        raise RehearseError(f"unknown backend {cfg.backend!r} (nccl, or gloo for tests)")
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
    host = memory.host_available_bytes() if cfg.backend != "nccl" else None
    gpus = memory.gpu_free_bytes(world) if cfg.backend == "nccl" else None
    problem = memory.fit_problem(need, host, gpus)
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


def config_dict(cfg: RehearseConfig) -> dict[str, Any]:
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in asdict(cfg).items()}


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


# ------------------------------------------------------------------ plot


def plot(report: dict[str, Any], path: Path) -> Path:
    """Per profile and path: the decode step beside the speculative cycle (verify compute,
    verify all-reduce, drafter), the break-even accept length written above each pair
    (matplotlib, Agg; the sweep's plot style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["profiles"] if r.get("status") == "ok"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) + 2), 4.5))
    labels = []
    top = 0.0
    for i, r in enumerate(rows):
        x = 2.5 * i
        ar = r.get("allreduce_ms_per_verify") or r["exposed_comm_ms"]
        compute = max(0.0, r["verify_ms"] - ar)
        ax.bar(
            x,
            r["decode_ms"],
            color="#4C72B0",
            edgecolor="black",
            label="decode step" if i == 0 else None,
        )
        ax.bar(
            x + 1,
            compute,
            color="#DD8452",
            edgecolor="black",
            label="verify: compute" if i == 0 else None,
        )
        ax.bar(
            x + 1,
            ar,
            bottom=compute,
            color="#C44E52",
            edgecolor="black",
            label="verify: all-reduce" if i == 0 else None,
        )
        ax.bar(
            x + 1,
            r["drafter_ms"],
            bottom=r["verify_ms"],
            color="#8172B2",
            edgecolor="black",
            label="drafter" if i == 0 else None,
        )
        height = r["verify_ms"] + r["drafter_ms"]
        top = max(top, height, r["decode_ms"])
        ax.text(
            x + 0.5,
            height * 1.02,
            f"break-even\n{r['breakeven_accept_length']:.2f}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
        labels.append((x + 0.5, f"{r['profile']}\n{r['path']}"))
    ax.set_xticks([x for x, _ in labels])
    ax.set_xticklabels([t for _, t in labels], fontsize=8)
    ax.set_ylim(0, top * 1.25 if top else 1.0)
    ax.set_ylabel("ms (p50 of graph replays)")
    accept = report.get("accept_length")
    note = f", accept length {accept:.2f}" if accept else ""
    ax.set_title(
        f"fastverify rehearse: {report['model']}, TP={report['world_size']}, "
        f"K={report['draft_tokens']}{note}"
    )
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = [
    "RehearseConfig",
    "RehearseError",
    "TorchMissing",
    "breakeven_accept_length",
    "daemon_extra_env",
    "load_profiles",
    "plot",
    "run_rehearsal",
]
