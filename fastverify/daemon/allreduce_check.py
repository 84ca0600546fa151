"""Did SGLang serve TP all-reduces with the backend the profile asked for? Checked per start.

`AllreduceWatch(env, argv, has_nvlink)` is made at spawn from the engine's environment and
argv (`fastverify.sglang.allreduce.dispatch`: what SGLang 0.5.23 should do). It reads
SGLang's own all-reduce lines as the engine prints them (`on_record`, records of kind
`allreduce` from `fastverify.sglang.loglines`), per TP rank:

- asked for PCIe-IPC (`SGLANG_ENABLE_PCIE_IPC_ALLREDUCE` true): every rank must log
  `FlashInfer PCIe-IPC all-reduce enabled (world=N, ...)` and `... workspace built (world=,
  max_numel=, hidden=)`; a fallback warning (no `pcie_ipc_comm`, workspace failure,
  deterministic inference, a non-bf16 `--dtype`) ends the start at once (`fallback_failure`:
  no point in loading weights for a server that will not serve as asked), and ranks
  that never confirm fail verification; both with reason `allreduce_backend_fallback`,
  quoting SGLang's warning (or naming the ranks that said nothing);
- SGLang's once-per-dtype warning on a server whose `--dtype` is bfloat16 or auto is kept as
  a note (`details()["notes"]`): that dtype's reductions stay on NCCL, the bf16 ones are
  PCIe-IPC's (with `auto` and a float16 model every reduction is float16: the note says so);
- otherwise the backend is what the dispatch says (NCCL, or custom all-reduce where the
  topology allows it), reported, not confirmed (SGLang logs no line for it).

`details()` is what status (`engine.allreduce`), the switch's history record and
`fastverify_allreduce_backend_info{backend,max_bytes}` report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastverify.daemon.failures import Failure
from fastverify.sglang import allreduce

REASON = "allreduce_backend_fallback"


class AllreduceWatch:
    def __init__(
        self,
        env: Mapping[str, str],
        argv: Sequence[str],
        has_nvlink: bool | None = False,
    ) -> None:
        self.args = allreduce.ServerArgs.from_argv(list(argv))
        self.plan = allreduce.dispatch(env=env, args=self.args, has_nvlink=has_nvlink)
        self.requested = self.plan.requested
        self.tp_size = self.args.tp_size
        self._lock = threading.Lock()
        self.enabled: set[int] = set()
        self.built: dict[int, dict[str, Any]] = {}
        self.autotuned: set[int] = set()
        self.fallback: dict[str, Any] | None = None
        self.notes: list[str] = []

    def _bf16_server(self) -> bool:
        """--dtype bfloat16, or auto (the model's dtype, which fastverify cannot see)."""
        return self.args.dtype in ("auto", "bfloat16")

    @property
    def wants_pcie_ipc(self) -> bool:
        return self.requested == allreduce.PCIE_IPC

    def on_record(self, rec: Mapping[str, Any], line: str) -> bool:
        """Take one `allreduce` record; True when it is a fallback the start must fail on."""
        rank = int(rec.get("tp_rank") or 0)
        event = rec.get("event")
        with self._lock:
            if event == "enabled":
                self.enabled.add(rank)
            elif event == "built":
                self.built[rank] = dict(rec)
            elif event == "autotuned":
                self.autotuned.add(rank)
            elif event == "fallback" and rec.get("why") == "dtype" and self._bf16_server():
                # a bf16 server's odd non-bf16 reduction (SGLang warns once per dtype): that
                # dtype stays on NCCL, the bf16 all-reduces are PCIe-IPC's; noted, not fatal
                self.notes.append(str(rec.get("message") or line.strip()))
            elif event == "fallback" and self.fallback is None:
                self.fallback = {**rec, "rank": rank, "line": line.strip()}
                return self.wants_pcie_ipc
        return False

    def fallback_failure(self, log: str | None) -> Failure | None:
        """The failure for a fallback SGLang announced (None: none, or not asked for)."""
        if not self.wants_pcie_ipc or self.fallback is None:
            return None
        fb = self.fallback
        return Failure(
            REASON,
            f"profile asks for FlashInfer PCIe-IPC all-reduce "
            f"({allreduce.ENABLE_VAR}=1) but SGLang fell back to NCCL on TP{fb['rank']}: "
            f"{fb.get('message') or fb['line']}",
            line=fb["line"],
            log=log,
        )

    def verify(self, log: str | None, strict: bool = True) -> Failure | None:
        """At VERIFYING: every rank confirmed the backend (None), else the failure
        (`strict=False`: only a fallback SGLang announced counts)."""
        failure = self.fallback_failure(log)
        if failure is not None or not self.wants_pcie_ipc or not strict:
            return failure
        if self.plan.fallbacks:  # SGLang never builds it here (e.g. world size 1)
            return Failure(
                REASON,
                "profile asks for FlashInfer PCIe-IPC all-reduce but SGLang will not use "
                f"it: {'; '.join(self.plan.fallbacks)}",
                log=log,
            )
        ranks = range(self.tp_size)
        with self._lock:
            missing = [r for r in ranks if r not in self.enabled or r not in self.built]
        if missing:
            which = ", ".join(f"TP{r}" for r in missing)
            return Failure(
                REASON,
                f"profile asks for FlashInfer PCIe-IPC all-reduce but {which} logged no "
                f"'{allreduce.ENABLED_TEXT}...' and '{allreduce.BUILT_TEXT}...' lines "
                "(SGLang serves those ranks with NCCL)",
                log=log,
            )
        return None

    def details(self) -> dict[str, Any]:
        """`{"requested", "backend", "max_bytes", "max_numel", "hidden", "confirmed_ranks",
        "description"}` for status, history and /metrics."""
        with self._lock:
            built = dict(self.built)
            confirmed = sorted(set(self.enabled) & set(built))
            autotuned = len(self.autotuned)
        serving = self.plan.serving
        max_bytes = self.plan.max_bytes
        max_numel = hidden = None
        if self.wants_pcie_ipc and self.fallback is None and built:
            first = built[min(built)]
            serving = allreduce.PCIE_IPC
            max_numel, hidden = first.get("max_numel"), first.get("hidden")
            max_bytes = first.get("max_bytes")
        elif self.wants_pcie_ipc:
            serving = allreduce.NCCL
            max_bytes = None
        plan = allreduce.dispatch(
            env={allreduce.ENABLE_VAR: "1"} if serving == allreduce.PCIE_IPC else {},
            args=self.args,
            hidden=hidden,
        )
        if serving == allreduce.PCIE_IPC and max_numel is not None:
            plan.max_numel, plan.rows = max_numel, (max_numel // hidden if hidden else None)
            plan.bands = [
                allreduce.SizeBand(allreduce.PCIE_IPC, max_bytes, "decode and verify"),
                allreduce.SizeBand(allreduce.NCCL, None),
            ]
            description = plan.describe()
        else:
            description = self.plan.describe()
        return {
            "requested": self.requested,
            "backend": serving,
            "max_bytes": max_bytes,
            "max_numel": max_numel,
            "hidden": hidden,
            "confirmed_ranks": len(confirmed) if self.wants_pcie_ipc else None,
            "autotuned_ranks": autotuned if self.wants_pcie_ipc else None,
            "description": description,
            "fallback": dict(self.fallback) if self.fallback else None,
            "notes": sorted(set(self.notes)),
        }


def cache_path(env: Mapping[str, str], world: int) -> Path | None:
    """FlashInfer's PCIe-IPC tactics file for `world` ranks under `env` (None: unknown)."""
    base = env.get(allreduce.AUTOTUNE_DIR_VAR)
    if not base:
        return None
    return Path(base) / allreduce.CACHE_FILE.format(world=world)


def cache_note(env: Mapping[str, str], world: int) -> str:
    """One line for the daemon's log before a PCIe-IPC start: reuse, or a first measurement."""
    path = cache_path(env, world)
    if path is None:
        return "FlashInfer PCIe-IPC autotune: no FLASHINFER_AUTOTUNE_DIR; FlashInfer's default"
    if path.is_file():
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(path.stat().st_mtime))
        return (
            f"FlashInfer PCIe-IPC autotune: reusing the tactics cached in {path} "
            f"(written {stamp} UTC); no measurement at this start"
        )
    return (
        f"FlashInfer PCIe-IPC autotune: no cached tactics for {world} ranks yet; FlashInfer "
        f"measures them at this start and saves them to {path} for the next ones"
    )
