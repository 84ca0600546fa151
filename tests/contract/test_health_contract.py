"""The daemon's engine watch (daemon/watch.py) and the sim's /health_generate against the
real sglang==0.5.23 `srt/entrypoints/http_server.py`: the endpoint, its timeout variable
and default, the busy-server rule, and the exact "Health check failed" line, rendered from
SGLang's own f-string (parsed with `ast`, evaluated with chosen values) and compared with
what the sim logs and the watch quotes.
"""

from __future__ import annotations

import ast
import subprocess
import time
from pathlib import Path

import pytest

from fastverify.daemon.watch import sglang_line
from fastverify.sglang import client, loglines

FIND = (
    "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('sglang').origin))"
)


@pytest.fixture(scope="module")
def http_server(sglang_python: Path) -> str:
    out = subprocess.run(
        [str(sglang_python), "-c", FIND], capture_output=True, text=True, timeout=120, check=True
    )
    path = Path(out.stdout.strip()) / "srt" / "entrypoints" / "http_server.py"
    return path.read_text(encoding="utf-8")


def _function(src: str, name: str) -> ast.AsyncFunctionDef:
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.AsyncFunctionDef) and node.name == name:
            return node
    raise AssertionError(f"no async def {name} in http_server.py")


def test_health_generate_endpoint_and_timeout(http_server: str) -> None:
    assert f'@app.get("{client.HEALTH_GENERATE}")' in http_server
    assert (
        f'HEALTH_CHECK_TIMEOUT = int(os.getenv("{loglines.HEALTH_CHECK_TIMEOUT_ENV}", '
        f"{loglines.HEALTH_CHECK_TIMEOUT_DEFAULT}))"
    ) in http_server
    fn = ast.get_source_segment(http_server, _function(http_server, "health_generate")) or ""
    # a 1-token generation; any detokenizer output since the request (a busy server) is 200
    assert '"max_new_tokens": 1' in fn
    assert "last_receive_tstamp > tic" in fn and "status_code=200" in fn
    assert "status_code=503" in fn


def test_the_health_check_failed_line_is_sglangs(http_server: str) -> None:
    fn = _function(http_server, "health_generate")
    calls = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "error"
        and isinstance(n.args[0], ast.JoinedStr)
    ]
    assert len(calls) == 1, "expected one logger.error(f'...') in health_generate"
    tic = time.mktime((2026, 12, 1, 10, 0, 5, 0, 0, -1))
    last = tic - 41
    real = eval(  # SGLang's own f-string, with our values
        compile(ast.Expression(calls[0].args[0]), "http_server.py", "eval"),
        {},
        {
            "HEALTH_CHECK_TIMEOUT": 20,
            "tic_time": time.strftime("%H:%M:%S", time.localtime(tic)),
            "last_receive_time": time.strftime("%H:%M:%S", time.localtime(last)),
        },
    )
    assert real == loglines.format_health_check_failed(20, tic, last)
    assert real.startswith(loglines.HEALTH_CHECK_FAILED_TEXT)
    # the watch quotes it from an engine log line with SGLang's prefix
    prefixed = f"[2026-12-01 10:00:05] {real}"
    assert sglang_line(["Decode batch, ...", prefixed, "INFO: 127.0.0.1 GET"]) == real


def test_the_readiness_probe_outwaits_sglangs_own_poll(http_server: str) -> None:
    """/health and /health_generate answer 200 only after their first `asyncio.sleep(1)`
    poll saw the scheduler's reply. A probe that gives up sooner never sees a 200: with a 1 s
    probe, fastverifyd found a real 0.5.17 server on the H200 ready 13 s after its ready
    line (tests/fixtures/sglang-0.5.17-h200/server-info-weight-cache-client.log: a
    "GET /health" 200 for each probe that had already given up)."""
    from fastverify.daemon import launcher

    fn = _function(http_server, "health_generate")
    sleeps = [
        c.args[0].value
        for c in ast.walk(fn)
        if isinstance(c, ast.Call) and ast.unparse(c.func) == "asyncio.sleep"
    ]
    assert sleeps, "health_generate no longer polls with asyncio.sleep"
    assert 5 * max(sleeps) <= launcher.HEALTH_PROBE_TIMEOUT_S
    routes = [ast.unparse(d) for d in fn.decorator_list]
    assert "app.get('/health')" in routes and "app.get('/health_generate')" in routes
