"""SGLang versions: the pinned one, the supported range and the flag generations.

The range is every release with a facts file (`fastverify.sglang.facts`: 0.5.1 .. 0.5.23,
read from each release's wheel); the generation of a known release is what its wheel
declares (`features.flag_generation`), the threshold below only for versions outside it.

- "new" (the per-phase CUDA-graph flags `--cuda-graph-backend-decode/-prefill ...
  disabled` exist: 0.5.14 and later by the wheels; the pinned 0.5.23): "CUDA graphs off"
  takes both phases, since the prefill phase captures by default on CUDA (breakable).
- "old" (0.5.13 and earlier): `--disable-cuda-graph` (decode graphs only existed).
"""

from __future__ import annotations

from fastverify.sglang import facts as _facts

PINNED_VERSION = "0.5.23"
# Every release whose facts were read from its own wheel (scripts/sglang_facts.py).
SUPPORTED_VERSIONS = _facts.known_versions()
NEW_FLAGS_SINCE = (0, 5, 14)
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
    """'new' or 'old' flag generation for an SGLang version string: the release's own
    (its facts) when known, else by NEW_FLAGS_SINCE."""
    release = _facts.release_for(version)
    if release is not None:
        return _facts.resolve(release).flag_generation
    v = parse_version(version)
    return "new" if v and v >= NEW_FLAGS_SINCE else "old"


def is_supported(version: str) -> bool:
    """Is `version` a release fastverify has facts for (any .postN of it)?"""
    return _facts.release_for(version) is not None
