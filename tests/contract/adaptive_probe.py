"""Runs inside the real-SGLang venv: answers questions about adaptive speculative decoding
with SGLang 0.5.23's own code (`srt/speculative/adaptive_spec_params.py`,
`srt/arg_groups/speculative_hook.py`). JSON request on stdin, one JSON object on stdout.

Imports nothing from fastverify: the facts fastverify holds are compared in the tests.
Request keys:
- "runs": [{"initial": int, "config": {...}, "cuda_graph_bs": [int] | null,
            "feed": [[batch_size, [accepted drafts per request]], ...]}]
  -> "runs": [[steps for that batch after each feed], ...] via AdaptiveSpeculativeParams
- "configs": [path] -> "configs": [{"ok": bool, "error": str, "candidates": [int]}]
  via _load_adaptive_config / resolve_candidate_steps_from_config
- "reasons": [{...server args...}] -> "reasons": [str | null] via adaptive_unsupported_reason
- "draft_forwards": [num_steps] -> "draft_forwards": {num_steps: drafter forwards} counted by
  running `EagleDraftWorker.draft_forward` (srt/speculative/eagle_worker_v2.py, topk 1, greedy,
  the CPU path) over a draft runner that only counts its `forward` calls
- "closed_loop": [{"config": path, "initial": int, "batch": int, "cuda_graph_bs": [int] | null,
                   "draws": [[drafts each request would accept at unlimited steps], ...]}]
  -> "closed_loop": [[steps of each pass]]: `AdaptiveSpeculativeParams` choosing the steps of
  each pass itself, fed min(draw, steps) per request (0 at steps 0), as SGLang feeds it
- sources: the steps-0 branches of `forward_batch_generation`, the trivial verify input, the
  spec-config override of `apply_runtime_state`, the accept-rate denominator of the
  scheduler's decode log (`metrics_reporter.py`), the request metrics file exporter
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import tempfile
import types
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)


def main() -> None:
    req = json.loads(sys.stdin.read())
    import sglang
    from sglang.srt.arg_groups import speculative_hook
    from sglang.srt.speculative import adaptive_spec_params as asp

    out: dict = {"version": sglang.__version__}
    out["default_config"] = asp.DEFAULT_ADAPTIVE_CONFIG
    bare = asp.AdaptiveStepSlot(1, {"candidate_steps": [1]})
    out["slot_defaults"] = {
        k: getattr(bare, k)
        for k in ("ema_alpha", "update_interval", "warmup_batches", "down_hysteresis",
                  "up_hysteresis", "ceiling_coeff")
    }  # fmt: skip
    out["disable_source"] = inspect.getsource(speculative_hook._maybe_disable_adaptive)
    out["init_source"] = inspect.getsource(speculative_hook._init_adaptive_speculative_params)
    out["updated_source"] = inspect.getsource(asp.AdaptiveStepSlot._apply_target_steps)
    from sglang.srt.managers import tokenizer_manager
    from sglang.srt.observability import metrics_collector

    out["meta_info_source"] = inspect.getsource(
        tokenizer_manager.TokenizerManager._calculate_spec_decoding_metrics
    )
    out["collector_source"] = inspect.getsource(metrics_collector)

    runs = []
    for run in req.get("runs", []):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(run["config"], fh)
        try:
            params = asp.AdaptiveSpeculativeParams(run["initial"], fh.name)
        finally:
            os.unlink(fh.name)
        params.set_cuda_graph_bs(run.get("cuda_graph_bs"))
        seq = []
        for bs, drafts in run["feed"]:
            params.on_verify_complete(drafts, bs)
            seq.append(params.get_steps_for_batch(bs))
        runs.append(seq)
    out["runs"] = runs

    configs = []
    for path in req.get("configs", []):
        try:
            asp._load_adaptive_config(path)
            configs.append(
                {"ok": True, "candidates": asp.resolve_candidate_steps_from_config(path)}
            )
        except Exception as exc:  # what SGLang refuses, with its message
            configs.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    out["configs"] = configs

    # adaptive_unsupported_reason on plain argument objects: its two derived views read
    # fields of the args (attention DP from attn_dp_size, multi-layer EAGLE as a field)
    asp.resolved_view = lambda sa: sa
    asp.attn_dp_enabled_of = lambda cfg: cfg.attn_dp_size > 1
    reasons = []
    for fields in req.get("reasons", []):
        args = types.SimpleNamespace(
            speculative_algorithm="EAGLE3", speculative_eagle_topk=1, attn_dp_size=1,
            enable_multi_layer_eagle=False, enable_two_batch_overlap=False,
            enable_pdmux=False,
        )  # fmt: skip
        for k, v in fields.items():
            setattr(args, k, v)
        reasons.append(asp.adaptive_unsupported_reason(args))
    out["reasons"] = reasons
    out["draft_forwards"] = {k: draft_forwards(k) for k in req.get("draft_forwards", [])}
    out["closed_loop"] = [closed_loop(run) for run in req.get("closed_loop", [])]
    sources(out)
    print(json.dumps(out))


def closed_loop(run: dict) -> list[int]:
    from sglang.srt.speculative import adaptive_spec_params as asp

    params = asp.AdaptiveSpeculativeParams(run["initial"], run["config"])
    params.set_cuda_graph_bs(run.get("cuda_graph_bs"))
    bs = run["batch"]
    seq = []
    for draws in run["draws"]:
        steps = params.get_steps_for_batch(bs)
        params.on_verify_complete([min(j, steps) if steps > 0 else 0 for j in draws], bs)
        seq.append(steps)
    return seq


def sources(out: dict) -> None:
    from sglang.srt import environ
    from sglang.srt.managers.scheduler_components import metrics_reporter
    from sglang.srt.observability import request_metrics_exporter as rme
    from sglang.srt.speculative import eagle_worker_v2 as w

    out["forward_source"] = inspect.getsource(w.EAGLEWorkerV2.forward_batch_generation)
    out["trivial_verify_source"] = inspect.getsource(w.EAGLEWorkerV2._build_trivial_verify_input)
    out["apply_state_source"] = inspect.getsource(w.EAGLEWorkerV2.apply_runtime_state)
    out["decode_log_source"] = inspect.getsource(metrics_reporter)
    out["exporter_source"] = inspect.getsource(rme.FileRequestMetricsExporter)
    out["skip_extend_default"] = environ.envs.SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND.get()


def draft_forwards(steps: int, bs: int = 2) -> int:
    """How many drafter forwards SGLang's own draft_forward runs per cycle at `steps`."""
    import torch
    from sglang.srt.speculative import eagle_worker_v2 as w

    calls = []
    ns = types.SimpleNamespace

    class CountingRunner:
        canary_manager = None
        model_config = ns(hf_config=ns(architectures=["LlamaForCausalLMEagle3"]),
                          model_is_mrope=False)  # fmt: skip

        def forward(self, fb: object) -> object:
            calls.append(fb)
            logits = torch.randn(fb.batch_size, 32)
            return ns(logits_output=ns(next_token_logits=logits,
                                       hidden_states=torch.zeros(fb.batch_size, 8)))  # fmt: skip

    w.get_spec = lambda: ns(speculative_use_rejection_sampling=False)  # greedy sampling
    worker = object.__new__(w.EagleDraftWorker)  # the method's own state, no model
    worker.speculative_num_steps = steps
    worker.speculative_num_draft_tokens = steps + 1
    worker.topk = 1
    worker.hot_token_id = None
    worker.draft_runner = CountingRunner()
    worker.draft_attn_backend = ns(attn_backends=[None] * steps)
    worker.index_share_for_mtp_iteration = False
    worker.seed_dsa_topk_from_draft_extend = False
    worker._topk1_parents_prealloc = torch.zeros(64, steps, dtype=torch.long)
    worker._topk1_score_indices_prealloc = torch.zeros(64, steps + 1, dtype=torch.long)
    spec_info = ns(topk_p=torch.ones(bs, 1), topk_index=torch.zeros(bs, 1, dtype=torch.long),
                   hidden_states=torch.zeros(bs, 8))  # fmt: skip
    batch = ns(spec_info=spec_info, forward_mode=ns(is_idle=lambda: False),
               out_cache_loc=torch.arange(bs * steps), batch_size=bs,
               positions=torch.zeros(bs, dtype=torch.long), sampling_info=ns(is_all_greedy=True),
               input_ids=None, moe_num_token_non_padded=None)  # fmt: skip
    w.EagleDraftWorker.draft_forward(worker, batch)
    return len(calls)


if __name__ == "__main__":
    main()
