"""SGLang 0.5.23's adaptive speculative decoding: flags, config format, tiers, refusals, lines.

Read in the installed wheel (tests/contract/test_adaptive_contract.py runs SGLang's own code
against every fact here):
- `srt/speculative/adaptive_spec_params.py`: `DEFAULT_ADAPTIVE_CONFIG` (tiers keyed by batch
  size), the per-tier slot settings and their defaults (`AdaptiveStepSlot.__init__`),
  `_load_adaptive_config` (what a `--speculative-adaptive-config` file must hold),
  `adaptive_unsupported_reason` (why SGLang serves without adaptive), the "updated" log line.
- `srt/arg_groups/speculative_hook.py`: `_maybe_disable_adaptive` logs
  `speculative_adaptive disabled: REASON. Falling back to static speculative params.` and
  serves with fixed steps; `_init_adaptive_speculative_params` refuses a
  `--speculative-num-steps` outside the union of candidates and sets num_draft_tokens =
  steps + 1.
- `srt/managers/tokenizer_manager.py`: a finished request's `meta_info` carries
  `spec_correct_drafts_histogram` (entry j = verify passes that accepted j drafts, the bonus
  token excluded) and `spec_verify_ct`. At steps 0 a verify accepts 0 drafts and still counts.
- `srt/observability/metrics_collector.py`: gauges `sglang:spec_num_steps` and
  `sglang:spec_num_draft_tokens` (the active step count), in `fastverify.sglang.metrics`.

The controller that moves between candidates lives in `fastverify.sglang.adaptive_slot`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastverify.durable import read_json

FLAG_ADAPTIVE = "--speculative-adaptive"
FLAG_ADAPTIVE_CONFIG = "--speculative-adaptive-config"
ALGORITHMS = ("EAGLE", "EAGLE3")  # the only algorithms the built-in worker adapts

# AdaptiveStepSlot's defaults for a key a tier (or the file's top level) leaves out.
SLOT_DEFAULTS: dict[str, float | int] = {
    "ema_alpha": 0.2,
    "update_interval": 5,
    "warmup_batches": 10,
    "down_hysteresis": -0.25,
    "up_hysteresis": 0.0,
    "ceiling_coeff": 0,
}
SLOT_KEYS = ("candidate_steps", *SLOT_DEFAULTS)

DEFAULT_ADAPTIVE_CONFIG: dict[str, dict[str, Any]] = {
    "1": {
        "candidate_steps": [1, 3, 5, 7],
        "up_hysteresis": 0.0,
        "down_hysteresis": -0.25,
        "ceiling_coeff": 0,
    },
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}  # fmt: skip

# --- log lines (TP0) ---
DISABLED_PREFIX = "speculative_adaptive disabled: "
DISABLED_SUFFIX = ". Falling back to static speculative params."
_DISABLED_RE = re.compile(r"speculative_adaptive disabled: (?P<reason>.*?)\. Falling back to")
_UPDATED_RE = re.compile(
    r"Adaptive spec params updated: steps (?P<old>\d+) -> (?P<new>\d+) "
    r"\(ema_accept_len=(?P<ema>-?[0-9.]+)\)"
)

# --- meta_info of a finished request ---
HISTOGRAM_KEY = "spec_correct_drafts_histogram"
VERIFY_CT_KEY = "spec_verify_ct"


class AdaptiveConfigError(ValueError):
    """A --speculative-adaptive-config that SGLang's `_load_adaptive_config` would refuse."""


def format_disabled(reason: str) -> str:
    """The warning `_maybe_disable_adaptive` logs when SGLang serves without adaptive."""
    return f"{DISABLED_PREFIX}{reason}{DISABLED_SUFFIX}"


def parse_disabled(line: str) -> str | None:
    """The reason of a `speculative_adaptive disabled: ...` line, None for any other line."""
    m = _DISABLED_RE.search(line)
    return m.group("reason") if m else None


def format_updated(old: int, new: int, ema: float) -> str:
    """`AdaptiveStepSlot`'s info line when it moves (TP0 only)."""
    return f"Adaptive spec params updated: steps {old} -> {new} (ema_accept_len={ema:.2f})"


@dataclass(frozen=True)
class StepChange:
    old: int
    new: int
    ema: float


def parse_updated(line: str) -> StepChange | None:
    """The step change of an `Adaptive spec params updated: ...` line, or None."""
    m = _UPDATED_RE.search(line)
    if m is None:
        return None
    return StepChange(int(m.group("old")), int(m.group("new")), float(m.group("ema")))


def unsupported_reason(
    algorithm: str | None,
    topk: int | None = 1,
    *,
    attention_dp: bool = False,
    multi_layer_eagle: bool = False,
    two_batch_overlap: bool = False,
    pdmux: bool = False,
) -> str | None:
    """Why SGLang 0.5.23 would serve these args without adaptive (its own wording, checked in
    the same order as `adaptive_unsupported_reason`), or None when adaptive runs. The
    platform-worker check (a non-CUDA platform's own EAGLE worker) is not modelled: on CUDA
    there is none."""
    if algorithm not in ALGORITHMS:
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if attention_dp:
        return (
            "attention DP is not supported "
            "(adaptive tier decisions are not synchronized across DP ranks)"
        )
    if multi_layer_eagle:
        return (
            "enable_multi_layer_eagle=True is not supported "
            "(MultiLayerEagleWorkerV2 does not implement adaptive)"
        )
    if two_batch_overlap:
        return (
            "enable_two_batch_overlap=True is not supported "
            "(adaptive state swap would discard the TboAttnBackend wrapper)"
        )
    if pdmux:
        return (
            "enable_pdmux=True is not supported "
            "(adaptive state swap does not update decode_attn_backend_group)"
        )
    return None


def tiers(cfg: object) -> dict[int, dict[str, Any]]:
    """The batch-size tiers of a config, checked as `_load_adaptive_config` checks them (keys
    that are not digit strings are file-wide settings), each merged over the file-wide
    settings as `AdaptiveSpeculativeParams` merges them. AdaptiveConfigError names what is
    wrong and what would be right."""
    if not isinstance(cfg, dict):
        raise AdaptiveConfigError(
            f"an adaptive config is a JSON object keyed by batch size, got {type(cfg).__name__}"
        )
    out: dict[int, dict[str, Any]] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if (
            not isinstance(steps, list)
            or not steps
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)
        ):
            raise AdaptiveConfigError(
                f"batch-size tier {key!r}: candidate_steps must be a non-empty list of "
                f"non-negative ints (0 = no drafting), got {steps!r}"
            )
        out[int(key)] = {**cfg, **entry}
    if not out:
        raise AdaptiveConfigError(
            'an adaptive config needs at least one batch-size tier, e.g. {"1": '
            f'{{"candidate_steps": [1, 3, 7]}}}}; got keys {list(cfg)}'
        )
    return out


def candidate_steps(cfg: dict[str, Any]) -> list[int]:
    """Every tier's candidates together (what sizes SGLang's runtime states; the launch's
    --speculative-num-steps must be one of these)."""
    return sorted({s for t in tiers(cfg).values() for s in t["candidate_steps"]})


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and check a --speculative-adaptive-config file (AdaptiveConfigError if bad)."""
    p = Path(path)
    cfg: dict[str, Any] = read_json(p, AdaptiveConfigError)
    try:
        tiers(cfg)
    except AdaptiveConfigError as exc:
        raise AdaptiveConfigError(f"{p}: {exc}") from None
    return cfg
