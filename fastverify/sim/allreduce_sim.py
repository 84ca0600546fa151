"""The sim's TP all-reduce backend, as SGLang 0.5.23 picks it (`fastverify.sglang.allreduce`).

`plan(args, env)` is SGLang's dispatch for the sim's argv and environment (PCIe-only, no
NVLink; FlashInfer with `pcie_ipc_comm` unless `--sim-flashinfer no-pcie-ipc-comm`).
`group_lines(plan, args)`: what each rank logs when its TP group is built
(`GroupCoordinator.__init__` -> `pcie_ipc_ar.eligible_group` / `PcieIpcCommunicator`):
the deterministic-inference warning, the missing-`pcie_ipc_comm` warning, or `... enabled
(world=N, ...)`; nothing at world size 1 or an unsupported world size (SGLang logs that at
debug level). `Workspace.prepare(...)` is `_pre_initialize_pcie_ipc_workspace` before
graph capture: `workspace built (world=, max_numel=, hidden=)` (or `--sim-flashinfer
workspace-fail`: SGLang's build-failure warning) and the autotune, which measures for a
while at the first start and writes FlashInfer's cache file
`$FLASHINFER_AUTOTUNE_DIR/pcie_ipc_all_reduce_ws{N}.json`, and reads it back at the next
(FlashInfer logs nothing of its own; SGLang logs `autotuned N shape(s)` both times). A
non-bf16 `--dtype` logs SGLang's once-per-dtype warning at the first reduction.
`flashinfer_offer(argv)` and `HOST_TEXT`: what the sim's host offers (for `tune`'s inventory,
which must not read this machine's interpreter or GPUs for a sim engine).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from fastverify.sglang import allreduce, flashinfer_facts
from fastverify.sim import cli_args, costmodel, flashinfer_jit

SIM_DECODE_MAX_BS = 32  # the sim captures decode graphs for bs 1..32
SIM_REQUEST_POOL = 256  # the sim's max_running_requests (its server-init log line)
# what FlashInfer's topology probe says on the simulated host (pcie_ipc_topology.py: GPUs on
# the CPU root complex, no switch pair) and its default block cap (AR_MAX_BLOCKS)
SIM_TOPOLOGY_PROFILE = "rootcplx-noswitch"
SIM_MAX_BLOCKS = 128
# pcie_ipc_ar._tune when tune() covered nothing (every tactic skipped)
NO_SHAPES_FORMAT = (
    "FlashInfer PCIe-IPC autotune covered no shapes for hidden={hidden} (requested rows "
    "{rows}); the kernels keep the seed policy."
)
TORCH_DTYPES = {"half": "torch.float16", "float16": "torch.float16", "float": "torch.float32",
                "float32": "torch.float32"}  # fmt: skip


def plan(args: cli_args.SimArgs, env: Mapping[str, str]) -> allreduce.Dispatch:
    sa = allreduce.ServerArgs.from_argv(list(args.argv))
    if sa.decode_max_bs is None and not sa.decode_bs:
        sa = replace(sa, decode_max_bs=SIM_DECODE_MAX_BS)
    return allreduce.dispatch(
        env=env,
        args=sa,
        has_nvlink=False,
        p2p=True,
        hidden=costmodel.HIDDEN,
        flashinfer_pcie_ipc=args.flashinfer != "no-pcie-ipc-comm",
        request_pool=SIM_REQUEST_POOL,
    )


HOST_TEXT = "the sim's simulated host: PCIe-only GPUs with P2P, no NVLink (docs/guides/sim.md)"


def flashinfer_offer(argv: Sequence[str]) -> tuple[bool, str]:
    """(has `pcie_ipc_comm`, why) of the simulated FlashInfer build a sim argv runs with
    (`--sim-flashinfer`, default "pcie-ipc"): what the real server's import check answers."""
    build = cli_args.SimArgs.flashinfer
    for i, a in enumerate(argv):
        if a == "--sim-flashinfer" and i + 1 < len(argv):
            build = argv[i + 1]
        elif a.startswith("--sim-flashinfer="):
            build = a.split("=", 1)[1]
    if build == "no-pcie-ipc-comm":
        return False, "the sim's simulated FlashInfer has no pcie_ipc_comm (--sim-flashinfer)"
    return (
        True,
        f"the sim's simulated FlashInfer 0.7.2 has pcie_ipc_comm (--sim-flashinfer {build})",
    )


def asked(env: Mapping[str, str], args: cli_args.SimArgs) -> bool:
    """SGLang builds a PCIe-IPC communicator at all (eligible_group passes the variable)."""
    return allreduce.requested_backend(env) == allreduce.PCIE_IPC and args.tp_size > 1


