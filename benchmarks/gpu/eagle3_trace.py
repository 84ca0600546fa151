"""Write real per-rank Kineto traces of a TP=N program shaped like SGLang serving EAGLE-3.

Fixture generator for `tests/fixtures/nccl-2.28.9-h200x2-2rank-traces/` (run on GPUs):

    python benchmarks/gpu/eagle3_trace.py --out DIR [--nproc 2] [--naming new|old]

Each rank holds a toy target model and a toy drafter, both tensor-parallel over the N
ranks: every layer is a local matmul, an all-reduce, a local matmul, an all-reduce (two
all-reduces per layer, as a TP attention + MLP layer has); nothing else communicates.
The target's verify, decode and draft forwards are captured in CUDA graphs after a warm-up
on a side stream (as SGLang's graph runners do) and replayed; the prefill forward runs
eagerly. Inside one torch.profiler window, each forward is wrapped in
`record_function` with SGLang 0.5.23's span names (`--naming new`):

- 1 x `step[EXTEND bs=1 toks=T]`: eager target prefill, 2 x layers all-reduces;
- D x `step[DECODE bs=B]`: target decode graph replays, 2 x layers each;
- C cycles of: S x `step[DRAFT bs=B]` (draft decode graph, 2 x draft_layers each),
  1 x `step[VERIFY bs=B]` (target graph over B x (S+1) tokens, 2 x layers each),
  1 x `step[DRAFT bs=B]` (draft extend graph, 2 x draft_layers).

`--naming old` uses older releases' mode names instead: `step[TARGET_VERIFY bs=B]` for the
verify and `step[DRAFT_EXTEND bs=B]` for every drafter forward.

The counts by construction are written beside the traces (`expected.json`): verify passes
= C, all-reduces per verify = 2 x layers, all-reduce kernels on each GPU in the window =
2 x layers x (1 + D + C) + 2 x draft_layers x (S + 1) x C. Traces are written as SGLang
names them (`{prefix}-TP-{rank}.trace.json.gz`).

`--backend gloo` runs the same program on CPUs (no graphs, no GPU events) so that it can be
checked anywhere before a GPU run.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any


def names(naming: str, bs: int, toks: int) -> dict[str, str]:
    if naming == "old":
        return {
            "extend": f"step[EXTEND bs={bs} toks={toks}]",
            "decode": f"step[DECODE bs={bs}]",
            "draft": f"step[DRAFT_EXTEND bs={bs}]",
            "draft_extend": f"step[DRAFT_EXTEND bs={bs}]",
            "verify": f"step[TARGET_VERIFY bs={bs}]",
        }
    return {
        "extend": f"step[EXTEND bs={bs} toks={toks}]",
        "decode": f"step[DECODE bs={bs}]",
        "draft": f"step[DRAFT bs={bs}]",
        "draft_extend": f"step[DRAFT bs={bs}]",
        "verify": f"step[VERIFY bs={bs}]",
    }


def expected(a: argparse.Namespace) -> dict[str, Any]:
    per_verify = 2 * a.layers
    draft_per_cycle = 2 * a.draft_layers * (a.draft_steps + 1)
    return {
        "world_size": a.nproc,
        "naming": a.naming,
        "span_names": names(a.naming, a.bs, a.prefill_tokens),
        "verify_passes": a.cycles,
        "allreduce_per_verify": per_verify,
        "verify_tokens": a.bs * (a.draft_steps + 1),
        "allreduce_calls": 2 * a.layers * (1 + a.decode_steps + a.cycles)
        + draft_per_cycle * a.cycles,
        "allreduce_in_draft": draft_per_cycle * a.cycles,
        "allreduce_in_decode": 2 * a.layers * a.decode_steps,
        "allreduce_in_extend": 2 * a.layers,
        "draft_forwards": (a.draft_steps + 1) * a.cycles,
        "decode_forwards": a.decode_steps,
        "layers": a.layers,
        "draft_layers": a.draft_layers,
        "hidden": a.hidden,
        "cycles": a.cycles,
        "draft_steps": a.draft_steps,
        "bs": a.bs,
        "prefill_tokens": a.prefill_tokens,
    }


class Model:
    """`layers` x (matmul, all-reduce, matmul, all-reduce) on this rank's weight shards."""

    def __init__(self, torch: Any, dist: Any, layers: int, hidden: int, world: int, dev: Any,
                 dtype: Any, seed: int):  # fmt: skip
        gen = torch.Generator(device="cpu").manual_seed(seed)
        shard = max(1, hidden // world)
        scale = 1.0 / hidden
        self.torch, self.dist = torch, dist
        self.w = [
            (
                (torch.randn(hidden, shard, generator=gen) * scale).to(dev, dtype),
                (torch.randn(shard, hidden, generator=gen) * scale).to(dev, dtype),
            )
            for _ in range(layers)
        ]

    def forward(self, x: Any) -> Any:
        torch, dist = self.torch, self.dist
        h = x
        for w_in, w_out in self.w:
            a = torch.matmul(torch.matmul(h, w_in), w_out)  # attention-like: shard in, out
            dist.all_reduce(a)
            h = h + a
            m = torch.matmul(torch.matmul(h, w_in), w_out)  # MLP-like
            dist.all_reduce(m)
            h = h + m
        return h


def _rank_main(rank: int, a: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(a.nproc), LOCAL_RANK=str(rank))  # fmt: skip
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = a.backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
        dev, dtype = torch.device("cuda", rank), torch.bfloat16
        dist.init_process_group("nccl", rank=rank, world_size=a.nproc, device_id=dev)
    else:
        dev, dtype = torch.device("cpu"), torch.float32
        dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    target = Model(torch, dist, a.layers, a.hidden, a.nproc, dev, dtype, seed=1 + rank)
    drafter = Model(torch, dist, a.draft_layers, a.hidden, a.nproc, dev, dtype, seed=100 + rank)
    n = names(a.naming, a.bs, a.prefill_tokens)
    verify_tokens = a.bs * (a.draft_steps + 1)
    bufs = {
        "verify": torch.zeros(verify_tokens, a.hidden, device=dev, dtype=dtype),
        "decode": torch.zeros(a.bs, a.hidden, device=dev, dtype=dtype),
        "draft": torch.zeros(a.bs, a.hidden, device=dev, dtype=dtype),
        "draft_extend": torch.zeros(verify_tokens, a.hidden, device=dev, dtype=dtype),
    }
    models = {"verify": target, "decode": target, "draft": drafter, "draft_extend": drafter}
    runs: dict[str, Any] = {}
    if cuda:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for key, buf in bufs.items():
                for _ in range(2):
                    models[key].forward(buf)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        for key, buf in bufs.items():
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                models[key].forward(buf)
            runs[key] = graph.replay
        torch.cuda.synchronize()
    else:
        runs = {key: (lambda k=key: models[k].forward(bufs[k])) for key in bufs}
    prompt = torch.randn(a.prefill_tokens, a.hidden, device=dev).to(dtype)
    target.forward(prompt)  # eager warm-up of the prefill shape
    if cuda:
        torch.cuda.synchronize()

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        with record_function(n["extend"]):
            target.forward(prompt)
        for _ in range(a.decode_steps):
            with record_function(n["decode"]):
                runs["decode"]()
        for _ in range(a.cycles):
            for _ in range(a.draft_steps):
                with record_function(n["draft"]):
                    runs["draft"]()
            with record_function(n["verify"]):
                runs["verify"]()
            with record_function(n["draft_extend"]):
                runs["draft_extend"]()
        if cuda:
            torch.cuda.synchronize()
    window_s = time.perf_counter() - t0
    out = Path(a.out)
    plain = out / f"{a.prefix}-TP-{rank}.trace.json"
    prof.export_chrome_trace(str(plain))
    with open(plain, "rb") as src, gzip.open(f"{plain}.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()
    info = {"rank": rank, "window_s": window_s, "torch": torch.__version__}
    if cuda:
        info["gpu"] = torch.cuda.get_device_name(dev)
        info["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    # Graphs that captured NCCL calls are released before the communicator goes: on the
    # first 2-GPU run this program (which kept them alive) never exited after writing its
    # traces. The teardown is timed and recorded; a rank that cannot leave is ended.
    runs.clear()
    del prof
    if cuda:
        torch.cuda.synchronize()
    info["teardown_s"] = teardown(dist, a.teardown_s)
    (out / f"rank{rank}.json").write_text(json.dumps(info), encoding="utf-8")
    os._exit(0)


def teardown(dist: Any, limit_s: float) -> float | None:
    """destroy_process_group() in a helper thread; its duration, or None when it did not
    return within `limit_s`."""
    import threading

    t0 = time.perf_counter()
    th = threading.Thread(target=_destroy, args=(dist,), daemon=True)
    th.start()
    th.join(limit_s)
    return None if th.is_alive() else time.perf_counter() - t0


def _destroy(dist: Any) -> None:
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--naming", choices=("new", "old"), default="new")
    p.add_argument("--prefix", default="eagle3")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--draft-layers", type=int, default=1)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--bs", type=int, default=1)
    p.add_argument("--draft-steps", type=int, default=3)
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--decode-steps", type=int, default=2)
    p.add_argument("--prefill-tokens", type=int, default=64)
    p.add_argument("--teardown-s", type=float, default=10.0)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole run")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.spawn(_rank_main, args=(a, port), nprocs=a.nproc, join=False)
    deadline = time.monotonic() + a.timeout
    finished = False
    while not finished and time.monotonic() < deadline:
        finished = ctx.join(timeout=1.0)
    if not finished:
        for proc in ctx.processes:  # only the ranks this program started
            if proc.is_alive():
                proc.kill()
    meta = expected(a)
    ranks = []
    for r in range(a.nproc):
        f = out / f"rank{r}.json"
        ranks.append(json.loads(f.read_text()) if f.exists() else {"rank": r, "missing": True})
        f.unlink(missing_ok=True)
    meta["finished"] = finished
    meta["ranks"] = ranks
    meta["command"] = "python benchmarks/gpu/eagle3_trace.py " + " ".join(argv or sys.argv[1:])
    (out / "expected.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: meta[k] for k in ("verify_passes", "allreduce_per_verify",
                                           "allreduce_calls")}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
