"""The engine as the daemon sees it: up, the active profile and its settings (the hub's
identity), the server's SGLang release and, for a drafting server, whether SGLang forces
its accept length (SGLANG_SIMULATE_ACC_LEN) or the drafter earns it. The TP all-reduce
backend is the all-reduce part's source (collectors/allreduce.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import Source, info, one
from fastverify.redact import is_secret_name
from fastverify.sglang.forced import SETTINGS_KEY as ACCEPTANCE_SOURCE

_LABEL_BAD = re.compile(r"[^a-z0-9_]")
_RESERVED = {"profile", "mode", "engine"}


def profile_labels(
    profile: str, mode: str, engine: str, settings: dict[str, str]
) -> dict[str, str]:
    """Labels of fastverify_profile_info: identity + every non-secret profile setting,
    lower-cased (`NCCL_ALGO` -> `nccl_algo`); algo/proto always present ("unset");
    `weights` always present: "dummy" when the settings say so (a trial server, whose
    figures must not be read as production ones), else "real"."""
    labels = {"profile": profile, "mode": mode, "engine": engine}
    for name, value in settings.items():
        if is_secret_name(name):
            continue
        label = _LABEL_BAD.sub("_", name.lower())
        if name == ACCEPTANCE_SOURCE:
            continue
        if not label or label[0].isdigit() or label.startswith("__") or label in _RESERVED:
            continue
        labels[label] = str(value)
    labels.setdefault("nccl_algo", "unset")
    labels.setdefault("nccl_proto", "unset")
    labels["weights"] = "dummy" if labels.get("weights") == "dummy" else "real"
    return labels


class EngineSource(Source):
    NAME = "engine"
    _sglang: dict[str, Any] | None = None  # the server's SGLang (set_sglang)

    def set_sglang(self, summary: Mapping[str, Any] | None) -> None:
        """The server's SGLang (`SGLangFacts.summary()`: version, facts_version, supported)."""
        with self.hub.lock:
            self._sglang = dict(summary) if summary else None
            self.hub.changed()

    def families(self, now: float) -> Iterable[Metric | None]:
        h = self.hub
        up = h.up
        yield one("fastverify_up", 1.0 if up else 0.0)
        if h.profile or h.mode:
            labels = profile_labels(h.profile or "", h.mode or "", h.engine_kind or "",
                                    h.settings)  # fmt: skip
            yield info("fastverify_profile_info", labels)
        source = h.settings.get(ACCEPTANCE_SOURCE)
        if source and up:
            yield info("fastverify_spec_acceptance_source_info",
                       {"profile": h.profile or "", "mode": h.mode or "",
                        "source": source})  # fmt: skip
        if self._sglang:
            supported = "true" if self._sglang["supported"] else "false"
            yield info("fastverify_engine_info", {**self._sglang, "supported": supported})
