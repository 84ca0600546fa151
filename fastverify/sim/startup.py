"""The sim server's start-up after its TP workers run, in SGLang's order and words: NCCL
communicator init (NCCL INFO lines per rank when NCCL_DEBUG=INFO; invalid values fail here),
weight loading with progress lines (from disk, `--load-format dummy`, or mapped from the
weight cache in client mode; `--sim-fail oom` fails here), FlashInfer's PCIe-IPC workspace,
CUDA-graph capture per phase (Tree on PCIe fails here, after the full load) and the
release's start-up timings line. The TP workers' side of these steps is worker_main.py's
`worker_handler`; the engine's lifecycle around it is engine.py's.
"""

from __future__ import annotations

import atexit
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from fastverify.sglang import allreduce
from fastverify.sim import (
    allreduce_sim,
    cli_args,
    costmodel,
    flashinfer_jit,
    gpu_memory,
    ncclenv,
    release_lines,
    sglang_logs,
    weight_cache,
)
from fastverify.sim.costtable import DRAFT_WEIGHTS_GB, KV_GB, KV_TOKENS, WEIGHTS_GB, SimCosts
from fastverify.sim.wakeup import StopFlag
from fastverify.sim.worker_main import MAPPED
from fastverify.sim.workers import WorkerPool

SHARDS = 64
# `--load-format dummy`: SGLang initialises random weights instead of reading the
# checkpoint; the sim keeps this share of its simulated weight-load time (graph capture
# and NCCL init are unchanged, as on real hardware).
DUMMY_LOAD_SHARE = 0.05
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode",
                "draft_extend")  # fmt: skip
# Of an EAGLE-3 start's decode-side capture: each phase's part on SGLang 0.5.17 on an H200
# (tests/fixtures/sglang-0.5.17-h200/server-info-eagle3.log: target verify 2.62 s, draft
# prefill 1.27 s, draft decode 3.52 s, draft extend 1.02 s)
EAGLE3_GRAPH_SHARES = {
    k: round(v / 8.43, 3)
    for k, v in {"verify": 2.62, "draft_prefill": 1.27, "draft_decode": 3.52,
                 "draft_extend": 1.02}.items()
}  # fmt: skip


class Stop(Exception):
    """SIGTERM/SIGINT arrived during start-up."""


def tuning_rows(settings: ncclenv.NcclSettings, args: cli_args.SimArgs) -> list[tuple]:
    """(bytes, ALGO, PROTO, channels) for the all-reduce sizes this server captures."""
    sizes = {1}
    if args.mode == "eagle3":
        sizes |= {args.topk, args.num_draft_tokens}
    rows = []
    for tokens in sorted(sizes):
        ar = costmodel.allreduce_cost(settings, tokens * costmodel.HIDDEN * 2, args.tp_size)
        rows.append((ar.nbytes, ar.algo_name, ar.proto_name, ar.nchannels))
    return rows


