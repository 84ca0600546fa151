"""Tune stages that need GPUs and no model load: the tuner derivation
(`preflight --derive-tuner`), `preflight` and `rehearse`, called as libraries.

On a host where one cannot run (no GPU, no PyTorch, no --model-config for rehearse) the
stage is `skipped` with that reason, never faked. Preflight drops the candidates that fail
(init, sums, CUDA-graph capture) and those clearly slower at decode sizes: at least
`SLOWER` x the fastest profile's in-graph time at every decode size (1-64 tokens); on the
gloo testing backend, which runs no NCCL, speed is not compared.
"""

from __future__ import annotations

import time
from typing import Any

from fastverify.durable import atomic_write_text
from fastverify.experiments.tune.context import Ctx, StageResult, TuneConfig


def to_json(report: dict[str, Any]) -> str:
    import json

    return json.dumps(report, indent=2, default=str)


SLOWER = 1.25
DECODE_MAX_TOKENS = 64
# the gloo backend (CPU ranks, tests only): a few small sizes and replays
GLOO_PREFLIGHT: dict[str, Any] = {"tokens": (1, 4, 16), "iters": 5, "warmup": 1, "graph_ops": 0}
GLOO_REHEARSE: dict[str, Any] = {"steps": 2, "warmup": 1}
NOT_COMPARED = "gloo ranks run no NCCL: speed not compared"


def skip_reasons(cfg: TuneConfig, gpus: int, torch_ok: bool) -> dict[str, str]:
    """stage -> why it cannot run on this host (stages that can run are absent)."""
    out: dict[str, str] = {}
    no_torch = "PyTorch is not installed here (pip install 'fastverify[preflight]')"
    no_gpu = "no GPU visible (nvidia-smi -L lists none)"
    for stage in ("derive_tuner", "preflight", "rehearse"):
        if gpus < 1:
            out[stage] = no_gpu
        elif not torch_ok:
            out[stage] = no_torch
    if "derive_tuner" not in out and gpus < 2:
        out["derive_tuner"] = f"{gpus} GPU: a tuner is derived for the rank count it serves (2+)"
    if "rehearse" not in out and not cfg.model_config:
        out["rehearse"] = "no --model-config (rehearse runs the model's shapes from config.json)"
    return out


def host_skips(cfg: TuneConfig) -> dict[str, str]:
    from fastverify.experiments.preflight.hostcheck import torch_available, visible_gpus

    if cfg.backend == "gloo":  # two CPU ranks (tests); a tuner needs real GPU timings
        out = skip_reasons(cfg, 2, torch_available())
        out.setdefault("derive_tuner", "gloo backend: no GPU timings to derive a tuner from")
        return out
    gpus = visible_gpus()
    return skip_reasons(cfg, gpus, torch_available() if gpus else False)


def extra_env(ctx: Ctx) -> dict[str, str]:
    """What preflight, rehearse and the derivation add to every profile: the daemon
    config's extras (as the server gets them) and `--env KEY=VALUE`."""
    from fastverify.experiments.preflight import inputs as pf_inputs

    out = pf_inputs.daemon_extra_env()
    for item in ctx.cfg.env:
        key, _, value = item.partition("=")
        out[key] = value
    return out


def candidates(ctx: Ctx) -> list[dict[str, Any]]:
    """The candidate rows so far: the candidates stage's plus a derived tuner profile."""
    rows = list(ctx.data("candidates").get("candidates", []))
    derived = ctx.data("derive_tuner").get("candidate")
    if derived and all(r["name"] != derived["name"] for r in rows):
        rows.append(derived)
    return rows


def _load(names: list[str]) -> list[Any]:
    from fastverify.experiments.preflight.inputs import load_profiles

    return load_profiles(names)


def derive_tuner(ctx: Ctx) -> StageResult:
    from fastverify.experiments.derive_tuner import cmd
    from fastverify.experiments.derive_tuner import derive as dt
    from fastverify.experiments.preflight.hostcheck import PreflightError, visible_gpus

    if reason := host_skips(ctx.cfg).get("derive_tuner"):
        return StageResult("skipped", reason)
    world = visible_gpus()
    name = f"tune-tp{world}"
    t0 = time.monotonic()
    try:
        report, lines = cmd.run_cli(
            name,
            base="nccl-default",
            nproc=None,
            sizes=dt.sizes_from_tokens(dt.DEFAULT_TOKENS),
            rounds=3,
            channels=dt.DEFAULT_CHANNELS,
            extra_env=extra_env(ctx),
            tuner_dir=None,
            fresh=False,
            backend="nccl",
            python="",
            timeout_s=300.0,
            fake_costs="",
            echo=ctx.emit,
        )
    except (PreflightError, dt.DeriveError) as exc:
        return StageResult("failed", f"tuner derivation: {exc}")
    ctx.journal.record_time("derive_tuner", time.monotonic() - t0)
    profile = _load([name])[0]
    from fastverify.experiments.tune.candidates import candidate_row

    return StageResult(
        "done",
        None,
        {"candidate": candidate_row(profile, "derived"), "report": report, "lines": lines},
    )


def decode_scores(report: dict[str, Any]) -> dict[str, float]:
    """Per profile: the smallest ratio, over decode sizes, of its in-graph per-op time to
    the fastest profile's at that size (1.0 = fastest somewhere)."""
    from fastverify.experiments.preflight.merge import winners

    ratios: dict[str, list[float]] = {}
    for w in winners(report.get("profiles", [])):
        if (w.get("tokens") or 0) > DECODE_MAX_TOKENS:
            continue
        figures = w.get("graph_us") or w.get("eager_us") or {}
        if not figures:
            continue
        best = min(figures.values())
        for prof, us in figures.items():
            ratios.setdefault(prof, []).append(us / best)
    return {p: min(v) for p, v in ratios.items()}