def group_lines(env: Mapping[str, str], args: cli_args.SimArgs) -> list[tuple[str, str]]:
    """(level, message) each rank logs when its TP group is built."""
    if not asked(env, args):
        return []
    sa = allreduce.ServerArgs.from_argv(list(args.argv))
    if allreduce.deterministic_collectives(env, sa):
        return [("warning", allreduce.DETERMINISTIC_FORMAT)]
    if args.tp_size not in allreduce.PCIE_IPC_WORLD_SIZES:
        return [("debug", f"FlashInfer PCIe-IPC all-reduce skipped: unsupported world size "
                          f"{args.tp_size}")]  # fmt: skip
    if args.flashinfer == "no-pcie-ipc-comm":
        return [("warning", allreduce.NO_COMM_FORMAT)]
    return [("info", allreduce.ENABLED_FORMAT.format(world=args.tp_size))]


def enabled(env: Mapping[str, str], args: cli_args.SimArgs) -> bool:
    return any(level == "info" for level, _ in group_lines(env, args))


class Workspace:
    """The sim's PCIe-IPC workspace: built before capture, then autotuned (cached)."""

    def __init__(self, env: Mapping[str, str], args: cli_args.SimArgs):
        self.env = env
        self.args = args
        self.max_bytes: int | None = None

    def cache_path(self) -> Path:
        base = self.env.get(allreduce.AUTOTUNE_DIR_VAR)
        if base:
            root = Path(base)
        else:
            root = flashinfer_facts.workspace_dir(
                self.env, flashinfer_facts.FLASHINFER_VERSION, flashinfer_jit.SIM_ARCH
            )
            root = root / "autotune"
        return root / allreduce.CACHE_FILE.format(world=self.args.tp_size)

    def prepare(
        self,
        say: Callable[[str, str], None],
        sleep: Callable[[float], None],
        map_all: Callable[[Path], None] | None = None,
    ) -> int | None:
        """Build and tune; returns the byte bound PCIe-IPC serves (None: it does not).
        `map_all(path)`: every rank maps the JIT-built `pcie_ipc_comm.so` (flashinfer_jit)."""
        if not enabled(self.env, self.args):
            return None
        numel = workspace_numel(self.env, self.args)
        # the first workspace build JIT-compiles pcie_ipc_comm; every rank then has it loaded
        lib, _ = flashinfer_jit.ensure(
            self.env, flashinfer_facts.PCIE_IPC_LIB, sleep, self.args.load_seconds
        )
        if map_all is not None and lib.is_file():
            map_all(lib)
        if self.args.flashinfer == "workspace-fail":
            say(
                "warning",
                allreduce.BUILD_FAILED_FORMAT.format(
                    max_numel=numel,
                    error="CUDA error: peer access is not supported between these two devices",
                ),
            )
            return None
        say(
            "info",
            allreduce.BUILT_FORMAT.format(
                world=self.args.tp_size, max_numel=numel, hidden=costmodel.HIDDEN
            ),
        )
        rows = allreduce_rows(numel // costmodel.HIDDEN)
        if self.args.disable_flashinfer_autotune:
            say("info", "FlashInfer PCIe-IPC all-reduce: " + allreduce.AUTOTUNE_OFF_TEXT)
        else:
            path = self.cache_path()
            nv_internal = self.args.flashinfer != "no-nv-internal"
            if nv_internal:  # the autotuner's trtllm_utils (needs FlashInfer's nv_internal)
                flashinfer_jit.ensure(
                    self.env, flashinfer_facts.TRTLLM_UTILS_LIB, sleep, self.args.load_seconds
                )
            keys = flashinfer_facts.cache_keys(path) if path.is_file() else None
            if not keys or not flashinfer_facts.covers(keys, world=self.args.tp_size,
                                                       max_numel=numel):  # fmt: skip
                # no entry for this workspace: FlashInfer measures (again) and persists
                sleep(self.args.load_seconds * 0.1)
                self._write_cache(path, rows if nv_internal else (), numel)
            if nv_internal:
                say("info", allreduce.AUTOTUNED_FORMAT.format(
                    n=len(rows), hidden=costmodel.HIDDEN, rows=rows))  # fmt: skip
            else:  # every tactic skipped: tune() covers no shape (pcie_ipc_ar._tune)
                say("warning", NO_SHAPES_FORMAT.format(hidden=costmodel.HIDDEN, rows=rows))
        if not bf16(self.args):
            dtype = served_dtype(self.args)
            say("warning", allreduce.DTYPE_FORMAT.format(dtype=TORCH_DTYPES.get(dtype, dtype)))
            return None
        self.max_bytes = numel * allreduce.BF16_BYTES
        return self.max_bytes

    def _write_cache(self, path: Path, rows: tuple[int, ...], numel: int) -> None:
        """FlashInfer's cache layout: a metadata entry, then one entry per tuned shape whose
        key holds the workspace head (`flashinfer_facts.CacheHead`); rows () = 0 configs."""
        head = flashinfer_facts.CacheHead(
            flashinfer_facts.TUNE_VERSION, self.args.tp_size, SIM_TOPOLOGY_PROFILE,
            SIM_MAX_BLOCKS, numel, False,
        )  # fmt: skip
        old = {}
        with contextlib.suppress(OSError, ValueError):  # FlashInfer merges into the file
            old = json.loads(path.read_text())
        data: dict[str, object] = {
            **(old if isinstance(old, dict) else {}),
            "_metadata": {
                "simulated": True,
                "note": "fastverify sim: no tactics were measured",
                "written_at": time.time(),
            },
        }
        for r in rows:
            key = (f"('{flashinfer_facts.CUSTOM_OP}', 'PcieIpcRunner', (({r}, "
                   f"{costmodel.HIDDEN}),), {head.needle()}'torch.bfloat16'))")  # fmt: skip
            data[key] = ["PcieIpcRunner", "sim"]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=2))
            os.replace(tmp, path)
        except OSError:
            pass  # FlashInfer keeps its tactics in memory when it cannot write the cache


