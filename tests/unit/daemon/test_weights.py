"""What a start does with its weights (fastverify.daemon.weights): the gate, SGLang's lines
read into "weights: from the cache / from disk", the split of the start, the config key."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from fastverify.config import ConfigError, load
from fastverify.daemon.failures import Failure
from fastverify.daemon.operations import Operation
from fastverify.daemon.rollback import Step
from fastverify.daemon.weights import (
    Gate,
    WeightSteps,
    WeightsWatch,
    gate,
    weights_summary,
)
from fastverify.sglang import weight_cache as wc
from fastverify.sglang.facts import resolve
from fastverify.sglang.weight_cache import strip_flags

F23, F16 = resolve("0.5.23"), resolve("0.5.16")


def test_the_gate_serves_baseline_starts_on_real_weights_only() -> None:
    assert gate("auto", F23, mode="baseline", load_format="auto", nnodes=1) == Gate(True)
    off = gate("off", F23, mode="baseline", load_format="auto", nnodes=1)
    assert not off.use and off.kind == "off"
    trial = gate("auto", F23, mode="baseline", load_format="dummy", nnodes=1)
    assert not trial.use and trial.expected and trial.kind == "trial"
    spec = gate("on", F23, mode="eagle3", load_format="auto", nnodes=1)
    assert not spec.use and spec.expected and spec.kind == "speculative"
    assert spec.why == "SGLang 0.5.23's weight cache does not export draft models"
    old = gate("auto", F16, mode="baseline", load_format="auto", nnodes=1)
    assert not old.use and not old.expected and "0.5.16 has no weight cache" in (old.why or "")
    nodes = gate("auto", F23, mode="baseline", load_format="auto", nnodes=2)
    assert not nodes.use and not nodes.expected


def test_the_flags_fastverifyd_adds_are_set_aside_when_argvs_are_compared() -> None:
    argv = ["py", "-m", "sglang.launch_server", "--tp-size", "2"]
    assert strip_flags([*argv, "--weight-cache-mode", "client"]) == argv
    assert strip_flags([*argv, "--weight-cache-mode=client"]) == argv


HIT = [
    "[t TP0] Load weight begin. avail mem=78.52 GB",
    "[t TP0] [IpcModelLoader] Fetched 1024 tensors from daemon (transport=torch_ipc) in 0.08s",
    "[t TP0] [IpcModelLoader] Loaded model via IPC (mode=client), total=0.20s",
    "[t TP0] Load weight end. elapsed=0.20 s, type=X, avail mem=78.48 GB, mem usage=0.04 GB.",
    "[t TP0] Capture target decode CUDA graph end. bs=[1, 2], elapsed=1.02 s, mem usage=0.38 GB, "
    "avail mem=7.74 GB.",
    "[t TP0] Capture target prefill CUDA graph end. elapsed=2.72 s, mem usage=0.05 GB, "
    "avail mem=7.69 GB.",
]


def _watch(lines: list[str], asked: bool = True) -> WeightsWatch:
    w = WeightsWatch(F23, asked)
    for ln in lines:
        w.on_line(ln)
    return w


def test_a_hit_is_from_the_cache_with_the_split_of_the_start() -> None:
    w = _watch(HIT)
    rec = weights_summary(w, Gate(True), ready_s=10.0, cache_bytes=3 << 30)
    assert rec["source"] == "cache" and rec["seconds"] == 0.2
    assert rec["text"] == "weights: from the cache (3.0 GiB over IPC, 0.20 s)"
    assert rec["phases"] == {"weights": 0.2, "cuda_graph": 3.74, "rest": 6.06}


def test_a_missing_socket_is_a_fallback_with_sglangs_reason() -> None:
    w = _watch([
        "[t TP0] Load weight begin. avail mem=78.52 GB",
        "[t TP0] [IpcModelLoader] Daemon socket not found at /run/fv/wc/GPU-0.sock.",
        "[t TP0] [IpcModelLoader] Weight cache not available or config mismatch, falling back "
        "to disk load",
        "[t TP0] Load weight end. elapsed=25.50 s, type=X, avail mem=14.31 GB, mem usage=64.21 GB.",
    ])  # fmt: skip
    rec = weights_summary(w, Gate(True), ready_s=30.0, cache_bytes=None)
    assert rec["source"] == "disk" and rec["fallback"] and rec["reason"] == "socket_missing"
    assert (
        rec["text"]
        == "weights: from disk (the cache refused: no cache socket at /run/fv/wc/GPU-0.sock)"
    )
    assert w.load_mem_gb == 64.21


def test_a_mismatch_names_the_fields_that_differ() -> None:
    w = _watch([
        "RuntimeError: [IpcModelLoader] Daemon config mismatch!",
        "  Engine config: {'tp_size': 2, 'torch_version': '2.10.0'}",
        "  Daemon config: {'tp_size': 2, 'torch_version': '2.9.1'}",
    ])  # fmt: skip
    reason, why = w.refusal()  # type: ignore[misc]
    assert reason == "mismatch"
    assert why == "fingerprint mismatch (torch_version: server '2.10.0', cache '2.9.1')"


def test_a_start_the_cache_does_not_serve_by_design_is_no_fallback() -> None:
    g = gate("auto", F23, mode="eagle3", load_format="auto", nnodes=1)
    rec = weights_summary(_watch(HIT[:1] + HIT[3:4], asked=False), g, 5.0, None)
    assert rec["source"] == "disk" and not rec["fallback"]
    assert rec["text"] == (
        "weights: from disk (SGLang 0.5.23's weight cache does not export draft models, 0.20 s)"
    )


def test_the_config_key_and_what_it_refuses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\nweight_cache = "auto"\n')
    assert load(cfg).server.weight_cache == "auto"
    cfg.write_text('[server]\nweight_cache = "yes"\n')
    with pytest.raises(ConfigError, match=r"c.toml:2: server.weight_cache: \"yes\" is not allowed"):
        load(cfg)
    cfg.write_text(
        '[server]\nweight_cache = "on"\nextra_args = ["--weight-cache-mode", "client"]\n'
    )
    with pytest.raises(ConfigError, match="fastverifyd passes the weight-cache flags itself"):
        load(cfg)
    cfg.write_text('[server]\nweight_cache = "on"\nnnodes = 2\ndist_init_addr = "h:1"\n')
    with pytest.raises(ConfigError, match="runs the weight cache on one node"):
        load(cfg)
    assert load(None, {"server": {"weight_cache": "on"}}).server.weight_cache == "on"


def _steps(setting: str, facts: Any, ensured: Failure | None = None) -> WeightSteps:
    """The steps over a core of their own: a setting, a release, a cache whose ensure()
    answers."""
    core = SimpleNamespace(
        cfg=SimpleNamespace(server=SimpleNamespace(load_format="auto", nnodes=1)),
        engine=SimpleNamespace(facts=lambda: facts),
        say=lambda *_, **__: None,
        current=None,
    )
    cache = SimpleNamespace(
        setting=setting, handle=None, ensure=lambda *a: ensured,
        disk_estimate=lambda mode: "~95 s, from the last recorded load",
        status=lambda: {"state": "ready", "pid": 7, "bytes": 3 << 30},
        facts=lambda: wc.of(facts), bytes_held=lambda: (3 << 30, "nvml"),
    )  # fmt: skip
    return WeightSteps(core, cache)  # type: ignore[arg-type]


ARGV = ["py", "-m", "sglang.launch_server", "--model-path", "m"]
OP = SimpleNamespace(mode="baseline", load_format=None, profile="ring-ll", parts={})
NOT_READY = Failure("weight_cache_unavailable", "the weight cache exited (1): boom")


def test_on_fails_a_start_the_cache_cannot_serve_and_auto_loads_it_from_disk() -> None:
    argv, g, failure = _steps("on", F16)._cache_gate(OP, ARGV, threading.Event())
    assert failure is not None and failure.reason == "weight_cache_unavailable"
    assert 'weight_cache = "on": SGLang 0.5.16 has no weight cache' in failure.message
    argv, g, failure = _steps("auto", F16)._cache_gate(OP, ARGV, threading.Event())
    assert failure is None and argv == ARGV and not g.use and not g.expected
    assert _steps("on", F23, NOT_READY)._cache_gate(OP, ARGV, threading.Event())[2] is NOT_READY
    argv, g, failure = _steps("auto", F23, NOT_READY)._cache_gate(OP, ARGV, threading.Event())
    assert failure is None and argv == ARGV and g.kind == "unavailable"
    assert g.why == "the cache is not available: the weight cache exited (1): boom"
    argv, g, failure = _steps("auto", F23)._cache_gate(OP, ARGV, threading.Event())
    assert failure is None and g.use and argv == [*ARGV, "--weight-cache-mode", "client"]


def test_a_rollback_step_the_cache_refuses_starts_again_from_disk_once() -> None:
    """A rollback's start is a step of its switch (rollback.Step), not an Operation: the
    refusal is kept on the step, which its next try's gate reads (disk, said why)."""
    steps = _steps("auto", F23)
    step = Step(Operation("switch", "tree-ll", "baseline"), "ring-ll", "baseline")
    h = SimpleNamespace(profile="ring-ll", mode="baseline")
    refused = Failure("weight_cache_refused", "SGLang refused the weight cache: dead socket")
    assert steps.again_from_disk(step, h, refused, threading.Event())  # type: ignore[arg-type]
    argv, g, failure = steps._cache_gate(step, ARGV, threading.Event())
    assert failure is None and argv == ARGV and not g.use and g.kind == "refused"
    assert g.why == "the cache refused: dead socket"
    assert not steps.again_from_disk(step, h, refused, threading.Event())  # type: ignore[arg-type]


