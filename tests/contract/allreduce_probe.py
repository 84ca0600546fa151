"""Runs inside the real-SGLang venv (scripts/sglang-venv.sh): SGLang 0.5.23's all-reduce
dispatch answered by its own code, on CPU, one JSON object on stdout.

Where the code needs a GPU or FlashInfer's kernels, only that part is replaced: a fake
`flashinfer.comm` (the workspace class SGLang constructs) and `dist.get_world_size`; the
SGLang functions themselves run as installed and their log records are captured. Imports
nothing from fastverify: the facts fastverify holds are compared in the test.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import sys
import types
import warnings

warnings.filterwarnings("ignore")

VARS = (
    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",
    "SGLANG_PCIE_IPC_MAX_NUMEL",
    "SGLANG_USE_1STAGE_ALLREDUCE",
    "SGLANG_ENABLE_DETERMINISTIC_INFERENCE",
    "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2",
    "SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB",
)


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname.lower(), record.getMessage()))


@contextlib.contextmanager
def environ(**values: str | None):
    saved = {k: os.environ.get(k) for k in VARS}
    for k in VARS:
        os.environ.pop(k, None)
    for k, v in values.items():
        if v is not None:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def env_facts() -> dict:
    from sglang.srt import environ as env_mod

    kinds = {}
    for name, field in vars(env_mod.Envs).items():
        if isinstance(field, env_mod.EnvField) and name.startswith("SGLANG_"):
            kind = type(field).__name__.replace("WithAlias", "")[3:].lower()
            kinds[name] = kind
    envs = env_mod.envs
    defaults = {}
    with environ():
        for name in VARS:
            defaults[name] = getattr(envs, name).get()
    bools = {}
    for value in ("1", "true", "YES", "y", "0", "false", "No", "n", "on", "2", ""):
        try:
            bools[value] = env_mod.EnvBool(False).parse(value)
        except ValueError:
            bools[value] = None
    return {"kinds": kinds, "defaults": defaults, "bools": bools}


def pcie_facts() -> dict:
    import torch
    import torch.distributed as dist
    from sglang.srt.distributed.device_communicators import pcie_ipc_ar as m

    cap = Capture()
    m.logger.addHandler(cap)
    m.logger.setLevel(logging.DEBUG)
    out: dict = {
        "world_sizes": list(m._SUPPORTED_WORLD_SIZES),
        "groups": sorted(m._ELIGIBLE_GROUP_NAMES),
        "fallback_width": m._FALLBACK_DECODE_WIDTH,
        "tune_batches": {n: list(m._tune_batches(n)) for n in (1, 5, 64, 128, 160, 4096)},
    }
    eligible = []
    for on in (None, "1", "0", "true"):
        for ws in (1, 2, 3, 8):
            for group in ("tp", "moe_tp", "attention_tp"):
                for det in (False, True):
                    with environ(SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=on):
                        ok = m.eligible_group(group_name=group, world_size=ws, deterministic=det)
                    eligible.append([on, ws, group, det, ok])
    out["eligible"] = eligible
    cap.records.clear()
    m._warn_deterministic_wins.cache_clear()
    m._warn_deterministic_wins()
    out["deterministic_warning"] = cap.records[-1]
    m._warn_untuned_dtype(torch.float16)
    out["dtype_warning"] = cap.records[-1]

    real_ws = dist.get_world_size
    dist.get_world_size = lambda group=None: 8
    dev = torch.device("cuda", 0)
    try:
        # a FlashInfer without pcie_ipc_comm
        sys.modules["flashinfer"] = types.ModuleType("flashinfer")
        sys.modules["flashinfer.comm"] = None  # type: ignore[assignment]
        cap.records.clear()
        c = m.PcieIpcCommunicator(group=None, device=dev)
        out["no_comm"] = {"disabled": c.disabled, "log": list(cap.records)}

        built: dict = {}

        class Workspace:
            fail = False

            def __init__(self, **kw):
                if Workspace.fail:
                    raise RuntimeError("boom")
                built.update({k: v for k, v in kw.items() if k != "group" and k != "dtype"})
                built["tune_batches"] = list(kw["tune_batches"])

            def tune(self, hiddens, dtype, tune_group):
                return [(h, r) for h in hiddens for r in (1, 2, 4)]

        comm = types.ModuleType("flashinfer.comm")
        comm.PcieIpcAllReduceWorkspace = Workspace
        tuner_mod = types.ModuleType("flashinfer.autotuner")
        tuner_mod.AutoTuner = types.SimpleNamespace(
            get=lambda: types.SimpleNamespace(is_tuning_mode=False)
        )
        sys.modules["flashinfer.comm"] = comm
        sys.modules["flashinfer.autotuner"] = tuner_mod
        cap.records.clear()
        c = m.PcieIpcCommunicator(group=None, device=dev, cpu_group=object())
        out["enabled"] = {"disabled": c.disabled, "log": list(cap.records)}
        real_capturing = torch.cuda.is_current_stream_capturing
        torch.cuda.is_current_stream_capturing = lambda: False
        try:
            for label, env, rows in (("decode", None, 128), ("override", "65536", 128)):
                cap.records.clear()
                built.clear()
                c = m.PcieIpcCommunicator(group=None, device=dev, cpu_group=object())
                c._max_rows = rows
                with environ(SGLANG_PCIE_IPC_MAX_NUMEL=env):
                    ok = c._ensure_workspace(torch.empty((1, 7168), dtype=torch.bfloat16))
                out[f"built_{label}"] = {
                    "ok": ok,
                    "max_numel": c.max_numel,
                    "kwargs": {k: v for k, v in built.items() if k != "tune_cache"},
                    "log": list(cap.records),
                }
                # what the dispatch asks per tensor
                small = torch.empty((rows, 7168), dtype=torch.bfloat16)
                big = torch.empty((rows + 1, 7168), dtype=torch.bfloat16)
                half = torch.empty((1, 7168), dtype=torch.float16)
                c._workspace.supports = lambda inp: True
                out[f"serves_{label}"] = [
                    c.should_pcie_ipc_ar(small),
                    c.should_pcie_ipc_ar(big),
                    c.should_pcie_ipc_ar(half),
                ]
            Workspace.fail = True
            cap.records.clear()
            c = m.PcieIpcCommunicator(group=None, device=dev, cpu_group=object())
            c._max_rows = 128
            ok = c._ensure_workspace(torch.empty((1, 7168), dtype=torch.bfloat16))
            out["build_failed"] = {"ok": ok, "disabled": c.disabled, "log": list(cap.records)}
        finally:
            torch.cuda.is_current_stream_capturing = real_capturing
    finally:
        dist.get_world_size = real_ws
        for name in ("flashinfer", "flashinfer.comm", "flashinfer.autotuner"):
            sys.modules.pop(name, None)
    out["source"] = inspect.getsource(m)
    return out


def dispatch_facts() -> dict:
    import torch
    from sglang.srt.distributed import parallel_state as ps

    gc = ps.GroupCoordinator

    def comm(ok: bool, attr: str):
        ns = types.SimpleNamespace(disabled=False)
        setattr(ns, attr, lambda inp: ok)
        return ns

    order = {}
    inp = torch.empty((4, 16), dtype=torch.bfloat16)
    for label, ca, ipc in (("both", True, True), ("ipc_only", False, True), ("none", 0, 0)):
        fake = types.SimpleNamespace(
            ca_comm=comm(bool(ca), "should_custom_ar"),
            pcie_ipc_comm=comm(bool(ipc), "should_pcie_ipc_ar"),
            qr_comm=None,
            pymscclpp_comm=None,
            torch_symm_mem_comm=None,
            pynccl_comm=None,
        )
        order[label] = gc._resolve_outplace_all_reduce_method(fake, inp, False)
    # MSCCL++ (when it has a tuned config for the size) is asked before PCIe-IPC; torch
    # symmetric memory after it
    fake = types.SimpleNamespace(
        ca_comm=None,
        pcie_ipc_comm=comm(True, "should_pcie_ipc_ar"),
        qr_comm=None,
        pymscclpp_comm=types.SimpleNamespace(disabled=False),
        torch_symm_mem_comm=comm(True, "should_torch_symm_mem_allreduce"),
        pynccl_comm=None,
    )
    order["mscclpp_wants"] = gc._resolve_outplace_all_reduce_method(fake, inp, True)
    order["symm_mem_too"] = gc._resolve_outplace_all_reduce_method(fake, inp, False)
    det = {}
    for one, d in ((None, "0"), (None, "1"), ("0", "1"), ("1", "0")):
        with environ(SGLANG_USE_1STAGE_ALLREDUCE=one, SGLANG_ENABLE_DETERMINISTIC_INFERENCE=d):
            det[f"{one}/{d}"] = gc._deterministic_collectives_enabled()
    src = inspect.getsource(gc.all_reduce)
    init = inspect.getsource(gc.__init__)
    return {
        "order": order,
        "deterministic": det,
        "symm_before_dispatch": src.index("is_symmetric_memory_enabled()")
        < src.index("_resolve_outplace_all_reduce_method("),
        "pcie_built_before_custom": init.index("PcieIpcCommunicator(")
        < init.index("dispatch_custom_allreduce("),
        "setup_failed_text": "Setup FlashInfer PCIe-IPC allreduce failed with" in init,
    }


def custom_facts() -> dict:
    import torch
    from sglang.srt.arg_groups import serving_hook
    from sglang.srt.distributed.device_communicators import custom_all_reduce as ca
    from sglang.srt.distributed.device_communicators import custom_all_reduce_utils as cu

    rows = []
    for ws, nvlink in ((2, False), (4, False), (8, False), (8, True)):
        fake = types.SimpleNamespace(
            disabled=False,
            world_size=ws,
            full_nvlink=nvlink,
            max_size=ca.CustomAllreduce._MAX_CAR_SIZE,
        )
        for nbytes in (16, ca.CustomAllreduce._MAX_CAR_SIZE, ca.CustomAllreduce._MAX_CAR_SIZE + 16):
            inp = torch.empty(nbytes // 2, dtype=torch.bfloat16)
            rows.append([ws, nvlink, nbytes, bool(ca.CustomAllreduce.should_custom_ar(fake, inp))])
    # its PCIe warning, from the real check on a faked 4-GPU PCIe-only group
    cap = Capture()
    cu.logger.addHandler(cap)
    saved = (cu.dist, cu.in_the_same_node_as, cu.is_full_nvlink)
    fake_dist = types.SimpleNamespace(
        get_backend=lambda group: "gloo",
        get_rank=lambda group=None: 0,
        get_world_size=lambda group=None: 4,
        all_gather=lambda out, t, group=None: [o.copy_(t) for o in out],
        Backend=types.SimpleNamespace(NCCL="nccl"),
    )
    cu.dist = fake_dist
    cu.in_the_same_node_as = lambda group, source_rank=0: [True] * 4
    cu.is_full_nvlink = lambda ids, n: False
    try:
        with environ():
            os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"
            got = cu.can_use_custom_all_reduce_with_nvlink(
                group=None, device=torch.device("cuda", 0), supported_world_size=[2, 4, 6, 8],
                cls_name="CustomAllreduce",
            )  # fmt: skip
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    finally:
        cu.dist, cu.in_the_same_node_as, cu.is_full_nvlink = saved
    return {
        "pcie_warning": {"result": got, "log": list(cap.records)},
        "world_sizes": list(ca.CustomAllreduce._SUPPORTED_WORLD_SIZES),
        "max_size": ca.CustomAllreduce._MAX_CAR_SIZE,
        "should": rows,
        "serving_hook_sets_deterministic": "SGLANG_ENABLE_DETERMINISTIC_INFERENCE.set("
        in inspect.getsource(serving_hook.handle_environment_variables),
    }


def flag_facts() -> dict:
    from sglang.srt.server_args import prepare_server_args

    want = (
        "dtype", "disable_custom_all_reduce", "enable_deterministic_inference",
        "enable_symm_mem", "enable_mscclpp", "enable_torch_symm_mem", "enable_nccl_nvls",
        "cuda_graph_max_bs_decode", "disable_flashinfer_autotune",
    )  # fmt: skip
    parsed = prepare_server_args(
        ["--model-path", "/nonexistent", "--enable-deterministic-inference", "--dtype", "half"]
    )
    default = prepare_server_args(["--model-path", "/nonexistent"])
    dtype_error = None
    try:
        prepare_server_args(["--model-path", "/nonexistent", "--dtype", "bf16"])
    except SystemExit as exc:
        dtype_error = exc.code
    return {
        "fields": {n: hasattr(default, n) for n in want},
        "defaults": {n: getattr(default, n, None) for n in want},
        "parsed": {"deterministic": parsed.enable_deterministic_inference, "dtype": parsed.dtype},
        "bad_dtype_exit": dtype_error,
    }


def main() -> None:
    import io

    real_stderr = sys.stderr
    sys.stderr = io.StringIO()  # argparse's message for the bad --dtype
    try:
        facts = {
            "env": env_facts(),
            "pcie": pcie_facts(),
            "dispatch": dispatch_facts(),
            "custom": custom_facts(),
            "flags": flag_facts(),
        }
    finally:
        sys.stderr = real_stderr
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
