"""SGLang's weight cache as fastverifyd runs it (absent while weight_cache = off): ready,
the GPU memory it holds, starts it served and starts that fell back to disk."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import SourceCollector, one, rows


class WeightCacheCollector(SourceCollector):
    SOURCE = "weight_cache"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        wc = s.get("weight_cache")
        if wc is None:
            return
        up, nbytes = wc
        yield one("fastverify_weight_cache_up", 1.0 if up else 0.0)
        yield one("fastverify_weight_cache_bytes", nbytes if up else 0)
        yield one("fastverify_weight_cache_hits_total", s["weight_cache_hits"])
        yield rows("fastverify_weight_cache_fallbacks_total", s["weight_cache_fallbacks"])
