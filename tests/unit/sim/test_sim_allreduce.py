"""The sim's TP all-reduce backend: SGLang 0.5.23's lines per fallback case, the FlashInfer
autotune cache, the cost model's published figures and the bound in its traces.

The log texts come from `fastverify.sglang.allreduce`, which tests/contract/ pins to the
installed SGLang; here the sim is checked to say them in the cases SGLang does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify.sglang import allreduce as ar
from fastverify.sglang import flashinfer_facts
from fastverify.sim import allreduce_sim, cli_args, costmodel, flashinfer_jit

REPO = Path(__file__).resolve().parents[3]
ON = {ar.ENABLE_VAR: "1"}
EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d"]


def args(*extra: str, tp: int = 8) -> cli_args.SimArgs:
    return cli_args.parse(["--model-path", "m", "--tp-size", str(tp), *EAGLE, *extra])


@pytest.mark.parametrize(
    ("env", "extra", "tp", "want"),
    [
        (ON, (), 8, ("info", ar.ENABLED_FORMAT.format(world=8))),
        (ON, ("--enable-deterministic-inference",), 8, ("warning", ar.DETERMINISTIC_FORMAT)),
        ({**ON, ar.ONE_STAGE_VAR: "1"}, (), 8, ("warning", ar.DETERMINISTIC_FORMAT)),
        (ON, ("--sim-flashinfer", "no-pcie-ipc-comm"), 8, ("warning", ar.NO_COMM_FORMAT)),
        (ON, (), 6, ("debug", "FlashInfer PCIe-IPC all-reduce skipped: unsupported world size 6")),
        (ON, (), 1, None),
        ({}, (), 8, None),
        ({ar.ENABLE_VAR: "on"}, (), 8, None),  # SGLang's EnvBool: invalid -> default False
    ],
)
def test_group_lines_per_case(env: dict, extra: tuple, tp: int, want: tuple | None) -> None:
    lines = allreduce_sim.group_lines(env, args(*extra, tp=tp))
    assert lines == ([want] if want else [])


def test_workspace_built_autotune_cached_and_dtype_fallback(tmp_path: Path) -> None:
    env = {**ON, ar.AUTOTUNE_DIR_VAR: str(tmp_path / "at"), ar.WORKSPACE_BASE_VAR: str(tmp_path)}
    said: list[tuple[str, str]] = []
    slept: list[float] = []
    ws = allreduce_sim.Workspace(env, args("--sim-load-seconds", "1"))
    bound = ws.prepare(lambda lvl, msg: said.append((lvl, msg)), slept.append)
    numel = 32 * 4 * 7168
    assert bound == numel * 2
    assert said[0] == ("info", ar.BUILT_FORMAT.format(world=8, max_numel=numel, hidden=7168))
    rows = (1, 2, 4, 8, 16, 32, 64, 128)
    assert said[1] == ("info", ar.AUTOTUNED_FORMAT.format(n=8, hidden=7168, rows=rows))
    cache = tmp_path / "at" / "pcie_ipc_all_reduce_ws8.json"
    # FlashInfer's layout: one entry per tuned row count, keyed with the workspace's head
    keys = flashinfer_facts.cache_keys(cache)
    assert keys is not None and len(keys) == len(rows)
    assert flashinfer_facts.covers(keys, world=8, max_numel=numel)
    assert not flashinfer_facts.covers(keys, world=8, max_numel=numel * 2)
    # the first start compiles pcie_ipc_comm and trtllm_utils, then measures
    share = flashinfer_jit.COMPILE_SHARE
    assert slept == [share["pcie_ipc_comm"], share["trtllm_utils"], 0.1]
    for lib in ("pcie_ipc_comm", "trtllm_utils"):
        assert flashinfer_jit.library(env, lib).is_file()
    slept.clear()
    allreduce_sim.Workspace(env, args()).prepare(lambda *_: None, slept.append)
    assert slept == []  # the second start reuses both libraries and the cache
    # a workspace of another size is not covered by the cache: FlashInfer measures again
    other = allreduce_sim.Workspace(env, args("--cuda-graph-max-bs-decode", "16"))
    other.prepare(lambda *_: None, slept.append)
    assert len(slept) == 1  # measured, nothing compiled
    keys = flashinfer_facts.cache_keys(cache) or []
    # FlashInfer merges the new entries into the file: both workspaces are covered now
    assert flashinfer_facts.covers(keys, world=8, max_numel=16 * 4 * 7168)
    assert flashinfer_facts.covers(keys, world=8, max_numel=numel)
    slept.clear()
    said.clear()
    half = allreduce_sim.Workspace(env, args("--dtype", "half"))
    assert half.prepare(lambda lvl, msg: said.append((lvl, msg)), slept.append) is None
    assert said[-1] == ("warning", ar.DTYPE_FORMAT.format(dtype="torch.float16"))
    said.clear()
    failed = allreduce_sim.Workspace(env, args("--sim-flashinfer", "workspace-fail"))
    assert failed.prepare(lambda lvl, msg: said.append((lvl, msg)), slept.append) is None
    assert said[-1][0] == "warning" and ar.BUILD_FAILED_TAIL in said[-1][1]
    assert allreduce_sim.Workspace({}, args()).prepare(lambda *_: None, slept.append) is None


def test_override_and_no_decode_graph_bounds() -> None:
    d = allreduce_sim.plan(args(), {**ON, ar.MAX_NUMEL_VAR: "65536"})
    assert d.max_numel == 65536
    # SGLang sizes from the decode batch list whether or not a decode graph is captured
    eager = args("--cuda-graph-backend-decode", "disabled")
    assert allreduce_sim.plan(eager, ON).rows == allreduce_sim.plan(args(), ON).rows == 32 * 4


def test_cost_model_uses_the_published_figures() -> None:
    # at 8 ranks the kernel time is the published one at its sizes, plus the launch gap
    # every backend pays (costmodel.LAUNCH_GAP_US, measured)
    for nbytes, us in ((12 * 1024, 5.3), (96 * 1024, 15.3), (384 * 1024, 34.6)):
        assert costmodel.pcie_ipc_seconds(nbytes, 8) * 1e6 == pytest.approx(us)
    bound = 32 * 4 * 7168 * 2
    nccl = costmodel.predict({}, "baseline", 8, 1, True)
    ipc = costmodel.predict({}, "baseline", 8, 1, True, pcie_ipc_max_bytes=bound)
    assert (nccl.algo, ipc.algo) == ("ring", "pcie_ipc")
    assert ipc.allreduce_each_seconds * 1e6 == pytest.approx(
        costmodel.pcie_ipc_seconds(7168 * 2, 8) * 1e6 + costmodel.LAUNCH_GAP_US
    )
    assert ipc.tokens_per_second > 2 * nccl.tokens_per_second
    # a prefill of 8000 tokens is far above the bound: NCCL either way
    assert costmodel.prefill_seconds({}, 8, 8000, "baseline") == costmodel.prefill_seconds(
        {}, 8, 8000, "baseline", pcie_ipc_max_bytes=bound
    )


def test_sim_server_accepts_the_flags_sglang_has() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fastverify.sim", "--model-path", "m", "--dtype", "bf16"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 2 and "invalid choice: 'bf16'" in out.stderr
    a = args("--enable-deterministic-inference", "--enable-symm-mem", "--dtype", "bfloat16")
    assert a.deterministic and a.dtype == "bfloat16"


def test_default_cache_path_is_under_sglangs_cache_dir(tmp_path: Path) -> None:
    """SGLang points FlashInfer's base at `$SGLANG_CACHE_DIR` (`~/.cache/sglang`) unless
    FLASHINFER_WORKSPACE_BASE is set; FLASHINFER_AUTOTUNE_DIR overrides both."""
    home = str(tmp_path)
    tail = Path(".cache", "flashinfer", "0.7.2", "120", "autotune", "pcie_ipc_all_reduce_ws8.json")
    ws = allreduce_sim.Workspace
    assert ws({**ON, "HOME": home}, args()).cache_path() == tmp_path / ".cache/sglang" / tail
    own = {**ON, "HOME": home, flashinfer_facts.SGLANG_CACHE_DIR_VAR: "/srv/sg"}
    assert ws(own, args()).cache_path() == Path("/srv/sg") / tail
    base = {**own, ar.WORKSPACE_BASE_VAR: "/srv/fi"}
    assert ws(base, args()).cache_path() == Path("/srv/fi") / tail
    assert ws({**base, ar.AUTOTUNE_DIR_VAR: "/t"}, args()).cache_path() == Path(
        "/t/pcie_ipc_all_reduce_ws8.json"
    )
