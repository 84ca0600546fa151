"""`python -m fastverify.sim.weight_cache.daemon`: the sim's weight-cache daemon, with
the command line of `python -m sglang.srt.weight_cache.daemon` of the release it plays.

- 0.5.17, 0.5.18: its own flags (`--model-path --tp-size --dtype --quantization --revision
  --gpu-id --tp-rank ... --timeout --force`, the release's facts);
- 0.5.19 and later: `--gpu-id --tp-rank --pp-rank --dist-init-method --timeout --force`, the
  rest is the server's command line (the sim server's parser here).
Sim-only: `--sim-sglang-version V`, `--sim-load-seconds S` (a disk start's simulated load:
the cache reads the weights' share of it).

Without `--gpu-id`/`--tp-rank` it launches one rank process per local rank (as SGLang does,
each dying with the launcher), waits for their ready files, then watches them: when one exits
the others are stopped and the launcher exits 1; SIGINT stops them all (exit 0); SIGTERM ends
the launcher at once (its ranks die with it, their files stay behind, stale). A rank refuses
to start while the ready file of its GPU names a live pid (unless `--force`), loads, binds its
socket (0600), writes `pid=`/`config=` to its ready file, serves `fetch_state`,
`query_config` and `ping`, and removes both files on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastverify.sglang.versions import PINNED_VERSION
from fastverify.sim import gpu_memory
from fastverify.sim import weight_cache as wc_sim
from fastverify.sim.workers import set_parent_death_signal

DAEMON_OWN = ("--gpu-id", "--tp-rank", "--pp-rank", "--dist-init-method", "--timeout", "--force")
SWITCHES = ("--force", "--trust-remote-code")  # store_true flags of the old parser
DUMMY_SHARE = 0.05  # --load-format dummy: random init (the sim server's DUMMY_LOAD_SHARE)
CONNECTION_TIMEOUT = 30.0  # daemon.py CLIENT_CONNECTION_TIMEOUT


@dataclass(frozen=True)
class Args:
    """What a rank needs, from either command-line style."""

    wc: dict[str, Any]  # the release's weight-cache facts
    version: str
    load_seconds: float
    gpu_id: int | None
    tp_rank: int | None
    pp_rank: int
    dist_init_method: str | None
    timeout: int
    force: bool
    argv: list[str]
    model_path: str
    tp_size: int
    dtype: str
    quantization: str | None
    revision: str | None
    load_format: str
    base_gpu_id: int
    gpu_id_step: int


def _log(gpu: int | None, tp_rank: int | None, msg: str, level: str = "INFO") -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    who = f" [Daemon gpu={gpu} tp_rank={tp_rank}]" if gpu is not None else ""
    sys.stdout.write(f"{stamp}{who} {level} {msg}\n")
    sys.stdout.flush()


def parse(argv: Sequence[str]) -> Args:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--sim-sglang-version", default=PINNED_VERSION)
    pre.add_argument("--sim-load-seconds", type=float, default=3.0)
    sim, rest = pre.parse_known_args(list(argv))
    wc = wc_sim.facts(sim.sim_sglang_version)
    flags = set(wc["daemon_flags"])
    p = argparse.ArgumentParser(prog="python -m sglang.srt.weight_cache.daemon", allow_abbrev=False)
    if wc_sim.new_style(wc):
        p.add_argument("--gpu-id", type=int, default=None)
        p.add_argument("--tp-rank", type=int, default=None)
        p.add_argument("--pp-rank", type=int, default=0)
        p.add_argument("--dist-init-method", default=None)
        p.add_argument("--timeout", type=int, default=1800)
        p.add_argument("--force", action="store_true")
        own, server_argv = p.parse_known_args(rest)
        from fastverify.sim import cli_args

        s = cli_args.parse([*server_argv, "--sim-sglang-version", sim.sim_sglang_version])
        values: dict[str, Any] = dict(
            model_path=s.model_path,
            tp_size=s.tp_size,
            dtype=s.dtype,
            quantization=s.quantization,
            revision=s.revision,
            load_format=s.load_format,
            base_gpu_id=s.base_gpu_id,
            gpu_id_step=s.gpu_id_step,
        )
    else:
        for flag in sorted(flags):
            if flag in SWITCHES:
                p.add_argument(flag, action="store_true")
            elif flag in (
                "--tp-size",
                "--dp-size",
                "--ep-size",
                "--pp-size",
                "--pp-rank",
                "--nnodes",
                "--node-rank",
                "--base-gpu-id",
                "--gpu-id-step",
                "--timeout",
                "--gpu-id",
                "--tp-rank",
            ):
                p.add_argument(flag, type=int, default=None)
            else:
                p.add_argument(flag, default=None, required=flag == "--model-path")
        own = p.parse_args(rest)
        values = dict(
            model_path=own.model_path,
            tp_size=own.tp_size or 1,
            dtype=own.dtype or "auto",
            quantization=own.quantization,
            revision=own.revision,
            load_format=own.load_format or "auto",
            base_gpu_id=own.base_gpu_id or 0,
            gpu_id_step=own.gpu_id_step or 1,
        )
        own.pp_rank = own.pp_rank or 0
        own.timeout = own.timeout if own.timeout is not None else 1800
    return Args(
        wc=wc,
        version=sim.sim_sglang_version,
        load_seconds=sim.sim_load_seconds,
        gpu_id=own.gpu_id,
        tp_rank=own.tp_rank,
        pp_rank=own.pp_rank,
        dist_init_method=own.dist_init_method,
        timeout=own.timeout,
        force=own.force,
        argv=list(argv),
        **values,
    )


def _key(a: Args, gpu_id: int, tp_rank: int) -> str:
    return wc_sim.key_of(a.wc, gpu_id=gpu_id, tp_size=a.tp_size, tp_rank=tp_rank, pp_rank=a.pp_rank)


def cleanup_stale(a: Args, gpu_id: int, tp_rank: int) -> None:
    """protocol.cleanup_stale_daemon_files: refuse a live rank unless --force, remove the
    stale files."""
    key = _key(a, gpu_id, tp_rank)
    ready = Path(wc_sim.path(a.wc, "ready", key))
    sock = Path(wc_sim.path(a.wc, "socket", key))
    if not ready.exists() and not sock.exists():
        return
    pid = None
    with contextlib.suppress(OSError, ValueError):
        for line in ready.read_text().splitlines():
            if line.startswith("pid="):
                pid = int(line.split("=", 1)[1])
    if pid is not None and gpu_memory.alive(pid):
        who = f"GPU {key}" if a.wc["paths"]["key"] == "device_uuid" else f"rank {key}"
        if not a.force:
            raise RuntimeError(
                f"Weight cache daemon for {who} is already running (pid={pid}, ready={ready}). "
                "Stop the existing daemon before launching a new one, or pass force=True "
                "(--force) to kill it and take over."
            )
        _log(
            None,
            None,
            f"[weight_cache] force takeover: killing existing daemon pid={pid} "
            f"for {who} and reclaiming its socket/ready files.",
            "WARNING",
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for path in (ready, sock):
        if path.exists():
            path.unlink()
            _log(None, None, f"Removed stale daemon file: {path}")


# ----------------------------------------------------------------------------- one rank


def run_rank(a: Args, gpu_id: int, tp_rank: int) -> int:
    set_parent_death_signal(signal.SIGKILL)  # kill_itself_when_parent_died
    stop = {"now": False}

    def on_signal(signum: int, _frame: Any) -> None:
        _log(
            gpu_id,
            tp_rank,
            f"[WeightCacheDaemon gpu={gpu_id}] Received signal {signum}, shutting down",
        )
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    config = wc_sim.fingerprint(
        a.wc,
        model_path=a.model_path,
        tp_size=a.tp_size,
        tp_rank=tp_rank,
        dtype=a.dtype,
        quantization=a.quantization,
        revision=a.revision,
    )
    if config.get("quant_method") and config["quant_method"] not in (a.wc["quant_allowlist"] or ()):
        raise RuntimeError(
            f"[weight_cache:daemon] quantization method {config['quant_method']!r} is not "
            "verified for CUDA IPC zero-copy weight sharing. Disable the weight cache "
            "(--weight-cache-mode off) for this model."
        )
    who = f"[WeightCacheDaemon gpu={gpu_id} tp_rank={tp_rank}]"
    _log(gpu_id, tp_rank, f"{who} Loading model from disk: {a.model_path}")
    tic = time.monotonic()
    seconds = a.load_seconds * wc_sim.WEIGHTS_SHARE
    if a.load_format == "dummy":
        seconds *= DUMMY_SHARE
    deadline = time.monotonic() + seconds
    while not stop["now"] and time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    if stop["now"]:
        return 0
    _log(gpu_id, tp_rank, f"{who} Model loaded from disk in {time.monotonic() - tic:.2f}s")
    _log(gpu_id, tp_rank, f"{who} Exported {wc_sim.TENSORS} tensors as IPC handles.")
    key = _key(a, gpu_id, tp_rank)
    sock_path = wc_sim.path(a.wc, "socket", key)
    ready_path = wc_sim.path(a.wc, "ready", key)
    Path(sock_path).parent.mkdir(parents=True, exist_ok=True)
    # the weights it holds on its simulated GPU, where the servers that map them look
    ledger = gpu_memory.Ledger(Path(sock_path).parent, [gpu_id])
    ledger.hold(wc_sim.BYTES_PER_RANK / (1 << 30))
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        srv.bind(sock_path)
    finally:
        os.umask(old)
    srv.listen(8)
    srv.settimeout(0.1)
    with open(ready_path, "w") as f:
        f.write(f"pid={os.getpid()}\n")
        f.write(f"config={config}\n")
    _log(gpu_id, tp_rank, f"[WeightCacheDaemon gpu={gpu_id}] Listening on {sock_path}")
    try:
        while not stop["now"]:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except InterruptedError:
                continue
            conn.settimeout(CONNECTION_TIMEOUT)
            try:
                _serve_one(conn, config, gpu_id)
            except Exception as exc:
                _log(
                    gpu_id,
                    tp_rank,
                    f"[WeightCacheDaemon gpu={gpu_id}] Error handling connection: {exc}",
                    "ERROR",
                )
            finally:
                conn.close()
    finally:
        srv.close()
        ledger.release()
        for p in (sock_path, ready_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
        _log(gpu_id, tp_rank, f"[WeightCacheDaemon gpu={gpu_id}] Shutdown complete")
    return 0


def _serve_one(conn: socket.socket, config: dict[str, Any], gpu_id: int) -> None:
    req = wc_sim.recv_msg(conn)
    kind = req.get("type") if isinstance(req, dict) else None
    if kind == "query_config":
        wc_sim.send_msg(conn, {"status": "ok", "config": config})
    elif kind == "fetch_state":
        engine = req.get("config") or {}
        if engine != config:
            diff = {
                k: (config.get(k), engine.get(k)) for k in config if config.get(k) != engine.get(k)
            }
            _log(
                gpu_id, None, f"[WeightCacheDaemon gpu={gpu_id}] Config mismatch: {diff}", "WARNING"
            )
            wc_sim.send_msg(conn, {"status": "mismatch", "daemon_config": config})
            return
        _log(
            gpu_id,
            None,
            f"[WeightCacheDaemon gpu={gpu_id}] Serving {wc_sim.TENSORS} tensors via "
            f"{wc_sim.TRANSPORT} transport",
        )
        wc_sim.send_msg(
            conn,
            {
                "status": "ok",
                "config": config,
                "transport_backend": wc_sim.TRANSPORT,
                "entries": [f"model.layers.{i}.weight" for i in range(wc_sim.TENSORS)],
                "pid": os.getpid(),
                "preloaded_weights_bytes": wc_sim.BYTES_PER_RANK,
            },
        )
    elif kind == "ping":
        wc_sim.send_msg(conn, {"status": "ok"})
    else:
        wc_sim.send_msg(conn, {"status": "error", "message": f"Unknown request type: {kind}"})


# ----------------------------------------------------------------------------- the launcher


def launch(a: Args) -> int:
    ranks = [(a.base_gpu_id + r * a.gpu_id_step, r) for r in range(a.tp_size)]
    for gpu_id, tp_rank in ranks:
        cleanup_stale(a, gpu_id, tp_rank)
    method = a.dist_init_method or "tcp://127.0.0.1:0"
    procs: list[subprocess.Popen] = []
    for gpu_id, tp_rank in ranks:
        argv = [
            sys.executable,
            "-m",
            "fastverify.sim.weight_cache.daemon",
            *a.argv,
            "--gpu-id",
            str(gpu_id),
            "--tp-rank",
            str(tp_rank),
            "--dist-init-method",
            method,
        ]
        procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
        _log(
            None,
            None,
            f"Launched weight cache daemon gpu={gpu_id} pp_rank=0 tp_rank={tp_rank} "
            f"pid={procs[-1].pid}",
        )
    t0 = time.monotonic()
    try:
        for (gpu_id, tp_rank), _p in zip(ranks, procs, strict=True):
            ready = Path(wc_sim.path(a.wc, "ready", _key(a, gpu_id, tp_rank)))
            while not ready.exists():
                time.sleep(0.05)
                if time.monotonic() - t0 > a.timeout:
                    raise TimeoutError(
                        f"Weight cache daemon pp_rank=0 tp_rank={tp_rank} did not become ready "
                        f"within {a.timeout}s"
                    )
                for p in procs:
                    if p.poll() is not None:
                        raise RuntimeError(
                            f"Weight cache daemon exited prematurely with code {p.returncode}"
                        )
            _log(None, None, f"Weight cache daemon pp_rank=0 tp_rank={tp_rank} is ready")
        _log(
            None,
            None,
            f"All {len(procs)} weight cache daemons on node 0 are ready (pp_ranks=0..0, "
            f"tp_ranks=0..{a.tp_size - 1}, dist_init_method={method})",
        )
        exited = None
        while exited is None:
            exited = next((p for p in procs if p.poll() is not None), None)
            if exited is None:
                time.sleep(0.1)
    except KeyboardInterrupt:
        _log(None, None, "Received KeyboardInterrupt, shutting down daemons")
        exited = None
    except (TimeoutError, RuntimeError) as exc:
        _stop_all(procs)
        _log(None, None, str(exc), "ERROR")
        return 1
    _stop_all(procs)
    if exited is not None:
        _log(
            None,
            None,
            f"Weight cache daemon (pid={exited.pid}) exited with code {exited.returncode}; "
            "terminated the remaining daemons.",
            "ERROR",
        )
        return 1
    return 0


def _stop_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    _log(None, None, "All weight cache daemons have been terminated")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse(argv)
    try:
        rank = a.gpu_id if a.gpu_id is not None else a.tp_rank  # one rank: either names it
        if rank is not None:
            gpu_id = a.gpu_id if a.gpu_id is not None else rank
            tp_rank = a.tp_rank if a.tp_rank is not None else rank
            cleanup_stale(a, gpu_id, tp_rank)
            return run_rank(a, gpu_id, tp_rank)
        return launch(a)
    except RuntimeError as exc:
        sys.stdout.write(f"Traceback (most recent call last):\nRuntimeError: {exc}\n")
        sys.stdout.flush()
        return 1


if __name__ == "__main__":
    sys.exit(main())
