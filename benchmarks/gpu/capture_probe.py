"""Try to make NCCL refuse CUDA-graph capture on N ranks; record what happened.

    NCCL_ALGO=Tree NCCL_P2P_DISABLE=1 python benchmarks/gpu/capture_probe.py \
        --name tree-p2poff-cold --cold --out results.jsonl

The environment (the NCCL variables under test) is inherited by the ranks. Each rank
initialises NCCL (eagerly, `device_id`), then, unless `--cold`, runs one eager all-reduce
per size (so every algorithm/protocol is connected before capture, as preflight and
SGLang's warm-up do); then captures `--ops` all-reduces per size into one CUDA graph,
replays it, and checks the sum. With `--cold` the first use of each size is inside the
capture (NCCL's lazy connection set-up happens during capture). `--mix` replays the graph
on one stream while an eager all-reduce of the same communicator runs on another (what
`NCCL_GRAPH_MIXING_SUPPORT=0` forbids). One JSON line per run is appended to --out:
variables, mode, per-rank capture/replay state and the first error text.
`--backend gloo` checks the program on CPUs (no graphs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any


def _err(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return " | ".join(line for line in text.splitlines() if line.strip())[:600]


def _rank(rank: int, a: argparse.Namespace, port: int, tmp: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(a.nproc), LOCAL_RANK=str(rank))  # fmt: skip
    import torch
    import torch.distributed as dist

    res: dict[str, Any] = {"rank": rank, "stage": "init"}
    path = Path(tmp) / f"rank{rank}.json"

    def save() -> None:
        path.write_text(json.dumps(res), encoding="utf-8")

    graph = None
    try:
        cuda = a.backend == "nccl"
        if cuda:
            torch.cuda.set_device(rank)
            dev, dtype = torch.device("cuda", rank), torch.bfloat16
            dist.init_process_group("nccl", rank=rank, world_size=a.nproc, device_id=dev)
        else:
            dev, dtype = torch.device("cpu"), torch.float32
            dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
        sizes = [int(s) for s in a.numels.split(",")]
        pats = [(torch.arange(n, device=dev) % 4 + 1).to(dtype) for n in sizes]
        bufs = [p * (rank + 1) for p in pats]
        want = [p * (a.nproc * (a.nproc + 1) // 2) for p in pats]
        if not a.cold:
            res["stage"] = "eager"
            save()
            for b in bufs:
                t = b.clone()
                dist.all_reduce(t)
            if cuda:
                torch.cuda.synchronize()
        if not cuda:
            for b, p, w in zip(bufs, pats, want, strict=True):
                dist.all_reduce(b)
                res["correct"] = bool(torch.equal(b, w)) and res.get("correct", True)
                b.copy_(p * (rank + 1))
            res["stage"] = "done"
            res["capture"] = "skipped (gloo)"
        else:
            res["stage"] = "capture"
            save()
            graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            t0 = time.perf_counter()
            with torch.cuda.graph(graph, stream=side):
                for b in bufs:
                    for _ in range(a.ops):
                        dist.all_reduce(b)
            torch.cuda.synchronize()
            res["capture"] = "ok"
            res["capture_ms"] = (time.perf_counter() - t0) * 1e3
            res["stage"] = "replay"
            save()
            for b, p in zip(bufs, pats, strict=True):
                b.copy_(p * (rank + 1))
            torch.cuda.synchronize()
            if a.mix:
                other = torch.cuda.Stream()
                extra = torch.ones(1024, device=dev, dtype=dtype)
                graph.replay()
                with torch.cuda.stream(other):
                    dist.all_reduce(extra)
                torch.cuda.synchronize()
                res["mix_extra_ok"] = bool(torch.all(extra == a.nproc))
            else:
                graph.replay()
                torch.cuda.synchronize()
            n = a.nproc * (a.nproc + 1) // 2
            # after `ops` in-place sums: (r+1) * pattern summed -> pattern * n, then x nproc each
            res["correct"] = all(
                bool(torch.equal(b, w * (a.nproc ** (a.ops - 1))))
                for b, w in zip(bufs, want, strict=True)
            )
            res["replay"] = "ok"
            res["stage"] = "done"
            res["expected_factor"] = n * a.nproc ** (a.ops - 1)
    except Exception as exc:
        res["error"] = _err(exc)
        res["traceback"] = traceback.format_exc()[-1500:]
        if res["stage"] == "capture":
            res["capture"] = "failed"
        elif res["stage"] == "replay":
            res["replay"] = "failed"
    save()
    # Release the graph before the communicator (a first 2-GPU run that kept it alive never
    # exited); time the teardown, and leave without it when it does not return.
    del graph
    if a.backend == "nccl":
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
    th = threading.Thread(target=_destroy, args=(dist,), daemon=True)
    t0 = time.perf_counter()
    th.start()
    th.join(a.teardown_s)
    res["teardown_s"] = None if th.is_alive() else time.perf_counter() - t0
    save()
    os._exit(0)


def _destroy(dist: Any) -> None:
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True)
    p.add_argument("--out", required=True, help="JSON lines file to append to")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--numels", default="7168,458752,58720256", help="bf16 elements per size")
    p.add_argument("--ops", type=int, default=2, help="all-reduces per size in the graph")
    p.add_argument("--cold", action="store_true", help="no eager all-reduce before capture")
    p.add_argument("--mix", action="store_true", help="eager all-reduce beside the replay")
    p.add_argument("--teardown-s", type=float, default=10.0)
    p.add_argument("--timeout", type=float, default=40.0, help="seconds for the whole run")
    a = p.parse_args(argv)
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line: dict[str, Any] = {
        "name": a.name,
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "cold": a.cold,
        "mix": a.mix,
        "numels": a.numels,
        "ops": a.ops,
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.spawn(_rank, args=(a, port, tmp), nprocs=a.nproc, join=False)
        deadline = time.monotonic() + a.timeout
        finished = False
        try:
            while not finished and time.monotonic() < deadline:
                finished = ctx.join(timeout=1.0)
        except Exception as exc:  # a rank died (signal, NCCL abort)
            line["spawn_error"] = _err(exc)
            finished = True
        if not finished:
            line["timed_out_s"] = a.timeout
            for proc in ctx.processes:  # only the ranks this program started
                if proc.is_alive():
                    proc.kill()
        ranks = []
        for r in range(a.nproc):
            f = Path(tmp) / f"rank{r}.json"
            ranks.append(json.loads(f.read_text()) if f.exists() else {"rank": r})
    line["wall_s"] = time.perf_counter() - t0
    line["ranks"] = ranks
    states = {str(r.get("capture")) for r in ranks} | {str(r.get("replay")) for r in ranks}
    line["outcome"] = (
        "timed out" if line.get("timed_out_s") and not any(
            r.get("capture") == "failed" for r in ranks)
        else "capture failed" if any(r.get("capture") == "failed" for r in ranks)
        else "replay failed" if any(r.get("replay") == "failed" for r in ranks)
        else "wrong sums" if any(r.get("correct") is False for r in ranks)
        else "ok" if all(r.get("stage") == "done" for r in ranks)
        else f"other ({', '.join(sorted(states))})"
    )  # fmt: skip
    line["error"] = next((r["error"] for r in ranks if r.get("error")), line.get("spawn_error"))
    with open(a.out, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
    print(json.dumps({k: line[k] for k in ("name", "outcome", "error", "wall_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
