"""The grammar of SGLang's own log lines (0.5.23 and the older forms), as typed records,
and the one reader of a server's output (`parse_line`, `iter_records`): NCCL's lines, which
the server's processes print into the same stream, go to `fastverify.nccl.loglines`
(nccl_version, nccl_env, nccl_tuning, nccl_tuner, nccl_warn), the rest to SGLang's grammar.
Host-side NCCL COLL lines are deliberately not records: under CUDA graphs they count
captures, not replays. Dispatch is by cheap substring tests before any regex runs.

Kinds of SGLang's lines (plain dicts with `kind`):

- `decode`: `Decode batch, #running-req: 1, #token: 148, token usage: 0.00, accept len: 2.01,
  accept rate: 0.34, cuda graph: True, gen throughput (token/s): 82.31, #queue-req: 0`;
  `Decode batch [N], ...` (SGLANG_LOG_FORWARD_ITERS, `iter` field); hybrid-SWA/SSM pools
  (`#full token: N, full token usage: U, #swa token: ..., swa token usage: ...`: token_count
  and token_usage from the full pool, the rest under `extra`); the older `Decode batch. ...,`;
  unknown suffixes (`fwd occupancy: ...`) kept under `extra`.
- `prefill`: `Prefill batch[ [N]][(mixed #running-req: N)][.,] #new-seq: ..., #new-token: ...`.
- `ready`: `The server is fired up and ready to roll!`.
- `load_progress` / `capture_progress`: tqdm bars of weight loading and CUDA-graph capture,
  and 0.5.23's `Capture target decode CUDA graph begin. backend=full, ...` / `... end.`
  milestones (`phase`: decode | verify | prefill, `role`: target | draft, `event`:
  begin | end, `backend`).
- `capture_failed`: `Capture cuda graph failed: ...` (decode/draft) and `Fail when using
  backend: breakable for prefill runner.` (breakable prefill).
- `argv_error`: argparse's `error: ...` line (`sglang serve: error: ambiguous option: ...`).
- `allreduce`: the FlashInfer PCIe-IPC backend's lines (`fastverify.sglang.allreduce.
  parse_line`: `event` enabled | built | autotuned | fallback | seed_policy, per `tp_rank`).

`format_*` functions build the lines the way SGLang does, for the sim; tests/contract/
builds the same lines with SGLang's own code where it can run on CPU.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fastverify.nccl.loglines import is_info_line, parse_nccl_line
from fastverify.sglang import allreduce

Record = dict[str, Any]

READY_TEXT = "The server is fired up and ready to roll"
# GET /health_generate (0.5.23 srt/entrypoints/http_server.py): a 1-token generation; any
# detokenizer output since the request (a busy server's included) answers 200, none within
# HEALTH_CHECK_TIMEOUT seconds (env SGLANG_HEALTH_CHECK_TIMEOUT, default 20) logs this line
# at ERROR and answers 503.
HEALTH_CHECK_TIMEOUT_ENV = "SGLANG_HEALTH_CHECK_TIMEOUT"
HEALTH_CHECK_TIMEOUT_DEFAULT = 20
HEALTH_CHECK_FAILED_TEXT = (
    "Health check failed. Server couldn't get a response from detokenizer for last "
)

# the common shapes of both generations in one pass; anything else takes the generic path
_DECODE_FAST = re.compile(
    r" #running-req: (\d+), #token: (\d+), token usage: ([\d.]+), "
    r"(?:accept len: ([\d.]+), )?(?:accept rate: ([\d.]+), )?(?:cuda graph: (True|False), )?"
    r"gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)(?:, )?$"
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_TQDM = re.compile(r"(\d+)%\s*(?:Completed\s*)?\|(?:[^|]*\|)?\s*(\d+)/(\d+)")
_CAPTURE_BS = re.compile(r"bs=(\d+)")
# 0.5.17's breakable prefill capture (runner/prefill_cuda_graph_runner.py): one tqdm step per
# token count, `Capturing num tokens (num_tokens=8192 avail_mem=138.82 GB)`
CAPTURE_TOKENS_TEXT = "Capturing num tokens"
_CAPTURE_TOKENS = re.compile(r"num_tokens=(\d+)")
# start-up milestones the daemon shows as progress: the weights' load and its checkpoint
# shards' tqdm bar, the whole CUDA-graph capture; the TP rank in a line's prefix
LOAD_WEIGHT_BEGIN_TEXT = "Load weight begin"
LOAD_WEIGHT_END_TEXT = "Load weight end"
CAPTURE_BEGIN_TEXT = "Capture cuda graph begin"
CAPTURE_END_TEXT = "Capture cuda graph end"
CHECKPOINT_SHARDS = re.compile(r"Loading \S+ checkpoint shards:\s*(\d+)%")
TP_RANK = re.compile(r"\sTP(\d+)\]")
# entrypoints/engine.py (0.5.17): where a start's time went, once, when the engine is up
STARTUP_TIMINGS_TEXT = "Engine startup timings (s): "
_TIMING = re.compile(r"(\w+)=([\d.]+)")

# SGLang key -> (our field, type)
_DECODE_FIELDS: dict[str, tuple[str, type]] = {
    "#running-req": ("running_reqs", int),
    "#token": ("token_count", int),
    "token usage": ("token_usage", float),
    "#full token": ("token_count", int),  # hybrid SWA / SSM pools: the full-attention pool
    "full token usage": ("token_usage", float),
    "accept len": ("accept_len", float),
    "accept rate": ("accept_rate", float),
    "cuda graph": ("cuda_graph", bool),
    "gen throughput (token/s)": ("gen_throughput", float),
    "#queue-req": ("queue_reqs", int),
}
_PREFILL_FIELDS: dict[str, tuple[str, type]] = {
    "#new-seq": ("new_seqs", int),
    "#new-token": ("new_tokens", int),
    "#cached-token": ("cached_tokens", int),
    "token usage": ("token_usage", float),
    "full token usage": ("token_usage", float),
    "#running-req": ("running_reqs", int),
    "#queue-req": ("queue_reqs", int),
    "cuda graph": ("cuda_graph", bool),
    "input throughput (token/s)": ("input_throughput", float),
    "cache hit rate": ("cache_hit_rate", float),
}


def _convert(raw: str, kind: type) -> Any:
    if kind is bool:
        return raw == "True"
    try:
        return kind(raw)
    except ValueError:
        raw = raw.rstrip("%")
        try:
            return kind(raw) if kind is float else int(float(raw))
        except ValueError:
            return None


def _fields(body: str, table: dict[str, tuple[str, type]], rec: Record) -> None:
    """`key: value, key: value, ` -> typed fields; unknown keys kept as text in `extra`."""
    extra: dict[str, str] | None = None
    for part in body.split(", "):
        key, sep, raw = part.partition(": ")
        if not sep:
            continue
        key = key.strip()
        raw = raw.strip().rstrip(",")
        spec = table.get(key)
        if spec is not None:
            rec[spec[0]] = _convert(raw, spec[1])
        elif raw:
            if extra is None:
                extra = {}
            extra[key] = raw
    if extra:
        rec["extra"] = extra


def _prefix(head: str, rec: Record) -> None:
    """`[2025-06-13 10:30:17 TP0] ` / `[... DP0 TP3 EP0] ` -> time and tp_rank (if any)."""
    i = head.find("[")
    j = head.find("]", i + 1)
    if i < 0 or j < 0:
        return
    parts = head[i + 1 : j].split(" ")
    if len(parts) < 2 or len(parts[0]) != 10 or parts[0][4:5] != "-":
        return
    rec["time"] = f"{parts[0]} {parts[1]}"
    for part in parts[2:]:
        if part.startswith("TP") and part[2:].isdigit():
            rec["tp_rank"] = int(part[2:])
            return


def _after_head(line: str, start: int, head_len: int) -> tuple[int, int | None]:
    """Position after `Decode batch`/`Prefill batch` and its ` [N]` iteration, if any."""
    pos = start + head_len
    if line.startswith(" [", pos):
        m = ITER_PREFIX.match(line, pos)
        if m:
            return m.end() + 1, int(m.group(1))
    return pos + 1, None


def _decode(line: str, start: int) -> Record:
    body_at, iteration = _after_head(line, start, 12)
    rec = _decode_body(line, start, body_at)
    if iteration is not None:
        rec["iter"] = iteration
    return rec


def _decode_body(line: str, start: int, body_at: int) -> Record:
    m = _DECODE_FAST.match(line, body_at)
    if m is not None:
        r, tok, use, alen, arate, graph, gen, queue = m.groups()
        rec: Record = {
            "kind": "decode",
            "running_reqs": int(r),
            "token_count": int(tok),
            "token_usage": float(use),
            "accept_len": float(alen) if alen is not None else None,
            "accept_rate": float(arate) if arate is not None else None,
            "cuda_graph": (graph == "True") if graph is not None else None,
            "gen_throughput": float(gen),
            "queue_reqs": int(queue),
        }
        if start:
            _prefix(line[:start], rec)
        return rec
    rec = {
        "kind": "decode",
        "running_reqs": None,
        "token_count": None,
        "token_usage": None,
        "accept_len": None,
        "accept_rate": None,
        "cuda_graph": None,
        "gen_throughput": None,
        "queue_reqs": None,
    }
    _fields(line[body_at:], _DECODE_FIELDS, rec)
    if start:
        _prefix(line[:start], rec)
    return rec


def _prefill(line: str, start: int) -> Record:
    rec: Record = {"kind": "prefill"}
    body_at, iteration = _after_head(line, start, 13)
    if iteration is not None:
        rec["iter"] = iteration
    body = line[body_at - 1 :]
    if body.startswith("(mixed"):
        close = body.find(")")
        m = _NUMBER.search(body, 0, close)
        if m:
            rec["mixed_running_reqs"] = int(m.group(0))
        body = body[close + 1 :]
    _fields(body.lstrip(".,"), _PREFILL_FIELDS, rec)
    _prefix(line[:start], rec)
    return rec


def _progress(line: str) -> Record | None:
    seg = line
    if "\r" in seg:  # tqdm redraws with carriage returns; the last drawn state wins
        parts = [p for p in seg.split("\r") if p.strip()]
        if not parts:
            return None
        seg = parts[-1]
    m = _TQDM.search(seg)
    if m is None:
        return None
    if "Capturing batches" in seg:
        rec: Record = {"kind": "capture_progress"}
        bs = _CAPTURE_BS.search(seg)
        rec["bs"] = int(bs.group(1)) if bs else None
    elif CAPTURE_TOKENS_TEXT in seg:
        rec = {"kind": "capture_progress", "phase": "prefill"}
        tokens = _CAPTURE_TOKENS.search(seg)
        rec["num_tokens"] = int(tokens.group(1)) if tokens else None
    else:
        rec = {"kind": "load_progress"}
    rec["percent"] = int(m.group(1))
    rec["current"] = int(m.group(2))
    rec["total"] = int(m.group(3))
    return rec


_CAPTURE = re.compile(
    r"Capture (target|draft) (decode|verify|prefill|extend) (?:CUDA|CPU|NPU|XPU|\w+) graph "
    r"(begin|end)\. ?(.*)$"
)
_BACKEND = re.compile(r"backend=(\w+)")
_ELAPSED = re.compile(r"elapsed=([\d.]+) s")
CAPTURE_FAILED_TEXT = "Capture cuda graph failed"
PREFILL_CAPTURE_FAILED = re.compile(r"Fail when using backend: (\w+) for prefill runner")
ARGV_ERROR = re.compile(r"^(?:usage: .*\n)?(\S[^:]*): error: (.+)$")
AMBIGUOUS_OPTION = "error: ambiguous option"
MODULE_FORM_WARNING = "'python -m sglang.launch_server' is still supported"
ITER_PREFIX = re.compile(r" \[(\d+)\]")
# a start that failed at CUDA-graph capture (`fastverify.daemon.failures`): the decode/draft
# runners', an older wording, the breakable prefill runner's
CAPTURE_FAILURE = re.compile(
    rf"{CAPTURE_FAILED_TEXT}|CUDA graph capture failed|{PREFILL_CAPTURE_FAILED.pattern}", re.I
)


def capture_record(line: str) -> Record | None:
    pos = line.find("Capture ")
    m = _CAPTURE.search(line, pos if pos >= 0 else 0)
    if m is None:
        return None
    rest = m.group(4)
    rec: Record = {
        "kind": "capture_progress",
        "role": m.group(1),
        "phase": m.group(2),
        "event": m.group(3),
        "percent": 0 if m.group(3) == "begin" else 100,
    }
    b = _BACKEND.search(rest)
    if b:
        rec["backend"] = b.group(1)
    e = _ELAPSED.search(rest)
    if e:
        rec["elapsed_s"] = float(e.group(1))
    return rec


def startup_timings_record(line: str) -> Record | None:
    """`Engine startup timings (s): load_weight=0.19, kv_cache_allocation=0.00,
    scheduler_e2e=76.00, cuda_graph={prefill=70.08, decode=2.61, ...}, tokenizer_e2e=87.32`:
    seconds per part of the start, the CUDA-graph capture per phase under `cuda_graph`."""
    pos = line.find(STARTUP_TIMINGS_TEXT)
    body = line[pos + len(STARTUP_TIMINGS_TEXT) :]
    graphs_at = body.find("cuda_graph={")
    rec: Record = {"kind": "startup_timings", "cuda_graph": {}}
    if graphs_at >= 0:
        end = body.find("}", graphs_at)
        inner = body[graphs_at + len("cuda_graph={") : end if end >= 0 else None]
        rec["cuda_graph"] = {k: float(v) for k, v in _TIMING.findall(inner)}
        body = body[:graphs_at] + (body[end + 1 :] if end >= 0 else "")
    for key, value in _TIMING.findall(body):
        rec[key] = float(value)
    if "load_weight" not in rec:
        return None
    _prefix(line, rec)
    return rec


def capture_failed_record(line: str) -> Record | None:
    if CAPTURE_FAILED_TEXT in line:
        return {"kind": "capture_failed", "phase": "decode", "message": line.strip()}
    m = PREFILL_CAPTURE_FAILED.search(line)
    if m:
        return {"kind": "capture_failed", "phase": "prefill", "backend": m.group(1),
                "message": line.strip()}  # fmt: skip
    return None


def argv_error_record(line: str) -> Record | None:
    if ": error: " not in line:
        return None
    m = ARGV_ERROR.match(line.strip())
    if m is None:
        return None
    return {"kind": "argv_error", "prog": m.group(1), "message": m.group(2)}


def format_decode(
    *,
    running_reqs: int,
    token_count: int,
    token_usage: float,
    gen_throughput: float,
    queue_reqs: int,
    accept_len: float | None = None,
    accept_rate: float | None = None,
    cuda_graph: bool = True,
    iteration: int | None = None,
) -> str:
    """A decode line as 0.5.23 writes it (`metrics_reporter.report_decode_stats`)."""
    it = f" [{iteration}]" if iteration is not None else ""
    msg = f"Decode batch{it}, #running-req: {running_reqs}, "
    msg += f"#token: {token_count}, token usage: {token_usage:.2f}, "
    if accept_len is not None:
        msg += f"accept len: {accept_len:.2f}, accept rate: {accept_rate or 0.0:.2f}, "
    msg += (
        f"cuda graph: {cuda_graph}, gen throughput (token/s): {gen_throughput:.2f}, "
        f"#queue-req: {queue_reqs}"
    )
    return msg


def format_prefill_capture_failed(backend: str) -> str:
    return f"Fail when using backend: {backend} for prefill runner."


def parse_sglang_line(line: str) -> Record | None:
    """The record for one SGLang log line, or None."""
    pos = line.find("Decode batch")
    if pos >= 0 and line[pos + 12 : pos + 13] in ",. ":
        return _decode(line, pos)
    pos = line.find("Prefill batch")
    if pos >= 0:
        return _prefill(line, pos)
    if READY_TEXT in line:
        ready: Record = {"kind": "ready"}
        _prefix(line, ready)
        return ready
    if "Capture " in line and " graph " in line:
        capture = capture_record(line)
        if capture is not None:
            _prefix(line, capture)
            return capture
    if "|" in line and ("Loading" in line or "Capturing " in line):
        return _progress(line)
    if STARTUP_TIMINGS_TEXT in line:
        return startup_timings_record(line)
    if "raph failed" in line or "Fail when using backend" in line:
        return capture_failed_record(line)
    if ": error: " in line:
        return argv_error_record(line)
    if "PCIe-IPC" in line or "pcie_ipc" in line:
        backend = allreduce.parse_line(line)
        if backend is not None:
            _prefix(line, backend)
        return backend
    return None


def parse_line(line: str) -> Record | None:
    """The record for one line of a server's output (NCCL's or SGLang's), or None when the
    line is not one we know."""
    if "NCCL" in line:
        rec = parse_nccl_line(line)
        if rec is not None or is_info_line(line):
            return rec  # an NCCL INFO line is never also a decode/prefill/ready line
    return parse_sglang_line(line)


def iter_records(lines: Iterable[str]) -> Iterator[Record]:
    """Parse many lines; yields records with `line` (1-based line number) added."""
    for number, line in enumerate(lines, 1):
        rec = parse_line(line)
        if rec is not None:
            rec["line"] = number
            yield rec


def format_health_check_failed(timeout_s: int, tic: float, last_receive: float) -> str:
    """SGLang's /health_generate failure line (times as its `time.strftime("%H:%M:%S")`)."""
    import time

    return (
        f"{HEALTH_CHECK_FAILED_TEXT}{timeout_s} seconds. tic start time: "
        f"{time.strftime('%H:%M:%S', time.localtime(tic))}. last_heartbeat time: "
        f"{time.strftime('%H:%M:%S', time.localtime(last_receive))}"
    )


