"""Every all-reduce fact fastverify holds, pinned to the installed sglang 0.5.23 and to the
flashinfer-python 0.7.2 sources scripts/sglang-venv.sh unpacks beside it.

SGLang's own functions run in its venv (tests/contract/allreduce_probe.py: eligibility, the
per-tensor dispatch order, the workspace bound, custom all-reduce's size rule, its log
lines as its loggers emit them); FlashInfer's kernel names and cache path are read from
its files. Each assertion compares with `fastverify.sglang.allreduce` (and the sim and the
profile validator that use it), so a drift in either package fails here.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from fastverify.profiles import sglang_vars
from fastverify.sglang import allreduce as ar
from fastverify.sglang import envvars, flashinfer_facts
from fastverify.sim import allreduce_sim, cli_args
from tests.support.contract import HERE

FLASHINFER_VERSION = "0.7.2"


@pytest.fixture(scope="module")
def facts(sglang_python: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(sglang_python), str(HERE / "allreduce_probe.py")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        pytest.fail(f"allreduce probe failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def flashinfer(sglang_python: Path) -> Path:
    root = sglang_python.parent.parent / "share" / f"flashinfer-python-{FLASHINFER_VERSION}"
    meta = root / f"flashinfer_python-{FLASHINFER_VERSION}.dist-info" / "METADATA"
    if not meta.is_file():
        pytest.fail(f"{root} is missing: run scripts/sglang-venv.sh (it unpacks FlashInfer)")
    assert f"Version: {FLASHINFER_VERSION}" in meta.read_text()
    return root / "flashinfer"


# ------------------------------------------------------------------ environment
def test_every_sglang_variable_and_its_kind(facts: dict[str, Any]) -> None:
    """The kinds the profile validator reads (the pinned release's facts file) are the
    installed package's own."""
    real = facts["env"]["kinds"]
    ours = envvars.kinds()
    missing = sorted(set(real) - set(ours))
    extra = sorted(set(ours) - set(real))
    changed = sorted(k for k in real if k in ours and ours[k] != real[k])
    assert not (missing or extra or changed), (
        f"fastverify/sglang/facts/{envvars.pinned()}.json drifted (rerun "
        f"scripts/sglang_facts.py): missing {missing}, changed {changed}, extra {extra}"
    )


def test_defaults_and_boolean_grammar(facts: dict[str, Any]) -> None:
    d = facts["env"]["defaults"]
    assert d[ar.ENABLE_VAR] is False and d[ar.MAX_NUMEL_VAR] == 0
    assert d[ar.ONE_STAGE_VAR] is False and d[ar.CUSTOM_V2_VAR] is True
    assert d[ar.CUSTOM_V2_MAX_KB_VAR] == ar.CUSTOM_V2_MAX_KB
    for value, parsed in facts["env"]["bools"].items():
        assert ar.env_bool(value) == parsed, value
        # the validator refuses exactly what SGLang cannot parse
        bad = sglang_vars.check_value(ar.ENABLE_VAR, value)
        assert (bad is not None) == (parsed is None), value
    assert ar.requested_backend({ar.ENABLE_VAR: "YES"}) == ar.PCIE_IPC
    assert ar.requested_backend({ar.ENABLE_VAR: "on"}) == ar.NCCL  # SGLang: invalid -> False


def test_flags_exist_with_their_defaults(facts: dict[str, Any]) -> None:
    fl = facts["flags"]
    assert all(fl["fields"].values()), fl["fields"]
    assert fl["defaults"]["dtype"] == "auto" and fl["defaults"]["cuda_graph_max_bs_decode"] is None
    assert fl["parsed"] == {"deterministic": True, "dtype": "half"}
    assert fl["bad_dtype_exit"] == 2  # not one of the choices fastverify knows
    sa = ar.ServerArgs.from_argv(
        ["--model-path", "m", "--enable-deterministic-inference", "--dtype", "half"]
    )
    assert (sa.deterministic, sa.dtype) == (True, "half")
    # the sim accepts what SGLang accepts
    args = cli_args.parse(
        ["--model-path", "m", "--enable-deterministic-inference", "--dtype", "half"]
    )
    assert (args.deterministic, args.dtype) == (True, "half")


# ------------------------------------------------------------------ PCIe-IPC
def test_pcie_ipc_world_sizes_groups_and_bounds(facts: dict[str, Any]) -> None:
    p = facts["pcie"]
    assert tuple(p["world_sizes"]) == ar.PCIE_IPC_WORLD_SIZES
    assert tuple(p["groups"]) == ar.PCIE_IPC_GROUPS
    assert p["fallback_width"] == ar.FALLBACK_DECODE_WIDTH
    for n, rows in p["tune_batches"].items():
        assert list(allreduce_sim.allreduce_rows(int(n))) == rows
    # eligibility: the variable, world size > 1, the tp group, not deterministic
    for on, ws, group, det, ok in p["eligible"]:
        env = {ar.ENABLE_VAR: on} if on is not None else {}
        ours = ar.requested_backend(env) == ar.PCIE_IPC and ws > 1 and group in ar.PCIE_IPC_GROUPS
        assert ok == (ours and not det), (on, ws, group, det)


def test_workspace_bound_is_decode_rows_times_hidden(facts: dict[str, Any]) -> None:
    p = facts["pcie"]
    built = p["built_decode"]
    assert built["ok"] and built["max_numel"] == 128 * 7168
    argv = ["--model-path", "m", "--tp-size", "8", "--cuda-graph-max-bs-decode", "32",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d",
            "--speculative-num-draft-tokens", "4"]  # fmt: skip
    d = ar.dispatch(env={ar.ENABLE_VAR: "1"}, args=ar.ServerArgs.from_argv(argv), hidden=7168)
    assert (d.serving, d.max_numel, d.max_bytes) == ("pcie_ipc", 128 * 7168, 128 * 7168 * 2)
    assert p["serves_decode"] == [True, False, False]  # at the bound, above it, fp16
    over = p["built_override"]
    assert over["max_numel"] == 65536
    d = ar.dispatch(
        env={ar.ENABLE_VAR: "1", ar.MAX_NUMEL_VAR: "65536"},
        args=ar.ServerArgs.from_argv(argv),
        hidden=7168,
    )
    assert d.max_numel == 65536


def test_log_lines_as_sglang_emits_them(facts: dict[str, Any]) -> None:
    p = facts["pcie"]
    enabled = p["enabled"]["log"][-1]
    assert enabled == ["info", ar.ENABLED_FORMAT.format(world=8)]
    built = p["built_decode"]["log"][1]
    assert built == ["info", ar.BUILT_FORMAT.format(world=8, max_numel=917504, hidden=7168)]
    tuned = p["built_decode"]["log"][2][1]
    assert tuned == ar.AUTOTUNED_FORMAT.format(n=3, hidden=7168, rows=(1, 2, 4, 8, 16, 32, 64, 128))
    assert p["no_comm"]["disabled"] and p["no_comm"]["log"] == [["warning", ar.NO_COMM_FORMAT]]
    failed = p["build_failed"]["log"][-1]
    assert failed == ["warning", ar.BUILD_FAILED_FORMAT.format(max_numel=917504, error="boom")]
    assert p["deterministic_warning"] == ["warning", ar.DETERMINISTIC_FORMAT]
    assert p["dtype_warning"] == ["warning", ar.DTYPE_FORMAT.format(dtype="torch.float16")]
    assert facts["dispatch"]["setup_failed_text"]
    # fastverify's parser reads each real line with the right event
    events = {
        "enabled": enabled[1],
        "built": built[1],
        "autotuned": tuned,
    }
    for event, line in events.items():
        rec = ar.parse_line(f"[2026-12-01 10:00:00 TP3] {line}")
        assert rec is not None and rec["event"] == event, line
    for why, line in (
        ("no_pcie_ipc_comm", p["no_comm"]["log"][0][1]),
        ("workspace_failed", failed[1]),
        ("deterministic", p["deterministic_warning"][1]),
        ("dtype", p["dtype_warning"][1]),
    ):
        rec = ar.parse_line(line)
        assert rec is not None and (rec["event"], rec["why"]) == ("fallback", why), line
        assert rec["message"] == line
    rec = ar.parse_line(built[1])
    assert (rec["max_numel"], rec["hidden"], rec["max_bytes"]) == (917504, 7168, 917504 * 2)


# ------------------------------------------------------------------ dispatch order
def test_dispatch_order_and_determinism(facts: dict[str, Any]) -> None:
    d = facts["dispatch"]
    assert d["order"] == {
        "both": "ca",
        "ipc_only": "pcie_ipc",
        "none": None,
        "mscclpp_wants": "pymscclpp",
        "symm_mem_too": "pcie_ipc",
    }
    mscclpp = ar.dispatch(
        env={ar.ENABLE_VAR: "1"}, args=ar.ServerArgs(tp_size=8, enable_mscclpp=True)
    )
    assert "MSCCL++" in mscclpp.bands[0].note and mscclpp.serving == "pcie_ipc"
    assert d["symm_before_dispatch"] and d["pcie_built_before_custom"]
    base = ar.ServerArgs(tp_size=8)
    for key, want in d["deterministic"].items():
        one, det = key.split("/")
        env = {} if one == "None" else {ar.ONE_STAGE_VAR: one}
        # SGLang overwrites SGLANG_ENABLE_DETERMINISTIC_INFERENCE from the flag
        args = ar.ServerArgs(tp_size=8, deterministic=det == "1")
        assert ar.deterministic_collectives(env, args) == want, key
    assert facts["custom"]["serving_hook_sets_deterministic"]
    on = {ar.ENABLE_VAR: "1"}
    assert ar.dispatch(env=on, args=base, hidden=7168).serving == "pcie_ipc"
    det = ar.dispatch(env=on, args=ar.ServerArgs(tp_size=8, deterministic=True))
    assert det.serving == "nccl" and "--enable-deterministic-inference" in det.fallbacks[0]
    symm = ar.dispatch(env=on, args=ar.ServerArgs(tp_size=8, enable_symm_mem=True))
    assert symm.serving == "nccl" and "--enable-symm-mem" in symm.fallbacks[0]


def test_custom_all_reduce_rule(facts: dict[str, Any]) -> None:
    c = facts["custom"]
    assert tuple(c["world_sizes"]) == ar.CUSTOM_WORLD_SIZES
    assert c["max_size"] == ar.CUSTOM_MAX_BYTES
    warn = c["pcie_warning"]
    assert warn["result"] is None  # more than two PCIe-only GPUs: no custom all-reduce
    assert warn["log"] == [
        [
            "warning",
            f"CustomAllreduce {ar.CUSTOM_PCIE_TEXT} To silence this warning, specify "
            "disable_custom_all_reduce=True explicitly.",
        ]
    ]
    for ws, nvlink, nbytes, ok in c["should"]:
        # the legacy class's rule (2 GPUs over PCIe, or full NVLink; up to its max size)
        assert ok == ((ws == 2 or nvlink) and nbytes <= ar.CUSTOM_MAX_BYTES), (ws, nvlink)
        d = ar.dispatch(env={}, args=ar.ServerArgs(tp_size=ws), has_nvlink=nvlink)
        assert (d.bands[0].backend == ar.CUSTOM) == (ws == 2 or nvlink), (ws, nvlink)
        if ws == 2 and not nvlink:  # the legacy class serves it (v2 needs full NVLink)
            assert d.bands[0].max_bytes == c["max_size"]


# ------------------------------------------------------------------ FlashInfer 0.7.2
def test_flashinfer_kernel_names(flashinfer: Path) -> None:
    header = flashinfer / "data" / "include" / "flashinfer" / "comm" / "pcie_ipc_all_reduce.cuh"
    text = header.read_text()
    assert "namespace flashinfer {\nnamespace comm {\nnamespace pcie_ipc {" in text
    kernels = re.findall(r"__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\(", text)
    assert tuple(kernels) == ar.KERNELS


def _seed_policy(flashinfer: Path) -> Any:
    """FlashInfer's own `pcie_ipc_policy` module, run from the wheel's source. Its one
    relative import (`pcie_ipc_collectives._constants`, not unpacked) gives names `_seed`
    does not read; they are bound to None so that any use of them fails loudly."""
    src = (flashinfer / "comm" / "pcie_ipc_policy.py").read_text()
    tree = ast.parse(src)
    tree.body = [
        n
        for n in tree.body
        if not (isinstance(n, ast.ImportFrom) and n.module == "pcie_ipc_collectives._constants")
    ]
    module = types.ModuleType("flashinfer_pcie_ipc_policy")
    module.__dict__.update(AR_MAX_BLOCKS=None, PACK_BYTES=None)
    sys.modules[module.__name__] = module  # dataclasses look their module up
    try:
        exec(compile(tree, "pcie_ipc_policy.py", "exec"), module.__dict__)  # the real source
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


def _dispatch_table(text: str) -> dict[tuple[int, str], str]:
    """(world, Variant name) -> kernel with template arguments, from the header's
    FI_PCIE_IPC_SELECT and TP2 branch, as launched without PDL (SGLang's call)."""
    table: dict[tuple[int, str], str] = {}
    select = text[text.index("#define FI_PCIE_IPC_SELECT") :]
    eight, four = select.split("switch (variant)")[1:3]
    for world, part in ((8, eight), (4, four)):
        for variant, kernel in re.findall(
            r"case Variant::(\w+):\s*\\?\s*return FI_PCIE_IPC_LAUNCH\(\((\w+<[^>]*>)\)", part
        ):
            table[(world, variant)] = kernel.replace("PDL", "false").replace("T,", "__nv_bfloat16,")
    tp2 = re.search(r": launch\((ipc_tp2_remote_push_kernel<T, false, false>)", text)
    assert tp2 is not None
    table[(2, "kUnstaged")] = tp2.group(1).replace("T,", "__nv_bfloat16,")
    return table


def test_sim_kernel_names_follow_flashinfer_seed_policy(flashinfer: Path) -> None:
    """The kernel the sim names for each world size and message size is the one FlashInfer's
    own seed policy picks (`_seed`, run from the wheel) and its header dispatches."""
    policy = _seed_policy(flashinfer)
    assert policy["_SEED_STAGE_BYTES"] == ar.SEED_STAGE_BYTES
    header = flashinfer / "data" / "include" / "flashinfer" / "comm" / "pcie_ipc_all_reduce.cuh"
    table = _dispatch_table(header.read_text())
    cpp_variant = {0: "kUnstaged", 1: "kStaged", 2: "kStagedRing", 3: "kFlatStaged"}
    seen = set()
    for world in ar.PCIE_IPC_WORLD_SIZES:
        for rows in (1, 2, 4, 8, 16, 32, 64, 128):
            numel = rows * 7168
            config = policy["_seed"](world, numel, 2, 16)
            kernel = table[(world, cpp_variant[int(config.variant)])]
            name = ar.kernel_name(world, numel * 2)
            assert f"{ar.KERNEL_NAMESPACE}{kernel}(" in name, (world, rows, config, name)
            assert ar.is_pcie_ipc_kernel(name)
            seen.add(kernel.split("<")[0])
    # 4 ranks never get the one-shot push; 8 ranks switch to the ring from 32 KiB up
    assert "push_oneshot_param_kernel" not in seen
    assert ar.kernel_name(8, 32 * 1024).startswith(
        f"void {ar.KERNEL_NAMESPACE}ipc_topo_rsag8_ring_push_param_kernel<"
    )


def test_flashinfer_exports_the_workspace_sglang_imports(flashinfer: Path) -> None:
    init = (flashinfer / "comm" / "__init__.py").read_text()
    assert "PcieIpcAllReduceWorkspace as PcieIpcAllReduceWorkspace" in init


def test_flashinfer_autotune_cache_path_and_workspace_variable(flashinfer: Path) -> None:
    tuning = ast.parse((flashinfer / "comm" / "pcie_ipc_tuning.py").read_text())
    (fn,) = [
        n for n in tuning.body if isinstance(n, ast.FunctionDef) and n.name == "default_cache_path"
    ]
    src = ast.unparse(fn)
    assert f"os.getenv('{ar.AUTOTUNE_DIR_VAR}')" in src
    assert "f'pcie_ipc_all_reduce_ws{world_size}.json'" in src
    assert ar.CACHE_FILE.format(world=8) == "pcie_ipc_all_reduce_ws8.json"
    assert "FLASHINFER_WORKSPACE_DIR / 'autotune'" in src
    env = (flashinfer / "jit" / "env.py").read_text()
    assert f'os.getenv("{ar.WORKSPACE_BASE_VAR}", pathlib.Path.home().as_posix())' in env
    assert 'FLASHINFER_BASE_DIR / ".cache" / "flashinfer"' in env


@pytest.mark.parametrize(
    "env",
    [{}, {"SGLANG_CACHE_DIR": "/srv/sglang"}, {"FLASHINFER_WORKSPACE_BASE": "/srv/fi"}],
)
def test_sglang_points_flashinfer_at_its_cache_dir(
    sglang_python: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """`import sglang` sets FLASHINFER_WORKSPACE_BASE (setdefault) to SGLANG_CACHE_DIR."""
    clean = {k: v for k, v in os.environ.items() if k not in (*env, "SGLANG_CACHE_DIR",
             "FLASHINFER_WORKSPACE_BASE")}  # fmt: skip
    out = subprocess.run(
        [str(sglang_python), "-c", "import os, sglang.srt.environ as e; e.redirect_third_party_"
         "caches(); print(os.environ['FLASHINFER_WORKSPACE_BASE'])"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**clean, **env, "HOME": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == flashinfer_facts.workspace_base(
        {**env, "HOME": str(tmp_path)}
    )


def test_flashinfer_copy_engine_kernels(flashinfer: Path) -> None:
    """The copy-engine tactics' kernels, their streams and their closing handshake, as the
    trace reader (fastverify/traces/ce_groups.py) folds them into one all-reduce."""
    comm = flashinfer / "data" / "include" / "flashinfer" / "comm"
    ring = (comm / "pcie_ipc_ce_ring.cuh").read_text()
    assert "namespace flashinfer {\nnamespace comm {\nnamespace pcie_ipc {" in ring
    kernels = re.findall(r"__global__\s+void\s+(\w+)\(", ring)
    assert sorted(kernels) == sorted(ar.CE_KERNELS)
    assert {ar.CE_ROLES[k] for k in kernels} == {"publish", "wait", "add"}
    flat = ring[ring.index("cudaError_t ce_ring_all_reduce_flat(") :]
    flat = flat[: flat.index("\n}\n")]
    # per step: publish on the flag stream, wait and add on the caller's stream ...
    assert "ce_publish_flag_kernel<<<1, 1, 0, ce.flag_stream>>>" in flat
    assert "ce_wait_flag_kernel<<<1, 1, 0, stream>>>" in flat
    assert "ce_add_kernel<T><<<add_grid, threads, 0, stream>>>" in flat
    assert "cudaMemcpyAsync(scratch_at(next, k, p), src, piece_bytes," in flat
    # ... and the call closes with one publish then one wait, both on the caller's stream
    tail = flat[flat.index("const int hs = ce_handshake_slot(world_size);") :]
    assert re.findall(r"(ce_\w+_kernel)<<<1, 1, 0, (\w+(?:\.\w+)?)>>>", tail) == [
        ("ce_publish_flag_kernel", "stream"),
        ("ce_wait_flag_kernel", "stream"),
    ]
    island = ring[ring.index("cudaError_t ce_ring_all_reduce_island(") :]
    tail = island[island.index("const int hs = ce_handshake_slot(world_size);") :]
    tail = tail[: tail.index("return cudaGetLastError();")]
    assert [k for k, _ in re.findall(r"(ce_\w+_kernel)<<<1, 1, 0, (\w+)>>>", tail)] == [
        "ce_publish_flag_kernel", "ce_publish_flag_kernel",
        "ce_wait_flag_kernel", "ce_wait_flag_kernel",
    ]  # fmt: skip
    # the memop variant: an extern "C" wait kernel, so kineto shows it without a namespace
    sm120 = (comm / "pcie_ipc_ce_sm120.cuh").read_text()
    assert 'extern "C" {' in sm120
    assert re.search(r"__global__\s+void\s+" + ar.CE_MEMOP_WAIT_KERNEL + r"\(", sm120)
    memop = (comm / "pcie_ipc_ce_memop.cuh").read_text()
    assert f"{ar.CE_MEMOP_WAIT_KERNEL}<<<1, 1, 0, stream>>>" in memop
    # the autotuner can pick them (4 and 8 ranks; never 2)
    policy = _seed_policy(flashinfer)
    names = {v.name for v in policy["IpcVariant"]}
    assert {"COPY_ENGINE_RING", "COPY_ENGINE_ISLAND", "COPY_ENGINE_RING_MEMOP"} <= names
    ce = policy["IpcLaunchConfig"](1, policy["CE_THREADS"], policy["IpcVariant"].COPY_ENGINE_RING)
    assert not policy["_is_launchable"](2, ce, 16)
    assert policy["_is_launchable"](4, ce, 16) and policy["_is_launchable"](8, ce, 16)
