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

This module owns the process: its signals, the HTTP server, the scheduler and profiler, the
status documents (`server_info`, `model_info`) and shutdown; the start-up phases between
the workers and the HTTP server are startup.py's.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from fastverify.sglang import adaptive
from fastverify.sglang.facts import resolve as resolve_facts
from fastverify.sim import (
    allreduce_sim,
    cli_args,
    costtable,
    ncclenv,
    sglang_logs,
    weight_cache,
)
from fastverify.sim.metrics import SimMetrics
from fastverify.sim.profiler import Profiler
from fastverify.sim.scheduler import Request, Scheduler
from fastverify.sim.server import App, SimHTTPServer
from fastverify.sim.startup import StartUp, Stop, tuning_rows
from fastverify.sim.wakeup import StopFlag
from fastverify.sim.worker_main import worker_handler
from fastverify.sim.workers import WorkerPool

SIM_VERSION = "0.5.23-fastverify-sim"
SIM_CONTEXT_LEN = 262144  # the context the sim's start-up line reports
# SGLang refuses a prompt of max_req_input_len tokens or more (scheduler.py); 0.5.17 with
# a context of 8192 reported 8186 in its server info
SIM_MAX_REQ_INPUT_LEN = SIM_CONTEXT_LEN - 6
BANNER = (
    "fastverify sim engine: this is a SIMULATION of an SGLang server (no GPU, no model). "
    "Timings come from a documented cost model (docs/guides/sim.md) and are not measurements "
    "of real hardware."
)


