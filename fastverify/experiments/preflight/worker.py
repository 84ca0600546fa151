"""One rank of `fastverifyctl preflight`: NCCL all-reduce, eager and CUDA-graph, at model sizes.

Run by `fastverify.experiments.preflight.run` as a plain script (`python worker.py`),
one process per GPU, with exactly the profile's environment plus RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT. It imports only torch and the standard library
(it never imports fastverify, so the profile environment needs no PYTHONPATH).

For each token count T the message is hidden_size x T elements (bf16 on NCCL, float32 on
the gloo testing backend). A pcie_ipc candidate (`--pcie-ipc-max-numel N`, the profile sets
SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1) sends the messages FlashInfer's PCIe-IPC kernels take
(up to N elements, bf16) to them, as SGLang 0.5.23 does, and the rest to NCCL; each row
names its `backend`.

How NCCL is called (`--call`): `pynccl` (the default with the nccl backend) is SGLang
0.5.23's own path, `ncclAllReduce` through ctypes on the current stream
(`fastverify/nccl/pynccl.py`, loaded by path: still no fastverify import), with a gloo
process group only to hand rank 0's unique id to the others, as SGLang's CPU group does;
`torch` calls `torch.distributed.all_reduce`, whose graph path adds stream hops of its own.
The gloo testing backend always uses `torch`. `--no-nccl` (ranks sharing one GPU, which NCCL
refuses) makes no NCCL communicator: the orchestrator then sends only sizes that FlashInfer's
PCIe-IPC kernels take. Steps:
1. correctness: rank r contributes (r + 1) * pattern with small integer pattern values,
   so the sum (pattern * n(n+1)/2) is exact in bf16; the result is compared bit for bit;
2. eager timing: `iters` in-place all-reduces, each between two CUDA events (the input is
   restored outside the timed region), after `warmup` untimed ones -> p50/p99;
3. CUDA graph: warm-up on a side stream, capture one all-reduce, replay, check the result,
   then time `iters` replays with events; a capture or replay failure is recorded with
   its error text and the remaining sizes skip the graph step (the CUDA context may be
   unusable after a failed capture);
4. batched, as nccl-tests times: `iters` back-to-back eager all-reduces between one event
   pair (mean per op), and a graph of `graph_ops` all-reduces replayed `graph_replays`
   times (per-op p50); these run on zero buffers so repeated sums cannot overflow.

Above --scale-bytes (default 1 MiB) the counts shrink in proportion to the message size
(`scaled()`: iterations and replays to no fewer than 5 and 3, graph ops to no fewer than
2, warm-up to no more than the iterations), so that a 112 MiB prefill all-reduce through
host memory does not cost a profile tens of seconds; each row records the counts it used.
algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests' definition), in GB/s (1e9).

Output: one JSON document written atomically to --out (and a one-line summary on stdout).
Exit status 0 when every check passed, 1 when some check failed (JSON still written),
2 when the process group could not be set up (JSON written when possible).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from typing import Any

# this script runs without fastverify on its import path: its one helper module, by path
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import rank_support


def _bw(nbytes: int, seconds: float | None, world: int) -> tuple[float | None, float | None]:
    if not seconds or seconds <= 0:
        return None, None
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * (2.0 * (world - 1) / world)


def _timing(samples_s: list[float], nbytes: int, world: int) -> dict[str, Any]:
    p50 = rank_support.percentile(samples_s, 50)
    algbw, busbw = _bw(nbytes, p50, world)
    return {
        "p50_us": None if p50 is None else p50 * 1e6,
        "p99_us": None if not samples_s else rank_support.percentile(samples_s, 99) * 1e6,
        "min_us": None if not samples_s else min(samples_s) * 1e6,
        "algbw_gbs": algbw,
        "busbw_gbs": busbw,
        "samples": len(samples_s),
    }


def scaled(count: int, nbytes: int, scale_bytes: int, floor: int) -> int:
    """`count` for messages up to `scale_bytes`; above, count x scale_bytes / nbytes, but
    never below `floor` (nor above `count`)."""
    if scale_bytes <= 0 or nbytes <= scale_bytes or count <= floor:
        return count
    return max(floor, min(count, round(count * scale_bytes / nbytes)))


class Rank(rank_support.RankContext):
    def __init__(self, args: argparse.Namespace):
        super().__init__(args.backend)
        self.args = args
        self.pcie: Any = None  # a PcieIpc for a pcie_ipc candidate
        self._outs: dict[tuple[int, int], Any] = {}
        self.set_counts(0)

    def set_counts(self, nbytes: int) -> dict[str, int]:
        """Iterations, warm-up, graph ops and replays for a message of `nbytes`."""
        a = self.args
        self.iters = scaled(a.iters, nbytes, a.scale_bytes, 5)
        self.warmup = min(a.warmup, self.iters)
        self.graph_ops = scaled(a.graph_ops, nbytes, a.scale_bytes, 2)
        self.graph_replays = scaled(a.graph_replays, nbytes, a.scale_bytes, 3)
        return {
            "iters": self.iters,
            "warmup": self.warmup,
            "graph_ops": self.graph_ops,
            "graph_replays": self.graph_replays,
        }

    def nccl_all_reduce(self, tensor: Any) -> None:
        """In-place sum over the group on NCCL, through the call path measured (`--call`)."""
        self.group.all_reduce(tensor)

    def init(self) -> float:
        """The process group (one tiny all-reduce inside: lazy communicator setup)."""
        return self.open_group(self.args.call, nccl=not self.args.no_nccl)

    def setup_pcie_ipc(self, max_numel: int) -> dict[str, Any]:
        """A pcie_ipc candidate: FlashInfer's workspace for messages up to `max_numel`."""
        mod = rank_support.load_pcie_ipc()
        self.pcie = mod.PcieIpc(self.torch, self.dist, self.world, max_numel, self.args.hidden_size)
        return self.pcie.info()

    def _ar(self, buf: Any) -> Any:
        """One all-reduce of `buf` as SGLang dispatches it: FlashInfer's PCIe-IPC kernels
        (out of place, into a buffer kept per size so a graph captures fixed addresses)
        when this is a pcie_ipc candidate and they take the message, else NCCL in place.
        Returns the tensor holding the sum."""
        pcie = self.pcie
        if pcie is not None:
            hidden = self.args.hidden_size
            view = buf.view(-1, hidden) if buf.numel() % hidden == 0 else buf.view(1, -1)
            if pcie.wants(view):
                key = (buf.data_ptr(), buf.numel())
                out = self._outs.get(key)
                if out is None:
                    out = self._outs[key] = self.torch.empty_like(view)
                return pcie.all_reduce(view, out=out).view_as(buf)
        self.nccl_all_reduce(buf)
        return buf

    def backend_of(self, numel: int) -> str:
        if self.pcie is None:
            return "nccl"
        probe = self.torch.empty(numel, device=self.device, dtype=self.dtype)
        hidden = self.args.hidden_size
        view = probe.view(-1, hidden) if numel % hidden == 0 else probe.view(1, -1)
        return "pcie_ipc" if self.pcie.wants(view) else "nccl"

    def inputs(self, numel: int) -> tuple[Any, Any]:
        torch = self.torch
        pattern = (torch.arange(numel, device=self.device) % 4 + 1).to(self.dtype)
        src = pattern * (self.rank + 1)
        expected = pattern * (self.world * (self.world + 1) // 2)
        return src, expected

    def time_eager(self, buf: Any, src: Any) -> list[float]:
        """Seconds of each of `iters` in-place all-reduces (every one through _ar), the input
        restored before each, outside its time."""
        for _ in range(self.warmup):
            buf.copy_(src)
            self._ar(buf)
        self.sync()
        reset = functools.partial(buf.copy_, src)
        return [ms / 1e3 for ms in self.time_ms(lambda: self._ar(buf), self.iters, reset)]

    def batch_eager(self, numel: int) -> float:
        """Mean time of `iters` back-to-back all-reduces between one pair of events (how
        nccl-tests times): host overhead overlaps the GPU work, as in a real forward pass.
        Runs on a zero buffer so repeated in-place sums cannot overflow."""
        torch = self.torch
        zbuf = torch.zeros(numel, device=self.device, dtype=self.dtype)
        for _ in range(self.warmup):
            self._ar(zbuf)
        self.sync()
        if not self.cuda:
            t0 = time.perf_counter()
            for _ in range(self.iters):
                self._ar(zbuf)
            return (time.perf_counter() - t0) / self.iters
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.iters):
            self._ar(zbuf)
        end.record()
        self.sync()
        return start.elapsed_time(end) / 1e3 / self.iters

    def batch_graph(self, numel: int) -> dict[str, Any]:
        """`graph_ops` all-reduces captured in one graph (SGLang captures a whole forward,
        122 all-reduces, per graph), replayed `graph_replays` times; per-op time is the
        replay time / graph_ops (nccl-tests -G does the same)."""
        torch = self.torch
        ops = self.graph_ops
        zbuf = torch.zeros(numel, device=self.device, dtype=self.dtype)

        def run(n: int) -> None:
            for _ in range(n):
                self._ar(zbuf)

        graph, _ = self.capture_graph(lambda: run(ops), lambda: run(3))
        graph.replay()
        self.sync()
        per_op = [ms / 1e3 / ops for ms in rank_support.replay_ms(torch, graph, self.graph_replays)]
        del graph
        p50 = rank_support.percentile(per_op, 50)
        algbw, busbw = _bw(numel * zbuf.element_size(), p50, self.world)
        return {
            "ops_per_graph": ops,
            "replays": len(per_op),
            "per_op_p50_us": p50 * 1e6,
            "per_op_p99_us": rank_support.percentile(per_op, 99) * 1e6,
            "algbw_gbs": algbw,
            "busbw_gbs": busbw,
        }

    def graph(self, buf: Any, src: Any, expected: Any) -> dict[str, Any]:
        torch = self.torch
        out: dict[str, Any] = {"capture": "failed", "replay": "not run", "correct": None}

        def warm() -> None:
            for _ in range(3):
                buf.copy_(src)
                self._ar(buf)

        held: list[Any] = []  # the tensor the captured all-reduce writes its sum to
        graph, capture_ms = self.capture_graph(lambda: held.append(self._ar(buf)), warm)
        result = held[0]
        out["capture"] = "ok"
        out["capture_ms"] = capture_ms
        out["replay"] = "failed"
        buf.copy_(src)
        graph.replay()
        self.sync()
        out["correct"] = bool(torch.equal(result, expected))
        reset = functools.partial(buf.copy_, src)  # the input back before every replay
        samples = [ms / 1e3 for ms in rank_support.replay_ms(torch, graph, self.iters, reset)]
        out["replay"] = "ok"
        out.update(_timing(samples, buf.numel() * buf.element_size(), self.world))
        del graph
        return out

    def run_size(
        self, tokens: int | None, graph_ok: bool, numel: int | None = None
    ) -> tuple[dict[str, Any], bool]:
        numel = numel if numel is not None else self.args.hidden_size * (tokens or 1)
        src, expected = self.inputs(numel)
        buf = src.clone()
        nbytes = numel * buf.element_size()
        row: dict[str, Any] = {"tokens": tokens, "numel": numel, "bytes": nbytes}
        row["counts"] = self.set_counts(nbytes)
        row["backend"] = self.backend_of(numel)
        try:
            result = self._ar(buf)
            self.sync()
            row["correct"] = bool(self.torch.equal(result, expected))
            row["eager"] = _timing(self.time_eager(buf, src), nbytes, self.world)
            row["eager"]["status"] = "ok"
            batch = self.batch_eager(numel)
            algbw, busbw = _bw(nbytes, batch, self.world)
            row["eager"]["batch"] = {
                "ops": self.iters,
                "per_op_mean_us": batch * 1e6,
                "algbw_gbs": algbw,
                "busbw_gbs": busbw,
            }
        except Exception as exc:
            row["correct"] = False
            row["eager"] = {"status": "failed", "error": rank_support.err(exc)}
        if not self.cuda:
            row["graph"] = {
                "capture": "skipped",
                "replay": "skipped",
                "reason": "CUDA graphs need the nccl backend",
            }
        elif not graph_ok:
            row["graph"] = {
                "capture": "skipped",
                "replay": "skipped",
                "reason": "an earlier capture failed in this process",
            }
        else:
            try:
                row["graph"] = self.graph(buf, src, expected)
                if self.graph_ops > 0:
                    row["graph"]["batch"] = self.batch_graph(numel)
            except Exception as exc:
                row["graph"] = {
                    "capture": "failed",
                    "replay": "not run",
                    "error": rank_support.err(exc),
                }
                graph_ok = False
            else:
                if row["graph"].get("correct") is False:
                    row["correct"] = False
        return row, graph_ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument(
        "--call",
        choices=("pynccl", "torch"),
        default="pynccl",
        help="pynccl: ncclAllReduce on the current stream as SGLang calls it; "
        "torch: torch.distributed.all_reduce (nccl backend only)",
    )
    p.add_argument("--hidden-size", type=int, default=7168)
    p.add_argument("--tokens", default="1,2,3,4,8,16,32,64")
    p.add_argument("--numels", default="", help="element counts instead of hidden x tokens")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--graph-ops", type=int, default=20, help="all-reduces per batch graph")
    p.add_argument("--graph-replays", type=int, default=20)
    p.add_argument(
        "--scale-bytes",
        type=int,
        default=1 << 20,
        help="above this message size the counts shrink in proportion (0: never)",
    )
    p.add_argument(
        "--pcie-ipc-max-numel",
        type=int,
        default=0,
        help="a pcie_ipc candidate: FlashInfer's PCIe-IPC all-reduce up to this many elements",
    )
    p.add_argument(
        "--no-nccl",
        action="store_true",
        help="ranks share a GPU (NCCL refuses that): no NCCL communicator; every size must "
        "go to FlashInfer's PCIe-IPC kernels",
    )
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    numels = [int(n) for n in args.numels.split(",") if n.strip()]

    doc: dict[str, Any] = {
        **rank_support.report_head(args.backend, args.call),
        "nccl_communicator": args.backend == "nccl" and not args.no_nccl,
        "hidden_size": args.hidden_size,
        "status": "failed",
        "sizes": [],
        "nccl_env": rank_support.nccl_env(),  # what this process really received
        "env_names": sorted(os.environ),  # names only: values may be secrets
    }
    t_start = time.perf_counter()
    try:
        rank = Rank(args)
        doc.update(rank.describe())
        if rank.cuda and args.call == "pynccl":
            doc["nccl_library"] = rank_support.load_pynccl().find_library()
        doc["import_s"] = time.perf_counter() - t_start  # import torch + CUDA context
        doc["init_s"] = rank.init()
        if args.pcie_ipc_max_numel > 0:
            doc["allreduce"] = rank.setup_pcie_ipc(args.pcie_ipc_max_numel)
    except Exception as exc:
        rank_support.init_failed(doc, exc, t_start)
        rank_support.write_report(args.out, doc)
        print(json.dumps({"rank": doc["rank"], "status": "failed", "error": doc["error"]}))
        return 2

    graph_ok = True
    t_measure = time.perf_counter()
    for t in numels or tokens:
        row, graph_ok = rank.run_size(None if numels else t, graph_ok, numel=t if numels else None)
        doc["sizes"].append(row)
    failed = [
        r
        for r in doc["sizes"]
        if not r.get("correct")
        or r["eager"].get("status") != "ok"
        or r["graph"].get("capture") == "failed"
        or r["graph"].get("replay") == "failed"
    ]
    doc["status"] = "ok" if not failed else "failed"
    doc["measure_s"] = time.perf_counter() - t_measure
    try:
        rank.group.destroy()
    except Exception as exc:  # teardown trouble is reported, not fatal
        doc["teardown_error"] = rank_support.err(exc)
    doc["wall_s"] = time.perf_counter() - t_start
    rank_support.write_report(args.out, doc)
    print(json.dumps({"rank": doc["rank"], "status": doc["status"], "sizes": len(doc["sizes"])}))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
