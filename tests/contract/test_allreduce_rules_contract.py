"""fastverify's all-reduce rules against SGLang 0.5.23's own code and
sources, in its venv (scripts/sglang-venv.sh).

- The PCIe-IPC workspace bound: SGLang's own resolution of the decode batch list and its
  `get_batch_sizes_to_capture` (tests/contract/bound_probe.py) for several argument sets,
  compared with `fastverify.sglang.allreduce.widest_decode_rows`.
- The logger per rank at each --log-level (tests/contract/logger_probe.py): what the daemon
  and the sim assume about which PCIe-IPC lines a server at `--log-level warning` prints.
- The dispatch facts read from the wheel's source: the fusion all-reduce's architectures and
  its auto-enable conditions (`arg_groups/overrides.py`), `--rl-on-policy-target` turning
  deterministic inference on (`attention_hook.py`), the eligible groups.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fastverify.daemon.allreduce_check import log_lines_visible
from fastverify.sglang import allreduce as ar
from fastverify.sglang.loglines import parse_sglang_line
from fastverify.sim import sglang_logs
from tests.support.contract import HERE, TINY_LLAMA

SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens"]
# (server args, GPU memory in MiB (None: unknown), the request pool SGLang sized at load)
CASES: list[tuple[list[str], int | None, int]] = [
    (["--tp-size", "8"], 143771, 4096),  # H200 at TP 8: default max_bs 512
    (["--tp-size", "2", "--disable-cuda-graph", *SPEC, "4", "--cuda-graph-max-bs-decode", "48"],
     81559, 24),  # graphs off: the list still counts, capped at the pool, x 4 draft tokens
    (["--tp-size", "4", "--cuda-graph-bs-decode", "1", "2", "4", "12"], 143771, 8),
    (["--tp-size", "2", "--max-running-requests", "20"], 24000, 4096),  # default max_bs capped
    (["--tp-size", "8", *SPEC, "3", "--disable-cuda-graph-padding",
      "--cuda-graph-max-bs-decode", "10"], None, 6),
    (["--tp-size", "4", *SPEC, "2"], 45000, 100),  # 40 GiB class at TP 4: 160, pool 100
    (["--tp-size", "2", "--cuda-graph-backend-decode", "disabled"], None, 4096),
]  # fmt: skip


def _run(python: Path, script: str, *args: str, stdin: str = "") -> Any:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [str(python), str(HERE / script), *args],
        input=stdin, capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    if out.returncode != 0:
        pytest.fail(f"{script} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model")
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    return d


def test_the_workspace_bound_is_sglangs_own_for_every_argument_set(
    sglang_python: Path, model: Path
) -> None:
    cases = [
        {"model": str(model), "argv": [*a, *(["--speculative-draft-model-path", str(model)]
                                           if "EAGLE3" in a else [])],
         "gpu_mem_mib": mem, "pool": pool}
        for a, mem, pool in CASES
    ]  # fmt: skip
    real = _run(sglang_python, "bound_probe.py", stdin=json.dumps(cases))
    assert len(real) == len(CASES)
    for case, got in zip(cases, real, strict=True):
        assert got["ok"], (case["argv"], got)
        args = ar.ServerArgs.from_argv(["--model-path", case["model"], *case["argv"]])
        assert ar.decode_batch_sizes(args, case["gpu_mem_mib"]) == got["decode_bs"], case
        ours = ar.widest_decode_rows(args, case["pool"], case["gpu_mem_mib"])
        assert ours == got["rows"], (case["argv"], ours, got)
        assert ar.capture_batch_sizes(args, case["pool"], case["gpu_mem_mib"]) == got[
            "capture_bs"]  # fmt: skip
    # the graphs-off case: SGLang still sizes from the list (not a fixed 64 rows)
    off = real[1]
    assert off["decode_backend"].lower().endswith("disabled") and off["rows"] == 24 * 4


def test_the_logger_per_rank_at_warning_and_info(sglang_python: Path) -> None:
    out = _run(sglang_python, "logger_probe.py", "3", "warning", "info")
    warn, info = out["warning"], out["info"]
    # SGLang at warning: the PCIe-IPC confirmations (INFO) are gone, its warnings are not
    assert ar.ENABLED_TEXT not in warn and ar.DETERMINISTIC_TEXT in warn
    assert ar.ENABLED_TEXT in info and ar.DETERMINISTIC_TEXT in info
    for line in info.splitlines():  # the TP prefix the daemon attributes ranks by
        rec = parse_sglang_line(line)
        assert rec is not None and rec.get("tp_rank") == 3, line
    # a logging config of the user's replaces SGLang's: no line carries a TP prefix
    assert " TP3]" not in out["logging_config"]
    # what fastverify assumes: lines visible only at info/debug and without such a config
    for level, text in (("warning", warn), ("info", info)):
        visible = bool(log_lines_visible({}, ar.ServerArgs(log_level=level)))
        assert visible == (ar.ENABLED_TEXT in text), level
    assert not log_lines_visible({"SGLANG_LOGGING_CONFIG_PATH": "/x.json"}, ar.ServerArgs())
    # the sim writes and filters the same way (prefix and level)
    for level, text in (("warning", warn), ("info", info)):
        buf = io.StringIO()
        w = sglang_logs.LogWriter(buf, level)
        w.log(ar.ENABLED_FORMAT.format(world=4), 3, "info")
        w.log(ar.DETERMINISTIC_FORMAT, 3, "warning")
        strip = re.compile(r"^\[[0-9-]+ [0-9:]+ TP3\] ", re.M)
        assert strip.sub("", buf.getvalue()) == strip.sub("", text), level


def _sglang_root(python: Path) -> Path:
    (site,) = python.parent.parent.glob("lib/python3*/site-packages")
    return site / "sglang" / "srt"


def test_fusion_allreduce_auto_enable_matches_overrides(sglang_python: Path) -> None:
    src = (_sglang_root(sglang_python) / "arg_groups" / "overrides.py").read_text()
    tree = ast.parse(src)
    archs: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_FLASHINFER_ALLREDUCE_FUSION_ARCHS"
            for t in node.targets
        ):
            archs = {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    assert archs and archs == set(ar.FUSION_ARCHS)
    fn = src[src.index("def _flashinfer_allreduce_fusion_auto_enable") :]
    fn = fn[: fn.index("\n@register_post_process")]
    # the conditions fastverify.sglang.allreduce.fusion_backend models, each in the source
    for cond in ("is_sm90 or get_platform().is_sm100", "view.tp_size > 1",
                 "not attn_dp_enabled_of(view)", "view.nnodes == 1 or get_platform().is_sm100",
                 'view.moe_a2a_backend == "none"'):  # fmt: skip
        assert cond in fn, cond
    assert "enforce_disable_flashinfer_allreduce_fusion" in src
    assert "def _deterministic_allreduce_fusion_disable" in src
    on = ar.ServerArgs(tp_size=8, architecture="DeepseekV3ForCausalLM")
    assert ar.fusion_backend(on, 90) is not None and ar.fusion_backend(on, 120) is None
    det = ar.ServerArgs(tp_size=8, architecture="DeepseekV3ForCausalLM", rl_on_policy_target=True)
    assert ar.fusion_backend(det, 90) is None  # deterministic inference turns it off


def test_rl_on_policy_target_turns_deterministic_on(sglang_python: Path) -> None:
    src = (_sglang_root(sglang_python) / "arg_groups" / "attention_hook.py").read_text()
    assert "Enable deterministic inference because of rl_on_policy_target." in src
    args = ar.ServerArgs.from_argv(["--tp-size", "8", "--rl-on-policy-target", "fsdp"])
    d = ar.dispatch(env={ar.ENABLE_VAR: "1"}, args=args)
    assert d.serving == ar.NCCL and "--rl-on-policy-target" in d.fallbacks[0]


def test_only_the_tp_group_is_eligible_and_the_order(sglang_python: Path) -> None:
    root = _sglang_root(sglang_python) / "distributed"
    pcie = (root / "device_communicators" / "pcie_ipc_ar.py").read_text()
    assert '_ELIGIBLE_GROUP_NAMES = frozenset({"tp"})' in pcie
    assert "attention_tp / moe_tp" in pcie  # the groups that never get it
    ps = (root / "parallel_state.py").read_text()
    body = ps[ps.index("def _resolve_outplace_all_reduce_method") :]
    order = [body.index(f'return "{m}"') for m in ("ca", "pcie_ipc", "qr", "pymscclpp")]
    assert order == sorted(order)  # custom AR, then PCIe-IPC, then quick AR, then MSCCL++
    doc = ar.__doc__ or ""
    assert doc.index("FlashInfer's fusion all-reduce") < doc.index("custom all-reduce (`ca`)")
    assert doc.index("custom all-reduce (`ca`)") < doc.index("FlashInfer PCIe-IPC (`pcie_ipc`)")
    ep = ar.dispatch(env={ar.ENABLE_VAR: "1"}, args=ar.ServerArgs(tp_size=8, ep_size=8))
    assert any("moe_tp" in n for n in ep.notes)
    multi = ar.dispatch(env={ar.ENABLE_VAR: "1"}, args=ar.ServerArgs(tp_size=8, nnodes=2))
    assert multi.serving == ar.NCCL and "intra-node only" in multi.fallbacks[0]
