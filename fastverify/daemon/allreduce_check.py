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

SGLang logs the two confirmations at INFO, with a ` TP{n}` prefix from `configure_logger`: a
server at `--log-level warning` (or with a `SGLANG_LOGGING_CONFIG_PATH` of its own) prints
neither. Evidence that does not depend on the level: FlashInfer's JIT-built `pcie_ipc_comm.so`
mapped in the engine's processes (`/proc/PID/maps`, `note_maps`), one per TP rank. A rank
count short of the TP size fails like missing lines. `refusal(...)` says before anything is
stopped why a start cannot serve (or cannot be shown to serve) PCIe-IPC: a fallback the
dispatch already knows (deterministic inference, world size, a float16 model under
`--dtype auto`, a group across nodes), or no evidence possible (no INFO lines and no
readable /proc maps).

`details()` is what status (`engine.allreduce`), the switch's history record and
`fastverify_allreduce_backend_info{backend,max_bytes}` report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastverify.daemon.failures import Failure
from fastverify.engines import allreduce_host
from fastverify.engines.allreduce_host import AllreduceHost
from fastverify.sglang import allreduce, flashinfer_facts

REASON = "allreduce_backend_fallback"
LOGGING_CONFIG_VAR = "SGLANG_LOGGING_CONFIG_PATH"  # srt/utils/common.py configure_logger


class AllreduceWatch:
    def __init__(
        self,
        env: Mapping[str, str],
        argv: Sequence[str],
        has_nvlink: bool | None = False,
        host: AllreduceHost | None = None,
    ) -> None:
        self.host = host
        if host is not None:  # the engine's own capabilities (sizes, FlashInfer, links)
            self.args = allreduce_host.server_args(host, argv)
            self.plan = allreduce_host.dispatch_for(host, env, argv)
        else:
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
        self.lines_expected = log_lines_visible(env, self.args)
        self.mapped: dict[int, str] | None = None  # pid -> mapped pcie_ipc_comm.so
        self.jit: dict[str, Any] | None = None  # what the JIT workspace held at spawn
        self.tactics: dict[str, Any] | None = None  # the tactics file after the start
        self.env = dict(env)

    def note_maps(self, pids: Sequence[int], proc_root: Path = Path("/proc")) -> None:
        """Which of the engine's processes have FlashInfer's `pcie_ipc_comm.so` mapped."""
        self.mapped = mapped_library(pids, flashinfer_facts.PCIE_IPC_LIB, proc_root)

    def _bf16_server(self) -> bool:
        """--dtype bfloat16, or auto with a bf16 model (or one whose config.json fastverify
        cannot read)."""
        return self.args.dtype_resolved[0] in ("auto", "bfloat16")

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
        if not missing:
            return None
        mapped = len(self.mapped or {})
        if mapped >= self.tp_size:
            return None  # every rank's process has the kernels loaded
        which = ", ".join(f"TP{r}" for r in missing)
        why_lines = "" if self.lines_expected else f" ({self.lines_expected.why})"
        maps = (
            "its processes could not be read (/proc/PID/maps)"
            if self.mapped is None
            else f"{mapped} of its processes map {flashinfer_facts.PCIE_IPC_LIB}.so, "
            f"{self.tp_size} TP ranks would"
        )
        return Failure(
            REASON,
            f"profile asks for FlashInfer PCIe-IPC all-reduce but {which} logged no "
            f"'{allreduce.ENABLED_TEXT}...' and '{allreduce.BUILT_TEXT}...' lines{why_lines}, "
            f"and {maps} (SGLang serves those ranks with NCCL)",
            log=log,
        )

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
        mapped = len(self.mapped or {})
        by_maps = not built and mapped >= self.tp_size > 1
        if self.wants_pcie_ipc and self.fallback is None and built:
            first = built[min(built)]
            serving = allreduce.PCIE_IPC
            max_numel, hidden = first.get("max_numel"), first.get("hidden")
            max_bytes = first.get("max_bytes")
        elif self.wants_pcie_ipc and self.fallback is None and by_maps:
            serving = allreduce.PCIE_IPC  # the bound is SGLang's rule (no line gave it)
            max_numel, hidden = self.plan.max_numel, self.plan.hidden
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
            "confirmed_ranks": (
                (len(confirmed) or (mapped if by_maps else 0)) if self.wants_pcie_ipc else None
            ),
            "evidence": self._evidence(confirmed, by_maps),
            "mapped_processes": mapped if self.mapped is not None else None,
            "log_lines": self.lines_expected.to_dict(),
            "jit": self.jit,
            "tactics": self.tactics,
            "autotuned_ranks": autotuned if self.wants_pcie_ipc else None,
            "description": description,
            "fallback": dict(self.fallback) if self.fallback else None,
            "notes": sorted(set(self.notes)),
        }

    def on_autotuner_line(self, line: str) -> str | None:
        """FlashInfer's own autotuner lines (visible only where its logger is not silenced):
        a note when they show the no-nv_internal failure mode (every tactic skipped, 0 configs
        saved), else None."""
        rec = flashinfer_facts.parse_autotuner_line(line)
        if rec is None:
            return None
        with self._lock:
            seen = self.__dict__.setdefault("_autotuner", {})
            seen[rec["event"]] = rec
            failed = "skipped" in seen and seen.get("saved", {}).get("configs") == 0
            if failed and flashinfer_facts.NO_NV_INTERNAL not in self.notes:
                self.notes.append(flashinfer_facts.NO_NV_INTERNAL)
                return flashinfer_facts.NO_NV_INTERNAL
        return None

    def note_tactics(self) -> None:
        """After the start: FlashInfer's tactics file, and whether it covers this workspace
        (an empty one is the no-nv_internal failure mode: the next start re-tunes)."""
        path = cache_path(self.env, self.tp_size)
        if path is None:
            return
        with self._lock:
            built = dict(self.built)
        numel = built[min(built)].get("max_numel") if built else self.plan.max_numel
        rep = flashinfer_facts.cache_report(path, world=self.tp_size, max_numel=numel)
        self.tactics = rep
        if rep["exists"] and rep["empty"] and flashinfer_facts.NO_NV_INTERNAL not in self.notes:
            self.notes.append(flashinfer_facts.NO_NV_INTERNAL)

    def _evidence(self, confirmed: list[int], by_maps: bool) -> str | None:
        if not self.wants_pcie_ipc:
            return None
        if confirmed and self.mapped:
            return "log lines and mapped pcie_ipc_comm.so"
        if confirmed:
            return "log lines"
        return "mapped pcie_ipc_comm.so" if by_maps else None


