"""The daemon's all-reduce backend check (daemon/allreduce_check.py) and the dispatch it
relies on (fastverify.sglang.allreduce), on lines as SGLang 0.5.23 writes them (their texts
are pinned to the installed package by tests/contract/test_allreduce_contract.py)."""

from __future__ import annotations

import json
from pathlib import Path

from fastverify.daemon.allreduce_check import REASON, AllreduceWatch, cache_note
from fastverify.sglang import allreduce as ar
from fastverify.sglang.loglines import parse_sglang_line

ARGV = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "4",
        "--cuda-graph-max-bs-decode", "16"]  # fmt: skip
ON = {ar.ENABLE_VAR: "1"}


def feed(w: AllreduceWatch, msg: str, rank: int) -> bool:
    line = f"[2026-12-01 10:00:00 TP{rank}] {msg}"
    rec = parse_sglang_line(line)
    assert rec is not None and rec["kind"] == "allreduce" and rec["tp_rank"] == rank, line
    return w.on_record(rec, line)


def test_every_rank_must_confirm() -> None:
    w = AllreduceWatch(ON, ARGV)
    assert w.wants_pcie_ipc and w.tp_size == 4
    for rank in range(4):
        assert not feed(w, ar.ENABLED_FORMAT.format(world=4), rank)
    for rank in range(3):
        feed(w, ar.BUILT_FORMAT.format(world=4, max_numel=16 * 5120, hidden=5120), rank)
    f = w.verify("/x.log")
    assert f is not None and f.reason == REASON and "TP3 logged no" in f.message
    feed(w, ar.BUILT_FORMAT.format(world=4, max_numel=16 * 5120, hidden=5120), 3)
    assert w.verify("/x.log") is None
    d = w.details()
    assert (d["backend"], d["max_bytes"], d["max_numel"], d["confirmed_ranks"]) == (
        "pcie_ipc", 16 * 5120 * 2, 16 * 5120, 4,
    )  # fmt: skip
    assert d["description"].startswith("all-reduces up to 160 KiB (decode and verify)")


def test_a_fallback_fails_at_once_and_quotes_sglang() -> None:
    w = AllreduceWatch(ON, [*ARGV, "--enable-deterministic-inference"])
    assert feed(w, ar.DETERMINISTIC_FORMAT, 2) is True  # the start must fail now
    f = w.fallback_failure("/x.log")
    assert f is not None and f.reason == REASON
    assert "FlashInfer PCIe-IPC" in f.message and "on TP2" in f.message
    assert f.line is not None and f.line.endswith(ar.DETERMINISTIC_FORMAT)
    assert w.details()["backend"] == "nccl"


def test_no_request_no_check() -> None:
    w = AllreduceWatch({}, ARGV)
    assert not feed(w, ar.NO_COMM_FORMAT, 0)  # not asked for: reported, never a failure
    assert w.fallback_failure(None) is None and w.verify(None) is None
    assert w.details()["backend"] == "nccl" and w.details()["max_bytes"] is None


def test_world_size_one_never_confirms() -> None:
    w = AllreduceWatch(ON, ["--model-path", "m"])
    f = w.verify(None)
    assert f is not None and "world size 1" in f.message


def test_cache_note(tmp_path: Path) -> None:
    env = {ar.AUTOTUNE_DIR_VAR: str(tmp_path)}
    assert "no cached tactics for 8 ranks yet" in cache_note(env, 8, 917504)
    cache = tmp_path / "pcie_ipc_all_reduce_ws8.json"
    # FlashInfer's key: the op, the runner, the shapes, then _cache_key_head + dtype
    key = "('flashinfer::pcie_ipc_all_reduce', 'R', ((4, 7168),), (3, 8, 'rootcplx-noswitch', {}"
    cache.write_text(
        json.dumps({"_metadata": {}, key.format("128, 917504, 'torch.bfloat16'))"): 1})
    )
    note = cache_note(env, 8, 917504)
    assert "reusing the tactics cached in" in note and "max_numel 917504" in note, note
    # another workspace size: FlashInfer measures again (the file exists, but is no reuse)
    note = cache_note(env, 8, 2 * 917504)
    assert "other workspaces only" in note and "reusing" not in note, note
    # the file a FlashInfer without nv_internal leaves: no configs, re-tuned every start
    cache.write_text(json.dumps({"_metadata": {}}))
    note = cache_note(env, 8, 917504)
    assert "holds no tactics" in note and "nv_internal" in note, note


