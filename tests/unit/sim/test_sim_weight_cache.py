"""The sim's weight cache follows SGLang's (fastverify.sim.weight_cache): its lines in
each release's wording (checked against the templates the facts read from every wheel), its
daemon's command line per release, and the daemon itself as a process: ready file, socket,
fingerprint check, the refusal of a second daemon on a live rank, SIGINT's clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fastverify.sglang import weight_cache as wc
from fastverify.sglang.facts import known_versions, resolve
from fastverify.sim import cli_args
from fastverify.sim import weight_cache as sim_wc
from fastverify.sim.weight_cache import daemon as sim_daemon
from tests.support.harness import ctrl_c_reaches_it

REPO = Path(__file__).resolve().parents[3]
WITH_CACHE = [v for v in known_versions() if resolve(v).section("weight_cache")]


@pytest.mark.parametrize("version", WITH_CACHE)
def test_the_sims_loader_lines_are_the_releases_own(version: str) -> None:
    facts = sim_wc.facts(version)
    cf = wc.of(resolve(version))
    assert cf is not None
    cfg = {"tp_size": 2, "revision": ""}
    lines = {
        "fetched": sim_wc.fetched_line(facts, 1024, 0.08),
        "mapped": sim_wc.mapped_line(1024, 0.12),
        "loaded": sim_wc.loaded_line("client", 0.2),
        "socket_missing": sim_wc.SOCKET_MISSING.format(path="/r/x.sock"),
        "fallback": sim_wc.FALLBACK,
        "refused": sim_wc.REFUSED.format(path="/r/x.sock"),
        "daemon_died": sim_wc.DIED.format(pid=7),
    }
    for kind, line in lines.items():
        ev = cf.loader_event(f"[2026-12-01 21:00:00 TP0] {line}")
        assert ev is not None and ev.kind == kind, (kind, line)
    head, engine, daemon = sim_wc.mismatch_message(cfg, {**cfg, "revision": "v2"}).split("\n")
    assert [cf.loader_event(x).kind for x in (f"RuntimeError: {head}", engine, daemon)] == [  # type: ignore[union-attr]
        "mismatch", "engine_config", "daemon_config"
    ]  # fmt: skip


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_the_fingerprint_has_exactly_the_releases_fields(version: str) -> None:
    facts = sim_wc.facts(version)
    fp = sim_wc.fingerprint(facts, model_path="m", tp_size=2, tp_rank=1, dtype="auto",
                            quantization=None, revision=None)  # fmt: skip
    assert list(fp) == resolve(version).section("weight_cache")["cache_config"]  # type: ignore[index]
    assert fp["dtype"] == "torch.bfloat16" and fp["tp_rank"] == 1


def test_the_daemons_command_line_per_release() -> None:
    args = ["--model-path", "m", "--tp-size", "2", "--revision", "v2", "--sim-load-seconds", "0"]
    old = sim_daemon.parse([*args, "--sim-sglang-version", "0.5.17"])
    assert (old.tp_size, old.revision, old.gpu_id) == (2, "v2", None)
    new = sim_daemon.parse([*args, "--gpu-id", "1", "--tp-rank", "1"])
    assert (new.tp_size, new.revision, new.gpu_id, new.tp_rank) == (2, "v2", 1, 1)
    # a server flag: 0.5.23's daemon hands it to the server parser, 0.5.17's own parser refuses it
    sim_daemon.parse([*args, "--cuda-graph-max-bs-decode", "8"])
    with pytest.raises(SystemExit) as exc:
        sim_daemon.parse(
            [*args, "--cuda-graph-max-bs-decode", "8", "--sim-sglang-version", "0.5.17"]
        )
    assert exc.value.code == 2


def test_the_server_refuses_the_cache_with_speculative_decoding_as_sglang_does(capsys) -> None:  # type: ignore[no-untyped-def]
    argv = ["--model-path", "m", "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", "d", "--weight-cache-mode", "client"]  # fmt: skip
    with pytest.raises(SystemExit):
        cli_args.parse(argv)
    refusal = resolve("0.5.23").section("weight_cache")["speculative_refusal"]["template"]  # type: ignore[index]
    assert f"ValueError: {refusal}" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # 0.5.16 has no such flag
        cli_args.parse(["--model-path", "m", "--weight-cache-mode", "client",
                        "--sim-sglang-version", "0.5.16"])  # fmt: skip


def _wait(pred, what: str, proc: subprocess.Popen, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert proc.poll() is None or what == "exit", f"the sim cache exited {proc.returncode}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def test_the_sim_daemon_serves_its_fingerprint_refuses_a_second_one_and_stops_cleanly() -> None:
    d = Path(tempfile.mkdtemp(prefix="fv-wc-", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE": str(d / "{device_uuid}.sock"),
           "SGLANG_WEIGHT_CACHE_READY_TEMPLATE": str(d / "{device_uuid}.ready")}  # fmt: skip
    argv = [sys.executable, "-m", "fastverify.sim.weight_cache.daemon",
            "--model-path", "sim/m", "--tp-size", "1", "--sim-load-seconds", "0.1"]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
        preexec_fn=ctrl_c_reaches_it,
    )
    try:
        uuid = sim_wc.device_uuid(0)
        ready = _wait(lambda: (d / f"{uuid}.ready").exists() and d / f"{uuid}.ready", "ready", proc)
        info = wc.parse_ready(ready.read_text())
        assert info.pid and info.pid != proc.pid  # a rank process under the launcher
        assert oct((d / f"{uuid}.sock").stat().st_mode & 0o777) == "0o600"
        facts = sim_wc.facts("0.5.23")
        reply, _ = sim_wc.fetch(facts, config=info.config, key=uuid, env=env)
        assert reply is not None and reply["pid"] == info.pid and len(reply["entries"]) > 0
        with pytest.raises(sim_wc.CacheRefused, match="Daemon config mismatch"):
            sim_wc.fetch(facts, config={**info.config, "revision": "v2"}, key=uuid, env=env)
        second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert (
            f"Weight cache daemon for GPU {uuid} is already running (pid={info.pid}"
            in second.stdout
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        out = proc.stdout.read() if proc.stdout else ""
        assert "All weight cache daemons have been terminated" in out
        assert not list(d.iterdir()), "the ranks remove their socket and ready files"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


def test_the_sims_start_split_is_the_recorded_one() -> None:
    """The sim's constants equal the ones its source file derives (and both add up)."""
    doc = json.loads((REPO / "benchmarks/results/engine-start-split-h200.json").read_text())
    want = doc["sim_constants"]
    warm = doc["derived"]["warm_baseline_split"]
    assert want["GRAPHS_SHARE"] == round((1 - want["WEIGHTS_SHARE"]) * warm["cuda_graph"] / 32.1, 4)
    for name in ("WEIGHTS_SHARE", "GRAPHS_SHARE", "REST_SHARE", "DECODE_GRAPH_SHARE",
                 "MAP_SECONDS"):  # fmt: skip
        assert getattr(sim_wc, name) == want[name], name
    assert pytest.approx(1.0) == sim_wc.WEIGHTS_SHARE + sim_wc.GRAPHS_SHARE + sim_wc.REST_SHARE
