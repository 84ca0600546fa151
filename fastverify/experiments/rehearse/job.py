"""The rehearse worker group on one job: the job's common fields, its file, the ranks
started on it (`worker.py` beside this module, one per GPU, through
`fastverify.experiments.common.ranks.RankGroup`), where they write their profiler windows,
and which rank the kernel killed. Shared by the profile runs (measure.py) and the grid
(grid.py)."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastverify.experiments.common.ranks import NCCL_DEBUG_ENV, RankGroup
from fastverify.experiments.rehearse import modelconfig

WORKER = Path(__file__).with_name("worker.py")
EventFn = Callable[[str], None]
REPORT_GRACE_S = 10.0  # a rank that wrote its report may linger this long in teardown


def job_base(
    cfg: Any, target: modelconfig.ModelSpec, drafter: modelconfig.ModelSpec, tp: int
) -> dict[str, Any]:
    """The fields every rehearse job carries (`cfg`: a RehearseConfig or GridConfig): the
    backend and call path, the per-rank plans at TP `tp`, the cache and the replays."""
    return {
        "backend": cfg.backend,
        "call": cfg.call,
        "target": modelconfig.plan(target, tp),
        "drafter": modelconfig.plan(drafter, tp),
        "context": cfg.context,
        "steps": cfg.steps,
        "warmup": cfg.warmup,
        "pool_gb": cfg.pool_gb,
        "seed": cfg.seed,
    }


def traces_dir(workdir: Path, tag: str) -> Path:
    """Where the ranks of `tag` write their profiler window (one trace per rank)."""
    return workdir / f"{tag}-traces"


def run_job(
    env: Mapping[str, str],
    world: int,
    workdir: Path,
    tag: str,
    job: Mapping[str, Any],
    cfg: Any,
    label: str,
    on_event: EventFn | None = None,
) -> tuple[RankGroup, dict[str, Any]]:
    """Write `job` to TAG.job.json, start the rehearsal workers on it (each writes its
    profiler window under `traces_dir`; a job without NCCL names the GPUs its ranks share),
    wait for them (ranks that reported get REPORT_GRACE_S to leave), return the group and
    its wait's outcome. `cfg`: timeout_s and python."""
    python = cfg.python or sys.executable
    gpus = job.get("gpus", 0) if job.get("nccl") is False else 0
    job_path = workdir / f"{tag}.job.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    traces = traces_dir(workdir, tag)
    traces.mkdir(exist_ok=True)

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
