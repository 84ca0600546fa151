"""The sim's stand-in for SGLang's weight cache (srt/weight_cache/): what its daemon and
the sim server in `--weight-cache-mode client` share.

Followed from the real package (its facts, read from each wheel, and 0.5.17/0.5.23's
source): one daemon process per local rank, its Unix socket and `.ready` file at the
release's template (`/tmp/sglang_weight_cache_rank{global_rank}.*` in 0.5.17 and 0.5.18,
`SGLANG_WEIGHT_CACHE_*_TEMPLATE` keyed by the GPU's UUID from 0.5.19), the ready file's
`pid=` and `config=` lines, length-prefixed pickled messages (`fetch_state` with the
client's CacheConfig -> `ok` with the entries, the daemon's pid and the bytes it holds, or
`mismatch` with its own config), the CacheConfig fields of the release, and the loader's
and the daemon's lines in each release's wording. The sim has no GPU: a rank's "UUID" is
derived from its GPU id, its weights are a sleep.

Timing (docs/guides/sim.md): a disk start of `--sim-load-seconds S` spends WEIGHTS_SHARE of S
reading the checkpoint, GRAPHS_SHARE capturing CUDA graphs and REST_SHARE on the rest; a
client start maps the cache's tensors in MAP_SECONDS instead of reading them.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
from collections.abc import Mapping
from typing import Any

from fastverify.sglang.facts import resolve

# The split of a disk start. The weights' share: a real load versus a load that reads no
# checkpoint (the field's 10-minute real load and ~1.5-minute dummy load, the figures tune's
# plan and docs/guides/experiments.md use): 1 - 90/600. Graphs versus the rest of what is left:
# SGLang 0.5.17 on an H200 with warm JIT caches (benchmarks/results/engine-start-split-h200.json:
# 3.74 s of CUDA-graph capture in a 32.1 s start that read no weights).
WEIGHTS_SHARE = 0.85
GRAPHS_SHARE = round((1 - WEIGHTS_SHARE) * 3.74 / 32.1, 4)
REST_SHARE = round(1 - WEIGHTS_SHARE - GRAPHS_SHARE, 4)
# Of the graphs: prefill 2.72 s, decode 1.02 s on that start.
DECODE_GRAPH_SHARE = round(1.02 / 3.74, 3)
# Mapping the cache's tensors over CUDA IPC: the published figure, a 235B FP8 model's weights
# "under a second" (SGLang's weight-cache announcement); the H200 start that read no weights
# spent 0.08-0.19 s in SGLang's "Load weight" phase.
MAP_SECONDS = 0.2
WATCH_INTERVAL_S = 5.0  # ipc_loader._DAEMON_LIVENESS_POLL_INTERVAL
TENSORS = 1_024  # entries a sim cache rank exports
BYTES_PER_RANK = int(64.21 * (1 << 30))  # the sim's "Load weight end ... mem usage=64.21 GB"
MODEL_ARCH = "DeepseekV3ForCausalLM"
DEVICE_CAPABILITY = "9.0"  # the sim plays H200s
TORCH_VERSION = "2.9.1+sim"
# The sim's stand-in for a process's torch.__version__ (the fingerprint's environment stamp:
# a cache and a server built by different torch builds do not share weights): tests set it
# in one process's environment (a profile) to make SGLang's fingerprint check refuse.
TORCH_VERSION_VAR = "FASTVERIFY_SIM_TORCH_VERSION"
TRANSPORT = "torch_ipc"
# Defaults of the CacheConfig fields the sim's arguments do not set (one TP group)
FIELD_DEFAULTS: dict[str, Any] = {
    "pp_size": 1,
    "pp_rank": 0,
    "dp_size": 1,
    "ep_size": 1,
    "moe_dp_size": 1,
    "moe_dp_rank": 0,
    "moe_ep_rank": 0,
    "attn_dp_size": 1,
    "enable_dp_lm_head": False,
    "attn_cp_size": 1,
    "moe_dense_tp_size": None,
    "moe_a2a_backend": "none",
    "quant_config_hash": "",
}
TORCH_DTYPES = {
    "auto": "torch.bfloat16",
    "bfloat16": "torch.bfloat16",
    "half": "torch.float16",
    "float16": "torch.float16",
    "float32": "torch.float32",
    "float": "torch.float32",
}


def facts(version: str) -> dict[str, Any]:
    """The played release's weight cache (SystemExit when it has none: its server has no
    such flag, and there is no daemon module to run)."""
    wc = resolve(version).section("weight_cache")
    if not wc:
        raise SystemExit(f"SGLang {version} has no weight cache (it came in 0.5.17)")
    return wc


def device_uuid(gpu_id: int) -> str:
    """The sim's UUID of GPU `gpu_id` (a real rank asks the driver)."""
    return f"GPU-00000000-5111-4000-8000-{gpu_id:012x}"


def global_rank(tp_size: int, pp_rank: int, tp_rank: int) -> int:
    return tp_size * pp_rank + tp_rank


def key_of(
    wc: Mapping[str, Any], *, gpu_id: int, tp_size: int, tp_rank: int, pp_rank: int = 0
) -> str:
    if wc["paths"]["key"] == "device_uuid":
        return device_uuid(gpu_id)
    return str(global_rank(tp_size, pp_rank, tp_rank))


