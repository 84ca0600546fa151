"""SGLang's own weight-cache code on what fastverify builds: for the pinned release and
0.5.17 (the first with the cache: fixed /tmp paths by global rank, its own parser), the paths
fastverify.sglang.weight_cache derives are the release's, a ready file the sim writes is one
the release reads (pid; a live pid refused with the text fastverify parses; a dead one
removed), the daemon's parser takes fastverifyd's command line (all local ranks, the model,
TP size and dtype as the server's), the sim's fingerprint is a CacheConfig, and (0.5.19+,
whose resolution hooks run on CPU) the server's resolution refuses the cache with speculative
decoding in the facts' words."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fastverify.sglang import weight_cache as wc
from fastverify.sglang.facts import resolve
from fastverify.sglang.versions import PINNED_VERSION
from fastverify.sim import weight_cache as sim_wc
from tests.support.contract import TINY_LLAMA, release_python

HERE = Path(__file__).resolve().parent
SERVER = [
    "--model-path",
    "/models/m",
    "--tp-size",
    "2",
    "--host",
    "127.0.0.1",
    "--port",
    "30000",
    "--dtype",
    "bfloat16",
    "--speculative-algorithm",
    "EAGLE3",
]


@pytest.mark.parametrize("version", [PINNED_VERSION, "0.5.17"])
def test_the_releases_own_weight_cache_code_agrees(
    version: str, sglang_python: Path, tmp_path: Path
) -> None:
    python = release_python(version, sglang_python)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    cf = wc.of(resolve(version))
    facts = sim_wc.facts(version)
    assert cf is not None
    d = str(tmp_path / "wc")
    suffix = {"socket": "sock", "ready": "ready"}
    env = {var: f"{d}/{{device_uuid}}.{suffix[kind]}" for kind, var in cf.template_vars().items()}
    key = sim_wc.key_of(facts, gpu_id=1, tp_size=2, tp_rank=1)
    fingerprint = sim_wc.fingerprint(
        facts,
        model_path="/models/m",
        tp_size=2,
        tp_rank=1,
        dtype="bfloat16",
        quantization=None,
        revision=None,
    )
    alive = f"pid={os.getpid()}\nconfig={fingerprint}\n"  # this test's pid: alive
    dead = "pid=999999999\n"
    req = {
        "env": env,
        "key": key,
        "key_kind": cf.path_key,
        "ready_text": alive,
        "dead_ready_text": dead,
        "fingerprint": fingerprint,
        "daemon_args": cf.daemon_args(SERVER),
        "takes_server_args": cf.takes_server_args,
    }
    if cf.takes_server_args:  # arg_groups' resolution hook (0.5.19+): refusal on CPU
        req["refusal_argv"] = ["--model-path", str(model), "--speculative-algorithm", "EAGLE3",
                               "--speculative-draft-model-path", str(model),
                               "--weight-cache-mode", "client"]  # fmt: skip
    out = subprocess.run(
        [str(python), str(HERE / "weight_cache_probe.py")],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        input=json.dumps(req),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["fields"] == list(cf.fingerprint_fields)
    assert got["paths"] == {"ready": cf.ready_path(key, env), "socket": cf.socket_path(key, env)}
    assert got["ready_pid"] == os.getpid()
    refusal = got["live_refusal"]
    assert refusal and any(
        wc.pattern(t).search(refusal) for t in cf.line_templates("already_running")
    ), refusal
    assert got["stale_removed"] is True
    assert got["config_roundtrip"] == fingerprint
    assert got["daemon"] == {
        "gpu_id": None,
        "tp_rank": None,
        "model_path": "/models/m",
        "tp_size": 2,
        "dtype": "bfloat16",
    }
    if cf.takes_server_args:
        assert got["refusal"] == f"ValueError: {cf.refusal}"
