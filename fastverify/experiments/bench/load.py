"""Closed-loop load against a running SGLang-compatible server (`fastverifyctl bench`).

`concurrency` clients each send one streaming `POST /generate` request after another
(closed loop) until `duration` seconds have passed or `requests` requests have been
sent. Prompts are a prompt set's (`dataset`: `fastverify.experiments.bench.datasets`, in
its order, cycled) or, by default, random token ids that no other request shares (`input_ids`,
so the input length is exact without a tokenizer: "synthetic"; `Prompts`); sampling is
`temperature` / `top_p` (default greedy), and `ignore_eos` pins the output length.

Timing, from the streamed chunks (SGLang sends cumulative `meta_info.completion_tokens`):
- TTFT: request start to the first chunk that carries a token.
- ITL: gap between chunks divided by the tokens that chunk added (a speculative step
  delivers several tokens at once), one value per token, as `sglang.bench_serving` does.
- Output tok/s: tokens received inside the measurement window / window length. With
  `duration` the window ends at the deadline and requests still in flight are cancelled
  (their tokens up to the deadline count, they do not count as completed); with
  `requests` it ends when the last request finishes.
- Per-request tok/s: mean over completed requests of (tokens - 1) / (latency - TTFT),
  the decode rate one sequence sees (what a break-even accept length is measured against).
  A window in which no request completed has none: `incomplete` then says why and what to
  change (a longer `duration`, a shorter `output_len`), and the CLI exits 1.
- Decode tok/s: the same rate with other requests' prefills taken out, pooled over every
  request's chunk gaps: tokens / seconds over the gaps during which no other request got its
  first token. A prefill forward holds every running sequence's decode (SGLang runs a prefill
  batch between decode passes), and it ends with the first tokens of the prompts it held, so
  a gap that holds one holds a prefill. With long prompts at a high concurrency a third of a
  request's decode time can be other requests' prefills; the per-request rate carries them,
  this one does not (what a decode pass costs: `spec costs`). `gaps_with_prefill` counts the
  gaps left out.
- Phases: `run_bench(..., phase=fn)` hears a line when the warm-up starts, every few
  seconds while it runs, when it ends, and when the window starts (the CLI prints them).
- Accept length: `internal_states[0].avg_spec_accept_length` of `/server_info`
  (`/get_server_info` on older SGLang) after the run; None for a baseline server.
  Server info goes through `fastverify.sglang.client`; httpx carries the load (and the
  /health check that opens the load client's connection before the window).
- Acceptance: the `spec_correct_drafts_histogram` SGLang puts in a finished request's
  `meta_info` (entry j: verify passes that accepted j drafts), summed over the requests
  that completed in the window -> `accept_histogram`; with topk 1 it gives the accept length
  at every step count up to the server's (`accept_curve`, {"1": L(1), ..., "K": L(K)};
  `fastverify.speculation.curve`). None for a baseline server; no curve for an adaptive one
  (its passes ran at several step counts).
- Weights: "dummy" when the server info's `load_format` (SGLang reports its server args
  there) is `dummy` (a timing trial: its accept length is not a real one), "real" for any
  other load format, None when the server does not say.

`keep_loaded(cfg, stop)` is the same closed loop without a window: `concurrency` clients
until `stop` is set, each sending its next request only when its last one finished, so the
server never holds more than `concurrency` of them (the load beside a profile window).

`run_sglang_bench` (sglang_bench.py) runs `python -m sglang.bench_serving` instead, when it
is installed, and maps the JSONL line it appends to `--output-file` onto the same result
fields. The config, the records and the result are records.py's.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from fastverify.config import weights_label
from fastverify.durable import atomic_write_text
from fastverify.experiments.bench.records import (
    BenchConfig,
    BenchError,
    BenchResult,
    RequestRecord,
    ms_summary,
    prefill_forwards,
    timeline,
    ttft_split,
)
from fastverify.experiments.bench.sglang_bench import (
    result_from_sglang_jsonl,
    run_sglang_bench,
    sglang_bench_argv,
    sglang_bench_available,
)
from fastverify.experiments.common import interruptible
from fastverify.experiments.common.stats import mean
from fastverify.sglang import adaptive, request_stamps
from fastverify.sglang import client as engine_client

ProgressFn = Callable[[int, float], None]  # (completed requests, elapsed seconds)
PhaseFn = Callable[[str], None]  # one line about the phase the run is in (warm-up, window)
# While the warm-up runs, a line every this many seconds (a slow server can take long).
WARMUP_NOTE_EVERY_S = 5.0
STOP_POLL_S = 0.1  # how often keep_loaded looks at its stop event


def synthetic_prompt(i: int, input_len: int, seed: int, salt: int = 0) -> list[int]:
    """Prompt `i` of a run: `input_len` random token ids from (`seed`, `salt`, `i`).

    Ids stay in 1000..29999, inside any modern vocabulary and clear of special tokens.
    """
    rng = random.Random(f"{seed}:{salt}:{i}")
    return [rng.randrange(1000, 30000) for _ in range(input_len)]


class Prompts:
    """The prompt of each request of a run: a prompt set's in its order, cycled; else random
    token ids that no other request shares, in this run or another: the warm-up and the
    window draw different indices and every run its own salt, so the server's prefix cache
    (SGLang's radix cache, on by default) never serves a synthetic prompt. Cycled or reused,
    it did: on SGLang 0.5.17 a 1024-token prompt sent again was prefilled as 2 new tokens
    beside 1022 cached ones, which made the time to first token and the throughput of a
    window those of a server that prefills almost nothing."""

    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.salt = secrets.randbits(64)
        self.made: dict[int, dict[str, Any]] = {}  # the prepared ones
        self.fixed: list[dict[str, Any]] | None = None
        if cfg.dataset:
            from fastverify.experiments.bench.datasets import load

            self.fixed = list(load(cfg.dataset).prompts)

    def __call__(self, i: int) -> dict[str, Any]:
        if self.fixed is not None:
            return self.fixed[i % len(self.fixed)]
        made = self.made.get(i)
        if made is None:  # drawn when asked, never kept: a long load sends without end
            return {"input_ids": synthetic_prompt(i, self.cfg.input_len, self.cfg.seed, self.salt)}
        return made

    def prepare(self, n: int) -> None:
        """Draw the first `n` synthetic prompts now, so that the window's clients do not
        (a millisecond per thousand tokens, inside the loop that times the chunks)."""
        if self.fixed is None:
            for i in range(n):
                ids = synthetic_prompt(i, self.cfg.input_len, self.cfg.seed, self.salt)
                self.made[i] = {"input_ids": ids}

    def warmup(self, j: int) -> dict[str, Any]:
        """Warm-up request `j`: a prompt set's from its start (the window starts there
        again), a synthetic one of its own (negative indices)."""
        return self(j) if self.fixed is not None else self(-1 - j)


def dataset_identity(cfg: BenchConfig) -> dict[str, Any]:
    """What the prompts were, for the acceptance record (`datasets`)."""
    from fastverify.experiments.bench import datasets

    if cfg.dataset:
        return datasets.load(cfg.dataset).identity
    return datasets.synthetic_identity(cfg.input_len)


def _load_client(cfg: BenchConfig) -> Any:
    """The clients' HTTP connection pool: room for every client, each request's timeout."""
    import httpx

    limits = httpx.Limits(max_connections=cfg.concurrency + 4)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(cfg.timeout, connect=10.0))


async def _one_request(
    client: Any, url: str, prompt: dict[str, Any], cfg: BenchConfig, rec: RequestRecord
) -> None:
    """Stream one request into `rec` (mutated in place, so a cancelled request keeps what it
    received). `prompt`: {"input_ids": [...]} or {"text": ...}."""
    payload = {
        **prompt,
        "sampling_params": {
            **cfg.sampling,
            "max_new_tokens": cfg.output_len,
            "ignore_eos": True,
        },
        "stream": True,
    }
    rec.start = time.perf_counter()
    rec.wall_offset = time.time() - rec.start
    try:
        async with client.stream("POST", f"{url}/generate", json=payload) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode(errors="replace")[:200]
                rec.error = f"HTTP {resp.status_code}: {body}"
                return
            async for line in resp.aiter_lines():
                line = line.strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    rec.error = str(chunk["error"])[:200]
                    return
                meta = chunk.get("meta_info") or {}
                # the first chunk's stamps stand: a retracted request's later chunks carry
                # another queue time (0.5.17 restarts it at the re-queue)
                for key, stamp in request_stamps.stamps_of(meta).items():
                    rec.stamps.setdefault(key, stamp)
                hist = meta.get(adaptive.HISTOGRAM_KEY)
                if isinstance(hist, list):
                    rec.histogram = [int(n) for n in hist]
                done = int(meta.get("completion_tokens", rec.tokens))
                if done <= rec.tokens:
                    continue
                now = time.perf_counter()
                if rec.ttft is None:
                    rec.ttft = now - rec.start
                rec.chunk_times.append(now)
                rec.chunk_tokens.append(done - rec.tokens)
                rec.tokens = done
    except Exception as exc:  # network errors, bad JSON: recorded, the run goes on
        rec.error = f"{type(exc).__name__}: {exc}"[:200]
        return
    rec.latency = time.perf_counter() - rec.start
    rec.completed = rec.tokens > 0
    if not rec.completed:
        rec.error = "stream ended without tokens"


async def _measure(
    cfg: BenchConfig, progress: ProgressFn | None, phase: PhaseFn | None = None
) -> tuple[list[RequestRecord], float, float, dict[str, Any] | None]:
    import httpx

    url = cfg.url.rstrip("/")
    prompts = Prompts(cfg)
    prompts.prepare(cfg.requests or max(64, 4 * cfg.concurrency))
    async with _load_client(cfg) as client:
        # Part of the load job: opens the load client's connection (and its lazy imports)
        # before the window starts; with it outside, a 1 s window measured ~35% low here.
        try:
            await client.get(f"{url}{engine_client.HEALTH}", timeout=10.0)
        except httpx.HTTPError as exc:
            raise BenchError(
                f"server not reachable at {url} ({type(exc).__name__}: {exc})"
            ) from None
        if cfg.warmup:
            warm = [RequestRecord(start=0.0) for _ in range(cfg.warmup * cfg.concurrency)]
            w0 = time.perf_counter()
            if phase:
                phase(f"warm-up: {len(warm)} request(s) of {cfg.output_len} tokens, "
                      "discarded (--warmup 0 skips it) ...")  # fmt: skip
            jobs = asyncio.gather(
                *[
                    _one_request(client, url, prompts.warmup(i), cfg, rec)
                    for i, rec in enumerate(warm)
                ]
            )
            try:
                while True:
                    try:
                        await asyncio.wait_for(asyncio.shield(jobs), WARMUP_NOTE_EVERY_S)
                        break
                    except TimeoutError:
                        if phase:
                            done = sum(1 for r in warm if r.completed or r.error)
                            got = sum(r.tokens for r in warm)
                            phase(f"warm-up: {done}/{len(warm)} done, {got} tokens so far "
                                  f"({time.perf_counter() - w0:.0f} s)")  # fmt: skip
            except asyncio.CancelledError:  # Ctrl-C: the shielded requests are stopped too,
                jobs.cancel()  # and their outcome read (no "exception never retrieved")
                await asyncio.gather(jobs, return_exceptions=True)
                raise
            if all(r.error for r in warm):
                raise BenchError(f"every warm-up request failed: {warm[0].error}")
            if phase:
                phase(f"warm-up done in {time.perf_counter() - w0:.1f} s")

        records: list[RequestRecord] = []
        state = {"next": 0, "done": 0}
        if phase:
            phase(
                f"measuring: {cfg.concurrency} client(s) for {cfg.duration:g} s ..."
                if cfg.duration is not None
                else f"measuring: {cfg.concurrency} client(s), {cfg.requests} request(s) ..."
            )
        t0 = time.perf_counter()
        deadline = None if cfg.duration is None else t0 + cfg.duration

        async def client_loop() -> None:
            while True:
                i = state["next"]
                if cfg.requests is not None and i >= cfg.requests:
                    return
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                state["next"] = i + 1
                rec = RequestRecord(start=time.perf_counter())
                records.append(rec)
                coro = _one_request(client, url, prompts(i), cfg, rec)
                if deadline is None:
                    await coro
                else:
                    try:
                        await asyncio.wait_for(coro, max(0.001, deadline - time.perf_counter()))
                    except TimeoutError:
                        rec.cancelled = True  # keeps the chunks it streamed before the deadline
                        return
                state["done"] += 1
                if progress:
                    progress(state["done"], time.perf_counter() - t0)

        async def ticker() -> None:
            # Duration runs: move the progress bar while long requests stream.
            while True:
                await asyncio.sleep(0.5)
                if progress:
                    progress(state["done"], time.perf_counter() - t0)

        tick = asyncio.ensure_future(ticker()) if progress and deadline is not None else None
        try:
            await asyncio.gather(*[client_loop() for _ in range(cfg.concurrency)])
        finally:
            if tick is not None:
                tick.cancel()
        t_end = deadline if deadline is not None else time.perf_counter()
    info = await asyncio.to_thread(server_info_or_none, url)
    return records, t0, t_end, info


def keep_loaded(cfg: BenchConfig, stop: threading.Event, counts: dict[str, int]) -> None:
    """Closed-loop load until `stop` is set (module docstring); `counts` ("sent",
    "finished", "failed") follows it as it runs. A failed request (the server restarting)
    is retried after half a second; those in flight at `stop` are cancelled, once."""
    asyncio.run(_keep_loaded(cfg, stop, counts))


async def _keep_loaded(cfg: BenchConfig, stop: threading.Event, counts: dict[str, int]) -> None:
    url = cfg.url.rstrip("/")
    prompts = Prompts(cfg)  # the bench window's own kind of prompts (its dataset, else random)
    for key in ("sent", "finished", "failed"):
        counts.setdefault(key, 0)
    async with _load_client(cfg) as client:

        async def one_client(k: int) -> None:
            i = k
            while not stop.is_set():
                rec = RequestRecord(start=time.perf_counter())
                counts["sent"] += 1
                try:
                    await _one_request(client, url, prompts(i), cfg, rec)
                except Exception as exc:  # counted as failed: never a silent stall
                    rec.error = f"{type(exc).__name__}: {exc}"
                i += cfg.concurrency
                if rec.error:
                    counts["failed"] += 1
                    await asyncio.sleep(0.5)
                else:
                    counts["finished"] += 1

        clients = [asyncio.ensure_future(one_client(k)) for k in range(cfg.concurrency)]
        while not stop.is_set():  # polled: a thread blocked in stop.wait() would hold up
            await asyncio.sleep(STOP_POLL_S)  # this process's exit if `stop` were never set
        for c in clients:
            c.cancel()
        await asyncio.gather(*clients, return_exceptions=True)


def server_info_or_none(url: str) -> dict[str, Any] | None:
    """The server info after the run (`fastverify.sglang.client.server_info`: `/server_info`,
    `/get_server_info` on older servers); None when the server does not give it."""
    try:
        return engine_client.server_info(url, timeout=10.0)
    except (OSError, ValueError, engine_client.EngineHTTPError):
        return None


def weights_from_server_info(info: dict[str, Any] | None) -> str | None:
    """Weights "dummy" / "real" from the server's reported `load_format`; None when absent."""
    fmt = (info or {}).get("load_format")
    return weights_label(fmt) if isinstance(fmt, str) else None