def test_the_notice_of_a_speculative_switch_and_none_for_baseline() -> None:
    ctl = _steps("auto", F23)
    assert ctl.notice("switch", "baseline", None) is None
    assert ctl.notice("mode", "eagle3", None) == (
        "this mode loads from disk (~95 s, from the last recorded load): SGLang 0.5.23's weight "
        "cache does not export draft models; the weight cache stays up for the next baseline "
        "switch (pid 7, 3.0 GiB)"
    )
    assert _steps("off", F23).notice("mode", "eagle3", None) is None


def test_the_status_section_says_which_loads_the_cache_serves_and_its_line() -> None:
    def section(**st: Any) -> dict[str, Any]:
        steps = _steps(st.get("setting", "auto"), F23)
        steps.cache.bytes_held = lambda: (3 << 30, "nvml")
        steps.cache.status = lambda: {"setting": "auto", "available": True,
                                      "speculative": False, "state": "ready", "pid": 7,
                                      "ranks": 2, "bytes": 3 << 30, **st}  # fmt: skip
        return steps.status()

    assert section()["shared_loads"] == ["baseline"]
    both = section(setting="on", state="starting", speculative=True)
    assert both["shared_loads"] == ["baseline", "eagle3", "adaptive"]
    assert section(setting="off")["shared_loads"] == []
    assert section(available=False)["shared_loads"] == []  # a release without one
    for state in ("failed", "stopped", "mismatch", "off"):  # its loads would read the disk
        assert section(state=state)["shared_loads"] == []
    # its own read of the checkpoint: what tune prices a load from disk with
    assert section(ready_s=20.7)["shared_load_s"] == 20.7
    assert section(ready_s=20.7, state="failed")["shared_load_s"] is None  # it shares nothing
    assert section()["summary"] == [
        "weight cache: ready (pid 7, 2 rank(s), 3.0 GiB) [weight_cache = auto]"
    ]
    failed = section(state="failed", last_failure={"message": "boom"})
    assert failed["summary"] == [
        "weight cache: failed (pid 7, 2 rank(s), 3.0 GiB) [weight_cache = auto]: boom"
    ]
    assert section(setting="off", pid=None)["summary"] == []
    steps = _steps("auto", F23)
    steps.cache.bytes_held = lambda: (3 << 30, "nvml")
    assert steps.sharing("baseline").serves and steps.sharing("baseline").bytes == 3 << 30
    assert not steps.sharing("eagle3").serves
    assert "weight_cache = off" in (_steps("off", F23).sharing("baseline").why or "")
