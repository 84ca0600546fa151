"""Runs inside the real-SGLang venv (scripts/sglang-venv.sh): SGLang 0.5.23's own code sizes
the PCIe-IPC workspace's rows for each case on stdin, on CPU; one JSON list on stdout.

Per case (`argv`, `gpu_mem_mib`, `pool`): `prepare_server_args(argv)`, then SGLang's own
resolution steps for the decode batch list (`cuda_graph_hook.parse_cuda_graph_config`,
`memory_hook.handle_gpu_memory_settings` with the GPU memory the case names), then
`base_cuda_graph_runner.get_batch_sizes_to_capture` (what `base_runner._widest_decode_rows`
calls) on a runner whose request pool holds `pool` requests, times
`model_runner.decode_num_tokens_per_req` (the draft tokens of a speculative server, else 1).
Only what needs a GPU or a loaded model is replaced: the device memory query, the runtime
context the graph runner reads (its cuda_graph_config is the resolved one), the attention
alignment (1: no attention DP) and the DLLM config (none). Imports nothing from fastverify.
"""

from __future__ import annotations

import json
import sys
import types
import warnings

warnings.filterwarnings("ignore")


def rows(case: dict) -> dict:
    from sglang.srt.arg_groups import cuda_graph_hook as cgh
    from sglang.srt.arg_groups import memory_hook as mh
    from sglang.srt.arg_groups.model_override_base import resolving_view
    from sglang.srt.model_executor.runner import base_cuda_graph_runner as bcgr
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(["--model-path", case["model"], *case["argv"]])
    cgh.parse_cuda_graph_config(sa)
    mh.get_device_memory_capacity = lambda device=None: case["gpu_mem_mib"]
    mh.handle_gpu_memory_settings(sa)
    cfg = resolving_view(sa).cuda_graph_config
    ns = types.SimpleNamespace
    bcgr.get_exec = lambda: ns(
        graph=ns(cuda_graph_config=cfg, torch_compile_max_bs=0),
        overlap=ns(enable_two_batch_overlap=False),
    )
    bcgr.get_flags = lambda: ns(capture=ns(enable_torch_compile=False))
    bcgr.DllmConfig = ns(from_server_args=lambda server_args: None)
    bcgr.get_cuda_graph_batch_size_alignment = lambda gathered_buffer_required=None: 1
    tokens = int(sa.speculative_num_draft_tokens or 1) if sa.speculative_algorithm else 1
    runner = ns(req_to_token_pool=ns(size=case["pool"]), server_args=sa)
    capture, _ = bcgr.get_batch_sizes_to_capture(runner, tokens)
    return {
        "decode_bs": list(cfg.decode.bs),
        "decode_backend": str(cfg.decode.backend),
        "capture_bs": list(capture),
        "tokens": tokens,
        "rows": max(capture) * tokens,
    }


def main() -> int:
    cases = json.loads(sys.stdin.read())
    out = []
    for case in cases:
        try:
            out.append({"ok": True, **rows(case)})
        except Exception as exc:  # reported per case: the test names which one broke
            out.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