def accept_length_from_server_info(info: dict[str, Any]) -> float | None:
    """`internal_states[0].avg_spec_accept_length` (older SGLang: top-level), or None."""
    states = info.get("internal_states")
    candidates = []
    if isinstance(states, list) and states and isinstance(states[0], dict):
        candidates.append(states[0].get("avg_spec_accept_length"))
    candidates.append(info.get("avg_spec_accept_length"))
    for value in candidates:
        if isinstance(value, int | float) and value > 0:
            return float(value)
    return None


def summarize(
    records: list[RequestRecord],
    t0: float,
    t_end: float,
    cfg: BenchConfig,
    accept_length: float | None,
) -> BenchResult:
    """Turn per-request records into the result (see the module docstring for definitions)."""
    window = max(t_end - t0, 1e-9)
    completed = [r for r in records if r.completed]
    failed = [r for r in records if r.error and not r.cancelled]
    if not completed and not any(r.chunk_times for r in records):
        first = failed[0].error if failed else "no request finished inside the window"
        raise BenchError(f"no tokens received from {cfg.url}: {first}")
    tokens_in_window = sum(
        n for r in records for t, n in zip(r.chunk_times, r.chunk_tokens, strict=True) if t <= t_end
    )
    ttfts = [r.ttft for r in records if r.ttft is not None]
    itls: list[float] = []
    for r in records:
        for k in range(1, len(r.chunk_times)):
            gap = (r.chunk_times[k] - r.chunk_times[k - 1]) / r.chunk_tokens[k]
            itls.extend([gap] * r.chunk_tokens[k])
    per_req = [
        (r.tokens - 1) / (r.latency - r.ttft)
        for r in completed
        if r.tokens > 1 and r.latency is not None and r.ttft is not None and r.latency > r.ttft
    ]
    decode, with_prefill = decode_rate(records)
    split, split_n = ttft_split(records)
    errors = sorted({r.error for r in failed if r.error})[:5]
    return BenchResult(
        source="fastverify",
        url=cfg.url,
        config=asdict(cfg),
        duration_s=window,
        completed=len(completed),
        failed=len(failed),
        output_tokens=tokens_in_window,
        output_tokens_per_second=tokens_in_window / window,
        request_rate=len(completed) / window,
        per_request_tokens_per_second=mean(per_req) if per_req else None,
        ttft_ms=ms_summary(ttfts),
        itl_ms=ms_summary(itls),
        accept_length=accept_length,
        errors=errors,
        decode_tokens_per_second=decode,
        gaps_with_prefill=with_prefill,
        ttft_split_ms=split,
        ttft_split_requests=split_n if split else None,
        prefill_forwards=prefill_forwards(records),
    )


