"""SGLang versions: the pinned one, the supported range and the flag generations.

- "new" (0.5.21 and later; the pinned 0.5.23): per-phase CUDA-graph flags
  `--cuda-graph-backend-decode/-prefill full|breakable|disabled`; the prefill phase
  captures by default on CUDA (breakable backend), so "CUDA graphs off" takes both.
- "old" (0.5.20 and earlier): `--disable-cuda-graph` (decode graphs only existed).
"""

from __future__ import annotations

PINNED_VERSION = "0.5.23"
# Versions whose facts tests/contract/ checked against the real package.
SUPPORTED_VERSIONS = ("0.5.23",)
NEW_FLAGS_SINCE = (0, 5, 21)
FLAG_GENERATIONS = ("new", "old")


def parse_version(text: str) -> tuple[int, ...]:
    """`"0.5.23.post1"` -> (0, 5, 23); stops at the first part without digits."""
    parts = []
    for piece in text.strip().split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def generation_for(version: str) -> str:
    """'new' or 'old' flag generation for an SGLang version string."""
    v = parse_version(version)
    return "new" if v and v >= NEW_FLAGS_SINCE else "old"


def is_supported(version: str) -> bool:
    return parse_version(version) in {parse_version(v) for v in SUPPORTED_VERSIONS}
