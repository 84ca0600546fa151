"""SGLang's weight cache as the facts of each release declare it (fastverify.sglang.weight_cache):
the cache daemon's command line for a server's, its paths, the ready file, the loader's lines.

The facts themselves are re-derived from the wheels by tests/contract/test_sglang_facts_contract.py;
tests/contract/test_weight_cache_contract.py runs the real 0.5.23 package's own functions."""

from __future__ import annotations

import pytest

from fastverify.sglang import weight_cache as wc
from fastverify.sglang.facts import known_versions, resolve
from fastverify.sglang.versions import parse_version

WITH_CACHE = [v for v in known_versions() if resolve(v).section("weight_cache")]
SERVER = [
    "--model-path", "/models/m", "--tp-size", "2", "--host", "0.0.0.0", "--port", "30000",
    "--enable-metrics", "--dtype", "bfloat16", "--trust-remote-code",
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/d",
    "--cuda-graph-max-bs-decode", "8", "--weight-cache-mode", "client",
]  # fmt: skip
# SGLang 0.5.17's lines on an H200 (the lead's device run, tiny model, dummy weights)
H200_LOAD_END = (
    "[2026-12-01 20:49:28] Load weight end. elapsed=0.19 s, type=LlamaForCausalLM, "
    "avail mem=139.06 GB, mem usage=0.04 GB."
)


def test_the_cache_came_in_0_5_17_and_every_release_since_has_it() -> None:
    assert WITH_CACHE[0] == "0.5.17"
    assert [v for v in known_versions() if parse_version(v) >= (0, 5, 17)] == WITH_CACHE
    assert wc.of(resolve("0.5.16")) is None
    assert all(resolve(v).features["weight_cache_speculative"] is False for v in WITH_CACHE)


@pytest.mark.parametrize("version", WITH_CACHE)
def test_the_daemon_gets_the_flags_its_parser_takes_and_never_the_draft(version: str) -> None:
    cf = wc.of(resolve(version))
    assert cf is not None
    args = cf.daemon_args(SERVER)
    assert args[:4] == ["--model-path", "/models/m", "--tp-size", "2"]
    assert "--dtype" in args and "--trust-remote-code" in args
    for gone in ("--speculative-algorithm", "--weight-cache-mode", "--host", "--port", "/models/d"):
        assert gone not in args
    # 0.5.19+ hands what its own parser leaves to SGLang's server parser; before, an unknown
    # flag would be an argparse error in the daemon
    assert ("--cuda-graph-max-bs-decode" in args) == cf.takes_server_args
    assert cf.takes_server_args == (parse_version(version) >= (0, 5, 19))


def test_paths_by_global_rank_in_tmp_then_by_gpu_uuid_through_the_environment() -> None:
    old, new = wc.of(resolve("0.5.17")), wc.of(resolve("0.5.23"))
    assert old is not None and new is not None
    assert old.ready_path(1) == "/tmp/sglang_weight_cache_rank1.ready"
    assert old.template_vars() == {}
    assert old.ready_path(0, {"SGLANG_WEIGHT_CACHE_READY_TEMPLATE": "/x/{global_rank}"}) == (
        "/tmp/sglang_weight_cache_rank0.ready"
    )  # 0.5.17 reads no such variable
    env = {"SGLANG_WEIGHT_CACHE_READY_TEMPLATE": "/run/fv/wc/{device_uuid}.ready"}
    assert new.template_vars() == {
        "socket": "SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE",
        "ready": "SGLANG_WEIGHT_CACHE_READY_TEMPLATE",
    }
    assert new.ready_path("GPU-1", env) == "/run/fv/wc/GPU-1.ready"
    assert new.ready_glob(env) == "/run/fv/wc/*.ready"
    assert new.socket_path("GPU-1") == "/tmp/sglang_weight_cache_GPU-1.sock"


def test_a_ready_file_gives_the_pid_and_the_fingerprint() -> None:
    text = "pid=4242\nconfig={'model_path': '/m', 'tp_size': 2, 'moe_dense_tp_size': None}\n"
    ready = wc.parse_ready(text)
    assert ready.pid == 4242 and ready.config == {"model_path": "/m", "tp_size": 2,
                                                  "moe_dense_tp_size": None}  # fmt: skip
    assert wc.parse_ready("pid=x\nconfig=oops(").pid is None


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_the_loader_lines_of_a_hit_a_missing_socket_and_a_mismatch(version: str) -> None:
    cf = wc.of(resolve(version))
    assert cf is not None
    hit = (
        "[2026-12-01 20:51:41 TP0] [IpcModelLoader] Loaded model via IPC (mode=client), total=0.31s"
    )
    assert cf.loader_event(hit) == wc.LoaderEvent("loaded", ("client", "0.31"))
    gone = "[2026-12-01 TP1] [IpcModelLoader] Daemon socket not found at /run/wc/GPU-1.sock."
    assert cf.loader_event(gone) == wc.LoaderEvent("socket_missing", ("/run/wc/GPU-1.sock",))
    lines = [
        "RuntimeError: [IpcModelLoader] Daemon config mismatch!",
        "  Engine config: {'tp_size': 2, 'revision': ''}",
        "  Daemon config: {'tp_size': 2, 'revision': 'v2'}",
    ]
    kinds = [cf.loader_event(ln).kind for ln in lines]  # type: ignore[union-attr]
    assert kinds == ["mismatch", "engine_config", "daemon_config"]
    diff = wc.differences(wc.parse_config(lines[1]), wc.parse_config(lines[2]))
    assert diff == {"revision": ("", "v2")}
    assert cf.raises("mismatch") and not cf.raises("fallback")
    assert cf.loader_event("[x] Decode batch. #running-req: 1") is None


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_load_weight_end_in_the_releases_own_format(version: str) -> None:
    assert wc.load_weight_end(resolve(version), H200_LOAD_END) == (0.19, 0.04)
    assert wc.load_weight_end(resolve(version), "Load weight begin. avail mem=139.09 GB") is None


def test_a_float_placeholder_is_a_number_and_a_name_ending_in_f_is_not() -> None:
    rx = wc.pattern("x={self.ref} t={t:.2f}s")
    assert rx.search("x=abc t=1.50s").groups() == ("abc", "1.50")
