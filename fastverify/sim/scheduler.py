"""The sim engine's decode loop: a scheduler thread that runs batches in real time.

Each iteration, as SGLang's scheduler (`get_next_batch_to_run`: a prefill batch whenever
requests wait, else a decode batch), either prefills waiting requests or runs one decode
cycle for every running request. A prefill forward takes waiting requests up to the
chunked-prefill budget (8192 new tokens; a longer prompt is split over several forwards)
and samples each finished prompt's first token. A decode cycle lasts exactly the cost of
its batch (`costtable.SimCosts`: padded to the release's captured batch size, eager beyond
the largest; sleep until an absolute deadline, catching up after up to 0.5 s of starvation
on a busy host, so timing error does not accumulate; an idle engine sleeps on a condition
and uses no CPU). Per cycle, each running request gains 1 token (baseline) or 1 + the
drafts its verify accepted (EAGLE-3), from the sim's drafter (`drafter`: a chain per
request, each request with its own acceptance when `--sim-accept-spread` is set). Each
verify is counted in the request's `spec_correct_drafts_histogram` (entry j: passes that
accepted j drafts), as SGLang does. With `adaptive_config` (`--speculative-adaptive`) the
step count of each batch comes from SGLang's controller (`fastverify.sglang.adaptive_slot`,
routing a batch by its padded size), fed after every verify; steps 0 is SGLang's steps-0
pass (a verify at one draft token plus the draft extend, or without the extend under
SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1, after which a request's first pass at k > 0
drafts from the stubbed zero state and accepts nothing) and counts a verify with 0 drafts.
With SGLANG_SIMULATE_ACC_LEN in its environment the accept length is forced as SGLang forces
it (`fastverify.sglang.forced`: one draw per pass for the whole batch, by the method of
SGLANG_SIMULATE_ACC_METHOD), the drafter's guesses overridden.
Every `decode_log_interval` cycles TP0 logs SGLang's decode line with the real tokens/s
over the interval (accept rate: accepted drafts / (passes x the active draft tokens - 1),
0 at steps 0, as `metrics_reporter.py` reads the overridden spec config), and the
Prometheus gauges are updated. The request gauges (`sglang:num_running_reqs`,
`sglang:num_queue_reqs`) also follow the batch itself: set whenever a request joins the
queue, enters the running batch or leaves it (SGLang refreshes them at its log intervals;
the sim's are never staler than that).
"""

from __future__ import annotations

import itertools
import queue
import random
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fastverify.sglang import adaptive
from fastverify.sglang import forced as forced_acceptance
from fastverify.sglang.adaptive_slot import AdaptiveController
from fastverify.sglang.forced import Forced
from fastverify.sim import costmodel, sglang_logs
from fastverify.sim.costtable import CHUNKED_PREFILL_TOKENS, SimCosts
from fastverify.sim.drafter import Drafter, RequestDraws
from fastverify.sim.metrics import SimMetrics

MAX_RUNNING = 256
MAX_TOTAL_TOKENS = 1_048_576  # KV-cache capacity used for "token usage"
MAX_CATCH_UP_S = 0.5  # how far behind its deadlines the decode loop may catch up

_ids = itertools.count(1)