def workspace_numel(env: Mapping[str, str], args: cli_args.SimArgs) -> int:
    """Elements the PCIe-IPC workspace holds: SGLang's bound, or its fallback width."""
    return plan(args, env).max_numel or allreduce.FALLBACK_DECODE_WIDTH * costmodel.HIDDEN


def served_dtype(args: cli_args.SimArgs) -> str:
    """The dtype the sim's server runs in: --dtype, or with auto its model's config.json
    `torch_dtype` when the model path has one (as SGLang loads it), else bfloat16."""
    dtype = allreduce.ServerArgs.from_argv(list(args.argv)).dtype_resolved[0]
    return "bfloat16" if dtype == "auto" else dtype


def torch_dtype(args: cli_args.SimArgs) -> str:
    dtype = served_dtype(args)
    return TORCH_DTYPES.get(dtype, f"torch.{dtype}")


def bf16(args: cli_args.SimArgs) -> bool:
    return served_dtype(args) == "bfloat16"


def served_bound(env: Mapping[str, str], tp_size: int, argv: tuple[str, ...]) -> int | None:
    """The byte bound PCIe-IPC serves on a sim server of this environment and argv."""
    args = cli_args.parse(["--model-path", "sim", "--tp-size", str(tp_size), *argv])
    ipc = enabled(env, args) and bf16(args) and args.flashinfer != "workspace-fail"
    return workspace_numel(env, args) * allreduce.BF16_BYTES if ipc else None


def served_prediction(
    env: Mapping[str, str],
    mode: str,
    tp_size: int,
    batch_size: int,
    cuda_graph: bool,
    accept_length: float | None = None,
    argv: tuple[str, ...] = (),
) -> costmodel.Prediction:
    """The cost model for a sim server of this environment and extra argv, all-reduce
    backend included (PCIe-IPC up to the bound the server would build, workspace failures
    aside): what the sim serves, for the tests and demos that compare against it."""
    bound = served_bound(env, tp_size, argv)
    return costmodel.predict(
        env, mode, tp_size, batch_size, cuda_graph, accept_length, pcie_ipc_max_bytes=bound
    )


def served_stream_rate(
    env: Mapping[str, str],
    mode: str,
    tp_size: int,
    cuda_graph: bool,
    accept_length: float | None = None,
    argv: tuple[str, ...] = (),
    *,
    input_tokens: int,
    output_tokens: int,
) -> float:
    """Output tokens per second one client sees sending `input_tokens`-token prompts for
    `output_tokens`-token answers back to back (what `bench -c 1` measures): the prefill
    (which samples the first token) plus the decode cycles of the rest; 0 when the
    configuration cannot run."""
    pred = served_prediction(env, mode, tp_size, 1, cuda_graph, accept_length, argv)
    if pred.error or pred.tokens_per_second <= 0:
        return 0.0
    prefill = costmodel.prefill_seconds(
        env, tp_size, input_tokens, mode, pcie_ipc_max_bytes=served_bound(env, tp_size, argv)
    )
    return output_tokens / (prefill + max(0, output_tokens - 1) / pred.tokens_per_second)


def allreduce_rows(max_rows: int) -> tuple[int, ...]:
    """`pcie_ipc_ar._tune_batches`: powers of two up to the bound, plus the bound."""
    rows = [r for r in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if r <= max_rows]
    if max_rows >= 1 and max_rows not in rows:
        rows.append(max_rows)
    return tuple(rows)
