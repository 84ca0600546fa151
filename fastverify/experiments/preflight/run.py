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
run proportionally fewer iterations. `winners()` names the fastest profile per size. This
module
never imports torch: it only checks that the workers' interpreter can (`find_spec`).

Verdict per profile: "ok"; "unsafe-cuda-graph" (eager works but capture or replay fails:
a CUDA-graph server would die after its model load; a profile that declares
`requires: cuda-graph=off` stays "ok"); "failed" (init failure, wrong sums, timeout).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.experiments.common import allreduce as allreduce_candidate
from fastverify.experiments.common.ranks import RankGroup, rank_workdir
from fastverify.experiments.common.stats import percentile

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
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}

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


class PreflightError(RuntimeError):
    """Preflight cannot run at all (no torch, no GPU, unknown profile)."""


class NoGpu(PreflightError):
    """The nccl backend was asked for on a host where no GPU is visible (a usage error:
    exit 2 for preflight and rehearse alike)."""


def no_gpu_problem(backend: str, world: int | None) -> str | None:
    """Why `backend` cannot run `world` ranks here (None: it can, as far as we can tell)."""
    if backend != "nccl":
        return None if world is None or world >= 1 else "--nproc must be at least 1"
    if visible_gpus() >= 1:
        return None
    return (
        "no GPU visible (nvidia-smi -L lists none and CUDA_VISIBLE_DEVICES names none): the "
        "nccl backend needs one GPU per rank. On a host without GPUs pass --backend gloo "
        "(CPU ranks: the same steps, no NCCL and no CUDA graphs); on a GPU host whose "
        "nvidia-smi cannot list them, set CUDA_VISIBLE_DEVICES"
    )


class TooFewGpus(NoGpu):
    """More ranks than GPUs without --share-gpu (a usage error, exit 2, as NoGpu)."""


class TorchMissing(PreflightError):
    """The workers' interpreter has no torch."""


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


# ------------------------------------------------------------------ environment checks


def torch_available(python: str = "") -> bool:
    """Whether `python` (default: this interpreter) can import torch, without importing it."""
    if not python or os.path.realpath(python) == os.path.realpath(sys.executable):
        return importlib.util.find_spec("torch") is not None
    code = "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"
    return subprocess.run([python, "-c", code], capture_output=True, check=False).returncode == 0


SAME_GPU_LABEL = "same-GPU ranks, not a PCIe measurement"
SAME_GPU_NOTE = (
    "ranks share GPUs (--share-gpu): their kernels time-slice one GPU, so every all-reduce "
    "waits for the other contexts' time slices; the code path, kernels, tuning, cache and "
    "sums are real, the timings are not a PCIe (or any interconnect) measurement"
)


def rank_count(
    tool: str, backend: str, nproc: int | None, python: str = "", share_gpu: bool = False
) -> int:
    """How many ranks `tool` (preflight, rehearse) starts here, after the checks both share:
    torch in the ranks' interpreter, a GPU for the nccl backend, one rank per GPU (several
    per GPU with `share_gpu`)."""
    if not torch_available(python):
        raise TorchMissing(
            f"{tool} needs PyTorch in {python or sys.executable}: "
            "pip install 'fastverify[preflight]' (or torch>=2.3 with CUDA for your driver)"
        )
    problem = no_gpu_problem(backend, nproc)
    if problem:
        raise NoGpu(problem)
    if backend != "nccl":
        return nproc or 2
    gpus = visible_gpus()
    world = nproc or gpus
    if 0 < gpus < world and not share_gpu:
        raise TooFewGpus(
            f"--nproc {world} but only {gpus} GPU(s) are visible (one rank per GPU); "
            "--share-gpu runs several ranks per GPU, for FlashInfer PCIe-IPC candidates only "
            "(NCCL refuses two ranks on one GPU), and its timings are not a PCIe measurement"
        )
    return world


def shared_gpus(backend: str, world: int) -> int:
    """The GPUs `world` ranks share (0 < n < world), else 0 (one GPU per rank, or gloo)."""
    if backend != "nccl":
        return 0
    gpus = visible_gpus()
    return gpus if 0 < gpus < world else 0