@dataclass(eq=False)  # identity semantics: requests are compared by object
class Request:
    """One generation request, shared between an HTTP handler thread and the scheduler."""

    prompt_tokens: int
    max_new_tokens: int
    stream: bool = False
    log_metrics: bool = True  # False: a health check (SGLang's log_metrics=False)
    sampling: dict = field(default_factory=dict)  # the request's sampling parameters
    rid: str = field(default_factory=lambda: f"{next(_ids):032x}")
    created: float = field(default_factory=time.perf_counter)
    generated: int = 0
    verify_ct: int = 0
    accepted_total: int = 0
    # the scheduler's loop first saw it: SGLang's scheduler reads its socket at the top of
    # each iteration (`recv_requests`, then `get_next_batch_to_run`), so a request sent
    # while a forward runs waits for that forward's end (its `wait_queue_entry_time`)
    queued_at: float | None = None
    forward_entry_at: float | None = None  # its first prefill forward began
    first_token_at: float | None = None
    first_sent_at: float | None = None  # the server wrote its first chunk (server.py)
    last_token_at: float | None = None
    finished_at: float | None = None
    draws: RequestDraws | None = None  # its acceptance (EAGLE-3), set at prefill
    prefilled: int = 0  # prompt tokens prefilled so far (chunked prefill)
    stale_draft: bool = False  # a steps-0 pass skipped the draft extend
    histogram: list[int] = field(default_factory=list)  # spec_correct_drafts_histogram
    aborted: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    updates: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)  # new-token counts

    @property
    def e2e_latency(self) -> float:
        return (self.finished_at or time.perf_counter()) - self.created

    def _emit(self, n: int) -> None:
        if self.stream:
            self.updates.put(n)


