"""What one forward pass of the sim costs at every batch size SGLang can run, as it serves
it and as its server info publishes it (`sim.cost_model`).

Follows SGLang 0.5.23 (`fastverify.sglang.allreduce.capture_batch_sizes`, the release's
decode capture list, and `fastverify.sglang.adaptive_slot`): a decode batch of B requests is
padded up to the next captured batch size and replays that graph; beyond the largest one it
runs eagerly at B. A speculative server captures the speculative list (1..8, then every 2 to
32, every 4 to 64, ...), a baseline server the baseline list (1, 2, 4, 8, 12, 16, 24, ...).
Per batch size, from `costmodel.predict`:
- `decode`: the step of a baseline server (no drafter) at that concurrency;
- `by_steps[k]`: SGLang's EAGLE worker at k steps (topk 1, k + 1 draft tokens, as adaptive
  runs them); k = 0 is its steps-0 pass: the TARGET_VERIFY graph at one draft token plus
  the draft extend over one token per request, or without that extend when the server has
  SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND set (`zero_step_skip_extend` has both);
- `prefill`: one prefill forward over T new tokens, per mode (EAGLE adds the drafter's
  extend over every prompt token), each mode with its own PCIe-IPC bound (a speculative
  workspace holds max_bs x draft tokens rows, a baseline one max_bs rows).
A SIMULATION: the model's numbers, never a measurement.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from fastverify.sglang import allreduce, eagle
from fastverify.sglang.launch import without_flags
from fastverify.sim import allreduce_sim, cli_args, costmodel

MAX_STEPS = 7  # the step counts published (SGLang's default adaptive config reaches 7)
CHUNKED_PREFILL_TOKENS = 8192  # the sim's chunked_prefill_size (its server-init log line)
# The sim's memory, as its start-up lines say it (engine.py `_load`, `_capture`): weights,
# the drafter's, the KV pool and what is left after capture. Not calibrated (no measurement
# of this host exists): figures first set for an 80 GB GPU, consistent with one another
# (the simulated GPU itself is GPU_GB, an H200's size).
WEIGHTS_GB, DRAFT_WEIGHTS_GB = 64.21, 1.10
KV_GB, KV_TOKENS = 4.50, 1_048_576
# one simulated GPU's memory (GB of 2**30 bytes, as SGLang's lines count): an H200's total
# capacity, as the sim's own out-of-memory line says it (sglang_logs.oom_traceback)
GPU_GB = 139.81
FREE_AFTER_CAPTURE_GB = 7.74
# the decode graphs of one step count over every captured size: fixed + per draft token
GRAPH_GB_FIXED, GRAPH_GB_PER_TOKEN = 0.10, 0.07
_SPEC_FLAGS_WITH_VALUE = (
    "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-draft-model",
    "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
    "--speculative-adaptive-config",
)  # fmt: skip


def baseline_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """The same server's argv without its speculative flags (what a baseline server of this
    profile and these flags would be started with)."""
    return tuple(without_flags(argv, _SPEC_FLAGS_WITH_VALUE, ("--speculative-adaptive",)))


PREFILL_STEP = 64  # the published prefill table's spacing from 128 tokens up


def prefill_points(limit: int = CHUNKED_PREFILL_TOKENS) -> list[int]:
    """Token counts the published prefill table holds: powers of two and 1.5x them up to 96,
    then every PREFILL_STEP tokens (a prefill's cost bends with the experts read and the
    all-reduce curve: a reader interpolating between these is within ~1%)."""
    small = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96}
    return sorted({*small, *range(128, limit + 1, PREFILL_STEP)} - {t for t in small if t > limit})


class SimCosts:
    """The costs of one sim server (its environment, argv and PCIe-IPC bound)."""

    def __init__(
        self,
        env: Mapping[str, str],
        args: cli_args.SimArgs,
        pcie_ipc_max_bytes: int | None,
        pool: Mapping[str, float] | None = None,
    ):
        self.pool = dict(pool or {})  # the KV pool its start-up sized (startup._allocate_pool)
        self.env = dict(env)
        self.args = args
        self.tp = args.tp_size
        self.bound = pcie_ipc_max_bytes
        self.skip_extend = eagle.skip_zero_step_extend(env)
        spec_argv = tuple(args.argv)
        base_argv = baseline_argv(args.argv)
        self.capture = self._capture(spec_argv) if args.mode == "eagle3" else []
        self.baseline_capture = self._capture(base_argv)
        if args.mode != "eagle3":
            self.capture = self.baseline_capture
        self.baseline_bound = (
            self.bound
            if args.mode != "eagle3"
            else allreduce_sim.served_bound(env, self.tp, base_argv)
        )
        self._cache: dict[tuple[Any, ...], float] = {}

    def _capture(self, argv: Sequence[str]) -> list[int]:
        """The decode batch sizes this server captures graphs for ([] without graphs)."""
        if not self.args.cuda_graph or not self.args.decode_cuda_graph:
            return []
        sa = allreduce.ServerArgs.from_argv(list(argv))
        if sa.decode_max_bs is None and not sa.decode_bs:
            sa = replace(sa, decode_max_bs=allreduce_sim.SIM_DECODE_MAX_BS)
        return allreduce.capture_batch_sizes(sa, allreduce_sim.SIM_REQUEST_POOL)

    @staticmethod
    def padded(bs: int, capture: Sequence[int]) -> tuple[int, bool]:
        """(the batch size a batch of `bs` runs at, whether it replays a graph)."""
        j = bisect.bisect_left(capture, bs)
        if j < len(capture):
            return capture[j], True
        return bs, False

    def batch_sizes(self, limit: int = allreduce_sim.SIM_REQUEST_POOL) -> list[int]:
        """Every batch size the server runs at distinct cost up to `limit`: the captured
        sizes, then the release's list continued past the graphs (eager)."""
        sa = allreduce.ServerArgs.from_argv(list(self.args.argv))
        sa = replace(sa, decode_max_bs=limit, decode_bs=None)
        listed = allreduce.decode_batch_sizes(sa)
        return sorted({*self.capture, *(b for b in listed if b <= limit)})

    def step(self, bs: int, steps: int | None) -> costmodel.Prediction:
        """One decode pass of `bs` requests: steps None = a baseline server's decode step,
        else the EAGLE worker at `steps` (0: its steps-0 pass)."""
        if steps is None:
            size, graph = self.padded(bs, self.baseline_capture)
            return costmodel.predict(
                self.env, "baseline", self.tp, size, graph, pcie_ipc_max_bytes=self.baseline_bound
            )
        size, graph = self.padded(bs, self.capture)
        return costmodel.predict(
            self.env, "eagle3", self.tp, size, graph, 1.0, num_steps=steps, topk=1,
            num_draft_tokens=steps + 1, pcie_ipc_max_bytes=self.bound,
            skip_draft_extend=self.skip_extend,
        )  # fmt: skip

    def cycle(self, bs: int, steps: int | None) -> float:
        key = ("step", bs, steps)
        if key not in self._cache:
            self._cache[key] = self.step(bs, steps).cycle_seconds
        return self._cache[key]

    def zero_step(self, bs: int, skip_extend: bool) -> float:
        """The steps-0 pass with or without its draft extend, whatever this server's env."""
        size, graph = self.padded(bs, self.capture)
        return costmodel.predict(
            self.env, "eagle3", self.tp, size, graph, 1.0, num_steps=0, topk=1,
            num_draft_tokens=1, pcie_ipc_max_bytes=self.bound, skip_draft_extend=skip_extend,
        ).cycle_seconds  # fmt: skip

    def prefill(self, tokens: int, eagle: bool) -> float:
        """One prefill forward over `tokens` new tokens (EAGLE: the drafter's extend too)."""
        key = ("prefill", tokens, eagle)
        if key not in self._cache:
            self._cache[key] = costmodel.prefill_seconds(
                self.env, self.tp, tokens, "eagle3" if eagle else "baseline",
                pcie_ipc_max_bytes=self.bound if eagle else self.baseline_bound,
            )  # fmt: skip
        return self._cache[key]

    def graph_gb(self, steps: int) -> float:
        """One runtime state's decode graphs at `steps` (k + 1 tokens per request)."""
        return GRAPH_GB_FIXED + GRAPH_GB_PER_TOKEN * (steps + 1) if self.capture else 0.0

    def memory_usage(self) -> dict[str, Any]:
        """SGLang 0.5.23's `memory_usage` of server info, for this server."""
        eagle = self.args.mode == "eagle3"
        decode = self.graph_gb(self.args.num_steps if eagle else 0)
        phases = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode",
                  "draft_extend")  # fmt: skip
        graph = dict.fromkeys(phases, 0.0)
        graph["target_verify" if eagle else "decode"] = round(decode, 3)
        pool = self.pool
        return {"weight": WEIGHTS_GB, "kvcache": round(pool.get("kv_gb", KV_GB), 2),
                "startup_available": round(pool.get("before_load_gb", 78.52), 2),
                "token_capacity": int(pool.get("tokens", KV_TOKENS)), "token_capacity_swa": None,
                "graph": graph}  # fmt: skip

    def table(self, max_steps: int = MAX_STEPS) -> dict[str, Any]:
        """The cost model as server info publishes it (seconds)."""
        sizes = self.batch_sizes()
        out: dict[str, Any] = {
            "batch_sizes": sizes,
            "cuda_graph_bs": self.capture,
            "baseline_cuda_graph_bs": self.baseline_capture,
            "max_running_requests": allreduce_sim.SIM_REQUEST_POOL,
            "chunked_prefill_tokens": CHUNKED_PREFILL_TOKENS,
            "decode": {str(b): self.cycle(b, None) for b in sizes},
            "prefill": {
                mode: {str(t): self.prefill(t, mode == "eagle") for t in prefill_points()}
                for mode in ("baseline", "eagle")
            },
        }
        if self.args.mode == "eagle3":
            out["by_steps"] = {
                str(b): {str(k): self.cycle(b, k) for k in range(max_steps + 1)} for b in sizes
            }
            out["zero_step_skip_extend"] = self.skip_extend
            out["zero_step_without_extend"] = {str(b): self.zero_step(b, True) for b in sizes}
            out["memory"] = {
                "draft_weights_gb": DRAFT_WEIGHTS_GB,
                "free_after_capture_gb": FREE_AFTER_CAPTURE_GB,
                "graph_gb_by_steps": {str(k): round(self.graph_gb(k), 4)
                                      for k in range(max_steps + 1)},
                "note": "not calibrated: the simulated GPU's figures",
            }  # fmt: skip
        return out