def same_gpu_plan(
    cand: allreduce_candidate.Candidate, shared: int
) -> allreduce_candidate.Candidate:
    """With ranks sharing GPUs (`shared` > 0) an NCCL candidate cannot run: skipped, saying
    why (NCCL's own refusal); a PCIe-IPC candidate runs without an NCCL communicator."""
    if not shared or cand.skip is not None or cand.backend != allreduce_candidate.allreduce.NCCL:
        return cand
    from fastverify.nccl.pynccl import SAME_GPU_NCCL

    return allreduce_candidate.Candidate(cand.backend, skip=SAME_GPU_NCCL)


def visible_gpus() -> int:
    """GPUs a worker would see: CUDA_VISIBLE_DEVICES when set, else `nvidia-smi -L`."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return len([d for d in cvd.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


# ------------------------------------------------------------------ NCCL debug logs


def parse_nccl_log(text: str) -> dict[str, Any]:
    """Read NCCL INFO output (fastverify.nccl.loglines.summarise): version, variables NCCL
    confirmed, AllReduce algo/proto by size, tuner plugin events and WARN lines."""
    from fastverify.nccl.loglines import summarise

    return summarise(text)


# ------------------------------------------------------------------ one profile


def _merge_timing(parts: list[dict[str, Any] | None], world: int, nbytes: int) -> dict[str, Any]:
    """Collective latency = the slowest rank's; bandwidth from that p50."""
    parts = [p for p in parts if p and p.get("p50_us") is not None]
    if not parts:
        return {}
    p50 = max(p["p50_us"] for p in parts)
    p99 = max(p["p99_us"] for p in parts)
    algbw = nbytes / (p50 * 1e-6) / 1e9 if p50 > 0 else None
    return {
        "p50_us": p50,
        "p99_us": p99,
        "algbw_gbs": algbw,
        "busbw_gbs": None if algbw is None else algbw * 2.0 * (world - 1) / world,
    }


def _merge_batch(parts: list[dict[str, Any]], key: str, world: int, nbytes: int) -> dict:
    """Batched per-op time: the slowest rank's."""
    us = max(p[key] for p in parts)
    algbw = nbytes / (us * 1e-6) / 1e9 if us > 0 else None
    merged = {k: v for k, v in parts[0].items() if k in ("ops", "ops_per_graph", "replays")}
    merged.update(
        {
            key: us,
            "algbw_gbs": algbw,
            "busbw_gbs": None if algbw is None else algbw * 2.0 * (world - 1) / world,
        }
    )
    return merged


def _merge_sizes(ranks: list[dict[str, Any]], world: int, tuning: dict[int, Any]) -> list[dict]:
    rows = []
    by_rank = [r.get("sizes", []) for r in ranks]
    for i, base in enumerate(by_rank[0] if by_rank else []):
        per = [sizes[i] for sizes in by_rank if i < len(sizes)]
        nbytes = base["bytes"]
        eager_errors = [p["eager"].get("error") for p in per if p["eager"].get("status") != "ok"]
        graphs = [p.get("graph", {}) for p in per]
        capture = _worst([g.get("capture") for g in graphs])
        replay = _worst([g.get("replay") for g in graphs])
        graph_err = next((g.get("error") for g in graphs if g.get("error")), None)
        graph: dict[str, Any] = {"capture": capture, "replay": replay}
        if graph_err:
            graph["error"] = graph_err
        if capture == "skipped":
            graph["reason"] = next((g.get("reason") for g in graphs if g.get("reason")), None)
        graph.update(_merge_timing(graphs if replay == "ok" else [], world, nbytes))
        batches = [g["batch"] for g in graphs if g.get("batch")]
        if batches and len(batches) == len(graphs):
            graph["batch"] = _merge_batch(batches, "per_op_p50_us", world, nbytes)
        eager: dict[str, Any] = {"status": "ok" if not eager_errors else "failed"}
        if eager_errors:
            eager["error"] = eager_errors[0]
        eager.update(_merge_timing([p["eager"] for p in per], world, nbytes))
        ebatches = [p["eager"]["batch"] for p in per if p["eager"].get("batch")]
        if ebatches and len(ebatches) == len(per):
            eager["batch"] = _merge_batch(ebatches, "per_op_mean_us", world, nbytes)
        choice = tuning.get(nbytes)
        rows.append(
            {
                "tokens": base["tokens"],
                "bytes": nbytes,
                "backend": base.get("backend", "nccl"),  # pcie_ipc: FlashInfer's kernels
                "counts": base.get("counts"),
                "correct": len(per) == len(by_rank) and all(p.get("correct") for p in per),
                "eager": eager,
                "graph": graph,
                "nccl_algo": choice["algo"] if choice else None,
                "nccl_proto": choice["proto"] if choice else None,
            }
        )
    return rows


