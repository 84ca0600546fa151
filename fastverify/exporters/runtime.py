"""ExporterRuntime: everything the exporter runs in the background, started and stopped as one.

- the /metrics HTTP server (`http.MetricsServer`) on `listen` ("" = no server);
- the SGLang /metrics poller (`sglang_metrics.SGLangPoller`) against `server_url`;
- profile windows every `trace_period_s` (0/None = only on demand): POST
  `{server}/start_profile {"output_dir": <ours>, "num_steps": N}`, wait until every per-rank
  `*-TP-{rank}.trace.json.gz` is complete, analyze them (`traces.analyze_path`), feed the
  hub, delete all but the newest `keep_windows` window directories;
- optionally an NCCL inspector directory follower (`inspector.InspectorFollower`).

`capture(steps)` runs one window now (also used by the daemon's POST /v1/trace/capture) and
returns the analysis dict (`{"ranks": [...], "window": dir, "steps": N, "captured_at": t}`);
it raises `CaptureError` with an operator-facing message when the window fails.
"""

from __future__ import annotations

import http.client
import json
import logging
import shutil
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from fastverify.exporters.hub import MetricsHub

log = logging.getLogger("fastverify.exporter")


class CaptureError(RuntimeError):
    """A profile window could not be captured or analyzed."""


def post_json(url: str, path: str, body: dict[str, Any], timeout: float) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.request(
            "POST",
            parts.path.rstrip("/") + path,
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


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
    ) -> None:
        self.hub = hub
        self.listen = listen or ""
        self._server_url = server_url
        self._own_trace_dir = trace_dir is None
        self._trace_dir = Path(trace_dir) if trace_dir else None
        self.trace_period_s = float(trace_period_s or 0.0)
        self.trace_steps = int(trace_steps)
        self.poll_interval_s = poll_interval_s
        self.inspector_dir = Path(inspector_dir) if inspector_dir else None
        self.keep_windows = max(1, keep_windows)
        self.capture_timeout_s = capture_timeout_s
        self.expected_ranks = expected_ranks
        self.server = None
        self._poller = None
        self._inspector = None
        self._capture_lock = threading.Lock()
        self._stop = threading.Event()
        self._trace_thread: threading.Thread | None = None
        self.last_capture_error: str | None = None

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

            self.server = MetricsServer(self.hub, self.listen).start()
        self._poller = SGLangPoller(
            self.hub,
            self._server_url,
            self.poll_interval_s,
            on_error=lambda m: log.info("sglang /metrics: %s", m),
        ).start()
        if self.inspector_dir is not None:
            from fastverify.exporters.inspector import InspectorFollower

            self._inspector = InspectorFollower(self.hub, self.inspector_dir).start()
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
                self.capture(self.trace_steps)
            except CaptureError as exc:
                self.last_capture_error = str(exc)
                log.warning("profile window failed: %s", exc)

    def capture(self, steps: int | None = None) -> dict[str, Any]:
        """Profile the live server for `steps` forward steps, analyze every rank, feed the hub."""
        steps = int(steps or self.trace_steps)
        if steps < 1:
            raise CaptureError("steps must be at least 1")
        url = self._server_url
        if not url:
            raise CaptureError("no engine is serving (no server URL): nothing to profile")
        if not self._capture_lock.acquire(timeout=self.capture_timeout_s):
            raise CaptureError("another profile window is still running")
        try:
            return self._capture(url, steps)
        except CaptureError:
            self.hub.on_trace_failure()
            raise
        finally:
            self._capture_lock.release()

    def _capture(self, url: str, steps: int) -> dict[str, Any]:
        from fastverify.exporters import traces

        self.trace_dir.mkdir(parents=True, exist_ok=True)
        window = (
            self.trace_dir / f"window-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9:09d}"
        )
        window.mkdir()
        # no Python stacks or shapes: smaller traces, less profiling overhead (newer SGLang
        # defaults with_stack to true); releases that reject the fields get the bare body
        body: dict[str, Any] = {
            "output_dir": str(window),
            "num_steps": steps,
            "activities": ["CPU", "GPU"],
            "with_stack": False,
            "record_shapes": False,
        }
        status, text = self._start_profile(url, body)
        if 400 <= status < 500:
            status, text = self._start_profile(url, {"output_dir": str(window), "num_steps": steps})
        if status >= 400:
            raise CaptureError(
                f"POST {url}/start_profile answered HTTP {status}: "
                f"{text.decode('utf-8', 'replace').strip()[:300]}"
            )
        deadline = time.monotonic() + self.capture_timeout_s
        while True:
            files = self._wait_for_files(window, steps)
            try:
                analysis = traces.analyze_path(window, files=files)
                break
            except traces.TraceError as exc:
                # SGLang may rewrite a trace after writing it (kernel attribution): retry
                if time.monotonic() > deadline:
                    raise CaptureError(str(exc)) from None
                time.sleep(0.5)
        analysis.update({"window": str(window), "steps": steps, "captured_at": time.time()})
        self.hub.on_trace_analysis(analysis)
        self._prune()
        self.last_capture_error = None
        return analysis

    def _start_profile(self, url: str, body: dict[str, Any]) -> tuple[int, bytes]:
        try:
            return post_json(url, "/start_profile", body, timeout=self.capture_timeout_s)
        except OSError as exc:
            raise CaptureError(f"POST {url}/start_profile failed: {exc}") from None

    def _wait_for_files(self, window: Path, steps: int) -> list[Path]:
        """Per-rank files, once none is growing and every gzip stream is complete."""
        deadline = time.monotonic() + self.capture_timeout_s
        last: dict[Path, int] = {}
        stable_since = None
        while time.monotonic() < deadline:
            if self._stop.is_set():
                raise CaptureError("exporter stopping")
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
        raise CaptureError(
            f"no complete trace after {self.capture_timeout_s:.0f}s in {window} ({have} file(s)); "
            f"the server writes traces only after {steps} forward steps: is it receiving requests?"
        )

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
