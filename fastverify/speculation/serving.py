"""End to end: what a closed-loop workload gets from a server, prefill included, predicted by
running SGLang's scheduling and adaptive controller over the costs and recorded acceptance.

The workload: `concurrency` clients, each sending one request of `input_len` prompt tokens
for `output_len` output tokens after the other (what `fastverifyctl bench -c N` runs).
The server, as SGLang's scheduler runs it (`get_next_batch_to_run`): whenever requests
wait, a prefill forward takes them in order up to the chunked-prefill budget of new tokens
(a longer prompt is split), and a finished prompt's first token comes from it; otherwise
one decode pass of every running request. Decode passes: mode "baseline" one token per
request at the baseline decode cost; mode "eagle" a fixed step count; mode "adaptive" the
step count SGLang's controller holds for the batch (routed by its padded size, fed every
verify's accepted drafts). A request accepts min(j, steps) drafts per pass for a j drawn
from its own recorded histogram (one recorded request per served request). Prefill costs
are the source's measured ones per mode (EAGLE: the drafter's extend over every prompt
token, and its own all-reduce bound); a forward over a batch of prompts holds the engine for
the measured time to first token less the part that holds no forward (`Costs.prefill_latency`,
from a short prompt's first token or two measured prompt lengths), which holds the client: its
next request reaches the scheduler that long after its last token (the way out, then the way
in; at one client on the sim, 1024-token prompts, leaving it out predicted 797 tok/s where 696
were served). Where the costs carry the front end in front of the scheduler
(`speculation.front_end`, measured by `spec costs`), requests sent about together queue
there and reach the scheduler spread out, as SGLang's do, so a round leaves over a few
forwards. Without prefill costs the prediction is decode only, and says so.

Figures per run: output tokens/s over a window after every client's first request (the
warm-up, as bench discards it), mean and median time to first token and inter-token latency
(chunk gap / tokens, one value per token, as bench counts it), and the seconds spent in
prefill and in decode (where a gain comes from).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastverify.sglang.adaptive_slot import AdaptiveController
from fastverify.speculation.acceptance import Acceptance, Draws
from fastverify.speculation.costs import Costs
from fastverify.speculation.front_end import Intake

CHUNKED_PREFILL_TOKENS = 8192  # SGLang's default chunked_prefill_size on an 80+ GB GPU
MODES = ("baseline", "eagle", "adaptive")
# A client's next request reaches the scheduler this long after the last token of the one
# before (response, detokenizer, HTTP, the client's own turn; uniform in the range): the
# scheduler has usually started the next forward by then, so requests that finish in one
# pass are not all prefilled in one batch.
TURNAROUND_S = (0.5e-3, 3.0e-3)


@dataclass(frozen=True)
class Workload:
    input_len: int = 128
    output_len: int = 256
    chunk_tokens: int = CHUNKED_PREFILL_TOKENS

    def to_dict(self) -> dict[str, int]:
        return {"input_len": self.input_len, "output_len": self.output_len,
                "chunked_prefill_tokens": self.chunk_tokens}  # fmt: skip


@dataclass
class Served:
    """One predicted run."""

    mode: str
    concurrency: int
    tokens_per_second: float
    ttft_mean_s: float
    ttft_p50_s: float
    itl_mean_s: float
    prefill_s: float  # per completed request: time the server spent in prefill forwards
    decode_s: float  # ... and in decode passes
    steps_share: dict[int, float] = field(default_factory=dict)  # decode time by step count
    decode_only: bool = False  # no prefill costs: decode passes alone

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "concurrency": self.concurrency,
            "tokens_per_second": round(self.tokens_per_second, 3),
            "ttft_ms": {
                "mean": round(self.ttft_mean_s * 1e3, 2),
                "p50": round(self.ttft_p50_s * 1e3, 2),
            },
            "itl_ms_mean": round(self.itl_mean_s * 1e3, 3),
            "seconds_per_request": {
                "prefill": round(self.prefill_s, 5),
                "decode": round(self.decode_s, 5),
            },
            "decode_time_by_steps": {str(k): round(v, 4) for k, v in self.steps_share.items()},
            **({"decode_only": True} if self.decode_only else {}),
        }


@dataclass
class _Req:
    draws: Draws | None
    alone_at: float  # when it would have reached the scheduler with no other request about
    prompt_left: int
    out_left: int
    first_at: float | None = None
    last_at: float | None = None


def serve(
    mode: str,
    concurrency: int,
    costs: Costs,
    workload: Workload,
    acceptance: Acceptance | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    steps: int | None = None,
    f: float = 1.0,
    requests: int | None = None,
    window_s: float | None = None,
    seed: int = 0,
) -> Served:
    """Predict one closed-loop run (see the module docstring). The long run by default:
    `requests` completed requests after the warm-up (default 6 x concurrency, at least 60).
    With `window_s`, exactly what a bench window of that length measures: one warm-up
    request per client, all together; when the last is done every client starts its first
    measured request at once, and the tokens streamed in the next `window_s` seconds
    count (`fastverify.experiments.bench.load`)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    rng = random.Random(seed * 104729 + concurrency)
    spec = mode != "baseline"
    if spec and acceptance is None:
        raise ValueError("a speculative mode needs the recorded acceptance")
    pool = [Draws(h, f) for h in acceptance.requests] if spec and acceptance else []
    ctl = None
    if mode == "adaptive":
        if config is None:
            raise ValueError("mode adaptive needs its config")
        from fastverify.sglang import adaptive

        launch = max(adaptive.candidate_steps(dict(config)))
        ctl = AdaptiveController(launch, dict(config), list(costs.cuda_graph_bs) or None)
    prefill_mode = mode  # baseline, eagle, adaptive: each its own first-token time
    decode_only = costs.prefill(prefill_mode, 1) is None
    target = requests or max(60, 6 * concurrency)
    warm = concurrency  # each client's first request is the warm-up

    now = 0.0
    waiting: list[_Req] = []
    running: list[_Req] = []
    front = None if decode_only else costs.front_end
    intake: Intake[_Req] = Intake(front)
    lone = front.lone_s() if front else 0.0

    # a client's next request reaches the scheduler after its last token's way out and the
    # new request's way in (the part of a first token that holds no forward), alone; with
    # others sent about then, later (the front end's queue)
    way = 0.0 if decode_only else costs.prefill_latency(prefill_mode)

    def send(t: float) -> None:
        alone_at = t + way + rng.uniform(*TURNAROUND_S)
        d = pool[rng.randrange(len(pool))] if pool else None
        r = _Req(d, alone_at, max(1, workload.input_len), workload.output_len)
        intake.enter(max(t, alone_at - lone), r)

    for _ in range(concurrency):
        send(0.0)
    done = 0
    t_start: float | None = None
    tokens_window = 0
    ttfts: list[float] = []
    itl_sum = 0.0
    itl_n = 0
    prefill_s = decode_s = 0.0
    at: defaultdict[int, float] = defaultdict(float)  # seconds at each step count

    def emit(r: _Req, n: int, t: float) -> None:
        nonlocal tokens_window, itl_sum, itl_n
        if t_start is not None and (window_s is None or t <= t_start + window_s):
            tokens_window += n
        if r.last_at is not None and n:
            itl_sum += t - r.last_at
            itl_n += n
        r.last_at = t

    def finish(r: _Req, t: float) -> None:
        nonlocal done, t_start
        done += 1
        if done == warm:
            t_start = t
        if window_s is None:
            send(t)
        elif done >= warm:  # bench: the measured clients start once the warm-up is over
            for _ in range(concurrency if done == warm else 1):
                send(t)

    def running_out() -> bool:
        if window_s is None:
            return done >= warm + target
        return t_start is not None and now >= t_start + window_s

    while not running_out():
        if not waiting and not running:  # idle until the next request arrives
            nxt = intake.next_arrival()
            if nxt is None:
                raise RuntimeError("the serving model ran out of requests")  # a bug, not input
            now = max(now, nxt)
        waiting.extend(r for _, r in intake.until(now))
        if waiting and not decode_only:
            budget = workload.chunk_tokens
            batch: list[tuple[_Req, int]] = []
            for r in waiting:
                if budget <= 0:
                    break
                n = min(r.prompt_left, budget)
                batch.append((r, n))
                budget -= n
            tokens = sum(n for _, n in batch)
            cost = costs.prefill_forward(prefill_mode, tokens, len(batch)) or 0.0
            now += cost
            if t_start is not None:
                prefill_s += cost
            for r, n in batch:
                r.prompt_left -= n
                if r.prompt_left == 0:
                    waiting.remove(r)
                    r.first_at = now
                    if done >= warm:  # the first token's way out holds no forward
                        ttfts.append(now - r.alone_at + way)
                    emit(r, 1, now)
                    r.out_left -= 1
                    if r.out_left <= 0:
                        finish(r, now)
                    else:
                        running.append(r)
            continue
        if waiting:  # decode only: prefill is not priced, requests join at once
            for r in waiting:
                r.first_at = now
                emit(r, 1, now)
                r.out_left -= 1
                running.append(r)
            waiting.clear()
            continue
        bs = len(running)
        row = costs.priced(bs)
        if row is None:
            raise ValueError(f"no measured costs at or above batch size {bs}")
        if mode == "baseline":
            k, cost = 0, costs.decode(row)
        else:
            k = ctl.steps_for(bs) if ctl is not None else int(steps or 0)
            cost = costs.cycle(row, k)
        now += cost
        if t_start is not None:
            decode_s += cost
            at[k] += cost
        accepted = []
        for r in list(running):
            j = 0
            if mode != "baseline" and k > 0 and r.draws is not None:
                j = min(r.draws.next(rng), k)
            accepted.append(j)
            n = min(j + 1, r.out_left)
            emit(r, n, now)
            r.out_left -= n
            if r.out_left <= 0:
                running.remove(r)
                finish(r, now)
        if ctl is not None:
            ctl.observe(accepted, bs)
    window = window_s if window_s is not None else now - (t_start or 0.0)
    ttfts.sort()
    total = sum(at.values()) or 1.0
    return Served(
        mode=mode,
        concurrency=concurrency,
        tokens_per_second=tokens_window / window if window > 0 else 0.0,
        ttft_mean_s=sum(ttfts) / len(ttfts) if ttfts else 0.0,
        ttft_p50_s=ttfts[len(ttfts) // 2] if ttfts else 0.0,
        itl_mean_s=itl_sum / itl_n if itl_n else 0.0,
        prefill_s=prefill_s / max(1, done - warm),
        decode_s=decode_s / max(1, done - warm),
        steps_share={kk: v / total for kk, v in sorted(at.items())},
        decode_only=decode_only,
    )


def window_runs(
    mode: str,
    concurrency: int,
    costs: Costs,
    workload: Workload,
    acceptance: Acceptance | None = None,
    *,
    window_s: float,
    seeds: Iterable[int],
    config: Mapping[str, Any] | None = None,
    steps: int | None = None,
    f: float = 1.0,
) -> list[Served]:
    """One bench window of `window_s` (`serve(window_s=)`) per seed: what such windows measure
    and how much they differ from one another."""
    return [serve(mode, concurrency, costs, workload, acceptance, config=config, steps=steps,
                  f=f, window_s=window_s, seed=s) for s in seeds]  # fmt: skip


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean of the replays' figures and their sample standard deviation (0 for one)."""
    m = sum(values) / len(values)
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / max(1, len(values) - 1))


def mean_tokens_per_second(runs: list[Served]) -> float:
    """The runs' mean output tokens/s."""
    return math.fsum(r.tokens_per_second for r in runs) / len(runs)
