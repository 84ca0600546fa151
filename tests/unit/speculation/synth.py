"""Inputs for the plan's unit tests: costs from the sim's cost model (as its server info
publishes them) and per-request acceptance drawn from the sim's drafter."""

from __future__ import annotations

import random
from collections.abc import Mapping

from fastverify.sim import allreduce_sim, cli_args
from fastverify.sim.costtable import SimCosts
from fastverify.sim.drafter import Drafter, RequestDraws
from fastverify.speculation import costs as spec_costs
from fastverify.speculation.acceptance import Acceptance

EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d"]


def sim_costs(env: Mapping[str, str], tp_size: int = 8, steps: int = 3) -> spec_costs.Costs:
    args = cli_args.parse(["--model-path", "sim", "--tp-size", str(tp_size), *EAGLE,
                           "--speculative-num-steps", str(steps)])  # fmt: skip
    sim = SimCosts(env, args, allreduce_sim.served_bound(env, tp_size, args.argv))
    info = {"sim": {"cost_model": sim.table()}, "speculative_num_steps": steps,
            "max_running_requests": allreduce_sim.SIM_REQUEST_POOL,
            "internal_states": [{"memory_usage": sim.memory_usage()}]}  # fmt: skip
    return spec_costs.from_engine_info(info)


def acceptance(
    length: float,
    steps: int = 3,
    requests: int = 64,
    tokens: int = 256,
    spread: float = 0.0,
    seed: int = 1,
) -> Acceptance:
    """`requests` requests of `tokens` output tokens each (as a bench's: a request with a
    better drafter needs fewer passes) from the sim's drafter whose pooled accept length at
    `steps` is `length` (per-request acceptance spread `spread`)."""
    drafter = Drafter.solve(length, steps, spread)
    rng = random.Random(seed)
    hists = []
    for _ in range(requests):
        d = RequestDraws(drafter.request_q(rng), rng.random())
        h = [0] * (steps + 1)
        made = 1  # the prefill's token
        while made < tokens:
            j = d.next(steps)
            h[j] += 1
            made += j + 1
        hists.append(h)
    return Acceptance.from_requests(hists, steps)