def health_check_timeout(env: Any) -> int:
    """SGLang's HEALTH_CHECK_TIMEOUT for an environment (`int(os.getenv(..., 20))`)."""
    try:
        return int(env.get(HEALTH_CHECK_TIMEOUT_ENV, HEALTH_CHECK_TIMEOUT_DEFAULT))
    except ValueError:
        return HEALTH_CHECK_TIMEOUT_DEFAULT


# The start-up lines that say what an engine holds on its GPU (GB of 2**30 bytes, as SGLang
# divides torch.cuda.mem_get_info by 1 << 30): fastverify.frontdoor.standby sums them.
_MEM_WEIGHTS = re.compile(r"Load weight end\..*?mem usage=([\d.]+) GB")
# the free memory just before the weights load (SGLang's pre_model_load_memory, the base of
# --mem-fraction-static's slack); an EAGLE-3 start prints a second one for its drafter
_MEM_BEFORE_LOAD = re.compile(r"Load weight begin\. avail mem=([\d.]+) GB")
# one size (MLA, 0.5.23's pools) or K and V apiece (MHA, as 0.5.17 prints it)
_MEM_KV = re.compile(
    r"KV (?:Cache is|cache) allocated\..*?#tokens: (\d+), "
    r"(?:KV size: ([\d.]+) GB|K size: ([\d.]+) GB, V size: ([\d.]+) GB)"
)
_MEM_GRAPHS = re.compile(r"CUDA graph end\..*?mem usage=([\d.]+) GB", re.IGNORECASE)
_MEM_CONTEXT = re.compile(r"Init torch distributed ends\..*?mem usage=([\d.]+) GB")
_MEM_RANK = re.compile(r"\bTP(\d+)\b")


@dataclass(frozen=True)
class MemoryRecord:
    """One start-up line's share of a rank's GPU memory: what (weights, kv, graphs,
    context), GiB, and for a KV pool its tokens; or (what `free_before_load`) the GiB free
    on that rank's GPU when its weights began to load."""

    rank: int
    what: str
    gib: float
    tokens: int | None = None


def memory_record(line: str) -> MemoryRecord | None:
    m = _MEM_RANK.search(line)
    rank = int(m.group(1)) if m else 0
    for pattern, what in ((_MEM_WEIGHTS, "weights"), (_MEM_GRAPHS, "graphs"),
                          (_MEM_CONTEXT, "context"),
                          (_MEM_BEFORE_LOAD, "free_before_load")):  # fmt: skip
        if m := pattern.search(line):
            return MemoryRecord(rank, what, float(m.group(1)))
    if m := _MEM_KV.search(line):
        size = float(m.group(2)) if m.group(2) else float(m.group(3)) + float(m.group(4))
        return MemoryRecord(rank, "kv", size, int(m.group(1)))
    return None
