"""SGLang-shaped and NCCL-shaped log lines, written by the sim engine's processes.

Owns the exact wording: the `[YYYY-MM-DD HH:MM:SS TP0] ` prefix (no TP at TP 1), load / CUDA-graph
capture progress, decode and prefill lines (newest SGLang form), the ready line, the
capture-failure traceback, and NCCL's `host:pid:tid [dev] NCCL INFO ...` lines. The
wording follows sgl-project/sglang (model_runner.py, cuda_graph_runner.py,
scheduler_metrics_mixin.py, http_server.py) and NVIDIA/nccl (debug.cc, param.cc,
enqueue.cc); see the REFERENCE in the shared docs and the fixtures.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import TextIO

from fastverify.sim import ncclenv, tunerload

READY_LINE = "The server is fired up and ready to roll!"
NCCL_VERSION = "2.28.9+cuda13.0"
LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}

CAPTURE_FAILED_HINT = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --cuda-graph-backend-decode=disabled. "
    "(Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)


class LogWriter:
    """Thread-safe line writer with SGLang's prefix and --log-level filtering."""

    def __init__(self, stream: TextIO | None = None, level: str = "info", *, show_tp: bool = True):
        self._stream = stream or sys.stdout
        self._lock = threading.Lock()
        self.level = LEVELS.get(level.lower(), 20)
        # SGLang's scheduler adds " TP{rank}" to its processes' prefix only when tp_size > 1
        # (managers/scheduler.py, run_scheduler_process)
        self.show_tp = show_tp

    def prefix(self, tp_rank: int | None) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        shown = tp_rank is not None and self.show_tp
        return f"[{stamp} TP{tp_rank}] " if shown else f"[{stamp}] "

    def raw(self, text: str) -> None:
        """Write text as is (multi-line tracebacks, progress bars, NCCL lines)."""
        with self._lock:
            try:
                self._stream.write(text if text.endswith("\n") else text + "\n")
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                pass

    def log(self, msg: str, tp_rank: int | None = 0, level: str = "info") -> None:
        if LEVELS.get(level, 20) < self.level:
            return
        self.raw(self.prefix(tp_rank) + msg)


def decode_line(
    running: int,
    tokens: int,
    token_usage: float,
    gen_throughput: float,
    queue: int,
    cuda_graph: bool,
    accept_len: float | None = None,
    accept_rate: float | None = None,
    *,
    old_form: bool = False,
    with_accept_rate: bool = True,
) -> str:
    """`Decode batch, ...` in SGLang's newest form (accept len/rate only with speculation);
    `old_form`: `Decode batch. ..., ` (0.5.1-0.5.3); `with_accept_rate` False: releases
    whose line has `accept len` only (their facts' log_formats)."""
    parts = [
        f"Decode batch{'.' if old_form else ','} #running-req: {running}",
        f"#token: {tokens}",
        f"token usage: {token_usage:.2f}",
    ]
    if accept_len is not None:
        parts.append(f"accept len: {accept_len:.2f}")
        if with_accept_rate:
            parts.append(f"accept rate: {accept_rate or 0.0:.2f}")
    parts.append(f"cuda graph: {cuda_graph}")
    parts.append(f"gen throughput (token/s): {gen_throughput:.2f}")
    parts.append(f"#queue-req: {queue}")
    return ", ".join(parts) + (", " if old_form else "")


def prefill_line(
    new_seq: int,
    new_token: int,
    token_usage: float,
    running: int,
    queue: int,
    input_throughput: float,
    *,
    old_form: bool = False,
) -> str:
    return (
        f"Prefill batch{'.' if old_form else ','} #new-seq: {new_seq}, #new-token: {new_token}, "
        f"#cached-token: 0, token usage: {token_usage:.2f}, #running-req: {running}, "
        f"#queue-req: {queue}, input throughput (token/s): {input_throughput:.2f}"
    )


def shard_progress(done: int, total: int, elapsed: float) -> str:
    """tqdm-style line of SGLang's safetensors loader."""
    pct = int(100 * done / total) if total else 100
    rate = done / elapsed if elapsed > 0 else 0.0
    remaining = (total - done) / rate if rate > 0 else 0.0

    def mmss(s: float) -> str:
        s = int(s)
        return f"{s // 60:02d}:{s % 60:02d}"

    rate_s = f"{rate:5.2f}it/s" if rate > 0 else "?it/s"
    rem_s = mmss(remaining) if rate > 0 else "?"
    return (
        f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {done}/{total} "
        f"[{mmss(elapsed)}<{rem_s}, {rate_s}]"
    )


