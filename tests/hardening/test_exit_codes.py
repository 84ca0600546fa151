"""One exit-code table, one meaning per code, every command held to it.

The table is read from docs/reference/api.md (so the docs and code cannot drift; the README links
it):
every code it lists is an `EXIT_*` of fastverify/cli/output.py and the other way round, and
each case below runs the real `fastverifyctl` (against a real daemon on the sim where it
needs one) and checks both its exit code and that the table's row for that code names the
situation."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fastverify.cli import output
from fastverify.exporters import sglang_metrics
from tests.support.harness import REPO, DaemonHarness, _scrubbed_env, ctrl_c_reaches_it, free_port

TINY_MODEL = REPO / "examples" / "model-configs" / "tiny-dense.json"


def readme_table() -> dict[int, str]:
    """code -> meaning, from docs/reference/api.md's `| code | meaning |` table (the one table)."""
    text = (REPO / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    head = text.index("| code | meaning |")
    rows: dict[int, str] = {}
    for line in text[head:].splitlines()[2:]:
        m = re.match(r"^\| (\d+) \| (.+) \|$", line)
        if not m:
            break
        code = int(m.group(1))
        assert code not in rows, f"code {code} listed twice"
        rows[code] = m.group(2)
    return rows


def output_codes() -> dict[str, int]:
    return {k: v for k, v in vars(output).items() if k.startswith("EXIT_") and isinstance(v, int)}


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def ctl(*args: str, sock: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 180) -> Result:  # fmt: skip
    full = {**_scrubbed_env(), "PYTHONPATH": str(REPO), **(env or {})}
    pre = ["--socket", str(sock)] if sock else []
    r = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", *pre, *args],
        capture_output=True, text=True, timeout=timeout, env=full, cwd=REPO,
    )  # fmt: skip
    return Result(r.returncode, r.stdout, r.stderr)


def popen_ctl(d: DaemonHarness, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**_scrubbed_env(), "PYTHONPATH": str(REPO)}, cwd=REPO,
        preexec_fn=ctrl_c_reaches_it,  # _interrupted sends it SIGINT
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = 180) -> Result:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return Result(proc.returncode, out, err)


def loading(d: DaemonHarness, profile: str) -> dict[str, Any]:
    """Wait until the daemon is loading `profile` (an operation in flight)."""
    return d.wait_for(
        lambda: (
            (s := d.status())["state"] == "STARTING"
            and s["profile"] == profile
            and s["engine"]["pid"]
            and s
        ),
        60,
        f"{profile} loading",
    )


def another_profile(d: DaemonHarness) -> str:
    """A shipped profile that is not the one serving (a switch to it is a real switch)."""
    serving = d.status()["profile"]
    return next(p for p in ("ring-ll", "ring-ll-8ch") if p != serving)


# ------------------------------------------------------------------ the cases


def _validate_bad(tmp: Path, d: Any) -> Result:
    bad = tmp / "bad.env"
    bad.write_text("NCCL_ALGOS=Ring\n")
    return ctl("profile", "validate", str(bad))


def _busy(tmp: Path, d: DaemonHarness) -> Result:
    target = another_profile(d)
    assert ctl("profile", "set", target, "--no-wait", sock=d.socket).returncode == 0
    loading(d, target)
    r = ctl("profile", "set", "ring-simple", sock=d.socket)
    d.wait_state("READY", timeout=60)
    return r


def _cancelled(tmp: Path, d: DaemonHarness) -> Result:
    target = another_profile(d)
    proc = popen_ctl(d, "profile", "set", target, "-q")
    loading(d, target)
    assert ctl("cancel", sock=d.socket).returncode == 0
    r = finish(proc)
    d.wait_state("READY", timeout=60)
    return r


def _lost(tmp: Path, d: DaemonHarness) -> Result:
    target = another_profile(d)
    proc = popen_ctl(d, "profile", "set", target)
    loading(d, target)
    assert "accepted" in (proc.stdout.readline() if proc.stdout else "")
    d.kill9()
    r = finish(proc)
    d.restart_daemon(timeout=60)
    d.wait_state("READY", timeout=60)
    return r


def _interrupted(tmp: Path, d: DaemonHarness) -> Result:
    target = another_profile(d)
    proc = popen_ctl(d, "profile", "set", target)
    loading(d, target)
    assert "accepted" in (proc.stdout.readline() if proc.stdout else "")
    proc.send_signal(signal.SIGINT)
    r = finish(proc)
    d.wait_for(lambda: (s := d.status())["state"] == "READY" and s["profile"] == target,
               60, "the detached switch to finish")  # fmt: skip
    return r