@dataclass(frozen=True)
class LogLines:
    """Whether SGLang's INFO lines (with their ` TP{n}` prefix) can reach the daemon."""

    visible: bool
    why: str = ""

    def __bool__(self) -> bool:
        return self.visible

    def to_dict(self) -> dict[str, Any]:
        return {"visible": self.visible, "why": self.why or None}


def log_lines_visible(env: Mapping[str, str], args: allreduce.ServerArgs) -> LogLines:
    """SGLang's `configure_logger` (srt/utils/common.py): `--log-level` on every logger, the
    ` TP{n}` prefix in the format; `SGLANG_LOGGING_CONFIG_PATH` replaces both."""
    if env.get(LOGGING_CONFIG_VAR):
        return LogLines(False, f"{LOGGING_CONFIG_VAR} replaces SGLang's logger configuration")
    level = args.log_level.lower()
    if level not in ("debug", "info"):
        return LogLines(False, f"--log-level {level}: SGLang logs them at INFO")
    return LogLines(True)


def mapped_library(
    pids: Sequence[int], name: str, proc_root: Path = Path("/proc")
) -> dict[int, str] | None:
    """pid -> path of `name.so` for each process that has it mapped (None: no process's
    maps could be read)."""
    found: dict[int, str] = {}
    readable = False
    suffix = f"/{name}.so"
    for pid in pids:
        try:
            text = (proc_root / str(pid) / "maps").read_text()
        except OSError:
            continue
        readable = True
        for line in text.splitlines():
            path = line.split(None, 5)[-1] if line.count(" ") >= 5 else ""
            if path.endswith(suffix):
                found[pid] = path.strip()
                break
    return found if readable else None


def maps_readable(proc_root: Path = Path("/proc")) -> bool:
    """Can this daemon read a process's maps (its own, as a stand-in for its engine's)?"""
    try:
        (proc_root / "self" / "maps").read_text()
        return True
    except OSError:
        return False


