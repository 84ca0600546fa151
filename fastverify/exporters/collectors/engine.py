"""The engine as the daemon sees it: up, the active profile and its settings, the server's
SGLang release, the TP all-reduce backend confirmed at verify and, for a drafting server,
whether SGLang forces its accept length (SGLANG_SIMULATE_ACC_LEN) or the drafter earns it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters.collectors.base import SourceCollector, info, one
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


class EngineCollector(SourceCollector):
    SOURCE = "engine"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        yield one("fastverify_up", 1.0 if s["up"] else 0.0)
        if s["profile"] or s["mode"]:
            labels = profile_labels(s["profile"], s["mode"], s["engine"], s["settings"])
            yield info("fastverify_profile_info", labels)
        source = (s.get("settings") or {}).get(ACCEPTANCE_SOURCE)
        if source and s["up"]:
            yield info("fastverify_spec_acceptance_source_info",
                       {"profile": s["profile"], "mode": s["mode"], "source": source})  # fmt: skip
        sg = s.get("sglang")
        if sg:
            supported = "true" if sg["supported"] else "false"
            yield info("fastverify_engine_info", {**sg, "supported": supported})
        ar = s.get("allreduce")
        if ar and s["up"]:
            bound = ar.get("max_bytes")
            yield info(
                "fastverify_allreduce_backend_info",
                {"profile": s["profile"], "mode": s["mode"], "backend": ar["backend"],
                 "max_bytes": "" if bound is None else int(bound)},
            )  # fmt: skip