def decode_rate(records: list[RequestRecord]) -> tuple[float | None, int]:
    """Decode tok/s over the chunk gaps that hold no other request's first token, and how
    many gaps held one (module docstring); None when no gap is left."""
    firsts = sorted(r.chunk_times[0] for r in records if r.chunk_times)
    tokens = 0
    seconds = 0.0
    held = 0
    for r in records:  # a request's own first token ends before its first gap starts
        for k in range(1, len(r.chunk_times)):
            a, b = r.chunk_times[k - 1], r.chunk_times[k]
            if bisect_right(firsts, b) > bisect_right(firsts, a):  # a first token in (a, b]
                held += 1
                continue
            tokens += r.chunk_tokens[k]
            seconds += b - a
    return (tokens / seconds if seconds > 0 else None), held


def incomplete_reason(result: BenchResult, cfg: BenchConfig) -> str | None:
    """Why a window measured no per-request rate and what to change, or None when it did.

    With `duration`, requests still streaming at the deadline do not complete; when none
    completes, there is no (tokens - 1) / (latency - TTFT) to average. The time one request
    needs is estimated from what the window saw: TTFT (p90: the later first tokens of clients
    that start together, whose prefills queue) + output_len x the inter-token latency (ITL
    p50)."""
    if result.per_request_tokens_per_second is not None:
        return None
    if result.completed:
        return (
            f"the {result.completed} completed request(s) streamed at most one token each, so "
            "there is no per-request rate: use a longer --output-len"
        )
    window = cfg.duration if cfg.duration is not None else result.duration_s
    itl = result.itl_ms.get("p50")
    ttft = result.ttft_ms.get("p90") or result.ttft_ms.get("p50") or 0.0
    why = (
        f"no request completed inside the {window:g} s window (each streams {cfg.output_len} tokens"
    )
    if itl:
        need_s = (ttft + cfg.output_len * itl) / 1000.0
        fits = max(1, int((window * 1000.0 * 0.8 - ttft) / itl))  # 20% of the window spare
        why += (
            f"; at the {itl:.1f} ms per token seen here one takes about {need_s:.1f} s), so "
            f"there is no per-request rate: use --duration {max(need_s * 2, window * 2):.0f} "
            f"or more, or --output-len {min(fits, cfg.output_len - 1)} or less"
        )
    else:
        why += (
            "), so there is no per-request rate: use a longer --duration or a shorter --output-len"
        )
    return why


