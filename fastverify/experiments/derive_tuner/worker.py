"""One rank of `fastverifyctl preflight --derive-tuner`: in-graph all-reduce time per
candidate (algorithm x protocol [x channels]) and message size, in ONE process.

Run by `fastverify.experiments.derive_tuner.derive` as a plain script, one process per GPU, with
the base profile's environment plus NCCL_TUNER_PLUGIN=<the fastverify plugin>, RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT and PYTHONPATH (it imports
`fastverify.tuner.plugin`, which is light: ctypes + the table module).

How one process measures every candidate: NCCL loaded the plugin for the communicator;
ctypes opens the same file and gets the same copy, so `fastverify_tuner_force(algo,
proto, channels)` steers every following enqueue. For each size and candidate the
worker forces the candidate, warms up eagerly on a side stream (NCCL connects the
algorithm's channels lazily), captures `ops` all-reduces in one CUDA graph (as SGLang
captures a forward), turns the override off, and reads the plugin's counters: a
candidate NCCL marks unavailable (cost -1) was not applied and is reported as such.
Then `rounds` rounds interleave the candidates' replays (so drift hits all alike);
per-op time = replay time / ops, median of `replays` replays per round.

Candidate `default` is NCCL's own choice (no override); with `--candidates default` it
is the only one, so the same worker times a fixed or tuned profile as a server would run
(compare.py does that).
On gloo (CPU, for tests) there is no graph, no plugin and the timing source is a fake
cost function given by `--fake-costs` (a JSON file), so the orchestration is tested
without a GPU.

Output: one JSON line per finished size appended to --out (resumable by size), then a
final `{"done": true, ...}` line. Exit 0 when every size finished, 1 when a check failed,
2 when the process group could not be set up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from statistics import median
from typing import TYPE_CHECKING, Any

from fastverify.durable import append_jsonl
from fastverify.experiments.common import rank_support
from fastverify.experiments.common.rank_support import RankContext, replay_ms

if TYPE_CHECKING:
    from fastverify.tuner.plugin import Plugin


def plan_ops(nbytes: int) -> tuple[int, int]:
    """(all-reduces per graph, replays per round): many small ops, few big ones."""
    if nbytes <= 1 << 20:
        return 20, 10
    if nbytes <= 8 << 20:
        return 10, 5
    if nbytes <= 32 << 20:
        return 4, 4
    return 2, 3


def parse_candidate(text: str) -> tuple[str | None, str | None, int | None]:
    """'default' | 'Ring/LL' | 'Ring/Simple/8' -> (algo, proto, channels)."""
    if text == "default":
        return None, None, None
    parts = text.split("/")
    channels = int(parts[2]) if len(parts) == 3 else None
    return parts[0], parts[1], channels


class Worker(RankContext):
    def __init__(self, args: argparse.Namespace):
        super().__init__(args.backend)
        self.args = args
        self.plugin: Plugin | None = None
        self.fake: dict[str, Any] | None = None
        if not self.cuda and args.fake_costs:
            with open(args.fake_costs, encoding="utf-8") as fh:
                self.fake = json.load(fh)

    def all_reduce(self, tensor: Any) -> None:
        """In-place sum through the call path measured (pynccl: SGLang's; torch.distributed)."""
        self.group.all_reduce(tensor)

    def init(self) -> float:
        t0 = time.perf_counter()
        self.open_group(self.args.call)
        so = os.environ.get("NCCL_TUNER_PLUGIN", "")
        if self.cuda and so.startswith("/"):
            from fastverify.tuner.plugin import Plugin

            self.plugin = Plugin(so)
        return time.perf_counter() - t0

    # ---- one candidate at one size
    def capture(self, cand: str, buf: Any, ops: int) -> dict[str, Any]:
        """Force `cand`, warm up, capture `ops` all-reduces; returns graph + what NCCL did."""
        algo, proto, ch = parse_candidate(cand)
        info: dict[str, Any] = {"candidate": cand}
        if self.plugin is not None:
            self.plugin.force(algo, proto, ch)
            self.plugin.reset_stats()
        elif cand != "default":
            info["available"] = False
            info["reason"] = "no tuner plugin loaded in this process"
            return info

        def warm() -> None:
            for _ in range(2):
                self.all_reduce(buf)
            if self.plugin is not None:  # what the capture asks NCCL, without the warm-up
                self.plugin.reset_stats()

        def captured() -> None:
            for _ in range(ops):
                self.all_reduce(buf)

        try:
            graph, _ = self.capture_graph(captured, warm)
        finally:
            if self.plugin is not None:
                self.plugin.force(None, None, None)
        info["graph"] = graph
        if self.plugin is not None:
            st = self.plugin.stats()
            info["nccl_default"] = st.default_choice
            info["plugin_calls"] = st.calls
            if cand != "default":
                ok = (algo is None or st.applied == st.calls == ops) and (
                    ch is None or st.channels_set == ops
                )
                info["available"] = bool(ok)
                if not ok:
                    info["reason"] = (
                        f"NCCL marks {algo}/{proto} unavailable here "
                        f"({st.unavailable} of {st.calls} calls)"
                        if st.unavailable
                        else f"override applied to {st.applied} of {st.calls} calls"
                    )
        else:
            info["available"] = True
        info.setdefault("available", True)
        return info

    def check(self, graph: Any, buf: Any, ops: int) -> bool:
        """Replay once on a known pattern: every op multiplies by world (exact in bf16 for
        power-of-two worlds; within 5% otherwise). Restores zeros afterwards."""
        torch = self.torch
        pattern = (torch.arange(buf.numel(), device=self.device) % 4 + 1).to(self.dtype)
        buf.copy_(pattern)
        graph.replay()
        self.sync()
        expected = pattern.double() * float(self.world) ** ops
        got = buf.double()
        buf.zero_()
        if self.world & (self.world - 1) == 0:
            return bool(torch.equal(got, expected))
        return bool(((got - expected).abs() <= expected.abs() * 0.05).all())

    def time_replays(self, graph: Any, ops: int, replays: int) -> float:
        """The median per-op time in us of `replays` replays of `ops` captured all-reduces."""
        return median([ms * 1e3 / ops for ms in replay_ms(self.torch, graph, replays)])

    def fake_time(self, cand: str, nbytes: int, rnd: int) -> float | None:
        """gloo tests: us = fake[cand] as [latency_us, us_per_MiB] (+ jitter per round)."""
        assert self.fake is not None
        spec = self.fake.get(cand)
        if spec is None:
            return None
        jitter = self.fake.get("_jitter", 0.0) * ((rnd % 3) - 1)
        return (spec[0] + spec[1] * nbytes / (1 << 20)) * (1.0 + jitter)

    def run_size(self, nbytes: int, cands: list[str]) -> dict[str, Any]:
        torch, args = self.torch, self.args
        numel = max(1, nbytes // (2 if self.cuda else 4))
        ops, replays = plan_ops(nbytes)
        row: dict[str, Any] = {"bytes": nbytes, "numel": numel, "ops": ops,
                               "replays": replays, "rounds": args.rounds,
                               "candidates": {}}  # fmt: skip
        if not self.cuda:
            buf = torch.zeros(numel, dtype=self.dtype)
            self.dist.all_reduce(buf)  # the rendezvous really runs on gloo
            for cand in cands:
                samples = [self.fake_time(cand, nbytes, r) for r in range(args.rounds)]
                if self.fake is None or samples[0] is None:
                    row["candidates"][cand] = {"available": False, "reason": "no fake cost"}
                    continue
                row["candidates"][cand] = {"available": True, "correct": True,
                                           "rounds_us": samples}  # fmt: skip
                if cand == "default" and self.fake.get("_nccl_default"):
                    row["candidates"][cand]["nccl_default"] = self.fake["_nccl_default"]
            return row
        buf = torch.zeros(numel, device=self.device, dtype=self.dtype)
        captured: dict[str, dict[str, Any]] = {}
        for cand in cands:
            try:
                info = self.capture(cand, buf, ops)
            except Exception as exc:  # a failed capture is a result, and ends this size
                row["candidates"][cand] = {"available": False, "error": rank_support.err(exc)}
                row["error"] = f"{cand}: capture failed: {rank_support.err(exc)}"
                break
            graph = info.pop("graph", None)
            entry = {k: v for k, v in info.items() if k != "candidate"}
            row["candidates"][cand] = entry
            if graph is None or not entry.get("available"):
                continue
            graph.replay()  # warm replay
            self.sync()
            entry["correct"] = self.check(graph, buf, ops)
            entry["rounds_us"] = []
            captured[cand] = {"graph": graph, "entry": entry}
        for _ in range(args.rounds):
            for c in captured.values():
                c["entry"]["rounds_us"].append(self.time_replays(c["graph"], ops, replays))
        for c in captured.values():
            del c["graph"]
        captured.clear()
        del buf
        torch.cuda.empty_cache()
        return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--call", choices=("pynccl", "torch"), default="pynccl",
                   help="pynccl: ncclAllReduce on the current stream (SGLang's path)")  # fmt: skip
    p.add_argument("--sizes", required=True, help="message sizes in bytes, comma-separated")
    p.add_argument("--candidates", default="default", help="default,Ring/LL,Ring/Simple/8,...")
    p.add_argument("--channel-sizes-from", type=int, default=1 << 20,
                   help="candidates with a channel count only at sizes >= this")  # fmt: skip
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fake-costs", default="", help="gloo only: JSON of fake costs")
    p.add_argument("--out", required=True, help="JSON lines, appended")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    cands = [c for c in args.candidates.split(",") if c.strip()]
    head = rank_support.report_head(args.backend, args.call)
    t0 = time.perf_counter()
    try:
        worker = Worker(args)
        head.update(worker.describe())
        head["init_s"] = worker.init()
        head["plugin"] = worker.plugin.path if worker.plugin else None
    except Exception as exc:
        rank_support.init_failed(head, exc)
        append_jsonl(args.out, {"head": head})
        return 2
    append_jsonl(args.out, {"head": head})
    bad = 0
    for nbytes in sizes:
        use = [c for c in cands if c.count("/") < 2 or nbytes >= args.channel_sizes_from]
        row = worker.run_size(nbytes, use)
        row["t_s"] = time.perf_counter() - t0
        bad += bool(row.get("error")) or any(
            c.get("correct") is False for c in row["candidates"].values()
        )
        append_jsonl(args.out, {"size": row})
        print(json.dumps({"rank": worker.rank, "bytes": nbytes}), flush=True)
    try:
        worker.group.destroy()
    except Exception as exc:  # teardown trouble is reported, not fatal
        head["teardown_error"] = rank_support.err(exc)
    append_jsonl(args.out, {"done": True, "wall_s": time.perf_counter() - t0, "failed_sizes": bad})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