def refusal(
    env: Mapping[str, str],
    argv: Sequence[str],
    has_nvlink: bool | None = False,
    *,
    host: AllreduceHost | None = None,
    maps_ok: bool | None = None,
) -> str | None:
    """Why a start of `argv` under `env` asks for PCIe-IPC but cannot serve with it (or
    cannot be shown to), known before anything is stopped; None when it can, or when
    PCIe-IPC is not asked for."""
    watch = AllreduceWatch(env, argv, has_nvlink, host=host)
    if not watch.wants_pcie_ipc:
        return None
    if watch.plan.fallbacks:
        serving = allreduce.BACKEND_NAMES.get(watch.plan.serving, watch.plan.serving)
        return (
            f"{allreduce.ENABLE_VAR}=1 asks for FlashInfer PCIe-IPC all-reduce, but SGLang "
            f"would serve with {serving}: {'; '.join(watch.plan.fallbacks)}"
        )
    if not watch.lines_expected and not (maps_readable() if maps_ok is None else maps_ok):
        return (
            f"{allreduce.ENABLE_VAR}=1 asks for FlashInfer PCIe-IPC all-reduce, which fastverify "
            f"confirms from SGLang's INFO lines or the processes' /proc/PID/maps: the lines "
            f"will not come ({watch.lines_expected.why}) and /proc maps cannot be read here. "
            f"Set --log-level info in the server's args (and leave {LOGGING_CONFIG_VAR} unset)"
        )
    return None


def cache_path(env: Mapping[str, str], world: int) -> Path | None:
    """FlashInfer's PCIe-IPC tactics file for `world` ranks under `env` (None: unknown)."""
    base = env.get(allreduce.AUTOTUNE_DIR_VAR)
    if not base:
        return None
    return Path(base) / allreduce.CACHE_FILE.format(world=world)


def cache_note(env: Mapping[str, str], world: int, max_numel: int | None = None) -> str:
    """One line for the daemon's log before a PCIe-IPC start: reuse, or a measurement.
    FlashInfer reuses an entry only for the same world, topology profile, max_blocks,
    max_numel and memop setting (`flashinfer_facts.covers`): a file written for another
    workspace is no reuse."""
    path = cache_path(env, world)
    if path is None:
        return "FlashInfer PCIe-IPC autotune: no FLASHINFER_AUTOTUNE_DIR; FlashInfer's default"
    if not path.is_file():
        return (
            f"FlashInfer PCIe-IPC autotune: no cached tactics for {world} ranks yet; FlashInfer "
            f"measures them at this start and saves them to {path} for the next ones"
        )
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(path.stat().st_mtime))
    rep = flashinfer_facts.cache_report(path, world=world, max_numel=max_numel)
    if rep["empty"]:
        return (
            f"FlashInfer PCIe-IPC autotune: {path} (written {stamp} UTC) holds no tactics: "
            f"FlashInfer measures again at this start. {flashinfer_facts.NO_NV_INTERNAL}"
        )
    heads = ", ".join(
        f"world {h['world']} max_numel {h['max_numel']} ({h['profile']}, max_blocks "
        f"{h['max_blocks']}, memop {'on' if h['memop'] else 'off'})"
        for h in rep["heads"]
    )
    if rep["covers"] is False:
        return (
            f"FlashInfer PCIe-IPC autotune: {path} holds tactics for other workspaces only "
            f"({heads}); this one (world {world}, max_numel {max_numel}) is measured at this "
            "start and added to it"
        )
    held = f" for {heads}" if heads else ""
    return (
        f"FlashInfer PCIe-IPC autotune: reusing the tactics cached in {path} "
        f"(written {stamp} UTC){held}; no measurement at this start, as long as FlashInfer's "
        "topology probe finds the same profile, max_blocks and memop setting"
    )


def jit_note(env: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """The JIT workspace before a PCIe-IPC start: the compile a first start pays, or the
    library a previous start built (persisted in the daemon's state dir)."""
    libs = flashinfer_facts.jit_libraries(env)
    if libs:
        lib = libs[-1]
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(lib.stat().st_mtime))
        return (
            f"FlashInfer JIT: reusing {lib} (built {stamp} UTC by an earlier start); "
            "nothing to compile at this start",
            {"reused": True, "library": str(lib)},
        )
    base = env.get(flashinfer_facts.WORKSPACE_BASE_VAR) or "~"
    note = (
        f"FlashInfer JIT: first start on this state volume: {flashinfer_facts.first_start_note()}; "
        f"the output stays in {base}/.cache/flashinfer for the next starts"
    )
    if env.get(flashinfer_facts.DISABLE_JIT_VAR):
        note += (
            f". {flashinfer_facts.DISABLE_JIT_VAR} is set: that build fails and SGLang serves "
            "with NCCL"
        )
    return note, {"reused": False, "library": None}


def start_notes(watch: AllreduceWatch) -> list[str]:
    """What the daemon says before a PCIe-IPC start: the JIT compile (or its reuse) and the
    tactics (measured, or reused for this workspace)."""
    note, watch.jit = jit_note(watch.env)
    return [note, cache_note(watch.env, watch.tp_size, watch.plan.max_numel)]