WINNER_FIGURES = {
    "graph": ("graph", "batch", "per_op_p50_us"),  # in-graph per op: what a CUDA-graph server sees
    "eager": ("eager", "batch", "per_op_mean_us"),  # back to back: an eager (prefill) forward
}


def _figure(size: dict[str, Any], path: tuple[str, str, str]) -> float | None:
    value = ((size.get(path[0]) or {}).get(path[1]) or {}).get(path[2])
    return value if isinstance(value, (int, float)) and value > 0 else None


def winners(profiles: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per message size: the fastest profile in-graph and back to back, among profiles whose
    sums were exact (a failed or unsafe profile still competes where it measured), with the
    runner-up's ratio and every profile's figure."""
    by_size: dict[int, dict[str, Any]] = {}
    for prof in profiles:
        for size in prof.get("sizes", []):
            if not size.get("correct"):
                continue
            entry = by_size.setdefault(
                size["bytes"], {"bytes": size["bytes"], "tokens": size.get("tokens")}
            )
            for mode, path in WINNER_FIGURES.items():
                value = _figure(size, path)
                if value is not None:
                    entry.setdefault(f"{mode}_us", {})[prof["profile"]] = value
    out = []
    for nbytes in sorted(by_size):
        entry = by_size[nbytes]
        for mode in WINNER_FIGURES:
            figures = entry.get(f"{mode}_us") or {}
            ranked = sorted(figures.items(), key=lambda kv: kv[1])
            if ranked:
                entry[f"{mode}_winner"] = ranked[0][0]
                entry[f"{mode}_second"] = ranked[1][0] if len(ranked) > 1 else None
                entry[f"{mode}_margin"] = ranked[1][1] / ranked[0][1] if len(ranked) > 1 else None
                algo = next(
                    (
                        f"{s['nccl_algo']}/{s['nccl_proto']}"
                        for p in profiles
                        if p["profile"] == ranked[0][0]
                        for s in p.get("sizes", [])
                        if s["bytes"] == nbytes and s.get("nccl_algo")
                    ),
                    None,
                )
                entry[f"{mode}_winner_algo_proto"] = algo
        out.append(entry)
    return out


def _worst(states: list[str | None]) -> str:
    for s in ("failed", "not run", "skipped"):
        if s in states:
            return s
    return "ok" if states and all(s == "ok" for s in states) else "not run"


def _requires_graph_off(requires: Mapping[str, str]) -> bool:
    return str(requires.get("cuda-graph", "")).lower() in ("off", "false", "0", "no", "disabled")


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
    sizes = _merge_sizes([r for r in ranks if r.get("sizes")] or ranks, world, nccl0["tuning"])

    init_errors = [r.get("error") for r in ranks if r.get("error")]
    env_mismatch = group.nccl_env_mismatch(ranks)
    result: dict[str, Any] = {
        "profile": name,
        "world_size": world,
        "wall_s": wall,
        "init_s": max((r.get("init_s") or 0.0) for r in ranks) if ranks else None,
        "nccl": {
            "version": nccl0["version"],
            "confirmed": nccl0["confirmed"],
            "warnings": sorted({w for n in nccl_logs for w in n["warnings"]})[:10],
        },
        "env_verified": bool(ranks)
        and all(r.get("nccl_env") is not None for r in ranks)
        and not env_mismatch,
        "env_mismatch": env_mismatch,
        "sizes": sizes,
        "ranks": [{k: r.get(k) for k in RANK_KEYS if r.get(k) is not None} for r in ranks],
    }
    result.update(
        verdict(sizes, init_errors, timed_out, env_mismatch, requires or {}, cfg.timeout_s)
    )
    return result


def verdict(
    sizes: list[dict[str, Any]],
    init_errors: list[str],
    timed_out: bool,
    env_mismatch: list[str],
    requires: Mapping[str, str],
    timeout_s: float,
) -> dict[str, str]:
    """`{"status", "error"|"note"}` for one profile from its merged per-size results."""
    if env_mismatch:
        return {
            "status": "failed",
            "error": f"environment not delivered as resolved: {', '.join(env_mismatch)}",
        }
    if timed_out:
        return {"status": "failed", "error": f"timed out after {timeout_s:.0f} s"}
    if init_errors and not sizes:
        return {"status": "failed", "error": init_errors[0]}
    bad = next((s for s in sizes if not s["correct"] or s["eager"]["status"] != "ok"), None)
    if bad is not None:
        return {
            "status": "failed",
            "error": bad["eager"].get("error")
            or f"wrong all-reduce result at {bad['bytes']} bytes",
        }
    if not sizes:
        return {
            "status": "failed",
            "error": init_errors[0] if init_errors else "no sizes were measured",
        }
    graph_failed = [s for s in sizes if "failed" in (s["graph"]["capture"], s["graph"]["replay"])]
    if graph_failed:
        err = graph_failed[0]["graph"].get("error") or "capture/replay failed"
        if _requires_graph_off(requires):
            return {
                "status": "ok",
                "note": f"CUDA-graph capture fails ({err}); the profile requires cuda-graph=off",
            }
        return {"status": "unsafe-cuda-graph", "error": err}
    return {"status": "ok"}  # fmt: skip


# ------------------------------------------------------------------ the whole run


def _masked(env: Mapping[str, str]) -> dict[str, str]:
    """Values of secret-looking names replaced by "***" for reports (fastverify.redact, the
    one home of the secret rule)."""
    from fastverify.redact import mask_env

    return mask_env(env)


def daemon_extra_env(config_path: str | None = None) -> dict[str, str]:
    """The non-profile variables the daemon adds to the engine's environment, from its config
    (`[server] env_passthrough` names taken from this environment, then `[server] env`), so
    preflight ranks see what the server would. Missing default config file: nothing."""
    from fastverify import config as config_mod

    try:
        cfg = config_mod.load(Path(config_path) if config_path else None)
    except config_mod.ConfigError as exc:
        raise PreflightError(f"config: {exc}") from None
    extra = {n: os.environ[n] for n in cfg.server.env_passthrough if n in os.environ}
    extra.update(cfg.server.env)
    return extra


def _profile_env(profile: Any, extra: Mapping[str, str]) -> dict[str, str]:
    from fastverify.profiles.effective import effective_env

    return effective_env(profile, extra=dict(extra) or None)


def load_profiles(names: Sequence[str]) -> list[Any]:
    """Profiles by name or path (every shipped/user profile when `names` is empty)."""
    from fastverify.profiles.model import ProfileError
    from fastverify.profiles.store import ProfileStore

    store = ProfileStore()
    if not names:
        profiles = store.list()
        if not profiles:
            raise PreflightError("no profiles found (shipped or user)")
        return profiles
    out = []
    for name in names:
        try:
            out.append(store.load(name, force=True))
        except ProfileError as exc:
            problems = "; ".join(str(p) for p in getattr(exc, "problems", [])) or str(exc)
            raise PreflightError(f"profile {name!r}: {problems}") from None
    return out


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
    """Preflight every profile in turn; returns the report (see docs/experiments.md)."""
    if cfg.backend not in ("nccl", "gloo"):
        raise PreflightError(f"unknown backend {cfg.backend!r} (nccl, or gloo for tests)")
    if cfg.call not in ("pynccl", "torch"):
        raise PreflightError(f"unknown call path {cfg.call!r} (pynccl or torch)")
    world = rank_count("preflight", cfg.backend, cfg.nproc, cfg.python, cfg.share_gpu)
    shared = shared_gpus(cfg.backend, world)
    env_for = env_for or (lambda p: _profile_env(p, cfg.extra_env))

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
                res["extra_env"] = _masked(cfg.extra_env)
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