def capture_failure_traceback(error: str) -> str:
    """The traceback SGLang's scheduler process logs when CUDA-graph capture fails."""
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py",'
        " line 388, in __init__\n"
        "    self.capture()\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/device_communicators/'
        'pynccl_wrapper.py", line 346, in NCCL_CHECK\n'
        f'    raise RuntimeError(f"NCCL error: {{error_str}}")\n'
        f"RuntimeError: {error}\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2901,'
        " in run_scheduler_process\n"
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank,"
        " pp_rank, dp_rank)\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py",'
        " line 390, in __init__\n"
        "    raise Exception(\n"
        f"Exception: Capture cuda graph failed: {error}\n"
        f"{CAPTURE_FAILED_HINT}"
    )


def missing_model_traceback(path: str) -> str:
    """What SGLang prints when --model-path is a local path that does not exist."""
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "/sgl-workspace/sglang/python/sglang/launch_server.py", line 24, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        '  File "/usr/local/lib/python3.12/dist-packages/transformers/configuration_utils.py",'
        " line 721, in _get_config_dict\n"
        "    raise EnvironmentError(\n"
        f"OSError: Can't load the configuration of '{path}'. If you were trying to load it "
        "from 'https://huggingface.co/models', make sure you don't have a local directory "
        f"with the same name. Otherwise, make sure '{path}' is the correct path to a "
        "directory containing a config.json file"
    )


def oom_traceback() -> str:
    """What a CUDA out-of-memory during weight loading looks like in SGLang's log."""
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 612,'
        " in load_model\n"
        "    model = _initialize_model(model_config, self.load_config)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 139.81 GiB of which 1.23 GiB is free. Including non-PyTorch "
        "memory, this process has 138.57 GiB memory in use. Of the allocated memory 136.02 "
        "GiB is allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


# ---------------------------------------------------------------- NCCL debug output


def nccl_subsys(env: Mapping[str, str]) -> set[str]:
    raw = env.get("NCCL_DEBUG_SUBSYS", "").strip()
    if not raw:
        return {"INIT", "BOOTSTRAP", "ENV"}
    exclude = raw.startswith("^")
    names = {s.strip().upper() for s in raw.lstrip("^").split(",") if s.strip()}
    if "ALL" in names:
        return set() if exclude else {"ALL"}
    every = {
        "INIT",
        "COLL",
        "P2P",
        "SHM",
        "NET",
        "GRAPH",
        "TUNING",
        "ENV",
        "ALLOC",
        "CALL",
        "PROXY",
        "NVLS",
        "BOOTSTRAP",
        "REG",
        "PROFILE",
        "RAS",
    }
    return every - names if exclude else names


def nccl_debug_file(env: Mapping[str, str], pid: int) -> str | None:
    """NCCL_DEBUG_FILE with %h (hostname) and %p (pid) expanded, or None."""
    raw = env.get("NCCL_DEBUG_FILE", "").strip()
    if not raw:
        return None
    out, i = [], 0
    while i < len(raw):
        if raw[i] == "%" and i + 1 < len(raw):
            nxt = raw[i + 1]
            if nxt == "h":
                out.append(socket.gethostname())
            elif nxt == "p":
                out.append(str(pid))
            elif nxt == "%":
                out.append("%")
            else:
                out.append(raw[i : i + 2])
            i += 2
            continue
        out.append(raw[i])
        i += 1
    return "".join(out)


def nccl_env_lines(env: Mapping[str, str]) -> list[str]:
    """NCCL's `X set by environment to Y` confirmations, in NCCL's own format."""
    lines = []
    for name in sorted(env):
        if not name.startswith("NCCL_"):
            continue
        value = env[name]
        if name == "NCCL_TUNER_PLUGIN":
            continue  # printed where NCCL loads the tuner (tunerload)
        if name in ncclenv.INT_PARAMS:
            lines.append(f"{name} set by environment to {ncclenv.nccl_int(value)}.")
        elif name in ncclenv.STR_PARAMS:
            lines.append(f"{name} set by environment to {value}")
    return lines