def _trace_baseline(tmp: Path, d: DaemonHarness) -> Result:
    """A baseline server under load: the window records decode steps, no verify pass."""
    stop = threading.Event()
    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 64}}).encode()

    def load() -> None:
        while not stop.is_set():
            req = urllib.request.Request(
                d.server_url + "/generate", data=body, headers={"Content-Type": "application/json"}
            )
            urllib.request.urlopen(req, timeout=30).read()

    loaders = [threading.Thread(target=load, daemon=True) for _ in range(2)]
    for t in loaders:
        t.start()
    try:
        d.wait_for(lambda: running(d) > 0, 30, "a running request")
        for _ in range(20):  # a gap between two requests reads as idle: capture again
            r = ctl("trace", "capture", "--steps", "2", sock=d.socket)
            if "the engine is idle" not in r.stderr:
                return r
        return r
    finally:
        stop.set()
        for t in loaders:
            t.join(30)


def running(d: DaemonHarness) -> float:
    values = sglang_metrics.reduce(sglang_metrics.fetch(d.server_url))
    return values["num_running_reqs"] + values["num_queue_reqs"]


def _trace_idle(tmp: Path, d: DaemonHarness) -> Result:
    assert ctl("mode", "set", "eagle3", "-q", sock=d.socket).returncode == 0
    return ctl("trace", "capture", "--steps", "2", sock=d.socket)


def _no_torch(tmp: Path, d: Any) -> Result:
    fake = tmp / "python-no-site"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    fake.chmod(0o755)
    return ctl("preflight", "nccl-default", "--python", str(fake), "--nproc", "1")


NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, whatever this host has


@dataclass
class Case:
    name: str
    code: int
    words: str  # the table's row for `code` says this
    run: Callable[[Path, Any], Result]
    daemon: bool = False
    check: Callable[[Result], None] | None = None


def _no_gpu_check(r: Result) -> None:
    assert "--backend gloo" in r.stderr and "pass --nproc N" not in r.stderr, r.stderr


def _baseline_check(r: Result) -> None:
    assert "runs no verify passes" in r.stderr and "mode set eagle3" in r.stderr, r.stderr
    assert "(--span picks" not in r.stderr, r.stderr  # capture has no --span to suggest
    assert r.stdout == "", r.stdout  # no table of zeros
    # the command it suggests works, and labels its rows by the span, not "verify passes"
    hint = r"`fastverifyctl (?:--socket \S+ )?(trace analyze --span DECODE (\S+))`"
    m = re.search(hint, r.stderr)
    assert m and Path(m.group(2)).is_dir(), r.stderr
    decode = ctl(*m.group(1).split())
    assert decode.returncode == 0, decode.stdout + decode.stderr
    head = decode.stdout.splitlines()
    assert head[0] == f"# DECODE ranges and their all-reduces: {m.group(2)}", decode.stdout
    assert head[1].split("\t")[:3] == ["rank", "DECODE ranges", "DECODE ms p50"], head[1]
    assert "verify" not in decode.stdout, decode.stdout


def _refused(t: Path, d: Any) -> Result:
    """A loopback TCP door with a token, and a client without one: the daemon refuses it."""
    token = t / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    port = free_port()
    config = {"daemon": {"tcp_listen": f"127.0.0.1:{port}", "token_file": str(token)}}
    with DaemonHarness(t / "door", metrics=False, config=config):
        return ctl("--host", f"tcp://127.0.0.1:{port}", "status")


def _refused_check(r: Result) -> None:
    assert "missing or wrong bearer token" in r.stderr, r.stderr
    assert "--token-file FILE (or FASTVERIFY_TOKEN_FILE)" in r.stderr, r.stderr


def _tcp_unreachable_check(r: Result) -> None:  # the TCP door's words, not the socket's
    assert "not reachable at tcp://127.0.0.1:1 " in r.stderr, r.stderr
    assert "--host tcp://HOST:PORT or set FASTVERIFY_HOST" in r.stderr and "--socket" not in (
        r.stderr
    ), r.stderr


def _idle_check(r: Result) -> None:
    assert "idle" in r.stderr and "traffic" in r.stderr, r.stderr


