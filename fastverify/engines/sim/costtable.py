"""The sim's cost table by batch size and draft steps, as its server info publishes it.

`cost_table(env, ...)` -> {"bs": {"k": seconds}}: one decode step at k = 0 (what SGLang's
adaptive worker runs at steps 0, and the baseline), else one draft+verify cycle at k steps
with num_draft_tokens = k + 1 (topk 1, as adaptive runs them), from `costmodel.predict`.
`fastverify.speculation.costs.from_engine_info` reads it back as the "engine" cost source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastverify.engines.sim import costmodel
from fastverify.speculation.costs import ENGINE_SOURCE, Costs, from_table


def cost_table(
    env: Mapping[str, str],
    *,
    tp_size: int,
    batch_sizes: Sequence[int],
    max_steps: int,
    cuda_graph: bool = True,
    pcie_ipc_max_bytes: int | None = None,
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for bs in batch_sizes:
        base = costmodel.predict(
            env, "baseline", tp_size, bs, cuda_graph, pcie_ipc_max_bytes=pcie_ipc_max_bytes
        )
        row = {"0": base.cycle_seconds}
        for k in range(1, max_steps + 1):
            row[str(k)] = costmodel.predict(
                env, "eagle3", tp_size, bs, cuda_graph, 1.0, num_steps=k, topk=1,
                num_draft_tokens=k + 1, pcie_ipc_max_bytes=pcie_ipc_max_bytes,
            ).cycle_seconds  # fmt: skip
        out[str(bs)] = row
    return out


def engine_costs(env: Mapping[str, str], **kw: Any) -> Costs:
    """`cost_table` read as the "engine" cost source (what `spec plan` gets from the sim)."""
    return from_table(cost_table(env, **kw), ENGINE_SOURCE)