def test_requested_and_possible_backends() -> None:
    assert ar.requested_backend({}) == "nccl"
    assert ar.requested_backend({ar.ENABLE_VAR: "true"}) == "pcie_ipc"
    assert ar.requested_backend({ar.ENABLE_VAR: "0"}) == "nccl"
    assert ar.possible_backends(8, False) == ["pcie_ipc", "nccl"]
    assert ar.possible_backends(2, False, p2p=True) == ["custom", "pcie_ipc", "nccl"]
    assert ar.possible_backends(8, True) == ["custom", "pcie_ipc", "nccl"]
    assert ar.possible_backends(6, False) == ["nccl"]
    assert ar.possible_backends(8, False, flashinfer_pcie_ipc=False) == ["nccl"]


def test_dispatch_descriptions() -> None:
    sa = ar.ServerArgs(tp_size=2, decode_max_bs=8, draft_tokens=4)
    # 2 GPUs over PCIe with P2P: custom all-reduce is asked first and covers decode sizes
    d = ar.dispatch(env=ON, args=sa, hidden=4096)
    assert d.serving == "custom" and any("custom all-reduce" in f for f in d.fallbacks)
    off = ar.ServerArgs(tp_size=2, decode_max_bs=8, draft_tokens=4, disable_custom_all_reduce=True)
    d = ar.dispatch(env=ON, args=off, hidden=4096)
    assert d.serving == "pcie_ipc" and d.max_bytes == 8 * 4 * 4096 * 2
    assert d.describe() == (
        "all-reduces up to 256 KiB (decode and verify: decode max_bs 8 x 4 draft tokens): "
        "FlashInfer PCIe-IPC; above: NCCL"
    )
    half = ar.dispatch(env=ON, args=ar.ServerArgs(tp_size=8, dtype="half"))
    assert half.serving == "nccl" and "--dtype half" in half.fallbacks[0]
    assert ar.dispatch(env={}, args=ar.ServerArgs(tp_size=8)).describe() == (
        "all all-reduces: NCCL"
    )


def test_dtype_warning_fails_an_explicit_fp16_server_and_is_a_note_otherwise() -> None:
    w = AllreduceWatch(ON, [*ARGV, "--dtype", "half"])
    assert feed(w, ar.DTYPE_FORMAT.format(dtype="torch.float16"), 0) is True
    assert w.fallback_failure(None) is not None
    w = AllreduceWatch(ON, ARGV)  # --dtype auto: an fp32 reduction of a bf16 model
    assert feed(w, ar.DTYPE_FORMAT.format(dtype="torch.float32"), 1) is False
    assert w.fallback_failure(None) is None
    assert w.details()["notes"] == [ar.DTYPE_FORMAT.format(dtype="torch.float32")]


def test_serving_backend_labels() -> None:
    tp8 = ["--model-path", "m", "--tp-size", "8"]
    assert ar.serving_backend(ON, tp8) == "pcie_ipc"
    assert ar.serving_backend(ON, [*tp8, "--enable-deterministic-inference"]) == "nccl"
    assert ar.serving_backend({}, tp8, has_nvlink=True) == "custom"
    assert ar.serving_backend(ON, ["--model-path", "m"]) == "none"
    assert ar.serving_backend(ON, tp8, flashinfer_pcie_ipc=False) == "nccl"


def test_refusal_before_anything_is_stopped(tmp_path: Path) -> None:
    from fastverify.daemon.allreduce_check import mapped_library, refusal

    quiet = ["--model-path", "m", "--tp-size", "4", "--log-level", "warning"]
    # no INFO lines and no /proc maps: nothing could confirm PCIe-IPC -> refused, with the fix
    why = refusal(ON, quiet, maps_ok=False)
    assert why is not None and "--log-level warning" in why and "--log-level info" in why
    assert refusal(ON, quiet, maps_ok=True) is None  # the maps confirm it
    assert refusal({}, quiet, maps_ok=False) is None  # PCIe-IPC not asked for
    model = tmp_path / "fp16"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    why = refusal(ON, ["--model-path", str(model), "--tp-size", "4"])
    assert why is not None and "torch_dtype float16" in why and "NCCL" in why
    assert (
        refusal(ON, ["--model-path", str(model), "--tp-size", "4", "--dtype", "bfloat16"]) is None
    )
    # the maps reader: a process with the library mapped, one without, one unreadable
    for pid, line in ((11, "7f00-7f01 r-xp 0 fe:00 1 /x/cached_ops/pcie_ipc_comm/pcie_ipc_comm.so"),
                      (12, "7f00-7f01 r-xp 0 fe:00 1 /usr/lib/libc.so.6")):  # fmt: skip
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "maps").write_text(line + "\n")
    found = mapped_library([11, 12, 13], "pcie_ipc_comm", tmp_path / "proc")
    assert found == {11: "/x/cached_ops/pcie_ipc_comm/pcie_ipc_comm.so"}
    assert mapped_library([13], "pcie_ipc_comm", tmp_path / "proc") is None