def preflight_verdicts(
    report: dict[str, Any], compare_speed: bool = True
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each profile's verdict row and the survivors (fastest first): a profile that failed is
    dropped, and so, when `compare_speed`, is one at least `SLOWER` x the fastest at every
    decode size. Ranks on the gloo backend run no NCCL, so the profiles' settings cannot make
    them faster or slower: their timings differ by noise alone and are not compared."""
    scores = decode_scores(report)
    table, survivors = [], []
    for p in report["profiles"]:
        score = scores.get(p["profile"])
        if p["status"] != "ok":
            verdict = f"dropped: {p['status']}" + (f" ({p.get('error')})" if p.get("error") else "")
        elif compare_speed and score is not None and score >= SLOWER:
            verdict = f"dropped: >= x{score:.2f} the fastest at every decode size"
        else:
            verdict = "kept" if compare_speed else f"kept ({NOT_COMPARED})"
            survivors.append(p["profile"])
        table.append(
            {
                "profile": p["profile"],
                "status": p["status"],
                "wall_s": p["wall_s"],
                "decode_ratio_to_fastest": score,
                "verdict": verdict,
            }
        )
    survivors.sort(key=lambda n: scores.get(n, 1.0))
    return table, survivors


def preflight(ctx: Ctx) -> StageResult:
    from fastverify.experiments.preflight import run as pf
    from fastverify.experiments.preflight.hostcheck import PreflightError

    if reason := host_skips(ctx.cfg).get("preflight"):
        return StageResult("skipped", reason)
    rows = candidates(ctx)
    cfg = pf.PreflightConfig(
        extra_env=extra_env(ctx),
        logs_dir=str(ctx.out / "preflight-logs"),
        backend=ctx.cfg.backend,
        **(GLOO_PREFLIGHT if ctx.cfg.backend == "gloo" else {}),
    )
    try:
        report = pf.run_preflight(_load([r["name"] for r in rows]), cfg, on_event=ctx.emit)
    except PreflightError as exc:
        return StageResult("failed", f"preflight: {exc}")
    report["fingerprint"] = ctx.data("inventory").get("fingerprint")  # this host's
    atomic_write_text(ctx.out / "preflight.json", to_json(report) + "\n", mode=0o644)
    ctx.journal.record_time("preflight", report["total_wall_s"] / max(1, len(rows)))
    table, survivors = preflight_verdicts(report, compare_speed=ctx.cfg.backend != "gloo")
    return StageResult(
        "done",
        None,
        {
            "survivors": survivors,
            "table": table,
            "report": str(ctx.out / "preflight.json"),
            "world_size": report["world_size"],
        },
    )


def rehearse(ctx: Ctx) -> StageResult:
    from fastverify.experiments.preflight.hostcheck import PreflightError
    from fastverify.experiments.rehearse import run as rh

    if reason := host_skips(ctx.cfg).get("rehearse"):
        return StageResult("skipped", reason)
    names = survivors(ctx)
    cfg = rh.RehearseConfig(
        model_config=ctx.cfg.model_config or "",
        draft_config=ctx.cfg.draft_config,
        accept_length=ctx.cfg.accept_length,
        accept_length_source="command line (--accept-length)" if ctx.cfg.accept_length else None,
        extra_env=extra_env(ctx),
        logs_dir=str(ctx.out / "rehearse-logs"),
        backend=ctx.cfg.backend,
        **(GLOO_REHEARSE if ctx.cfg.backend == "gloo" else {}),
    )
    try:
        report = rh.run_rehearsal(_load(names), cfg, on_event=ctx.emit)
    except PreflightError as exc:
        return StageResult("failed", f"rehearse: {exc}")
    atomic_write_text(ctx.out / "rehearse.json", to_json(report) + "\n", mode=0o644)
    ctx.journal.record_time("rehearse", report["wall_s"] / max(1, len(names)))
    keys = (
        "profile",
        "status",
        "rank",
        "decode_ms",
        "verify_ms",
        "cycle_ms",
        "breakeven_accept_length",
        "allreduce_per_verify",
        "baseline_tokens_per_s",
        "eagle3_tokens_per_s",
        "speedup",
        "error",
    )
    table = [{k: p.get(k) for k in keys} for p in report["profiles"]]
    ranked = [p["profile"] for p in report["profiles"] if p.get("status") == "ok"]
    return StageResult(
        "done", None, {"ranked": ranked, "table": table, "report": str(ctx.out / "rehearse.json")}
    )


def survivors(ctx: Ctx) -> list[str]:
    """Candidate names still in the funnel, best first where a stage ranked them:
    rehearse's order, else preflight's, else the doctor's recommendations first."""
    if ctx.status_of("rehearse") == "done":
        return list(ctx.data("rehearse")["ranked"])
    if ctx.status_of("preflight") == "done":
        return list(ctx.data("preflight")["survivors"])
    names = [r["name"] for r in candidates(ctx)]
    recs = [
        r["profile"] for r in ctx.data("inventory").get("doctor", {}).get("recommendations", [])
    ]
    first = [n for n in recs if n in names]
    return first + [n for n in names if n not in first]
