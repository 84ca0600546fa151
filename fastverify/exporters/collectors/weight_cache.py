"""SGLang's weight cache as fastverifyd runs it: ready, the GPU memory it holds, starts it
served and starts that fell back to disk. The weight-cache part (daemon/weights.py) adds
this source to the hub when it is configured (absent while weight_cache = off)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import Source, one, rows

# Why a start the weight cache should have served loaded from disk (daemon/weights.py):
# SGLang refused its fingerprint, its socket refused, no socket, the cache not ready.
FALLBACKS = ("mismatch", "refused", "socket_missing", "unavailable")


class WeightCacheSource(Source):
    NAME = "weight_cache"
    _group: tuple[bool, int | None] | None = None  # (ready, bytes) once told
    _hits = 0
    _fallbacks: Counter[str] | None = None

    def set_group(self, up: bool, nbytes: int | None) -> None:
        """The cache's process group: serving (ready) or not, and the GPU memory it holds."""
        with self.hub.lock:
            self._group = (bool(up), nbytes)
            self.hub.changed()

    def on_start(self, weights: Mapping[str, Any]) -> None:
        """A start came up (daemon/weights.py's record): a cache hit, or a fallback to disk
        by reason."""
        with self.hub.lock:
            if weights.get("source") == "cache":
                self._hits += 1
            elif weights.get("fallback"):
                self._fallbacks = self._fallbacks or Counter()
                self._fallbacks[str(weights.get("reason") or "unavailable")] += 1
            self.hub.changed()

    def families(self, now: float) -> Iterable[Metric | None]:
        if self._group is None:
            return
        up, nbytes = self._group
        yield one("fastverify_weight_cache_up", 1.0 if up else 0.0)
        yield one("fastverify_weight_cache_bytes", nbytes if up else 0)
        yield one("fastverify_weight_cache_hits_total", self._hits)
        yield rows("fastverify_weight_cache_fallbacks_total",
                   {**dict.fromkeys(FALLBACKS, 0), **(self._fallbacks or {})})  # fmt: skip
