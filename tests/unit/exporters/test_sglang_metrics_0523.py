"""`sglang_metrics.reduce` on 0.5.23's series and labels (names and label names from
fastverify.sglang.metrics, which tests/contract checks against the real package): two TP
ranks (only the lowest read), is_streaming split counters summed, passes per mode."""

from __future__ import annotations

from fastverify.exporters import sglang_metrics
from fastverify.sglang import metrics as m

SCHED = 'model_name="k",engine_type="unified",pp_rank="0",moe_ep_rank="0"'
TOK = 'model_name="k",engine_type="unified"'


def _text() -> str:
    """Exposition as prometheus_client's generate_latest writes it: HELP and TYPE (a
    counter under its `_total` name), then the family's samples."""
    fams: dict[str, list[str]] = {}

    def add(name: str, labels: str, value: float) -> None:
        fams.setdefault(name, []).append(f"{name}{{{labels}}} {value}")

    for rank in (0, 1):
        lab = f'{SCHED},tp_rank="{rank}"'
        add(m.IS_CUDA_GRAPH, lab, 1 - rank)  # rank 1 differs: never read
        add(m.CUDA_GRAPH_PASSES_TOTAL, f'{lab},mode="decode_cuda_graph"', 40 + rank)
        add(m.CUDA_GRAPH_PASSES_TOTAL, f'{lab},mode="prefill_none"', 3 + rank)
        add(m.NUM_RUNNING_REQS, lab, 2)
    add(m.GENERATION_TOKENS_TOTAL, f'{TOK},is_streaming="true"', 100)
    add(m.GENERATION_TOKENS_TOTAL, f'{TOK},is_streaming="false"', 20)
    add(m.SPEC_VERIFY_CALLS_TOTAL, TOK, 7)
    add(m.STARTUP_CUDA_GRAPH_TIME_SECONDS, f'{TOK},phase="decode"', 1.5)
    add(m.STARTUP_CUDA_GRAPH_TIME_SECONDS, f'{TOK},phase="prefill"', 0.5)
    lines = []
    for name, rows in fams.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        lines += [f"# HELP {name} h", f"# TYPE {name} {kind}"]
        lines += rows
    return "\n".join(lines) + "\n"


def test_reduce_reads_the_0523_series() -> None:
    out = sglang_metrics.reduce(_text())
    assert out["is_cuda_graph"] == 1.0
    assert out["cuda_graph_passes_total_decode_cuda_graph"] == 40.0
    assert out["cuda_graph_passes_total_prefill_none"] == 3.0
    assert out["num_running_reqs"] == 2.0
    assert out["generation_tokens_total"] == 120.0
    assert out["spec_verify_calls_total"] == 7.0
    assert out["startup_cuda_graph_seconds"] == 2.0
    assert "weight_load_duration_seconds" not in out