def nccl_init_lines(
    env: Mapping[str, str],
    rank: int,
    nranks: int,
    settings: ncclenv.NcclSettings,
) -> list[str]:
    """One rank's NCCL INFO/WARN lines for communicator init (subsystems INIT, ENV)."""
    subsys = nccl_subsys(env)

    def on(name: str) -> bool:
        return "ALL" in subsys or name in subsys

    host = socket.gethostname().split(".")[0]
    pid = os.getpid()
    pre = f"{host}:{pid}:{pid} [{rank}] NCCL INFO "
    comm = f"0x{(pid * 7919) & 0xFFFFFFF:x}"
    nch = settings.max_nchannels
    out: list[str] = []
    env_lines = nccl_env_lines(env) if on("ENV") else []
    if on("INIT"):
        out += [
            pre + "ENV/Plugin: Could not find: libnccl-env.so",
            pre + "cudaDriverVersion 13000",
            pre + f"NCCL version {NCCL_VERSION}",
            pre + "Comm config Blocking set to 1",
            pre + f"ncclCommInitRankConfig comm {comm} rank {rank} nranks {nranks} cudaDev "
            f"{rank} nvmlDev {rank} busId {(rank + 1) * 0x10:x}000 commId 0x5ee0fa57 - Init START",
        ]
    out += [pre + line for line in env_lines]
    if settings.errors:
        warn = f"{host}:{pid}:{pid} [{rank}] NCCL WARN "
        out += [warn + err for err in settings.errors]
        return out
    if on("INIT"):
        out.append(
            pre + f"comm {comm} rank {rank} nRanks {nranks} nNodes 1 localRanks {nranks} "
            f"localRank {rank} MNNVL 0"
        )
        ring = " ".join(str((rank + i) % nranks) for i in range(nranks))
        for c in range(nch):
            out.append(pre + f"Channel {c:02d}/{nch:02d} : {ring}")
        transport = {"p2p": "P2P/CUMEM/read", "shm": "SHM/direct/direct", "net": "NET/Socket/0"}[
            settings.transport
        ]
        nxt = (rank + 1) % nranks
        for c in range(min(nch, 2)):
            out.append(pre + f"Channel {c:02d}/0 : {rank}[{rank}] -> {nxt}[{nxt}] via {transport}")
    out += tunerload.nccl_lines(env, rank, nranks, pre, on)  # where NCCL loads its tuner
    if on("INIT"):
        out.append(
            pre + f"{nch} coll channels, {nch} collnet channels, 0 nvls channels, "
            f"{nch} p2p channels, {max(1, nch // nranks)} p2p channels per peer"
        )
        out.append(pre + "CC Off, workFifoBytes 1048576")
        out.append(
            pre + f"ncclCommInitRankConfig comm {comm} rank {rank} nranks {nranks} cudaDev "
            f"{rank} nvmlDev {rank} busId {(rank + 1) * 0x10:x}000 commId 0x5ee0fa57 "
            "- Init COMPLETE"
        )
    return out


def _prefix(rank: int, kind: str = "INFO") -> str:
    host = socket.gethostname().split(".")[0]
    pid = os.getpid()
    return f"{host}:{pid}:{threading.get_native_id()} [{rank}] NCCL {kind} "


def nccl_tuning_lines(
    env: Mapping[str, str], rank: int, rows: list[tuple[int, str, str, int]]
) -> list[str]:
    """TUNING lines `AllReduce: N Bytes -> Algo RING proto LL channel{Lo..Hi}={0..15}`.

    NCCL prints them on rank 0 only, when a collective is enqueued: at CUDA-graph capture,
    or at the first eager call.
    """
    subsys = nccl_subsys(env)
    if rank != 0 or not ("ALL" in subsys or "TUNING" in subsys):
        return []
    pre = _prefix(rank)
    return [
        pre + f"AllReduce: {nbytes} Bytes -> Algo {algo} proto {proto} "
        f"channel{{Lo..Hi}}={{0..{channels - 1}}}"
        for nbytes, algo, proto, channels in rows
    ]


def nccl_warn_line(rank: int, msg: str) -> str:
    return _prefix(rank, "WARN") + msg


def write_nccl_lines(env: Mapping[str, str], lines: list[str], log: LogWriter) -> None:
    """Send NCCL lines where NCCL would (NCCL_DEBUG_FILE, expanded, else stdout), filtered by
    NCCL_DEBUG: INFO/TRACE print everything, WARN only WARN lines, unset/VERSION nothing."""
    level = env.get("NCCL_DEBUG", "").strip().upper()
    if level == "WARN":
        lines = [ln for ln in lines if " NCCL WARN " in ln]
    elif level not in ("INFO", "TRACE"):
        return
    if not lines:
        return
    path = nccl_debug_file(env, os.getpid())
    if path:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")
            return
        except OSError as exc:
            log.raw(f"NCCL WARN cannot open NCCL_DEBUG_FILE {path}: {exc}")
    log.raw("\n".join(lines))