def run_bench(
    cfg: BenchConfig,
    progress: ProgressFn | None = None,
    phase: PhaseFn | None = None,
    timeline_to: str | None = None,
) -> BenchResult:
    """Run the closed loop described in the module docstring and summarise it; `phase`
    hears one line per phase (warm-up, its progress every few seconds, the window);
    `timeline_to`: a JSONL file for the window's requests as they went (`records.timeline`)."""
    cfg.validate()
    identity = dataset_identity(cfg)  # a bad prompt file ends it before any load
    # Ctrl-C ends it as KeyboardInterrupt at any moment (asyncio.run's own handling has gaps)
    records, t0, t_end, info = interruptible.run(_measure(cfg, progress, phase))
    if timeline_to:
        lines = (json.dumps(row) + "\n" for row in timeline(records, t0))
        atomic_write_text(timeline_to, "".join(lines))
    result = summarize(records, t0, t_end, cfg, accept_length_from_server_info(info or {}))
    result.dataset = identity
    result.weights = weights_from_server_info(info)
    result.incomplete = incomplete_reason(result, cfg)
    add_acceptance(result, records, info)
    return result


def add_acceptance(
    result: BenchResult, records: list[RequestRecord], info: dict[str, Any] | None
) -> None:
    """Sum the completed requests' histograms into `result` and derive the accept curve
    (see the module docstring); leaves the fields None when no request carried one."""
    from fastverify.speculation.curve import AcceptCurve, add_histograms

    hists = [r.histogram for r in records if r.completed and r.histogram]
    total = add_histograms(hists)
    if not total or sum(total) == 0:
        return
    result.accept_histogram = total
    result.accept_requests = [list(h) for h in hists if sum(h) > 0]
    info = info or {}
    steps = info.get("speculative_num_steps")
    steps = int(steps) if isinstance(steps, int) and steps >= len(total) - 1 else len(total) - 1
    result.accept_steps = steps
    if info.get("speculative_adaptive") or steps < 1:
        return
    result.accept_curve = AcceptCurve.from_histogram(total, steps).curve()


__all__ = [
    "BenchConfig",
    "BenchError",
    "BenchResult",
    "RequestRecord",
    "keep_loaded",
    "result_from_sglang_jsonl",
    "run_bench",
    "run_sglang_bench",
    "server_info_or_none",
    "sglang_bench_argv",
    "sglang_bench_available",
]
