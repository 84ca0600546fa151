"""The engine's log as NCCL wrote it: its version, the settings it confirmed as "set by
environment", its TUNING choices, WARN lines, and the lines read."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import SourceCollector, info, one
from fastverify.redact import is_secret_name


class LogsCollector(SourceCollector):
    SOURCE = "logs"

    def families(self, s: dict[str, Any]) -> Iterable[Metric | None]:
        if s["nccl_version"]:
            yield info("fastverify_nccl_info", {"version": s["nccl_version"]})
        if s["nccl_env"]:
            env = catalog.family("fastverify_nccl_env_info")
            for var, value in sorted(s["nccl_env"].items()):
                if not is_secret_name(var):
                    env.add_metric([var, value], {})
            yield env
        if s["nccl_tuning"]:
            tuning = catalog.family("fastverify_nccl_tuning_info")
            for (coll, nbytes), (algo, proto, channels) in sorted(s["nccl_tuning"].items()):
                tuning.add_metric([coll, str(nbytes), algo, proto, channels], {})
            yield tuning
        yield one("fastverify_nccl_warnings_total", s["nccl_warnings"])
        yield one("fastverify_log_lines_total", s["log_lines"])