def path(wc: Mapping[str, Any], kind: str, key: str, env: Mapping[str, str] | None = None) -> str:
    """A rank's socket ("socket") or ready ("ready") path, as the release derives it."""
    p = wc["paths"][kind]
    env = os.environ if env is None else env
    tmpl = env.get(p["env"]) if p.get("env") else None
    tmpl = tmpl or p["template"]
    if p.get("env") and "{device_uuid}" not in tmpl:  # protocol._format_daemon_path
        raise ValueError(
            f"{p['env']}={tmpl!r} must contain '{{device_uuid}}': each physical GPU needs "
            "its own path, and a GPU-independent one would point every caller at a single "
            "daemon."
        )
    return tmpl.format(**{wc["paths"]["key"]: key})


def fingerprint(
    wc: Mapping[str, Any],
    *,
    model_path: str,
    tp_size: int,
    tp_rank: int,
    dtype: str,
    quantization: str | None,
    revision: str | None,
    dp_size: int = 1,
    ep_size: int = 1,
) -> dict[str, Any]:
    """The CacheConfig of a rank, with exactly the release's fields."""
    values = dict(FIELD_DEFAULTS)
    values.update(
        model_path=model_path,
        model_arch=MODEL_ARCH,
        tp_size=tp_size,
        tp_rank=tp_rank,
        dp_size=dp_size,
        ep_size=ep_size,
        quant_method=quantization or "",
        dtype=TORCH_DTYPES.get(dtype, f"torch.{dtype}"),
        revision=revision or "",
        device_capability=DEVICE_CAPABILITY,
        torch_version=os.environ.get(TORCH_VERSION_VAR) or TORCH_VERSION,
    )
    return {f: values.get(f) for f in wc["cache_config"]}


def send_msg(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(struct.pack("!I", len(data)) + data)


def recv_msg(sock: socket.socket) -> Any:
    header = _recv_exact(sock, 4)
    if header is None:
        raise ConnectionError("Connection closed while reading message header")
    data = _recv_exact(sock, struct.unpack("!I", header)[0])
    if data is None:
        raise ConnectionError("Connection closed while reading message body")
    return pickle.loads(data)  # the sim's own socket (mode 0600), the sim's data


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf.extend(chunk)
    return bytes(buf)


def new_style(wc: Mapping[str, Any]) -> bool:
    """0.5.19 and later: the daemon takes the server's flags, paths by GPU UUID."""
    return bool(wc["daemon_takes_server_args"])


# ----------------------------------------------------------------------------- lines
# Each release's wording (srt/weight_cache/ipc_loader.py and daemon.py); the contract test
# tests/unit/sim/test_sim_weight_cache.py checks every one against the release's facts.


def fetched_line(wc: Mapping[str, Any], n: int, seconds: float) -> str:
    if new_style(wc):
        return (
            f"[IpcModelLoader] Fetched {n} tensors from daemon (transport={TRANSPORT}) "
            f"in {seconds:.2f}s"
        )
    return f"[IpcModelLoader] Fetched {n} IPC handles from daemon in {seconds:.2f}s"


def loaded_line(mode: str, seconds: float) -> str:
    return f"[IpcModelLoader] Loaded model via IPC (mode={mode}), total={seconds:.2f}s"


def mapped_line(n: int, seconds: float) -> str:
    return f"[IpcModelLoader] Zero-copy: mapped {n} tensors (0 new post-quant), time={seconds:.3f}s"


SOCKET_MISSING = "[IpcModelLoader] Daemon socket not found at {path}."
FALLBACK = (
    "[IpcModelLoader] Weight cache not available or config mismatch, falling back to disk load"
)
REFUSED = (
    "[IpcModelLoader] Daemon socket exists at {path} but refused the connection. The daemon "
    "may have crashed after creating the socket. Check daemon logs."
)
DIED = (
    "[IpcModelLoader] Weight cache daemon (pid={pid}) died while this engine holds its weights "
    "via CUDA IPC. The mapped weight pointers are now dangling; continuing would read freed "
    "GPU memory. Terminating this process."
)


def mismatch_message(engine: Mapping[str, Any], daemon: Mapping[str, Any]) -> str:
    return (
        f"[IpcModelLoader] Daemon config mismatch!\n  Engine config: {dict(engine)}\n"
        f"  Daemon config: {dict(daemon)}"
    )


# ----------------------------------------------------------------------------- the client


class CacheRefused(RuntimeError):
    """The server cannot use the cache and must not load from disk either (it exits)."""


def fetch(
    wc: Mapping[str, Any],
    *,
    config: Mapping[str, Any],
    key: str,
    socket_path: str | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """One rank's `_fetch_from_cache`: (the daemon's answer, the socket path), (None, path)
    when the socket is absent (the client loads from disk); CacheRefused for a socket that
    is not ours, refuses the connection or serves another fingerprint."""
    import stat

    path_ = socket_path or path(wc, "socket", key, env)
    try:
        st = os.lstat(path_)
    except FileNotFoundError:
        return None, path_
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        raise CacheRefused(
            f"[IpcModelLoader] Refusing to connect: {path_} is not a socket owned by this user."
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(30)
        try:
            sock.connect(path_)
        except FileNotFoundError:
            return None, path_
        except ConnectionRefusedError:
            raise CacheRefused(REFUSED.format(path=path_)) from None
        send_msg(sock, {"type": "fetch_state", "config": dict(config)})
        reply = recv_msg(sock)
    finally:
        sock.close()
    if reply.get("status") != "ok":
        raise CacheRefused(mismatch_message(config, reply.get("daemon_config", {})))
    return reply, path_