class SimEngine:
    """One run of the sim server: `SimEngine(args).run()` returns the exit status."""

    def __init__(self, args: cli_args.SimArgs):
        self.args = args
        self.log = sglang_logs.LogWriter(sys.stdout, args.log_level, show_tp=args.tp_size > 1)
        self._stop_flag: StopFlag | None = None  # created in run(), after forking
        self.workers: WorkerPool | None = None
        self.settings = ncclenv.resolve(os.environ)
        self.failure: str | None = None
        self.startup: StartUp | None = None  # created in run(), after forking
        self._cost_table: dict[str, Any] | None = None

    # --------------------------------------------------------------- helpers
    @property
    def stop_event(self) -> StopFlag:
        if self._stop_flag is None:
            raise RuntimeError("stop flag used before run()")
        return self._stop_flag

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

    @property
    def started(self) -> StartUp:
        if self.startup is None:
            raise RuntimeError("start-up state used before run()")
        return self.startup

    def server_info(self) -> dict[str, Any]:
        a = self.args
        pcie_ipc_max_bytes = self.started.pcie_ipc_max_bytes
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
            "max_req_input_len": SIM_MAX_REQ_INPUT_LEN,
            "chunked_prefill_size": costtable.CHUNKED_PREFILL_TOKENS,
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
                    "memory_usage": self.started.known_costs.memory_usage(),
                }
            ],
            "sim": {
                "pids": [os.getpid(), *(self.workers.pids if self.workers else [])],
                "allreduce": {
                    "backend": "pcie_ipc" if pcie_ipc_max_bytes else "nccl",
                    "pcie_ipc_max_bytes": pcie_ipc_max_bytes,
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

    def _forced(self, played: Any) -> dict[str, Any]:
        """SGLang's forced acceptance from the server's environment, as the played release
        reads it: a length that is no number is ignored with its warning; a method or token
        mode it does not accept fails the first verify pass (the scheduler's exception)."""
        from fastverify.sglang import forced

        try:
            return {"forced": forced.of(os.environ, played)}
        except forced.ForcedError as exc:
            spec = forced.spec(played) or {}
            role = (spec.get("vars") or {}).get(exc.field) or {}
            name, value = role.get("name"), os.environ.get(str(role.get("name")))
            if exc.field == "length":
                self.log.log(f"UserWarning: Invalid value for {name}: \"{value}\" is not a "
                             f"valid float value, using default \"{role.get('default')}\"",
                             None, "warning")  # fmt: skip
                return {"forced": None}
            what = "simulate_acc_method" if exc.field == "method" else name
            return {"forced_failure": f"Invalid {what}: {value}"}

    def _request_metrics(self) -> Any:
        """SGLang's --export-metrics-to-file: the scheduler's finish hook, or None."""
        if not self.args.export_metrics_dir:
            return None
        from fastverify.sim.request_meta import MetricsFile

        spec = self.args.mode == "eagle3"
        out = MetricsFile(
            self.args.export_metrics_dir, spec, self.args.num_draft_tokens,
            stamps=self.args.enable_metrics,
        )  # fmt: skip
        return out.write

    def cost_table(self) -> dict[str, Any]:
        """The engine's costs (`costtable.SimCosts.table`), computed once."""
        if self._cost_table is None:
            self._cost_table = self.started.known_costs.table()
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
        started = time.monotonic()
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
                worker_handler(self.log),
                [sys.executable, "-u", "-m", "fastverify.sim.worker_main", a.log_level],
            )
            # like SGLang waiting for its schedulers: every worker answers once it runs
            self.workers.request_each(lambda rank: {"cmd": "ping"}, timeout=120.0)
        self._stop_flag = StopFlag()
        st = self.startup = StartUp(a, self.log, self.settings, self.workers, self._stop_flag)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGCHLD, self._on_child)
        # SIGUSR1: the scheduler hangs while the process lives (a stand-in for an NCCL hang
        # from a bad setting; docs/guides/sim.md): the HTTP server answers, /health and
        # /health_generate (one endpoint in SGLang) turn 503
        signal.signal(signal.SIGUSR1, self._on_hang)
        httpd: SimHTTPServer | None = None
        app = App(
            model_info=self.model_info(),
            served_model_name=a.served_model_name,
            log=self.log,
            access_log=a.log_level == "debug",
            sglang_vars=resolve_facts(a.sglang_version).env.get("sglang_vars") or (),
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
            st.sleep(a.load_seconds * weight_cache.REST_SHARE / 2)  # start-up before NCCL
            st.nccl_init()
            st.load()
            st.capture()
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
            for phase, seconds in st.graph_phases().items():
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
                    "pcie_ipc_max_bytes": st.pcie_ipc_max_bytes,
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
                pcie_ipc_max_bytes=st.pcie_ipc_max_bytes,
                accept_steps=a.accept_steps,
                adaptive_config=a.adaptive_config,
                accept_spread=a.accept_spread,
                costs=st.costs,
                on_finish=self._request_metrics(),
                **self._forced(resolve_facts(a.sglang_version)),
            )
            played = resolve_facts(a.sglang_version)
            self.scheduler.old_log_form = played.decode_old_form
            self.scheduler.log_accept_rate = played.decode_accept_rate
            self.log.log(
                "max_total_num_tokens=1048576, "
                f"chunked_prefill_size={costtable.CHUNKED_PREFILL_TOKENS}, "
                "max_prefill_tokens=16384, "
                f"max_running_requests={allreduce_sim.SIM_REQUEST_POOL}, "
                f"context_len={SIM_CONTEXT_LEN}, available_gpu_mem=7.74 GB"
            )
            st.timings(started)
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
                rows = tuning_rows(self.settings, a)
                tuning = sglang_logs.nccl_tuning_lines(os.environ, 0, rows)
                sglang_logs.write_nccl_lines(os.environ, tuning, self.log)
            st.sleep(a.load_seconds * weight_cache.REST_SHARE / 2)  # warm-up, tokenizer
            warm = Request(prompt_tokens=6, max_new_tokens=1)
            self.scheduler.submit(warm)
            while not warm.done.wait(0.05):
                st.sleep(0)
                if self.stop_event.is_set():
                    raise Stop
            app.ready.set()
            self.log.log(sglang_logs.READY_LINE, None)
            # StopFlag wakes this wait even when SIGTERM lands on another thread (see wakeup.py)
            self.stop_event.wait()
            return self._exit_status()
        except Stop:
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
