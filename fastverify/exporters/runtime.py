"""ExporterRuntime: everything the exporter runs in the background, started and stopped as one.

- the /metrics HTTP server (`http.MetricsServer`) on `listen` ("" = no server);
- the SGLang /metrics poller (`sglang_metrics.SGLangPoller`) against `server_url`;
- profile windows every `trace_period_s` (0/None = only on demand): POST
  `{server}/start_profile {"output_dir": <ours>, "num_steps": N}`, wait until every per-rank
  `*-TP-{rank}.trace.json.gz` is complete, analyze them (`traces.analyze_path`), feed the
  hub, delete all but the newest `keep_windows` window directories;
- optionally an NCCL inspector directory follower (`inspector.InspectorFollower`).

`capture(steps, cancelled, wait_s=0)` runs one window now (also used by the daemon's POST
/v1/trace/capture, which waits up to the capture timeout for a window already running) and
returns the analysis dict (`{"ranks": [...], "window": dir, "steps": N, "captured_at": t}`).
It raises `CaptureRefused` (nothing started) when the engine is idle or another window runs
past `wait_s`, and `CaptureError` with an operator-facing message when the window fails; a
failed, timed-out or cancelled window is stopped on the server (POST /stop_profile) and its
directory removed. Background windows are skipped while the engine is idle.

Idle means evidence that nothing is served, never one sample of a gauge (SGLang refreshes
`num_running_reqs` at log intervals; one read between batches says 0 under load): over
`traffic_window_s` (3 s) SGLang's /metrics is read every `traffic_poll_s`, and the window
starts as soon as a read shows a running or queued request or any activity counter
(forward passes, generated/prompt tokens, finished requests:
`fastverify.sglang.metrics.ACTIVITY_COUNTERS`) has moved since the first read. Refused only
when none did; a server whose /metrics cannot be read or has none of those counters is not
refused (the window's own timeout applies).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastverify.exporters.hub import MetricsHub
from fastverify.sglang import client

if TYPE_CHECKING:  # imported where they start (the exporter starts only what it is asked for)
    from fastverify.exporters.http import MetricsServer
    from fastverify.exporters.inspector import InspectorFollower
    from fastverify.exporters.request_metrics import RequestMetricsFollower
    from fastverify.exporters.sglang_metrics import SGLangPoller

log = logging.getLogger("fastverify.exporter")


class CaptureError(RuntimeError):
    """A profile window could not be captured or analyzed."""


class CaptureTimedOut(CaptureError):
    """The window started but its traces were not complete within the capture timeout (the
    server ran fewer forward steps than asked: no or too little load)."""


class CaptureRefused(CaptureError):
    """Nothing was started: the engine is idle, or another window is running (HTTP 409)."""


class EngineIdle(CaptureRefused):
    """Refused because the engine serves no request: nothing is busy, there is nothing to
    record (the CLI exits 1, not 4)."""


class _StartProfile:
    """POST {url}/start_profile in a thread: SGLang answers a window with `num_steps` only
    once the steps ran and every rank wrote its trace, so the caller waits on files, its
    cancel flag and its timeout instead. Old releases that refuse the extra fields (4xx)
    get the bare body."""

    def __init__(self, url: str, window: Path, steps: int, timeout_s: float) -> None:
        self.url = url
        self.window = window
        self.steps = steps
        self.timeout_s = timeout_s
        self.done = threading.Event()
        self.sent = threading.Event()  # the request is on the wire (or could not be sent)
        self.status: int | None = None
        self.text = ""  # the server's message
        self.error: str | None = None

    def start(self) -> _StartProfile:
        threading.Thread(target=self._run, daemon=True, name="fastverify-start-profile").start()
        return self

    def _run(self) -> None:
        # no Python stacks or shapes: smaller traces, less profiling overhead (newer SGLang
        # defaults with_stack to true)
        bare: dict[str, Any] = {"output_dir": str(self.window), "num_steps": self.steps}
        body = dict(bare, activities=["CPU", "GPU"], with_stack=False, record_shapes=False)
        url, timeout, sent = self.url, self.timeout_s, self.sent
        try:
            self.status, self.text = client.start_profile(url, body, timeout, sent=sent)
            if 400 <= self.status < 500:
                self.status, self.text = client.start_profile(url, bare, timeout, sent=sent)
        except (OSError, ValueError) as exc:
            self.error = str(exc)
        finally:
            self.sent.set()
            self.done.set()

    def accepted_or_pending(self) -> bool:
        """May the server be profiling for us (no answer yet, or it said yes)?"""
        return not self.done.is_set() or (self.status is not None and self.status < 400)

    def raise_if_refused(self) -> None:
        if not self.done.is_set():
            return
        if self.error is not None:
            raise CaptureError(f"POST {self.url}/start_profile failed: {self.error}")
        if self.status is not None and self.status >= 400:
            raise CaptureError(
                f"POST {self.url}/start_profile answered HTTP {self.status}: {self.text[:300]}"
            )


class ExporterRuntime:
    """See the module docstring. All methods are thread-safe; `capture` runs one at a time."""

    def __init__(
        self,
        hub: MetricsHub,
        listen: str | None,
        server_url: str | None,
        trace_dir: str | Path | None,
        trace_period_s: float | None = 0.0,
        trace_steps: int = 5,
        *,
        poll_interval_s: float = 1.0,
        inspector_dir: str | Path | None = None,
        keep_windows: int = 3,
        capture_timeout_s: float = 120.0,
        expected_ranks: int | None = None,
        traffic_window_s: float = 3.0,
        traffic_poll_s: float = 0.25,
        web: Any = None,
        request_metrics_dir: str | Path | None = None,
    ) -> None:
        self.hub = hub
        self.web = web  # exporters.webconfig.WebConfig for /metrics (TLS, basic auth), or None
        self.listen = listen or ""
        self._server_url = server_url
        self._own_trace_dir = trace_dir is None
        self._trace_dir = Path(trace_dir) if trace_dir else None
        # profile windows: how often, steps each, how many kept, how long one may take, and
        # the per-rank files to wait for; the idle check: for how long and how often
        # SGLang's /metrics is read
        self.trace_period_s, self.trace_steps = float(trace_period_s or 0.0), int(trace_steps)
        self.keep_windows, self.capture_timeout_s = max(1, keep_windows), capture_timeout_s
        self.expected_ranks = expected_ranks
        self.traffic_window_s, self.traffic_poll_s = traffic_window_s, traffic_poll_s
        self.poll_interval_s = poll_interval_s
        self.inspector_dir = Path(inspector_dir) if inspector_dir else None
        self.request_metrics_dir = Path(request_metrics_dir) if request_metrics_dir else None
        self.server: MetricsServer | None = None
        # the followers, once started
        self._poller: SGLangPoller | None = None
        self._inspector: InspectorFollower | None = None
        self._requests: RequestMetricsFollower | None = None
        self._capture_lock = threading.Lock()
        self._stop = threading.Event()
        self._trace_thread: threading.Thread | None = None
        self.last_capture_error: str | None = None
        # the periodic windows' `quiet` (see `capture`), set by the daemon, whose liveness
        # checks would otherwise count as an idle engine's traffic
        self.traffic_quiet: Callable[[], AbstractContextManager[Any]] | None = None

    # ----------------------------------------------------------------- lifecycle
    @property
    def trace_dir(self) -> Path:
        """Where windows go (a private temp dir, made on first use, when none was given)."""
        if self._trace_dir is None:
            self._trace_dir = Path(tempfile.mkdtemp(prefix="fastverify-traces-"))
        return self._trace_dir

    @property
    def metrics_url(self) -> str | None:
        return self.server.url if self.server is not None else None

    def start(self) -> ExporterRuntime:
        from fastverify.exporters.sglang_metrics import SGLangPoller

        if self.listen:
            from fastverify.exporters.http import MetricsServer

            self.server = MetricsServer(self.hub, self.listen, web=self.web).start()
        self._poller = SGLangPoller(
            self.hub,
            self._server_url,
            self.poll_interval_s,
            on_error=lambda m: log.info("sglang /metrics: %s", m),
        ).start()
        if self.inspector_dir is not None:
            from fastverify.exporters.inspector import InspectorFollower

            self._inspector = InspectorFollower(self.hub, self.inspector_dir).start()
        if self.request_metrics_dir is not None:
            from fastverify.exporters.request_metrics import RequestMetricsFollower

            self._requests = RequestMetricsFollower(
                self.hub.speculation.on_requests, self.request_metrics_dir
            ).start()
        self._remove_empty_windows()
        if self.trace_period_s > 0:
            self._trace_thread = threading.Thread(
                target=self._trace_loop, daemon=True, name="fastverify-trace-windows"
            )
            self._trace_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.stop()
        if self._inspector is not None:
            self._inspector.stop()
        if self._requests is not None:
            self._requests.stop()
        if self._trace_thread is not None:
            self._trace_thread.join(timeout=5)  # a window stuck in HTTP is abandoned
        if self.server is not None:
            self.server.stop()
        if self._own_trace_dir and self._trace_dir is not None:
            shutil.rmtree(self._trace_dir, ignore_errors=True)

    def set_server_url(self, url: str | None) -> None:
        """Point the poller and profile windows at a new engine URL (None: engine down)."""
        self._server_url = url
        if self._poller is not None:
            self._poller.set_url(url)

    def set_inspector_dir(self, directory: str | Path | None) -> None:
        """Tail NCCL inspector dumps in `directory` (a profile's NCCL_INSPECTOR_DUMP_DIR when
        it enables the plugin), or stop tailing (None)."""
        from fastverify.exporters.inspector import InspectorFollower

        new = Path(directory) if directory else None
        if new == self.inspector_dir and (new is None or self._inspector is not None):
            return
        if self._inspector is not None:
            self._inspector.stop()
            self._inspector = None
        self.inspector_dir = new
        if new is not None and self._poller is not None:  # started: follow now
            self._inspector = InspectorFollower(self.hub, new).start()

    # ----------------------------------------------------------------- windows
    def _trace_loop(self) -> None:
        # first window after one period, so that a fresh engine has warmed up
        while not self._stop.wait(self.trace_period_s):
            if not self._server_url:
                continue
            try:
                self.capture(self.trace_steps, quiet=self.traffic_quiet)
            except CaptureRefused as exc:  # idle engine or a capture running: no window
                log.debug("profile window skipped: %s", exc)
            except CaptureError as exc:
                self.last_capture_error = str(exc)
                if isinstance(exc, CaptureTimedOut) and self._idle_now():
                    # the load ended as the window began: an idle engine, no failure
                    log.info("profile window ended without its %d steps: the engine went "
                             "idle", self.trace_steps)  # fmt: skip
                else:
                    log.warning("profile window failed: %s", exc)

    def _idle_now(self) -> bool:
        """Whether the engine serves nothing now (the idle check, its watch paused)."""
        url = self._server_url
        if not url:
            return False
        try:
            with self.traffic_quiet() if self.traffic_quiet else contextlib.nullcontext():
                self._require_traffic(url, self.trace_steps)
        except EngineIdle:
            return True
        except CaptureError:
            return False
        return False

    def capture(
        self,
        steps: int | None = None,
        cancelled: Callable[[], bool] | None = None,
        *,
        require_traffic: bool = True,
        wait_s: float = 0.0,
        quiet: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> dict[str, Any]:
        """Profile the live server for `steps` forward steps, analyze every rank, feed the hub.

        Refused up front (`CaptureRefused`, nothing started) when the engine is idle (see the
        module docstring: forward steps only happen under load) or another window is still
        running after `wait_s` seconds. A window that fails, times out or is `cancelled()` is
        stopped on the server (POST /stop_profile, when the server had accepted it) and its
        directory removed. `quiet()`: a context in which the daemon's own liveness checks
        pause, so that the idle check counts only the engine's real traffic."""
        steps = int(steps or self.trace_steps)
        if steps < 1:
            raise CaptureError("steps must be at least 1")
        url = self._server_url
        if not url:
            raise CaptureError("no engine is serving (no server URL): nothing to profile")
        if require_traffic:  # outside the lock: an idle check never blocks a capture
            with quiet() if quiet is not None else contextlib.nullcontext():
                self._require_traffic(url, steps, cancelled)
        if not self._acquire(wait_s, cancelled):
            raise CaptureRefused(
                "another profile window is running (a background window or another capture);"
                " retry when it has finished"
            )
        try:
            try:
                return self._capture(url, steps, cancelled)
            except CaptureError:
                self.hub.traces.on_failure()
                raise
        finally:
            self._capture_lock.release()

    def _acquire(self, wait_s: float, cancelled: Callable[[], bool] | None) -> bool:
        """Take the one-window lock, waiting up to `wait_s` for a window in progress."""
        if self._capture_lock.acquire(blocking=False):
            return True
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not self._stop.is_set():
            if cancelled is not None and cancelled():
                raise CaptureError("capture cancelled")
            if self._capture_lock.acquire(timeout=0.2):
                return True
        return False

    def _require_traffic(
        self, url: str, steps: int, cancelled: Callable[[], bool] | None = None
    ) -> None:
        """CaptureRefused when nothing is served over the traffic window (module docstring);
        returns at the first evidence of traffic, or when there can be no evidence."""
        from fastverify.exporters import sglang_metrics

        deadline = time.monotonic() + self.traffic_window_s
        first: dict[str, float] | None = None
        reads = 0
        while True:
            try:
                values = sglang_metrics.reduce(sglang_metrics.fetch(url, timeout=5.0))
            except Exception as exc:  # unknown: try the window
                log.debug("traffic check skipped: %s", exc)
                return
            reads += 1
            running = values.get("num_running_reqs") or 0.0
            queued = values.get("num_queue_reqs") or 0.0
            if running + queued > 0:
                return  # requests in the batch or waiting for it
            counters = sglang_metrics.activity(values)
            if not counters:
                log.debug("traffic check: no activity counter on %s/metrics", url)
                return  # no evidence either way: the window's timeout applies
            if first is None:
                first = counters
            elif any(v > first.get(k, 0.0) for k, v in counters.items()):
                return  # forward passes, tokens or finished requests since the first read
            if time.monotonic() >= deadline and reads >= 2:
                break
            if self._stop.is_set():
                raise CaptureError("exporter stopping")
            if cancelled is not None and cancelled():
                raise CaptureError("capture cancelled")
            time.sleep(self.traffic_poll_s)
        raise EngineIdle(
            f"the engine is idle (0 running and 0 queued requests, and no forward pass, token"
            f" or finished request counted in {self.traffic_window_s:g} s): a trace records"
            f" {steps} forward steps, which only happen while it serves requests; send traffic"
            " (e.g. `fastverifyctl bench`) and capture while it runs"
        )

    def _capture(
        self, url: str, steps: int, cancelled: Callable[[], bool] | None
    ) -> dict[str, Any]:
        from fastverify import traces

        self.trace_dir.mkdir(parents=True, exist_ok=True)
        window = (
            self.trace_dir / f"window-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9:09d}"
        )
        window.mkdir()
        call = _StartProfile(url, window, steps, self.capture_timeout_s + 30.0).start()
        try:
            deadline = time.monotonic() + self.capture_timeout_s
            while True:
                files = self._wait_for_files(window, steps, call, cancelled)
                try:
                    analysis = traces.analyze_path(window, files=files)
                    break
                except traces.TraceError as exc:
                    # SGLang may rewrite a trace after writing it (kernel attribution): retry
                    if time.monotonic() > deadline:
                        raise CaptureError(str(exc)) from None
                    time.sleep(0.5)
        except CaptureError as exc:
            note = ""
            if call.accepted_or_pending():
                note = "; " + self._stop_started(url, call)
            shutil.rmtree(window, ignore_errors=True)
            raise type(exc)(f"{exc}{note}; window {window.name} removed") from None
        analysis.update({"window": str(window), "steps": steps, "captured_at": time.time()})
        self.hub.traces.on_analysis(analysis)
        self._prune()
        self.last_capture_error = None
        return analysis

    def _stop_started(self, url: str, call: _StartProfile) -> str:
        """Stop the window we asked for; what happened, for the message. A stop that
        arrives before the server registered our start ("not in progress") is repeated
        until the start is answered, so the server is never left profiling."""
        call.sent.wait(10.0)
        deadline = time.monotonic() + 10.0
        while True:
            ok, note = self._stop_profile(url)
            if ok or call.done.is_set() or time.monotonic() > deadline:
                return note
            time.sleep(0.1)

    def _stop_profile(self, url: str) -> tuple[bool, str]:
        """POST /stop_profile once: (stopped, what happened)."""
        try:
            status, text = client.stop_profile(url, timeout=30.0)
        except (OSError, ValueError) as exc:
            log.warning("POST %s/stop_profile failed: %s", url, exc)
            return False, f"POST /stop_profile failed ({exc}): the server may still be profiling"
        if status >= 400:  # e.g. the window ended meanwhile: nothing to stop
            return False, f"stop_profile answered HTTP {status} ({text[:200]})"
        return True, "profiling stopped on the server"

    def _wait_for_files(
        self,
        window: Path,
        steps: int,
        call: _StartProfile,
        cancelled: Callable[[], bool] | None = None,
    ) -> list[Path]:
        """Per-rank files, once none is growing and every gzip stream is complete."""
        deadline = time.monotonic() + self.capture_timeout_s
        last: dict[Path, int] = {}
        stable_since = None
        while time.monotonic() < deadline:
            if self._stop.is_set():
                raise CaptureError("exporter stopping")
            if cancelled is not None and cancelled():
                raise CaptureError("capture cancelled")
            call.raise_if_refused()
            files = sorted(p for p in window.rglob("*") if p.is_file() and _is_trace(p.name))
            sizes = {p: p.stat().st_size for p in files}
            enough = files and (self.expected_ranks is None or len(files) >= self.expected_ranks)
            if enough and sizes == last:
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since >= 0.3 and all(_complete(p) for p in files):
                    return files
            else:
                stable_since = None
            last = sizes
            time.sleep(0.1)
        have = len(last)
        raise CaptureTimedOut(
            f"no complete trace after {self.capture_timeout_s:.0f}s in {window} ({have} file(s)); "
            f"the server writes traces only after {steps} forward steps: is it receiving requests?"
        )

    def _remove_empty_windows(self) -> None:
        """Window directories without a trace file (left by an older version) go."""
        if self._trace_dir is None or not self._trace_dir.is_dir():
            return
        for window in self._trace_dir.glob("window-*"):
            if window.is_dir() and not any(p.is_file() for p in window.rglob("*")):
                shutil.rmtree(window, ignore_errors=True)

    def _prune(self) -> None:
        windows = sorted(p for p in self.trace_dir.glob("window-*") if p.is_dir())
        for old in windows[: -self.keep_windows]:
            shutil.rmtree(old, ignore_errors=True)


def _is_trace(name: str) -> bool:
    return name.endswith(".trace.json.gz") or name.endswith(".trace.json")


def _complete(path: Path) -> bool:
    """A gzip file whose stream ends (a plain JSON file whose last byte closes it)."""
    import zlib

    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                fh.seek(-64, 2) if path.stat().st_size > 64 else fh.seek(0)
                return fh.read().rstrip().endswith((b"}", b"]"))
            fh.seek(0)
            d = zlib.decompressobj(wbits=47)
            while chunk := fh.read(1 << 20):
                d.decompress(chunk, 1 << 16)
                while d.unconsumed_tail:
                    d.decompress(d.unconsumed_tail, 1 << 16)
            return d.eof
    except OSError:
        return False
