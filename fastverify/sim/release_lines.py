"""The sim's CUDA-graph capture milestones in the served release's own words.

SGLang's `cuda_graph_setup.py` prints one begin and one end line per captured phase, and
the releases differ: 0.5.17-0.5.22 put the decode batch sizes (`bs=[...]`) on the begin
line, 0.5.23 on the end line. The templates come from the release's facts (the f-strings
of its wheel, `scripts/sglang_facts.py`: `capture_begin` / `capture_end`), so the sim
prints what that release prints; a release whose facts lack them (before the
`cuda_graph_setup.py` split) is printed as the pinned release prints. A template whose
placeholders the sim has no value for raises KeyError: a release that changed the line is
found by the suite, not papered over.
"""

from __future__ import annotations

import re
from typing import Any

from fastverify.sglang.facts import resolve as resolve_facts
from fastverify.sglang.versions import PINNED_VERSION

SETUP_FILE = "cuda_graph_setup.py"
# `{expr}` or `{expr:spec}` of an f-string template, as the facts keep it
_FIELD = re.compile(r"\{([^{}:!]+)(?::([^{}]*))?\}")
# what the decode line's `{graph_backend[model_runner.device]}` is on a CUDA device
GRAPH_BACKEND = "CUDA graph"


EAGLE_FILE = "eagle_worker_v2.py"


def _templates(version: str, kind: str) -> dict[str, str]:
    """{"decode": .., "prefill": .., "draft decode": .., "draft extend": ..}: the templates
    of `kind` (capture_begin / capture_end) printed by cuda_graph_setup.py (the target's
    phases and the draft's prefill) and eagle_worker_v2.py (the draft's decode and
    extend) in `version`, else in the pinned release."""
    for v in (version, PINNED_VERSION):
        found: dict[str, str] = {}
        for e in resolve_facts(v).log_formats.get(kind) or []:
            text = "".join(e["pieces"])
            if SETUP_FILE in e["at"]:
                found.setdefault("decode" if "{graph_backend" in text else "prefill", text)
            elif EAGLE_FILE in e["at"]:
                for phase in ("draft decode", "draft extend"):
                    if text.startswith(f"Capture {phase} "):
                        found.setdefault(phase, text)
        if {"decode", "prefill"} <= set(found):
            return found
    raise KeyError(f"no {kind} templates of {SETUP_FILE} in the facts of {version}")


def _template(version: str, kind: str, role: str, phase: str) -> str:
    found = _templates(version, kind)
    if role == "draft" and phase in ("decode", "extend"):
        return found[f"draft {phase}"]
    return found["prefill" if phase == "prefill" else "decode"]


def render(template: str, values: dict[str, Any]) -> str:
    return _FIELD.sub(lambda m: format(values[m.group(1).strip()], m.group(2) or ""), template)


def capture_begin(
    version: str,
    role: str,
    phase: str,
    backend: str,
    avail_gb: float,
    sizes: list[int],
    per_req: int = 1,
) -> str:
    """The begin line of `role` `phase` (prefill: `sizes` are token counts, else batch
    sizes; `per_req`: tokens per request, the draft tokens of a verify or extend)."""
    return render(_template(version, "capture_begin", role, phase), {
        "capture_name": f"{role} {phase}",
        "graph_backend[model_runner.device]": GRAPH_BACKEND,
        "decode_backend": backend,
        "prefill_backend": backend,
        "num_tokens_per_req": per_req,
        "self.topk": per_req,
        "self.speculative_num_draft_tokens": per_req,
        "capture_bs": sizes,
        "capture_num_tokens": sizes,
        "before_mem": avail_gb,
    })  # fmt: skip


def capture_end(
    version: str,
    role: str,
    phase: str,
    elapsed_s: float,
    mem_gb: float,
    avail_gb: float,
    sizes: list[int],
) -> str:
    return render(_template(version, "capture_end", role, phase), {
        "capture_name": f"{role} {phase}",
        "graph_backend[model_runner.device]": GRAPH_BACKEND,
        "runner.capture_bs": sizes,
        "capture_time": elapsed_s,
        "mem_usage": mem_gb,
        "memory_usage_gb": mem_gb,
        "before_mem - after_mem": mem_gb,
        "after_mem": avail_gb,
    })  # fmt: skip


def startup_timings(
    version: str,
    load_weight: float,
    kv_alloc: float,
    scheduler_e2e: float,
    graphs: dict[str, float],
    tokenizer_e2e: float,
) -> str | None:
    """entrypoints/engine.py's "Engine startup timings (s): ..." line where the release
    prints it (its %-format template from the facts), else None. `graphs`: the capture
    seconds by SGLang's phase names (prefill, decode, target_verify, draft_prefill, ...)."""
    entries = resolve_facts(version).log_formats.get("startup_timings") or []
    if not entries:
        return None
    cuda_graph = ", ".join(f"{k}={v:.2f}" for k, v in graphs.items())
    template = "".join(entries[0]["pieces"])
    return template % (load_weight, kv_alloc, scheduler_e2e, cuda_graph, tokenizer_e2e)
