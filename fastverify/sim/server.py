"""HTTP front end of the sim engine: SGLang's endpoints on a threading HTTP/1.1 server.

Owns request parsing and response shapes: /health, /health_generate, /generate,
/v1/completions, /v1/chat/completions (SSE streaming ending `data: [DONE]`),
/v1/models, /get_model_info, /get_server_info and /server_info, /flush_cache,
/metrics, /start_profile, /stop_profile. One thread per connection (64+ concurrent
streaming clients are fine); generation itself happens in the scheduler thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from fastverify.sglang import loglines
from fastverify.sim import cli_args, request_meta
from fastverify.sim.metrics import SimMetrics
from fastverify.sim.profiler import ProfileError, Profiler
from fastverify.sim.scheduler import Request, Scheduler
from fastverify.sim.sglang_logs import LogWriter

# srt/entrypoints/http_server.py health_generate: `await asyncio.sleep(1)` between its
# checks of the scheduler's reply; tests shorten it (FASTVERIFY_SIM_HEALTH_POLL_S) where
# they are not about it
HEALTH_POLL_S = 1.0
HEALTH_POLL_VAR = "FASTVERIFY_SIM_HEALTH_POLL_S"
# the variable that turns /health into a plain 200 where a release has it (srt/environ.py,
# default on); a release without it answers /health as /health_generate
HEALTH_GENERATION_VAR = "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"

FILLER = (
    " the",
    " model",
    " is",
    " a",
    " simulation",
    " of",
    " speculative",
    " decoding",
    " on",
    " eight",
    " PCIe",
    " GPUs",
    ",",
    " and",
    " its",
    " tokens",
    " are",
    " filler",
    ".",
)
DEFAULT_MAX_NEW_TOKENS = 128


def filler_text(start: int, count: int) -> str:
    return "".join(FILLER[(start + i) % len(FILLER)] for i in range(count))


def estimate_tokens(text: str) -> int:
    """Prompt length in tokens for a text prompt (about 4 characters per token)."""
    return max(1, (len(text) + 3) // 4)


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], app: App):
        self.app = app
        if ":" in addr[0]:  # an IPv6 literal such as ::1 or ::
            self.address_family = socket.AF_INET6
        super().__init__(addr, Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up mid-response are normal; anything else is logged once."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        self.app.log.log(f"HTTP error from {client_address}: {exc!r}", None, "error")


class App:
    """State the handlers need: readiness, scheduler, metrics, profiler, static info.

    The server is bound before loading starts (so a port conflict fails fast and health
    checks get 503 rather than a refused connection); `scheduler`, `metrics` and
    `profiler` are attached once the simulated load is done.
    """

    def __init__(
        self,
        *,
        model_info: dict[str, Any],
        served_model_name: str,
        log: LogWriter,
        access_log: bool = False,
        sglang_vars: Collection[str] = (),
    ):
        self.model_info = model_info
        self.sglang_vars = frozenset(sglang_vars)  # the SGLANG_* the played release reads
        self.served_model_name = served_model_name
        self.log = log
        self.access_log = access_log
        self.scheduler: Scheduler | None = None
        self.metrics: SimMetrics | None = None
        self.metrics_enabled = False
        self.profiler: Profiler | None = None
        self.server_info: Callable[[], dict[str, Any]] | None = None
        self.ready = threading.Event()

    def attach(
        self,
        scheduler: Scheduler,
        metrics: SimMetrics | None,
        profiler: Profiler,
        server_info: Callable[[], dict[str, Any]],
    ) -> None:
        self.metrics = metrics
        self.profiler = profiler
        self.server_info = server_info
        self.scheduler = scheduler  # last: handlers test it to know they can serve


class _BadRequest(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    server: SimHTTPServer
    _raw_body: bytes = b""

    # ------------------------------------------------------------- plumbing
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _access(self, code: int) -> None:
        app = self.server.app
        if app.access_log:
            host, port = self.client_address[:2]
            app.log.log(
                f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {code}',
                None,
                "debug",
            )

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._access(code)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj).encode())

    def _text(self, code: int, text: str) -> None:
        self._send(code, text.encode(), "text/plain; charset=utf-8")

    def _read_body(self) -> bytes:
        """Read the whole request body up front, so every reply leaves the connection clean."""
        raw_len = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise _BadRequest("chunked request bodies are not supported; send Content-Length")
        try:
            length = int(raw_len) if raw_len else 0
        except ValueError:
            raise _BadRequest(f"invalid Content-Length {raw_len!r}") from None
        if length < 0:
            raise _BadRequest(f"invalid Content-Length {raw_len!r}")
        return self.rfile.read(length) if length else b""

    def _body(self) -> dict[str, Any]:
        raw = self._raw_body
        if not raw.strip():
            return {}
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise _BadRequest(f"invalid JSON body: {exc}") from None
        if not isinstance(obj, dict):
            raise _BadRequest("JSON body must be an object")
        return obj

    def _sse(self, chunks: Iterator[Any], req: Request | None = None) -> None:
        """Stream `chunks` as SSE; if the client goes away, abort `req` (as SGLang does)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._access(200)
        try:
            for chunk in chunks:
                data = "[DONE]" if chunk is None else json.dumps(chunk)
                payload = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            if req is not None and self.server.app.scheduler is not None:
                self.server.app.scheduler.abort(req)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        try:
            self._raw_body = self._read_body()
        except _BadRequest as exc:
            self.close_connection = True
            self._json(
                400, {"error": {"message": str(exc), "type": "BadRequestError", "code": 400}}
            )
            return
        path = urlsplit(self.path).path.rstrip("/") or "/"
        route = ROUTES.get(path)
        if route is None:
            self._json(404, {"detail": "Not Found"})
            return
        if path not in STATIC_ROUTES and self.server.app.scheduler is None:
            self._json(
                503,
                {
                    "error": {
                        "message": "The server is starting up (loading weights "
                        "/ capturing CUDA graphs); retry when /health answers 200.",
                        "code": 503,
                    }
                },
            )
            return
        try:
            route(self)
        except _BadRequest as exc:
            self._json(
                400, {"error": {"message": str(exc), "type": "BadRequestError", "code": 400}}
            )
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug: answer 500 and say so once in the log
            self.close_connection = True
            self.server.app.log.log(
                f"Error handling {self.command} {path}: {type(exc).__name__}: {exc}", None, "error"
            )
            with contextlib.suppress(OSError):
                self._json(500, {"error": {"message": f"internal error: {exc}", "code": 500}})

    # ------------------------------------------------------------- health/info
    def health(self) -> None:
        """SGLang's /health is its /health_generate unless the played release reads
        SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (its facts) and it is off (then 200 once up)."""
        off = os.environ.get(HEALTH_GENERATION_VAR, "1").lower() in ("0", "false", "no", "off")
        if off and HEALTH_GENERATION_VAR in self.server.app.sglang_vars:
            self._send(200 if self.server.app.ready.is_set() else 503, b"", "text/plain")
            return
        self.health_generate()

    def health_generate(self) -> None:
        """SGLang's: a 1-token generation; 200 at the first poll (every HEALTH_POLL_S) that
        finds the scheduler produced any output since the request came in (so never
        sooner than one poll, and a busy server at the first), else 503 after
        SGLANG_HEALTH_CHECK_TIMEOUT seconds with SGLang's ERROR line."""
        app = self.server.app
        sched = app.scheduler
        if not app.ready.is_set() or sched is None:
            self._send(503, b"", "text/plain")
            return
        timeout = loglines.health_check_timeout(os.environ)
        poll = float(os.environ.get(HEALTH_POLL_VAR) or HEALTH_POLL_S)
        tic = time.time()
        req = Request(prompt_tokens=1, max_new_tokens=1, log_metrics=False)
        sched.submit(req)
        deadline = time.monotonic() + timeout
        while True:
            time.sleep(poll)
            if sched.last_output > tic:
                break
            if time.monotonic() >= deadline:
                sched.abort(req)
                last = sched.last_output or tic
                app.log.log(loglines.format_health_check_failed(timeout, tic, last), None,
                            "error")  # fmt: skip
                self._send(503, b"", "text/plain")
                return
        self._send(200, b"", "text/plain")

    def model_info(self) -> None:
        self._json(200, self.server.app.model_info)

    def server_info(self) -> None:
        info = self.server.app.server_info
        assert info is not None
        self._json(200, info())

    def models(self) -> None:
        app = self.server.app
        self._json(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": app.served_model_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": app.model_info["model_path"],
                        "max_model_len": 262144,
                    }
                ],
            },
        )

    def metrics(self) -> None:
        m = self.server.app.metrics
        if m is None:  # started without --enable-metrics
            self._json(404, {"detail": "Not Found"})
            return
        self._send(200, m.render(), m.content_type)

    def flush_cache(self) -> None:
        self._text(
            200,
            "Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation will not "
            "be performed.)\n",
        )

    # ------------------------------------------------------------- profiling
    def start_profile(self) -> None:
        prof = self.server.app.profiler
        assert prof is not None
        try:
            window = prof.start(self._body())
        except ProfileError as exc:
            self._text(400, str(exc) + "\n")
            return
        if window.num_steps is not None:
            window.done.wait()
            if window.errors:
                self._text(500, "Profiling failed: " + "; ".join(window.errors) + "\n")
                return
        self._text(200, "Start profiling.\n")

    def stop_profile(self) -> None:
        prof = self.server.app.profiler
        assert prof is not None  # attached before it serves
        try:
            window = prof.stop()
        except ProfileError as exc:
            self._text(400, str(exc) + "\n")
            return
        if window.errors:
            self._text(500, "Profiling failed: " + "; ".join(window.errors) + "\n")
            return
        self._text(200, "Stop profiling. This will take some time.\n")

    # ------------------------------------------------------------- generation
    def _new_request(
        self, prompt_tokens: int, max_new: Any, stream: bool, sampling: dict | None = None
    ) -> Request:
        try:
            max_new_i = DEFAULT_MAX_NEW_TOKENS if max_new is None else int(max_new)
        except (TypeError, ValueError):
            raise _BadRequest("max_new_tokens must be an integer") from None
        if max_new_i < 1:
            raise _BadRequest("max_new_tokens must be >= 1")
        req = Request(prompt_tokens=prompt_tokens, max_new_tokens=max_new_i, stream=stream,
                      sampling=dict(sampling or {}))  # fmt: skip
        sched = self.server.app.scheduler
        assert sched is not None  # attached before it serves
        sched.submit(req)
        return req

    def _meta(self, req: Request) -> dict[str, Any]:
        sched = self.server.app.scheduler
        drafts = sched.num_draft_tokens if sched is not None and sched.mode == "eagle3" else None
        stamps = self.server.app.metrics is not None  # --enable-metrics
        return request_meta.meta_info(req, drafts is not None, drafts or 0, stamps)

    @staticmethod
    def _updates(req: Request) -> Iterator[int]:
        while True:
            n = req.updates.get()
            if n is None:
                return
            if n:
                yield n

    def generate(self) -> None:
        body = self._body()
        text, ids = body.get("text"), body.get("input_ids")
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise _BadRequest("sampling_params must be an object")
        stream = bool(body.get("stream"))
        prompts: list[int]
        batch = False
        if text is not None:
            batch = isinstance(text, list)
            prompts = [estimate_tokens(str(t)) for t in (text if batch else [text])]
        elif ids is not None:
            if not isinstance(ids, list):
                raise _BadRequest("input_ids must be a list of token ids (or a list of lists)")
            batch = bool(ids) and isinstance(ids[0], list)
            seqs = ids if batch else [ids]
            if not all(isinstance(x, list) for x in seqs):
                raise _BadRequest("input_ids must be a list of token ids (or a list of lists)")
            prompts = [max(1, len(x)) for x in seqs]
        else:
            raise _BadRequest("Either text or input_ids should be provided.")
        if stream and batch:
            raise _BadRequest("streaming is supported for a single prompt only")
        reqs = [self._new_request(p, sp.get("max_new_tokens"), stream, sp) for p in prompts]
        if stream:
            req = reqs[0]

            def chunks() -> Iterator[Any]:
                for _ in self._updates(req):
                    req.first_sent_at = req.first_sent_at or time.perf_counter()
                    yield {"text": filler_text(0, req.generated), "meta_info": self._meta(req)}
                req.done.wait()
                yield {"text": filler_text(0, req.generated), "meta_info": self._meta(req)}
                yield None

            self._sse(chunks(), req)
            return
        out = []
        for r in reqs:
            r.done.wait()
            out.append({"text": filler_text(0, r.generated), "meta_info": self._meta(r)})
        self._json(200, out if batch else out[0])

    def _openai(self, chat: bool) -> None:
        body = self._body()
        app = self.server.app
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _BadRequest("messages must be a non-empty list")
            text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            prompt_tokens = estimate_tokens(text) + 4 * len(messages)
        else:
            prompt = body.get("prompt")
            if prompt is None:
                raise _BadRequest("prompt is required")
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
                prompt_tokens = len(prompt)
            else:
                prompt_tokens = estimate_tokens(str(prompt))
        max_new = body.get("max_completion_tokens") if chat else None
        if max_new is None:
            max_new = body.get("max_tokens")
        if max_new is None:  # OpenAI's default for completions; chat: a long answer
            max_new = 16 if not chat else 2048
        stream = bool(body.get("stream"))
        req = self._new_request(prompt_tokens, max_new, stream)
        cid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        model = body.get("model") or app.served_model_name
        obj = "chat.completion" if chat else "text_completion"

        def usage() -> dict[str, int]:
            return {
                "prompt_tokens": req.prompt_tokens,
                "completion_tokens": req.generated,
                "total_tokens": req.prompt_tokens + req.generated,
            }

        if not stream:
            req.done.wait()
            text_out = filler_text(0, req.generated)
            choice: dict[str, Any] = {
                "index": 0,
                "logprobs": None,
                "finish_reason": "length",
                "matched_stop": None,
            }
            if chat:
                choice["message"] = {
                    "role": "assistant",
                    "content": text_out,
                    "reasoning_content": None,
                    "tool_calls": None,
                }
            else:
                choice["text"] = text_out
            self._json(
                200,
                {
                    "id": cid,
                    "object": obj,
                    "created": created,
                    "model": model,
                    "choices": [choice],
                    "usage": usage(),
                },
            )
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunk_obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(delta_text: str | None, finish: str | None, first: bool = False) -> dict:
            c: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
            if chat:
                delta: dict[str, Any] = {}
                if first:
                    delta["role"] = "assistant"
                if delta_text is not None:
                    delta["content"] = delta_text
                c["delta"] = delta
            else:
                c["text"] = delta_text or ""
            return {
                "id": cid,
                "object": chunk_obj,
                "created": created,
                "model": model,
                "choices": [c],
                "usage": None,
            }

        def chunks() -> Iterator[Any]:
            sent = 0
            first = True
            for _ in self._updates(req):
                new = req.generated - sent
                if new <= 0:
                    continue
                yield chunk(filler_text(sent, new), None, first)
                sent += new
                first = False
            req.done.wait()
            final = chunk("" if not chat else None, "length", first)
            if include_usage:
                final["usage"] = usage()
            yield final
            yield None

        self._sse(chunks(), req)

    def completions(self) -> None:
        self._openai(chat=False)

    def chat_completions(self) -> None:
        self._openai(chat=True)


ROUTES: dict[str, Callable[[Handler], None]] = {
    "/health": Handler.health,
    "/health_generate": Handler.health_generate,
    "/get_model_info": Handler.model_info,
    "/model_info": Handler.model_info,
    "/get_server_info": Handler.server_info,
    "/server_info": Handler.server_info,
    "/v1/models": Handler.models,
    "/metrics": Handler.metrics,
    "/flush_cache": Handler.flush_cache,
    "/start_profile": Handler.start_profile,
    "/stop_profile": Handler.stop_profile,
    "/generate": Handler.generate,
    "/v1/completions": Handler.completions,
    "/v1/chat/completions": Handler.chat_completions,
}

# Answered while the server is still loading.
STATIC_ROUTES = frozenset(
    {"/health", "/health_generate", "/get_model_info", "/model_info", "/v1/models"}
)


def parse_args(argv: list[str]) -> cli_args.SimArgs:
    """The sim's argv parser (exit 2 on bad flags), for callers that check argv."""
    return cli_args.parse(argv)