class Scheduler(threading.Thread):
    """Runs the simulated batches; `submit()` is thread-safe."""

    def __init__(
        self,
        *,
        env: Mapping[str, str],
        mode: str,
        tp_size: int,
        cuda_graph: bool,
        accept_length: float | None,
        num_steps: int,
        topk: int,
        num_draft_tokens: int,
        decode_log_interval: int,
        log: sglang_logs.LogWriter,
        metrics: SimMetrics | None,
        seed: int = 0,
        on_cycle: Callable[[int, int, int | None], None] | None = None,
        on_crash: Callable[[], None] | None = None,
        pcie_ipc_max_bytes: int | None = None,
        accept_steps: int | None = None,
        adaptive_config: dict | None = None,
        accept_spread: float = 0.0,
        costs: SimCosts | None = None,
        on_finish: Callable[[Request], None] | None = None,
        forced: Forced | None = None,
        forced_failure: str | None = None,
    ):
        super().__init__(name="sim-scheduler", daemon=True)
        self.env = dict(env)
        self.pcie_ipc_max_bytes = pcie_ipc_max_bytes
        self.mode = mode
        self.tp_size = tp_size
        self.cuda_graph = cuda_graph
        self.accept_length = accept_length
        self.num_steps = num_steps
        self.topk = topk
        self.num_draft_tokens = num_draft_tokens
        ref_steps = accept_steps or max(1, num_draft_tokens - 1)
        length = costmodel.DEFAULT_ACCEPT_LENGTH if accept_length is None else accept_length
        self.drafter = Drafter.solve(min(max(length, 1.0), ref_steps + 1), ref_steps, accept_spread)
        self.costs = costs
        # SGLANG_SIMULATE_ACC_LEN in the server's environment: every verify pass accepts a
        # length SGLang samples (one per pass, for the whole batch), whatever the drafter
        # guessed; `forced_failure`: the ValueError SGLang raises at the first verify pass
        # for a method or token mode its source does not accept
        self.forced = forced
        self.forced_failure = forced_failure
        self._forced_rng = random.Random(seed + 2)
        # SGLang's adaptive router pads a batch to a captured size before picking its tier
        graph_bs = (costs.capture if costs is not None else None) or None
        self.controller = (
            AdaptiveController(num_steps, adaptive_config, graph_bs if cuda_graph else None)
            if adaptive_config is not None and mode == "eagle3"
            else None
        )
        self.active_steps = num_steps if mode == "eagle3" else 0
        self.decode_log_interval = max(1, decode_log_interval)
        # the played SGLang release's log-line form (its facts; the engine sets these)
        self.old_log_form = False
        self.log_accept_rate = True
        self.log = log
        self.metrics = metrics
        self.on_cycle = on_cycle
        self.on_crash = on_crash
        self.on_finish = on_finish
        self.crashed = False
        # hang(): the loop stops answering while the process lives (an NCCL hang's shape)
        self.hung = threading.Event()
        self.last_output = 0.0  # time.time() of the last tokens produced (SGLang's
        # tokenizer_manager.last_receive_tstamp: what /health_generate waits for)
        self._rng = random.Random(seed)
        self._probe_rng = random.Random(seed + 1)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._pred_cache: dict[tuple[int, int | None], costmodel.Prediction] = {}
        # stats
        self.forward_ct = 0
        self.last_gen_throughput = 0.0
        self.avg_spec_accept_length = 0.0
        self._interval_tokens = 0
        self._interval_accepted = 0
        self._interval_verify = 0
        self._interval_tic = time.perf_counter()

    # ------------------------------------------------------------------ public
    def predict(self, bs: int, steps: int | None = None) -> costmodel.Prediction:
        """The cost of one decode pass of `bs` requests at `steps` draft steps (default: the
        configured shape; 0: SGLang's steps-0 pass), padded to the captured batch size."""
        key = (bs, steps)
        pred = self._pred_cache.get(key)
        if pred is None:
            pred = self._predict(bs, steps)
            self._pred_cache[key] = pred
        return pred

    def _predict(self, bs: int, steps: int | None) -> costmodel.Prediction:
        eagle = self.mode == "eagle3"
        if self.costs is not None and (not eagle or steps is not None):
            return self.costs.step(bs, steps if eagle else None)
        size, graph = bs, self.cuda_graph
        if self.costs is not None:
            size, graph = self.costs.padded(bs, self.costs.capture)
        if not eagle:
            return costmodel.predict(self.env, "baseline", self.tp_size, size, graph,
                                     pcie_ipc_max_bytes=self.pcie_ipc_max_bytes)  # fmt: skip
        k = self.num_steps if steps is None else steps
        ndt = self.num_draft_tokens if k == self.num_steps else k + 1
        return costmodel.predict(
            self.env, "eagle3", self.tp_size, size, graph, self.chain_length(ndt - 1),
            num_steps=k, topk=self.topk, num_draft_tokens=ndt,
            pcie_ipc_max_bytes=self.pcie_ipc_max_bytes,
        )  # fmt: skip

    def chain_length(self, positions: int) -> float:
        """The accept length with `positions` draft positions, pooled over passes (the sim's
        ground truth; forced by SGLang, the mean of its draws)."""
        if self.forced is not None and self.mode == "eagle3":
            return forced_acceptance.expected_length(self.forced, positions + 1)
        return self.drafter.pooled_length(positions) if positions > 0 else 1.0

    def submit(self, req: Request) -> None:
        with self._cond:
            self.waiting.append(req)
            self._request_gauges_locked()
            self._cond.notify()

    def hang(self) -> None:
        """Stop answering from the next iteration on, until stopped (requests never finish);
        the HTTP server and the process stay up. Safe from a signal handler."""
        self.hung.set()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def abort(self, req: Request) -> None:
        """Drop a request whose client went away (it finishes with what it has)."""
        with self._cond:
            req.aborted = True  # the decode loop skips it from now on
            if req in self.waiting:
                self.waiting.remove(req)
            elif req in self.running:
                self.running.remove(req)
            self._request_gauges_locked()
        self._finish(req, time.perf_counter())

    def counts(self) -> tuple[int, int]:
        with self._cond:
            return len(self.running), len(self.waiting)

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        try:
            self._loop()
        except Exception:
            self.log.log(
                "Scheduler hit an exception: " + traceback.format_exc().rstrip(), 0, "error"
            )
            self.crashed = True
            if self.on_crash is not None:
                self.on_crash()

    def _loop(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            if self.hung.is_set():
                self._stop.wait()  # stuck: nothing runs, nothing is logged
                return
            idle = False
            with self._cond:
                while not self.waiting and not self.running and not self._stop.is_set():
                    self._update_gauges_locked()
                    self._cond.wait()
                    idle = True
                if self._stop.is_set():
                    return
                seen = time.perf_counter()
                for r in self.waiting:
                    r.queued_at = r.queued_at or seen
                chunk = self._prefill_batch_locked()
                if chunk:  # prefilling: part of the running batch from now on
                    done = sum(1 for _r, _n, whole in chunk if whole)
                    self._request_gauges_locked(prefilling=done)
            if self.hung.is_set():
                continue  # hung while idle: the requests just taken never run
            now = time.monotonic()
            # Late (the thread was starved on a busy host): catch up by running the next
            # iterations back to back, so the long-run rate stays the model's; after a real
            # stall (more than MAX_CATCH_UP_S behind) or an idle wait, restart the clock.
            if idle or now - deadline > MAX_CATCH_UP_S:
                deadline = now
            if chunk:
                entry = time.perf_counter()
                for r, _n, _done in chunk:
                    r.forward_entry_at = r.forward_entry_at or entry
                tokens = sum(n for _r, n, _done in chunk)
                dur = self._prefill_seconds(tokens)
                deadline += dur
                if self._wait_until(deadline):
                    return
                self._prefill(chunk, tokens, dur)
                continue
            bs = len(self.running)
            if self.controller is not None:
                self.active_steps = self.controller.steps_for(bs)
            steps = self.active_steps if self.controller else None
            pred = self.predict(bs, steps)
            start_ns = time.time_ns()
            deadline += pred.cycle_seconds + self._context_seconds(bs)
            if self._wait_until(deadline):
                return
            self._decode_cycle()
            if self.on_cycle is not None:
                self.on_cycle(start_ns, bs, steps)

    def _context_seconds(self, bs: int) -> float:
        """What the running requests' contexts add to this pass (`costmodel.context_seconds`)."""
        with self._cond:
            contexts = [r.prompt_tokens + r.generated for r in self.running]
        if not contexts:
            return 0.0
        mean = sum(contexts) / len(contexts)
        return costmodel.context_seconds(self.mode == "eagle3", bs, mean)

    def _wait_until(self, deadline: float) -> bool:
        """Sleep until `deadline` (monotonic); True when stopped meanwhile."""
        delay = deadline - time.monotonic()
        return delay > 0 and self._stop.wait(delay)

    def _prefill_batch_locked(self) -> list[tuple[Request, int, bool]]:
        """SGLang's prefill batch (`PrefillAdder`): waiting requests in order, up to the
        chunked-prefill budget of new tokens per forward; a prompt that does not fit is
        chunked (the rest in the next forward). [(request, tokens now, prompt done)]."""
        budget = CHUNKED_PREFILL_TOKENS
        out: list[tuple[Request, int, bool]] = []
        admitted = len(self.running)
        for r in self.waiting:
            if budget <= 0 or admitted >= MAX_RUNNING:
                break
            left = max(1, r.prompt_tokens) - r.prefilled
            n = min(left, budget)
            out.append((r, n, n == left))
            budget -= n
            admitted += 1
        for r, _n, done in out:
            if done:
                self.waiting.remove(r)
        return out

    def _prefill_seconds(self, tokens: int) -> float:
        if self.costs is not None:
            return self.costs.prefill(tokens, self.mode == "eagle3")
        return costmodel.prefill_seconds(
            self.env, self.tp_size, tokens, self.mode, pcie_ipc_max_bytes=self.pcie_ipc_max_bytes
        )

    def _prefill(self, chunk: list[tuple[Request, int, bool]], tokens: int, dur: float) -> None:
        now = time.perf_counter()
        for r, n, _done in chunk:
            r.prefilled += n
        new = [r for r, _n, done in chunk if done]
        with self._cond:
            running_before = len(self.running)
            queue_len = len(self.waiting)
            usage = self._token_usage_locked(extra=new)
        self.log.log(
            sglang_logs.prefill_line(
                len(chunk),
                tokens,
                usage,
                running_before,
                queue_len,
                tokens / dur if dur > 0 else 0.0,
                old_form=self.old_log_form,
            )
        )
        finished = []
        for r in new:
            r.generated = 1  # prefill samples the first token
            if self.mode == "eagle3":
                # a health check draws from its own stream: the watch's probes, timed by the
                # clock, must not move a seeded bench's per-request acceptance
                rng = self._rng if r.log_metrics else self._probe_rng
                r.draws = RequestDraws(self.drafter.request_q(rng), rng.random())
            r.first_token_at = r.last_token_at = now
            if self.metrics and r.log_metrics:
                self.metrics.ttft(r.stream).observe(now - r.created)
            r._emit(1)
            if r.generated >= r.max_new_tokens:
                finished.append(r)
        if self.metrics:
            self.metrics.prefill_pass()
            for r in new:
                if r.log_metrics:
                    self.metrics.generation_tokens(r.stream).inc(1)
        self._account(len(new), 0, 0)
        self.last_output = time.time()
        with self._cond:
            self.running.extend(r for r in new if r not in finished)
            self._request_gauges_locked()
        for r in finished:
            self._finish(r, now)

    def _decode_cycle(self) -> None:
        now = time.perf_counter()
        eagle = self.mode == "eagle3"
        # draft positions this cycle: the adaptive step count, else the configured shape
        positions = self.active_steps if self.controller else self.num_draft_tokens - 1
        stub_extend = positions == 0 and self.costs is not None and self.costs.skip_extend
        drafts: list[int] = []
        produced = accepted = 0
        with self._cond:
            running = list(self.running)
        finished = []
        forced_j = self._forced_drafts(positions) if eagle and running else None
        for r in running:
            if r.aborted:
                continue
            if eagle and r.draws is not None:
                j = r.draws.next(positions)
                if r.stale_draft and positions > 0:
                    j = 0  # drafted from the zeroed stub of a skipped extend: nothing holds
                if forced_j is not None:
                    j = forced_j  # SGLang's simulated accept index replaces the verify's
                r.stale_draft = stub_extend or (r.stale_draft and positions == 0)
                drafts.append(j)
                if len(r.histogram) <= j:
                    r.histogram.extend([0] * (j + 1 - len(r.histogram)))
                r.histogram[j] += 1
                n = j + 1
                r.verify_ct += 1
                r.accepted_total += n
                accepted += j
            else:
                n = 1
            n = min(n, r.max_new_tokens - r.generated)
            r.generated += n
            produced += n
            if self.metrics and r.log_metrics and r.last_token_at is not None and n:
                # as SGLang 0.5.23's observe_inter_token_latency: interval / n, n times
                # (the histogram's sum grows by the interval, its count by n tokens)
                for _ in range(n):
                    self.metrics.itl.observe((now - r.last_token_at) / n)
            r.last_token_at = now
            if self.metrics and r.log_metrics and n:
                self.metrics.generation_tokens(r.stream).inc(n)
            r._emit(n)
            if r.generated >= r.max_new_tokens:
                finished.append(r)
        if finished:
            with self._cond:
                gone = set(map(id, finished))
                self.running = [r for r in self.running if id(r) not in gone]
                self._request_gauges_locked()
            for r in finished:
                self._finish(r, now)
        if self.controller is not None and drafts:
            self._adapt(drafts, len(running))
        self.forward_ct += 1
        if produced:
            self.last_output = time.time()
        if self.metrics:
            self.metrics.decode_pass()
            if eagle and running:
                self.metrics.count_verify(len(running))
        self._account(produced, accepted, len(drafts))
        if self.forward_ct % self.decode_log_interval == 0:
            batch_tokens = sum(r.prompt_tokens + r.generated for r in running)
            self._log_decode(len(running), batch_tokens)

    def _forced_drafts(self, positions: int) -> int | None:
        """Drafts every request of this pass accepts under forced acceptance (None: the
        drafter decides), as SGLang's verify: one accept length for the batch."""
        if self.forced_failure is not None:
            raise ValueError(self.forced_failure)
        if self.forced is None:
            return None
        return forced_acceptance.sample(self.forced, positions + 1, self._forced_rng) - 1

    def _adapt(self, drafts: list[int], bs: int) -> None:
        """Feed SGLang's controller one verify's accepted drafts; log its step changes."""
        assert self.controller is not None
        moved = self.controller.observe(drafts, bs)
        if moved is not None:
            # SGLang swaps its runtime state (and the spec config its logs read) at once
            self.active_steps = moved
            change = self.controller.slot(bs).last_change
            if change is not None:
                self.log.log(adaptive.format_updated(*change))

    def _finish(self, r: Request, now: float) -> None:
        with self._cond:  # an abort and the last cycle may race: finish exactly once
            if r.finished_at is not None:
                return
            r.finished_at = now
        if self.metrics and r.log_metrics and not r.aborted:
            self.metrics.e2e(r.stream).observe(now - r.created)
            self.metrics.num_requests(r.stream).inc()
            self.metrics.prompt_tokens(r.stream).inc(r.prompt_tokens)
        r.updates.put(None)
        r.done.set()
        if self.on_finish is not None and r.log_metrics and not r.aborted:
            self.on_finish(r)

    def _account(self, produced: int, accepted: int, verifies: int) -> None:
        self._interval_tokens += produced
        self._interval_accepted += accepted
        self._interval_verify += verifies

    def _log_decode(self, running: int, tokens: int) -> None:
        """SGLang's decode line for the batch that just ran (`tokens`: its KV tokens)."""
        now = time.perf_counter()
        gap = now - self._interval_tic
        self._interval_tic = now
        self.last_gen_throughput = self._interval_tokens / gap if gap > 0 else 0.0
        self._interval_tokens = 0
        accept_len = accept_rate = None
        if self.mode == "eagle3" and self._interval_verify:
            # metrics_reporter.py: tokens per verified request, and accepted drafts over
            # passes x (num_draft_tokens - 1) of the spec config active now (adaptive
            # overrides it at every switch): 0 while steps 0 is active
            accept_len = 1.0 + self._interval_accepted / self._interval_verify
            drafting = self.active_steps if self.controller else self.num_draft_tokens - 1
            passes = self._interval_verify * drafting
            accept_rate = self._interval_accepted / passes if passes else 0.0
            self.avg_spec_accept_length = accept_len
        self._interval_accepted = self._interval_verify = 0
        usage = tokens / MAX_TOTAL_TOKENS
        with self._cond:
            queue_len = len(self.waiting)
        self.log.log(
            sglang_logs.decode_line(
                running,
                tokens,
                usage,
                self.last_gen_throughput,
                queue_len,
                self.cuda_graph,
                accept_len,
                accept_rate,
                old_form=self.old_log_form,
                with_accept_rate=self.log_accept_rate,
            )
        )
        if self.metrics:
            self.metrics.gen_throughput.set(self.last_gen_throughput)
            self.metrics.num_running_reqs.set(running)
            self.metrics.num_queue_reqs.set(queue_len)
            self.metrics.token_usage.set(usage)
            if accept_len is not None:
                self.metrics.spec_accept_length.set(accept_len)
                self.metrics.spec_accept_rate.set(accept_rate or 0.0)
            if self.mode == "eagle3":  # the active step count (SGLang's spec snapshot)
                steps = self.active_steps
                self.metrics.spec_num_steps.set(steps)
                self.metrics.spec_num_draft_tokens.set(
                    steps + 1
                    if self.controller or steps != self.num_steps
                    else self.num_draft_tokens
                )

    def _token_usage_locked(self, extra: list[Request] | None = None) -> float:
        used = sum(r.prompt_tokens + r.generated for r in self.running)
        used += sum(r.prompt_tokens for r in extra or [])
        return used / MAX_TOTAL_TOKENS

    def _request_gauges_locked(self, prefilling: int = 0) -> None:
        """Running and queued requests as they are now (the caller holds `_cond`)."""
        if self.metrics:
            self.metrics.num_running_reqs.set(len(self.running) + prefilling)
            self.metrics.num_queue_reqs.set(len(self.waiting))

    def _update_gauges_locked(self) -> None:
        if self.metrics:
            self.metrics.num_running_reqs.set(len(self.running))
            self.metrics.num_queue_reqs.set(len(self.waiting))
            self.metrics.token_usage.set(self._token_usage_locked())
