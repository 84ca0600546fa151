"""Every fact fastverify relies on about SGLang, in one place, per release.

- `facts`: one release's facts (0.5.1 .. 0.5.23, one JSON per release read from its wheel
  by scripts/sglang_facts.py) and the version policy (`resolve`: newer -> the newest facts
  with a warning, older -> refused; `require`: "SGLang X.Y.Z has no ...").
- `versions`: the pinned version, the supported range and flag generations.
- `launch`: `LaunchArgs` (a typed launch-args object) and its `to_argv(generation)`.
- `envrules`: the NCCL variables SGLang adds to its own environment (and its schedulers')
  as a function of the launch args, per version.
- `loglines`: the grammar of SGLang's log lines (decode, prefill, ready, load/capture
  progress, capture failures, argv errors).
- `spans`: profiler step-span names (`step[VERIFY bs=N]`, `step[DRAFT bs=N]`, older
  `step[TARGET_VERIFY bs=N]`).
- `metrics`: `sglang:*` metric names and their label names.
- `client`: the one HTTP client of a running SGLang server (daemon, exporter, bench).
- `request_stamps`: the per-request time stamps SGLang streams with `--enable-metrics`, the
  split of a first token they give and the prefill forwards they show.

Each fact is checked against the real `sglang` package by tests/contract/.
The daemon, the exporter and the sim import these; nothing else spells an SGLang string.
"""

from typing import Any

__all__ = ["PINNED_VERSION", "SUPPORTED_VERSIONS"]


def __getattr__(name: str) -> Any:
    """`PINNED_VERSION`, `SUPPORTED_VERSIONS` on first use (PEP 562): a module of this
    package (envvars on `profile list`'s path) then does not load versions, the facts and
    json with it."""
    if name in __all__:
        from fastverify.sglang import versions

        return getattr(versions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
