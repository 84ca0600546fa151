"""Lifecycle of one sim engine process (TP0): start-up like SGLang, serve, shut down.

Order, as SGLang does it: SGLang's own NCCL variables (`apply_engine_env`, e.g.
NCCL_GRAPH_REGISTER=0 with TP > 1) -> banner and server_args -> TP workers (forked before
any thread, then exec'd as SGLang spawns its schedulers) -> NCCL communicator init
(NCCL INFO lines per rank when NCCL_DEBUG=INFO) ->
weight loading with progress lines -> CUDA-graph capture (fails for NCCL_ALGO=Tree,
after the full load) -> HTTP server up (uvicorn lines) -> warm-up generation ->
`The server is fired up and ready to roll!`. SIGTERM/SIGINT at any point stop the
workers and exit 0. Failures exit 1 after logging SGLang's error text: invalid NCCL
values at communicator init, Tree with CUDA graphs at capture, an injected OOM
(`--sim-fail oom`) while loading, a busy port, a TP worker that dies, a crashed
scheduler. A missing absolute --model-path fails immediately like SGLang (config not
found), before any worker is forked.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastverify.engines.sim import (
    allreduce_sim,
    cli_args,
    costmodel,
    costtable,
    flashinfer_jit,
    ncclenv,
    sglang_logs,
    weight_cache,
)
from fastverify.engines.sim.costtable import SimCosts
from fastverify.engines.sim.metrics import SimMetrics
from fastverify.engines.sim.profiler import Profiler, write_cycles
from fastverify.engines.sim.scheduler import Request, Scheduler
from fastverify.engines.sim.server import App, SimHTTPServer
from fastverify.engines.sim.wakeup import StopFlag
from fastverify.engines.sim.workers import WorkerPool
from fastverify.sglang import adaptive, allreduce, loglines
from fastverify.sglang.facts import resolve as resolve_facts

SIM_VERSION = "0.5.23-fastverify-sim"
SHARDS = 64
# `--load-format dummy`: SGLang initialises random weights instead of reading the
# checkpoint; the sim keeps this share of its simulated weight-load time (graph capture
# and NCCL init are unchanged, as on real hardware).
DUMMY_LOAD_SHARE = 0.05
BANNER = (
    "fastverify sim engine: this is a SIMULATION of an SGLang server (no GPU, no model). "
    "Timings come from a documented cost model (docs/sim.md) and are not measurements "
    "of real hardware."
)


class _Stop(Exception):
    """SIGTERM/SIGINT arrived during start-up."""


def _tuning_rows(settings: ncclenv.NcclSettings, args: cli_args.SimArgs) -> list[tuple]:
    """(bytes, ALGO, PROTO, channels) for the all-reduce sizes this server captures."""
    sizes = {1}
    if args.mode == "eagle3":
        sizes |= {args.topk, args.num_draft_tokens}
    rows = []
    for tokens in sorted(sizes):
        ar = costmodel.allreduce_cost(settings, tokens * costmodel.HIDDEN * 2, args.tp_size)
        rows.append((ar.nbytes, ar.algo_name, ar.proto_name, ar.nchannels))
    return rows


_MAPPED: list[flashinfer_jit.Mapped] = []  # libraries this process holds mapped


def _worker_handler(log: sglang_logs.LogWriter):
    def handle(rank: int, msg: dict[str, Any]) -> dict[str, Any] | None:
        cmd = msg.get("cmd")
        if cmd == "log":
            log.log(msg["msg"], rank, msg.get("level", "info"))
        elif cmd == "nccl":
            lines = sglang_logs.nccl_init_lines(
                os.environ, rank, msg["tp_size"], ncclenv.resolve(os.environ)
            )
            sglang_logs.write_nccl_lines(os.environ, lines, log)
        elif cmd == "map":  # load FlashInfer's JIT-built library, as each rank's process does
            _MAPPED.append(flashinfer_jit.Mapped(Path(msg["path"])))
        elif cmd == "trace":
            path = write_cycles(
                msg["path"], rank, msg["tp_size"], msg["cycles"], dict(os.environ), msg["args"]
            )
            return {"ok": True, "path": str(path)}
        return None

    return handle


class SimEngine:
    """One run of the sim server: `SimEngine(args).run()` returns the exit status."""

    def __init__(self, args: cli_args.SimArgs):
        self.args = args
        self.log = sglang_logs.LogWriter(sys.stdout, args.log_level)
        self._stop_flag: StopFlag | None = None  # created in run(), after forking
        self.workers: WorkerPool | None = None
        self.settings = ncclenv.resolve(os.environ)
        self.failure: str | None = None
        self.pcie_ipc_max_bytes: int | None = None  # what FlashInfer's kernels serve
        self._cost_table: dict[str, Any] | None = None

    # --------------------------------------------------------------- helpers
    @property
    def stop_event(self) -> StopFlag:
        if self._stop_flag is None:
            raise RuntimeError("stop flag used before run()")
        return self._stop_flag

    def _sleep(self, seconds: float) -> None:
        if seconds > 0 and self.stop_event.wait(seconds):
            raise _Stop

    def _all_ranks(self, msg: str, level: str = "info") -> None:
        self.log.log(msg, 0, level)
        if self.workers:
            self.workers.broadcast({"cmd": "log", "msg": msg, "level": level})

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_event.set()

    def _on_child(self, signum: int, frame: Any) -> None:
        """A TP worker exited: unless we are stopping, the server fails (as SGLang does)."""
        if self.stop_event.is_set() or self.workers is None:
            return
        for pid in self.workers.pids:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.failure = f"TP worker (pid {pid}) exited"
                self.stop_event.set()
                return

    def _on_hang(self, signum: int, frame: Any) -> None:
        sched = getattr(self, "scheduler", None)
        if sched is not None:
            sched.hang()

    def _on_crash(self) -> None:
        self.failure = "scheduler crashed"
        self.stop_event.set()

    def server_args_repr(self) -> str:
        a = self.args
        return (
            f"server_args=ServerArgs(model_path='{a.model_path}', tp_size={a.tp_size}, "
            f"host='{a.host}', port={a.port}, enable_metrics={a.enable_metrics}, "
            f"speculative_algorithm={a.speculative_algorithm!r}, "
            f"speculative_draft_model_path={a.draft_model_path!r}, "
            f"speculative_num_steps={a.num_steps if a.mode == 'eagle3' else None}, "
            f"speculative_eagle_topk={a.topk if a.mode == 'eagle3' else None}, "
            f"speculative_num_draft_tokens="
            f"{a.num_draft_tokens if a.mode == 'eagle3' else None}, "
            f"speculative_adaptive={a.adaptive_config is not None}, "
            f"speculative_adaptive_config={a.adaptive_config_path!r}, "
            f"disable_cuda_graph={not a.cuda_graph}, "
            f"decode_log_interval={a.decode_log_interval}, "
            f"disable_custom_all_reduce={a.disable_custom_all_reduce}, "
            f"dtype='{a.dtype}', enable_deterministic_inference={a.deterministic}, "
            f"log_level='{a.log_level}', simulated=True)"
        )

    # --------------------------------------------------------------- phases
    def _check_paths(self) -> int | None:
        for path in (self.args.model_path, self.args.draft_model_path):
            if path and os.path.isabs(path) and not os.path.exists(path):
                self.log.log(
                    f"Failed to load model config from {path}: no such directory", None, "error"
                )
                self.log.raw(sglang_logs.missing_model_traceback(path))
                return 1
        return None

    def _nccl_init(self) -> None:
        a = self.args
        self._all_ranks("Init torch distributed begin.")
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
            self._all_ranks(msg, level)
        if a.tp_size > 2 and not a.disable_custom_all_reduce:
            # dispatch_custom_allreduce tries the v2 class first, then the legacy one: both
            # run custom_all_reduce_utils' check and warn (fastverify.sglang.allreduce)
            for cls_name in ("CustomAllReduceV2", "CustomAllreduce"):
                self._all_ranks(
                    f"{cls_name} {allreduce.CUSTOM_PCIE_TEXT} To silence this warning, "
                    "specify disable_custom_all_reduce=True explicitly.",
                    "warning",
                )
        self._all_ranks("Init torch distributed ends. mem usage=0.53 GB")

    def _load(self) -> None:
        a = self.args
        weights_s = a.load_seconds * weight_cache.WEIGHTS_SHARE
        self._all_ranks("Load weight begin. avail mem=78.52 GB")
        tic = time.monotonic()
        if a.weight_cache_mode == "client" and self._load_from_cache(tic):
            pass  # mapped from the cache's daemon, no checkpoint read
        else:
            self._load_from_disk(weights_s, tic)
        if a.mode == "eagle3":
            self._all_ranks("Load weight begin. avail mem=14.31 GB")
            self._sleep(weights_s * 0.05)
            self._all_ranks(
                "Load weight end. elapsed=0.31 s, type=LlamaForCausalLMEagle3, "
                "dtype=torch.bfloat16, avail mem=13.21 GB, mem usage=1.10 GB."
            )
        self._all_ranks("KV Cache is allocated. #tokens: 1048576, KV size: 4.50 GB")
        self._all_ranks("Memory pool end. avail mem=8.12 GB")
        # base_runner._pre_initialize_pcie_ipc_workspace: before graph capture
        self.pcie_ipc_max_bytes = allreduce_sim.Workspace(os.environ, a).prepare(
            lambda level, msg: self._all_ranks(msg, level), self._sleep, self._map_all
        )
        self.costs = SimCosts(os.environ, a, self.pcie_ipc_max_bytes)

    def _load_from_disk(self, weights_s: float, tic: float) -> None:
        a = self.args
        steps = 16
        if a.load_format == "dummy":  # random init, no checkpoint read (no shard progress)
            weights_s *= DUMMY_LOAD_SHARE
            steps = 0
            self._sleep(weights_s * 0.95)
            if a.fail == "oom":  # random weights take the same memory
                self.log.log(sglang_logs.oom_traceback(), 0, "error")
                raise RuntimeError("injected OOM")
        for k in range(1, steps + 1):
            self._sleep(weights_s * 0.95 / steps)
            done = SHARDS * k // steps
            self.log.raw(sglang_logs.shard_progress(done, SHARDS, time.monotonic() - tic))
            if a.fail == "oom" and k == steps * 5 // 8:
                self.log.log(sglang_logs.oom_traceback(), 0, "error")
                raise RuntimeError("injected OOM")
        self.log.raw("")
        self._all_ranks(
            f"Load weight end. elapsed={time.monotonic() - tic:.2f} s, "
            f"type=DeepseekV3ForCausalLM, dtype={allreduce_sim.torch_dtype(a)}, "
            "avail mem=14.31 GB, "
            "mem usage=64.21 GB."
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
        self._sleep(seconds)
        for rank, reply in enumerate(replies):
            n = len(reply.get("entries") or ())
            self.log.log(weight_cache.fetched_line(wc, n, seconds * 0.4), rank)
            self.log.log(weight_cache.mapped_line(n, seconds * 0.6), rank)
            self.log.log(weight_cache.loaded_line(a.weight_cache_mode, seconds), rank)
        self._all_ranks(
            f"Load weight end. elapsed={time.monotonic() - tic:.2f} s, "
            f"type=DeepseekV3ForCausalLM, dtype={allreduce_sim.torch_dtype(a)}, "
            "avail mem=78.48 GB, mem usage=0.04 GB."
        )
        pids = [int(r["pid"]) for r in replies if r.get("pid")]
        threading.Thread(target=self._watch_cache, args=(pids,), daemon=True).start()
        return True

    def _watch_cache(self, pids: list[int]) -> None:
        """The loader's liveness watchdog: the mapped weights dangle once a cache rank dies."""
        # (a plain sleep: StopFlag.wait here would drain the main thread's wake-up pipe)
        while not self.stop_event.is_set():
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
        _MAPPED.append(flashinfer_jit.Mapped(path))
        if self.workers:
            self.workers.request_each(lambda rank: {"cmd": "map", "path": str(path)}, 30.0)

    def _capture(self) -> None:
        """SGLang 0.5.23's capture milestones per phase that captures (decode: backend
        full, prefill: breakable), lines from `fastverify.sglang.loglines`."""
        a = self.args
        self.capture_seconds: dict[str, float] = {}
        if not a.cuda_graph:
            return
        # the release's decode capture list (speculative or baseline), clamped to the pool
        bs = self.costs.capture or self.costs.baseline_capture
        if a.decode_cuda_graph:
            tic = time.monotonic()
            self._all_ranks(loglines.format_capture_begin("target", "decode", "full", 8.12, bs))
            tuning = sglang_logs.nccl_tuning_lines(os.environ, 0, _tuning_rows(self.settings, a))
            sglang_logs.write_nccl_lines(os.environ, tuning, self.log)
            self._sleep(
                a.load_seconds * weight_cache.GRAPHS_SHARE * weight_cache.DECODE_GRAPH_SHARE
            )
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
            self.capture_seconds["decode"] = time.monotonic() - tic
            self._all_ranks(
                loglines.format_capture_end(
                    "target", "decode", self.capture_seconds["decode"], 0.38, 7.74, bs
                )
            )
        if a.prefill_cuda_graph:
            tic = time.monotonic()
            self._all_ranks(
                loglines.format_capture_begin("target", "prefill", "breakable", 7.74, bs)
            )
            self._sleep(
                a.load_seconds * weight_cache.GRAPHS_SHARE * (1 - weight_cache.DECODE_GRAPH_SHARE)
            )
            self.capture_seconds["prefill"] = time.monotonic() - tic
            self._all_ranks(
                loglines.format_capture_end(
                    "target", "prefill", self.capture_seconds["prefill"], 0.05, 7.69, bs
                )
            )

    def server_info(self) -> dict[str, Any]:
        a = self.args
        sched = self.scheduler
        pred = sched.predict(max(1, sched.counts()[0]))
        running, queued = sched.counts()
        return {
            "model_path": a.model_path,
            "served_model_name": a.served_model_name,
            "tp_size": a.tp_size,
            "host": a.host,
            "port": a.port,
            "enable_metrics": a.enable_metrics,
            "speculative_algorithm": a.speculative_algorithm,
            "speculative_draft_model_path": a.draft_model_path,
            "speculative_num_steps": a.num_steps if a.mode == "eagle3" else None,
            "speculative_eagle_topk": a.topk if a.mode == "eagle3" else None,
            "speculative_num_draft_tokens": a.num_draft_tokens if a.mode == "eagle3" else None,
            "speculative_adaptive": a.adaptive_config is not None,
            "speculative_adaptive_config": a.adaptive_config_path,
            "disable_cuda_graph": not a.cuda_graph,
            "decode_log_interval": a.decode_log_interval,
            "load_format": a.load_format,
            "version": f"{a.sglang_version}-fastverify-sim",
            "max_running_requests": allreduce_sim.SIM_REQUEST_POOL,
            "simulated": True,
            "engine": "fastverify-sim",
            "note": BANNER,
            "internal_states": [
                {
                    "avg_spec_accept_length": sched.avg_spec_accept_length
                    if a.mode == "eagle3"
                    else None,
                    "last_gen_throughput": sched.last_gen_throughput,
                    "num_running_reqs": running,
                    "num_queue_reqs": queued,
                    "memory_usage": self.costs.memory_usage(),
                }
            ],
            "sim": {
                "pids": [os.getpid(), *(self.workers.pids if self.workers else [])],
                "allreduce": {
                    "backend": "pcie_ipc" if self.pcie_ipc_max_bytes else "nccl",
                    "pcie_ipc_max_bytes": self.pcie_ipc_max_bytes,
                },
                "nccl": {
                    "algo": pred.algo,
                    "proto": pred.proto,
                    "nchannels": pred.nchannels,
                    "p2p": self.settings.p2p,
                    "transport": self.settings.transport,
                },
                "cost_model": {
                    "cycle_seconds": pred.cycle_seconds,
                    "verify_seconds": pred.verify_seconds,
                    "allreduce_per_verify": pred.allreduce_count,
                    "allreduce_seconds_per_verify": pred.allreduce_seconds,
                    "tokens_per_second_bs1": sched.predict(1).tokens_per_second,
                    **self.cost_table(),
                    "note": "seconds per decode pass by batch size (decode: a baseline "
                    "server; by_steps: the EAGLE worker at k steps, 0 = its steps-0 pass) and "
                    "per prefill forward by new tokens, from this cost model (a SIMULATION)",
                },
                "acceptance": {
                    "mean_q": sched.drafter.mean_q,
                    "spread": sched.drafter.spread,
                    "accept_length_by_steps": {
                        str(k): sched.chain_length(k) for k in range(1, costtable.MAX_STEPS + 1)
                    },
                    "active_steps": sched.active_steps if a.mode == "eagle3" else None,
                },
            },
        }

    def _request_metrics(self) -> Any:
        """SGLang's --export-metrics-to-file: the scheduler's finish hook, or None."""
        if not self.args.export_metrics_dir:
            return None
        from fastverify.engines.sim.request_meta import MetricsFile

        spec = self.args.mode == "eagle3"
        out = MetricsFile(self.args.export_metrics_dir, spec, self.args.num_draft_tokens)
        return out.write

    def cost_table(self) -> dict[str, Any]:
        """The engine's costs (`costtable.SimCosts.table`), computed once."""
        if self._cost_table is None:
            self._cost_table = self.costs.table()
        return self._cost_table

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.args.model_path,
            "tokenizer_path": self.args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "kimi_k2",
            "architectures": ["DeepseekV3ForCausalLM"],
            "simulated": True,
            "engine": "fastverify-sim",
            "note": BANNER,
        }

    def _exit_status(self) -> int:
        if self.failure is None:
            return 0
        self.log.log(
            f"Received sigquit from a child process. It usually means the child failed. "
            f"({self.failure})",
            None,
            "error",
        )
        return 1

    # --------------------------------------------------------------- run
    def run(self) -> int:
        a = self.args
        self.log.log(BANNER, None, "warning")
        self.log.log(self.server_args_repr(), None)
        if a.adaptive_disabled is not None:  # speculative_hook._maybe_disable_adaptive
            self.log.log(adaptive.format_disabled(a.adaptive_disabled), None, "warning")
        rc = self._check_paths()
        if rc is not None:
            return rc
        sys.stdout.flush()
        if a.tp_size > 1:
            self.workers = WorkerPool.fork(
                a.tp_size - 1,
                _worker_handler(self.log),
                [sys.executable, "-u", "-m", "fastverify.engines.sim.worker_main", a.log_level],
            )
            # like SGLang waiting for its schedulers: every worker answers once it runs
            self.workers.request_each(lambda rank: {"cmd": "ping"}, timeout=120.0)
        self._stop_flag = StopFlag()
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGCHLD, self._on_child)
        # SIGUSR1: the scheduler hangs while the process lives (a stand-in for an NCCL hang
        # from a bad setting; docs/sim.md): /health stays 200, /health_generate turns 503
        signal.signal(signal.SIGUSR1, self._on_hang)
        httpd: SimHTTPServer | None = None
        app = App(
            model_info=self.model_info(),
            served_model_name=a.served_model_name,
            log=self.log,
            access_log=a.log_level == "debug",
        )
        try:
            try:
                httpd = SimHTTPServer((a.host, a.port), app)
            except OSError as exc:
                reason = (exc.strerror or str(exc)).lower()
                self.log.log(
                    f"ERROR:    [Errno {exc.errno}] error while attempting to bind on "
                    f"address ('{a.host}', {a.port}): {reason}",
                    None,
                    "error",
                )
                return 1
            threading.Thread(
                target=httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="sim-http",
                daemon=True,
            ).start()
            self._sleep(a.load_seconds * weight_cache.REST_SHARE / 2)  # start-up before NCCL
            self._nccl_init()
            self._load()
            self._capture()
            self.metrics = (
                SimMetrics(
                    a.served_model_name,
                    a.decode_cuda_graph,
                    a.prefill_cuda_graph,
                    sglang_version=a.sglang_version,
                )
                if a.enable_metrics
                else None
            )
            for phase, seconds in getattr(self, "capture_seconds", {}).items():
                if self.metrics is not None:
                    self.metrics.startup_cuda_graph(phase, seconds)
            self.profiler = Profiler(
                tp_size=a.tp_size,
                workers=self.workers,
                log=self.log,
                trace_args={
                    "sglang_version": a.sglang_version,
                    "mode": a.mode,
                    "cuda_graph": a.cuda_graph,
                    "accept_length": a.accept_length,
                    "num_steps": a.num_steps,
                    "topk": a.topk,
                    "num_draft_tokens": a.num_draft_tokens,
                    "pcie_ipc_max_bytes": self.pcie_ipc_max_bytes,
                },
            )
            self.scheduler = Scheduler(
                env=os.environ,
                mode=a.mode,
                tp_size=a.tp_size,
                cuda_graph=a.cuda_graph,
                accept_length=a.accept_length,
                num_steps=a.num_steps,
                topk=a.topk,
                num_draft_tokens=a.num_draft_tokens,
                decode_log_interval=a.decode_log_interval,
                log=self.log,
                metrics=self.metrics,
                seed=a.seed,
                on_cycle=self.profiler.on_cycle,
                on_crash=self._on_crash,
                pcie_ipc_max_bytes=self.pcie_ipc_max_bytes,
                accept_steps=a.accept_steps,
                adaptive_config=a.adaptive_config,
                accept_spread=a.accept_spread,
                costs=self.costs,
                on_finish=self._request_metrics(),
            )
            played = resolve_facts(a.sglang_version)
            self.scheduler.old_log_form = played.decode_old_form
            self.scheduler.log_accept_rate = played.decode_accept_rate
            self.log.log(
                "max_total_num_tokens=1048576, chunked_prefill_size=8192, "
                "max_prefill_tokens=16384, "
                f"max_running_requests={allreduce_sim.SIM_REQUEST_POOL}, "
                "context_len=262144, available_gpu_mem=7.74 GB"
            )
            self.scheduler.start()
            app.attach(self.scheduler, self.metrics, self.profiler, self.server_info)
            self.log.log(f"INFO:     Started server process [{os.getpid()}]", None)
            self.log.log("INFO:     Waiting for application startup.", None)
            self.log.log("INFO:     Application startup complete.", None)
            self.log.log(
                f"INFO:     Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)",
                None,
            )
            if not a.cuda_graph:  # eager: NCCL tunes at the first collective call
                rows = _tuning_rows(self.settings, a)
                tuning = sglang_logs.nccl_tuning_lines(os.environ, 0, rows)
                sglang_logs.write_nccl_lines(os.environ, tuning, self.log)
            self._sleep(a.load_seconds * weight_cache.REST_SHARE / 2)  # warm-up, tokenizer
            warm = Request(prompt_tokens=6, max_new_tokens=1)
            self.scheduler.submit(warm)
            while not warm.done.wait(0.05):
                self._sleep(0)
                if self.stop_event.is_set():
                    raise _Stop
            app.ready.set()
            self.log.log(sglang_logs.READY_LINE, None)
            # StopFlag wakes this wait even when SIGTERM lands on another thread (see wakeup.py)
            self.stop_event.wait()
            return self._exit_status()
        except _Stop:
            return self._exit_status()
        except RuntimeError:
            self.log.log(
                "Received sigquit from a child process. It usually means the child failed.",
                None,
                "error",
            )
            return 1
        finally:
            self.stop_event.set()  # from here on, worker exits are expected
            if httpd is not None:
                httpd.shutdown()
                httpd.server_close()
            sched = getattr(self, "scheduler", None)
            if sched is not None:
                sched.stop()
            prof = getattr(self, "profiler", None)
            if prof is not None:
                prof.cancel()
            if self.workers is not None:
                self.workers.terminate()


def apply_engine_env(argv: Sequence[str], sglang_version: str | None = None) -> dict[str, str]:
    """What SGLang (the release the sim plays; default the pinned one) sets in its own
    environment for this argv before it starts its schedulers (`fastverify.sglang.envrules`),
    applied to this process so that the workers inherit it as SGLang's schedulers do.
    Returns what changed."""
    from fastverify.sglang.envrules import engine_env
    from fastverify.sglang.launch import LaunchArgs
    from fastverify.sglang.versions import PINNED_VERSION

    args = LaunchArgs.from_argv(list(argv))
    rules = engine_env(args, os.environ, sglang_version or PINNED_VERSION)
    final = rules.final(os.environ)
    changed = {k: v for k, v in final.items() if os.environ.get(k) != v}
    os.environ.update(changed)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = cli_args.parse(argv)
    apply_engine_env(argv, args.sglang_version)
    return SimEngine(args).run()
