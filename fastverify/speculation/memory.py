"""What speculation costs in GPU memory, and whether an adaptive config fits.

From the serving engine's `memory_usage` (SGLang 0.5.23 `internal_states[0].memory_usage`,
`managers/scheduler_components/memory_usage.py`: `weight`, `kvcache`, `token_capacity` and
`graph` by phase, GB) of the EAGLE-3 server the costs came from:
- the drafter: its weights (the sim publishes them; SGLang logs them at its load) and its
  KV (inside `kvcache`: the pool is sized for target and drafter together);
- the KV pool's tokens, and so the most requests of the workload it holds at once
  (input + output tokens each), capped by the server's max running requests;
- CUDA graphs: SGLang builds one runtime state per candidate step count, each capturing its
  draft, verify and extend graphs (`adaptive_runtime_state.py`) for the batch sizes whose
  tier can reach that step count (`cuda_graph_bs_for_step`); the KV pool is sized before
  capture (mem_fraction_static), so those graphs must fit in what the server had left after
  its own capture. Per step count, the engine's own figure when it publishes one (the sim),
  else the K-step server's graphs scaled by draft tokens (an estimate, said so).
A config whose graphs do not fit is refused with both figures.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DECODE_PHASES = ("decode", "target_verify", "draft_decode", "draft_extend")


@dataclass(frozen=True)
class Memory:
    weights_gb: float
    draft_weights_gb: float | None
    kv_gb: float
    kv_tokens: int
    graph_gb: float  # the K-step server's decode-side graphs
    free_gb: float | None  # left after its capture (None: not reported)
    steps: int  # K, the server's steps
    max_running: int | None
    graph_by_steps: dict[int, float]  # one runtime state per step count, every captured size
    estimated: bool  # graph_by_steps scaled from the K-step server's, not published

    @classmethod
    def from_server_info(cls, info: Mapping[str, Any], steps: int) -> Memory | None:
        states = info.get("internal_states")
        mu = states[0].get("memory_usage") if isinstance(states, list) and states else None
        if not isinstance(mu, dict) or not mu.get("token_capacity"):
            return None
        graph = mu.get("graph")
        decode = (sum(float(graph.get(p) or 0.0) for p in DECODE_PHASES)
                  if isinstance(graph, dict) else float(graph or 0.0))  # fmt: skip
        sim = ((info.get("sim") or {}).get("cost_model") or {}).get("memory") or {}
        by = {int(k): float(v) for k, v in (sim.get("graph_gb_by_steps") or {}).items()}
        estimated = not by
        if estimated and decode:
            by = {k: decode * (k + 1) / (steps + 1) for k in range(0, steps + 1)}
        free = sim.get("free_after_capture_gb", info.get("available_gpu_mem"))
        return cls(
            weights_gb=float(mu.get("weight") or 0.0),
            draft_weights_gb=sim.get("draft_weights_gb"),
            kv_gb=float(mu.get("kvcache") or 0.0),
            kv_tokens=int(mu["token_capacity"]),
            graph_gb=decode,
            free_gb=float(free) if isinstance(free, int | float) else None,
            steps=steps,
            max_running=info.get("max_running_requests"),
            graph_by_steps=by,
            estimated=estimated,
        )

    def check(
        self, config: Mapping[str, Any], cuda_graph_bs: list[int], tokens_per_request: int
    ) -> dict[str, Any]:
        """The config's graphs, what is left for them, and the requests the KV pool holds."""
        keys = sorted(int(k) for k in config if str(k).isdigit())
        graphs: dict[int, float] = {}
        sizes = cuda_graph_bs or []
        for k in sorted({s for key in keys for s in config[str(key)]["candidate_steps"]}):
            # cuda_graph_bs_for_step: the captured sizes whose tier can reach k
            reach = [b for b in sizes
                     if k in config[str(keys[max(0, bisect.bisect_right(keys, b) - 1)])]
                     ["candidate_steps"]]  # fmt: skip
            share = sum(reach) / sum(sizes) if sizes else 1.0
            graphs[k] = round(self.graph_by_steps.get(k, 0.0) * share, 4)
        need = sum(graphs.values())
        room = None if self.free_gb is None else self.free_gb + self.graph_gb
        fits = room is None or need <= room
        reqs = self.kv_tokens // max(1, tokens_per_request)
        most = min(reqs, self.max_running) if self.max_running else reqs
        return {
            "weights_gb": self.weights_gb,
            "draft_weights_gb": self.draft_weights_gb,
            "kv_gb": self.kv_gb,
            "kv_tokens": self.kv_tokens,
            "graphs_gb_by_steps": {str(k): v for k, v in graphs.items()},
            "graphs_gb": round(need, 4),
            "room_for_graphs_gb": None if room is None else round(room, 4),
            "graphs_estimated": self.estimated,
            "fits": fits,
            "max_running_requests": most,
            "requests_the_kv_pool_holds": reqs,
            "tokens_per_request": tokens_per_request,
        }
