"""Preflight's figures from its ranks' reports: per message size, the slowest rank's
latency (eager and in-graph, p50/p99), bandwidth from it, whether the sums were exact, what
NCCL chose (its debug log's TUNING lines); the fastest profile per size (`winners`); the
verdict of one profile (`verdict`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def parse_nccl_log(text: str) -> dict[str, Any]:
    """Read NCCL INFO output (fastverify.nccl.loglines.summarise): version, variables NCCL
    confirmed, AllReduce algo/proto by size, tuner plugin events and WARN lines."""
    from fastverify.nccl.loglines import summarise

    return summarise(text)


def _merge_timing(parts: list[dict[str, Any] | None], world: int, nbytes: int) -> dict[str, Any]:
    """Collective latency = the slowest rank's; bandwidth from that p50."""
    timed = [p for p in parts if p and p.get("p50_us") is not None]
    if not timed:
        return {}
    p50 = max(p["p50_us"] for p in timed)
    p99 = max(p["p99_us"] for p in timed)
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


def merge_sizes(ranks: list[dict[str, Any]], world: int, tuning: dict[int, Any]) -> list[dict]:
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


def requires_graph_off(requires: Mapping[str, str]) -> bool:
    return str(requires.get("cuda-graph", "")).lower() in ("off", "false", "0", "no", "disabled")


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
        if requires_graph_off(requires):
            return {
                "status": "ok",
                "note": f"CUDA-graph capture fails ({err}); the profile requires cuda-graph=off",
            }
        return {"status": "unsafe-cuda-graph", "error": err}
    return {"status": "ok"}  # fmt: skip