class StartUp:
    """One sim server's start-up phases (`nccl_init`, `load`, `capture`, `timings`) and
    what they leave: the PCIe-IPC bound, the costs, the load and capture seconds. `stop`
    set interrupts any phase's wait (`Stop`)."""

    def __init__(
        self,
        args: cli_args.SimArgs,
        log: sglang_logs.LogWriter,
        settings: ncclenv.NcclSettings,
        workers: WorkerPool | None,
        stop: StopFlag,
    ):
        self.args = args
        self.log = log
        self.settings = settings
        self.workers = workers
        self.stop = stop
        self.pcie_ipc_max_bytes: int | None = None  # what FlashInfer's kernels serve
        self.costs: SimCosts | None = None
        self.load_weight_s: float | None = None
        self.capture_seconds: dict[str, float] = {}
        gpus = [args.base_gpu_id + rank * args.gpu_id_step for rank in range(args.tp_size)]
        self.ledger = gpu_memory.Ledger(self._ledger_dir(), gpus)
        self.preloaded_gb = 0.0  # the cache's weights this server mapped (SGLang's preloaded)
        self.pool: dict[str, float] = {}

    def _ledger_dir(self) -> Path | None:
        """Where the simulated GPU's holders are: beside the weight cache's sockets for a
        server that maps the cache; a server that reads its own weights has a GPU to itself."""
        a = self.args
        if a.weight_cache_mode != "client":
            return None
        if a.weight_cache_socket:
            return Path(a.weight_cache_socket).parent
        wc = weight_cache.facts(a.sglang_version)
        key = weight_cache.key_of(wc, gpu_id=a.base_gpu_id, tp_size=a.tp_size, tp_rank=0)
        return Path(weight_cache.path(wc, "socket", key)).parent

    def take(self, gib: float) -> float:
        """Hold `gib` more on each GPU; what is left free."""
        self.ledger.hold(self.ledger.held + gib)
        return self.ledger.free()

    @property
    def known_costs(self) -> SimCosts:
        """The costs, read by `load()`: every later phase (capture, serving) uses them."""
        if self.costs is None:
            raise RuntimeError("the sim's costs are read by load(), which has not run")
        return self.costs

    def sleep(self, seconds: float) -> None:
        if seconds > 0 and self.stop.wait(seconds):
            raise Stop

    def all_ranks(self, msg: str, level: str = "info") -> None:
        self.log.log(msg, 0, level)
        if self.workers:
            self.workers.broadcast({"cmd": "log", "msg": msg, "level": level})

    def nccl_init(self) -> None:
        a = self.args
        self.all_ranks("Init torch distributed begin.")
        lines = sglang_logs.nccl_init_lines(os.environ, 0, a.tp_size, self.settings)
        sglang_logs.write_nccl_lines(os.environ, lines, self.log)
        if self.workers:
            self.workers.broadcast({"cmd": "nccl", "tp_size": a.tp_size})
        if self.settings.errors:
            self.log.log(
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/'
                'distributed_c10d.py", line 4851, in barrier\n'
                "    work = group.barrier(opts=opts)\n"
                "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
                "distributed/c10d/ProcessGroupNCCL.cpp:3690, invalid argument (run with "
                "NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
                "ncclInvalidArgument: Invalid value for an argument.\n"
                "Last error:\n" + "\n".join(self.settings.errors),
                0,
                "error",
            )
            raise RuntimeError("nccl init failed")
        # GroupCoordinator for the TP group: PCIe-IPC first (pcie_ipc_ar.eligible_group),
        # then custom all-reduce (custom_all_reduce_utils), on every rank
        for level, msg in allreduce_sim.group_lines(os.environ, a):
            self.all_ranks(msg, level)
        if a.tp_size > 2 and not a.disable_custom_all_reduce:
            # dispatch_custom_allreduce tries the v2 class first, then the legacy one: both
            # run custom_all_reduce_utils' check and warn (fastverify.sglang.allreduce)
            for cls_name in ("CustomAllReduceV2", "CustomAllreduce"):
                self.all_ranks(
                    f"{cls_name} {allreduce.CUSTOM_PCIE_TEXT} To silence this warning, "
                    "specify disable_custom_all_reduce=True explicitly.",
                    "warning",
                )
        self.all_ranks("Init torch distributed ends. mem usage=0.53 GB")

    def load(self) -> None:
        a = self.args
        weights_s = a.load_seconds * weight_cache.WEIGHTS_SHARE
        atexit.register(self.ledger.release)
        before = self.take(gpu_memory.BEFORE_LOAD_GB)  # SGLang's pre_model_load_memory
        self.all_ranks(f"Load weight begin. avail mem={before:.2f} GB")
        tic = time.monotonic()
        if a.weight_cache_mode == "client" and self._load_from_cache(tic):
            pass  # mapped from the cache's daemon, no checkpoint read
        else:
            self._load_from_disk(weights_s, tic)
        self.load_weight_s = time.monotonic() - tic
        if a.mode == "eagle3":
            self.all_ranks(f"Load weight begin. avail mem={self.ledger.free():.2f} GB")
            self.sleep(weights_s * 0.05)
            self.all_ranks(
                "Load weight end. elapsed=0.31 s, type=LlamaForCausalLMEagle3, "
                f"dtype=torch.bfloat16, avail mem={self.take(DRAFT_WEIGHTS_GB):.2f} GB, "
                f"mem usage={DRAFT_WEIGHTS_GB:.2f} GB."
            )
        self._allocate_pool(before)
        if a.mode == "eagle3":  # the drafter's own pool (SGLang: after the target's)
            self.all_ranks("KV Cache is allocated. #tokens: 1048576, KV size: 0.07 GB")
            self.all_ranks(f"Memory pool end. avail mem={self.take(0.07):.2f} GB")
        # base_runner._pre_initialize_pcie_ipc_workspace: before graph capture
        self.pcie_ipc_max_bytes = allreduce_sim.Workspace(os.environ, a).prepare(
            lambda level, msg: self.all_ranks(msg, level), self.sleep, self._map_all
        )
        self.costs = SimCosts(os.environ, a, self.pcie_ipc_max_bytes, self.pool)

    def _allocate_pool(self, before: float) -> None:
        """The target's KV pool by SGLang's rule (gpu_memory.pool_budget) from the simulated
        GPU's free memory, capped by --max-total-tokens (SGLang: max_total_num_tokens)."""
        a = self.args
        fraction = a.mem_fraction_static or gpu_memory.DEFAULT_MEM_FRACTION
        accounts = self.preloaded_gb and weight_cache.facts(a.sglang_version).get(
            "accounts_cached_weights")  # fmt: skip
        preloaded = self.preloaded_gb if accounts else 0.0
        after = self.ledger.free()
        budget = gpu_memory.pool_budget(before=before, after=after, fraction=fraction,
                                        preloaded=preloaded)  # fmt: skip
        if budget <= 0:
            base = before + preloaded
            least = 1 - after / base
            self.log.log(
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                "ValueError: Loaded weights leave no GPU memory for the KV cache under "
                f"--mem-fraction-static={fraction}. Raise --mem-fraction-static above "
                f"{math.ceil(least * 1000) / 1000:.3f} (minimum viable = 1 - available/pre = "
                f"{least:.4f}). If using speculative decoding, draft weights are now counted.",
                0,
                "error",
            )
            raise RuntimeError("no memory for the KV cache")
        tokens = int(budget * KV_TOKENS / KV_GB + 1e-6)
        if a.max_total_tokens:
            tokens = min(tokens, a.max_total_tokens)
        size = KV_GB * tokens / KV_TOKENS
        self.all_ranks(f"KV Cache is allocated. #tokens: {tokens}, KV size: {size:.2f} GB")
        free = self.take(size)
        self.all_ranks(f"Memory pool end. avail mem={free:.2f} GB")
        self.pool = {"tokens": tokens, "kv_gb": size, "before_load_gb": before}

    def _load_from_disk(self, weights_s: float, tic: float) -> None:
        a = self.args
        steps = 16
        if a.load_format == "dummy":  # random init, no checkpoint read (no shard progress)
            weights_s *= DUMMY_LOAD_SHARE
            steps = 0
            self.sleep(weights_s * 0.95)
            if a.fail == "oom":  # random weights take the same memory
                self.log.log(sglang_logs.oom_traceback(), 0, "error")
                raise RuntimeError("injected OOM")
        for k in range(1, steps + 1):
            self.sleep(weights_s * 0.95 / steps)
            done = SHARDS * k // steps
            self.log.raw(sglang_logs.shard_progress(done, SHARDS, time.monotonic() - tic))
            if a.fail == "oom" and k == steps * 5 // 8:
                self.log.log(sglang_logs.oom_traceback(), 0, "error")
                raise RuntimeError("injected OOM")
        self.log.raw("")
        self.all_ranks(
            f"Load weight end. elapsed={time.monotonic() - tic:.2f} s, "
            f"type=DeepseekV3ForCausalLM, dtype={allreduce_sim.torch_dtype(a)}, "
            f"avail mem={self.take(WEIGHTS_GB):.2f} GB, mem usage={WEIGHTS_GB:.2f} GB."
        )

    def _load_from_cache(self, tic: float) -> bool:
        """Every rank's `IpcModelLoader.load_model` in client mode: True when mapped from the
        cache, False when its socket is absent (SGLang then loads from disk); a socket that
        refuses or a fingerprint that differs fails the start (RuntimeError), as in SGLang."""
        a = self.args
        wc = weight_cache.facts(a.sglang_version)
        replies = []
        for rank in range(a.tp_size):
            gpu_id = a.base_gpu_id + rank * a.gpu_id_step
            config = weight_cache.fingerprint(
                wc, model_path=a.model_path, tp_size=a.tp_size, tp_rank=rank,
                dtype=a.dtype, quantization=a.quantization, revision=a.revision,
            )  # fmt: skip
            key = weight_cache.key_of(wc, gpu_id=gpu_id, tp_size=a.tp_size, tp_rank=rank)
            try:
                reply, path = weight_cache.fetch(
                    wc, config=config, key=key, socket_path=a.weight_cache_socket
                )
            except weight_cache.CacheRefused as exc:
                self.log.log(
                    "Scheduler hit an exception: Traceback (most recent call last):\n"
                    '  File "sglang/srt/weight_cache/ipc_loader.py", in _fetch_from_cache\n'
                    f"RuntimeError: {exc}",
                    rank,
                    "error",
                )
                raise RuntimeError("weight cache refused") from None
            if reply is None:
                self.log.log(weight_cache.SOCKET_MISSING.format(path=path), rank)
                self.log.log(weight_cache.FALLBACK, rank, "warning")
                return False
            replies.append(reply)
        seconds = weight_cache.MAP_SECONDS
        self.sleep(seconds)
        for rank, reply in enumerate(replies):
            n = len(reply.get("entries") or ())
            self.log.log(weight_cache.fetched_line(wc, n, seconds * 0.4), rank)
            self.log.log(weight_cache.mapped_line(n, seconds * 0.6), rank)
            self.log.log(weight_cache.loaded_line(a.weight_cache_mode, seconds), rank)
        self.all_ranks(
            f"Load weight end. elapsed={time.monotonic() - tic:.2f} s, "
            f"type=DeepseekV3ForCausalLM, dtype={allreduce_sim.torch_dtype(a)}, "
            f"avail mem={self.take(0.04):.2f} GB, mem usage=0.04 GB."
        )
        self.preloaded_gb = weight_cache.BYTES_PER_RANK / (1 << 30)
        pids = [int(r["pid"]) for r in replies if r.get("pid")]
        threading.Thread(target=self._watch_cache, args=(pids,), daemon=True).start()
        return True

    def _watch_cache(self, pids: list[int]) -> None:
        """The loader's liveness watchdog: the mapped weights dangle once a cache rank dies."""
        # (a plain sleep: StopFlag.wait here would drain the main thread's wake-up pipe)
        while not self.stop.is_set():
            time.sleep(weight_cache.WATCH_INTERVAL_S)
            for pid in pids:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    self.log.log(weight_cache.DIED.format(pid=pid), 0, "critical")
                    os.kill(os.getpid(), signal.SIGKILL)
                except PermissionError:
                    continue

    def _map_all(self, path: Path) -> None:
        """Every rank's process maps `path` (TP0 here, the workers on command)."""
        MAPPED.append(flashinfer_jit.Mapped(path))
        if self.workers:
            self.workers.request_each(lambda rank: {"cmd": "map", "path": str(path)}, 30.0)

    def capture(self) -> None:
        """SGLang's capture milestones per phase that captures, in its order
        (cuda_graph_setup.capture_cuda_graphs: the target's prefill, backend breakable, then
        its decode, backend full, named verify under EAGLE-3; then the drafter's prefill,
        decode and extend) and in the served release's words (release_lines)."""
        a = self.args
        self.capture_seconds = {}
        if not a.cuda_graph:
            return
        v = a.sglang_version
        # the release's decode capture list (speculative or baseline), clamped to the pool
        bs = self.known_costs.capture or self.known_costs.baseline_capture
        graphs_s = a.load_seconds * weight_cache.GRAPHS_SHARE
        spec = a.mode == "eagle3"
        avail = [round(self.ledger.free(), 2)]

        def phase(role: str, name: str, backend: str, seconds: float, mem: float,
                  per_req: int = 1, before_end: Any = None) -> None:  # fmt: skip
            tic = time.monotonic()
            self.all_ranks(release_lines.capture_begin(v, role, name, backend, avail[0], bs,
                                                        per_req))  # fmt: skip
            if before_end is not None:
                before_end()
            self.sleep(seconds)
            took = time.monotonic() - tic
            self.capture_seconds[name if role == "target" else f"{role}_{name}"] = took
            avail[0] = round(self.take(mem), 2)
            self.all_ranks(release_lines.capture_end(v, role, name, took, mem, avail[0], bs))

        prefill_s = graphs_s * (1 - weight_cache.DECODE_GRAPH_SHARE)
        decode_s = graphs_s * weight_cache.DECODE_GRAPH_SHARE
        if a.prefill_cuda_graph:
            phase("target", "prefill", "breakable", prefill_s, 0.05)
        if a.decode_cuda_graph:
            share = EAGLE3_GRAPH_SHARES if spec else {"decode": 1.0}
            name = "verify" if spec else "decode"
            phase("target", name, "full", decode_s * share[name], 0.38,
                  a.num_draft_tokens if spec else 1, self._decode_capture_nccl)  # fmt: skip
        if spec and a.prefill_cuda_graph:
            phase("draft", "prefill", "breakable", decode_s * EAGLE3_GRAPH_SHARES["draft_prefill"],
                  0.04)  # fmt: skip
        if spec and a.decode_cuda_graph:
            phase("draft", "decode", "full", decode_s * EAGLE3_GRAPH_SHARES["draft_decode"],
                  0.04, a.topk)  # fmt: skip
            phase("draft", "extend", "full", decode_s * EAGLE3_GRAPH_SHARES["draft_extend"],
                  0.05, a.num_draft_tokens)  # fmt: skip

    def _decode_capture_nccl(self) -> None:
        """NCCL's tuning lines at the decode capture's first all-reduce; Tree on PCIe fails
        the capture (a stand-in for what docs/guides/sim.md describes)."""
        a = self.args
        tuning = sglang_logs.nccl_tuning_lines(os.environ, 0, tuning_rows(self.settings, a))
        sglang_logs.write_nccl_lines(os.environ, tuning, self.log)
        if a.tp_size > 1 and self.settings.tree_only:
            err = costmodel.TREE_CAPTURE_ERROR
            warn = sglang_logs.nccl_warn_line(
                0,
                "Tree algorithm cannot be captured in a CUDA graph on this topology "
                "(NCCL_ALGO=Tree, PCIe): operation not permitted when stream is capturing",
            )
            sglang_logs.write_nccl_lines(os.environ, [warn], self.log)
            self.log.log(sglang_logs.capture_failure_traceback(err), 0, "error")
            raise RuntimeError("capture failed")

    def graph_phases(self) -> dict[str, float]:
        """The capture seconds by SGLang's phase names, every phase (0 where none ran), as
        its startup-timings line and `sglang:startup_cuda_graph_time_seconds` carry them
        (model_executor/graph_memory_usage.py)."""
        cs = self.capture_seconds
        return {n: cs.get("verify" if n == "target_verify" else n, 0.0) for n in GRAPH_PHASES}

    def timings(self, started: float) -> None:
        """The release's "Engine startup timings (s)" line (where it prints one), after
        the scheduler is up, in SGLang's phase names."""
        a = self.args
        line = release_lines.startup_timings(
            a.sglang_version, self.load_weight_s or 0.0, 0.0, time.monotonic() - started,
            self.graph_phases(), time.monotonic() - started,
        )  # fmt: skip
        if line is not None:  # the tokenizer manager's process: no TP in its prefix
            self.log.log(line, None)