CASES = [
    Case("diff-same", 0, "ok", lambda t, d: ctl("profile", "diff", "ring-ll", "ring-ll")),
    Case("validate-problems", 1, "problems found (`profile validate`)", _validate_bad),
    Case("diff-differ", 1, "`profile diff`: the profiles differ",
         lambda t, d: ctl("profile", "diff", "ring-ll", "tree-ll")),
    Case("validate-missing-file", 2, "unknown profile name or file",
         lambda t, d: ctl("profile", "validate", "nosuch.env")),
    Case("bad-option", 2, "bad arguments", lambda t, d: ctl("status", "--no-such-option")),
    Case("logs-parse-missing-file", 2, "a missing input file",
         lambda t, d: ctl("logs", "parse", str(t / "nope.log"))),
    Case("trace-analyze-missing-file", 2, "a missing input file",
         lambda t, d: ctl("trace", "analyze", str(t / "nope"))),
    Case("preflight-no-gpu", 2, "the nccl backend on a host without GPUs",
         lambda t, d: ctl("preflight", "ring-ll", env=NO_GPU), check=_no_gpu_check),
    Case("preflight-no-gpu-nproc", 2, "the nccl backend on a host without GPUs",
         lambda t, d: ctl("preflight", "ring-ll", "--nproc", "2", env=NO_GPU),
         check=_no_gpu_check),
    Case("rehearse-no-gpu", 2, "the nccl backend on a host without GPUs",
         lambda t, d: ctl("rehearse", "--model-config", str(TINY_MODEL), "ring-ll",
                          env=NO_GPU), check=_no_gpu_check),
    Case("unreachable", 3, "the daemon is unreachable",
         lambda t, d: ctl("status", "--socket", str(t / "nobody.sock"))),
    Case("unreachable-tcp", 3, "the daemon is unreachable",
         lambda t, d: ctl("--host", "tcp://127.0.0.1:1", "status"),
         check=_tcp_unreachable_check),
    Case("refused", 8, "the daemon refused this client", _refused, check=_refused_check),
    Case("missing-dependency", 6, "an optional dependency is missing", _no_torch),
    # against one daemon on the sim (in this order; each leaves it READY)
    Case("switch-ok", 0, "ok",
         lambda t, d: ctl("profile", "set", "ring-simple", "-q", sock=d.socket), daemon=True),
    Case("switch-rolled-back", 1, "an operation failed or rolled back",
         lambda t, d: ctl("profile", "set", "tree-ll", "-q", sock=d.socket), daemon=True),
    Case("switch-unknown-profile", 2, "unknown profile name",
         lambda t, d: ctl("profile", "set", "no-such-profile", sock=d.socket), daemon=True),
    Case("trace-capture-baseline", 1, "a baseline server: no verify passes", _trace_baseline,
         daemon=True, check=_baseline_check),
    Case("busy", 4, "another operation is in flight", _busy, daemon=True),
    Case("lost", 5, "the connection broke after the daemon accepted the operation", _lost,
         daemon=True),
    Case("cancelled", 7, "the operation was cancelled", _cancelled, daemon=True),
    Case("interrupted", 130, "interrupted (Ctrl-C)", _interrupted, daemon=True),
    Case("trace-capture-idle", 1, "an idle engine", _trace_idle, daemon=True,
         check=_idle_check),
]  # fmt: skip


def test_readme_table_is_the_exit_codes_of_output_py() -> None:
    table = readme_table()
    codes = output_codes()
    assert sorted(table) == sorted(codes.values()), (table, codes)
    assert len(set(codes.values())) == len(codes), codes  # one name per code


def test_every_code_of_the_table_is_exercised() -> None:
    assert sorted({c.code for c in CASES}) == sorted(readme_table())


def test_docs_quote_the_table_codes() -> None:
    """docs/guides/experiments.md's exit codes are the table's (a missing dependency is 6)."""
    text = (REPO / "docs" / "guides" / "experiments.md").read_text(encoding="utf-8")
    for m in re.finditer(r"exits (\d+) (?:and says so|with the install hint)", text):
        assert int(m.group(1)) == output.EXIT_MISSING_DEPENDENCY, m.group(0)
    assert re.search(r"`6` a missing optional dependency", text)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonHarness]:
    tmp = tmp_path_factory.mktemp("exit-codes")
    with DaemonHarness(tmp, sim_load_seconds=6.0, tp_size=2) as d:
        yield d


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_exit_code(case: Case, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    meaning = readme_table()[case.code]
    assert case.words in meaning, f"the table's row {case.code} ({meaning!r}) lacks {case.words!r}"
    d = request.getfixturevalue("daemon") if case.daemon else None
    r = case.run(tmp_path, d)
    assert r.returncode == case.code, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    if case.check:
        case.check(r)


def test_json_of_an_idle_capture_says_it_is_not_busy(tmp_path: Path, daemon: DaemonHarness) -> None:
    r = ctl("trace", "capture", "--json", sock=daemon.socket)
    assert r.returncode == 1, r.stdout + r.stderr
    body = json.loads(r.stdout)
    assert body["http_status"] == 409 and body["busy"] is False, body
