"""The engine's log as NCCL wrote it: its version, the settings it confirmed as "set by
environment", its TUNING choices, WARN lines, and the lines read. Decode lines go on to the
decode source."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from fastverify.exporters import catalog
from fastverify.exporters.collectors.base import EngineChange, Hub, Source, info, one
from fastverify.exporters.collectors.decode import DecodeSource
from fastverify.exporters.collectors.sources import HealthSource
from fastverify.redact import is_secret_name
from fastverify.sglang import loglines

MAX_TUNING_ROWS = 64


class LogsSource(Source):
    NAME = "logs"

    def __init__(self, hub: Hub, health: HealthSource, decode: DecodeSource) -> None:
        super().__init__(hub)
        self.health, self.decode = health, decode
        self._lines = 0
        self._warnings = 0
        self._version: str | None = None
        self._env: dict[str, str] = {}
        self._tuning: dict[tuple[str, int], tuple[str, str, str]] = {}

    def on_line(self, line: str, live: bool = True) -> dict[str, Any] | None:
        """Feed one line of the engine's output; returns the parsed record (or None).

        `live=False` (catching up on an old log) keeps NCCL facts but not decode figures,
        which would otherwise be published as current."""
        rec = loglines.parse_line(line)
        self.on_record(rec, live=live)
        return rec

    def on_record(self, rec: Mapping[str, Any] | None, live: bool = True) -> None:
        """Feed one engine log line already parsed (`loglines.parse_line`; None: a line
        with no record): the daemon parses each line once and hands the record on."""
        h = self.hub
        with h.lock:
            self._lines += 1
            self.health.mark("logs", True)
            if rec is None:
                return
            kind = rec["kind"]
            if kind == "decode":
                if not live:
                    return
                self.decode.on_decode_line(rec)
            elif kind == "nccl_env":
                self._env[rec["var"]] = rec["value"]
            elif kind == "nccl_version":
                self._version = rec["version"]
            elif kind == "nccl_tuning":
                key = (rec["collective"], rec["bytes"])
                if key in self._tuning or len(self._tuning) < MAX_TUNING_ROWS:
                    lo, hi = rec.get("channel_lo"), rec.get("channel_hi")
                    channels = "" if lo is None else str(hi - lo + 1)
                    self._tuning[key] = (rec["algo"], rec["proto"], channels)
            elif kind == "nccl_warn":
                self._warnings += 1
            h.changed()

    def engine_changed(self, change: EngineChange) -> None:
        if change.went_down:
            # what NCCL said was about that process (the next engine prints its own lines
            # while STARTING, before it is labelled READY)
            self._version, self._env, self._tuning = None, {}, {}

    def families(self, now: float) -> Iterable[Metric | None]:
        if self._version:
            yield info("fastverify_nccl_info", {"version": self._version})
        if self._env:
            env = catalog.family("fastverify_nccl_env_info")
            for var, value in sorted(self._env.items()):
                if not is_secret_name(var):
                    env.add_metric([var, value], {})
            yield env
        if self._tuning:
            tuning = catalog.family("fastverify_nccl_tuning_info")
            for (coll, nbytes), (algo, proto, channels) in sorted(self._tuning.items()):
                tuning.add_metric([coll, str(nbytes), algo, proto, channels], {})
            yield tuning
        yield one("fastverify_nccl_warnings_total", self._warnings)
        yield one("fastverify_log_lines_total", self._lines)
