"""The exporter on what a real SGLang 0.5.17 served: its /metrics text, replayed byte for
byte by a loopback HTTP server, read by `fastverify-exporter`, scraped by a real Prometheus.
The text is tests/fixtures/sglang-0.5.17-h200/metrics-baseline.txt (an H200, after a
bench): nothing of it was written by this project."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support import prom
from tests.support.harness import free_port

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"
TEXT = (REAL / "metrics-baseline.txt").read_bytes()


@dataclass
class Replay:
    url: str
    paths: list[str] = field(default_factory=list)  # what was asked of it, in order


@pytest.fixture
def replay() -> Iterator[Replay]:
    served = Replay("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = TEXT if self.path == "/metrics" else b"{}"
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            """The access log goes to `Replay.paths`, not the test's output."""
            served.paths.append(self.path)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    served.url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield served
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.skipif(not prom.available(), reason="needs Prometheus (install-system-deps.sh)")
def test_real_sglang_series_through_the_exporter_into_prometheus(
    tmp_path: Path, replay: Replay
) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastverify.exporters.standalone", "--sglang-url", replay.url,
         "--listen", f"127.0.0.1:{port}", "--profile", "nccl-default", "--mode", "baseline",
         "--poll-interval", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        with prom.Prometheus(tmp_path, targets=[f"127.0.0.1:{port}"]) as p:
            p.wait_for("fastverify_up == 1", timeout=60)
            # the real text holds generation_tokens_total per is_streaming: 8 + 33792
            p.wait_for("fastverify_generation_tokens_total > 0", timeout=60)
            assert p.value("sum(fastverify_generation_tokens_total)") == 33800.0
            assert p.value("fastverify_generation_tokens_per_second") == 0.0  # idle after bench
            assert all(t["health"] == "up" for t in p.targets_health())
            assert "/metrics" in replay.paths  # read from the replayed SGLang, not elsewhere
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()[-2000:]
