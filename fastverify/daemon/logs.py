"""Engine log handling: tail the per-start log file, keep an in-memory ring, parse once.

The engine writes its stdout/stderr straight into `state_dir/logs/<start>.log` (so it
survives a daemon crash). `LogTail` follows that file (the project's one tailer,
fastverify/follow.Tail, which survives rotation and truncation) and hands every complete
line, with secrets masked (fastverify.redact), to its subscriber. `parse(line)` turns a
line into `LineFacts`: the line's record (`fastverify.sglang.loglines.parse_line`, parsed
here once and handed on in the EngineLine event: the exporter reads the same record) and
the start-up progress milestone.

`parse_progress(line)` turns SGLang's startup milestones (their text is
`fastverify.sglang.loglines`'s) into `(phase, percent, message)`: weights loading
(including "Loading safetensors checkpoint shards: 50% Completed"), CUDA-graph capture
begin/end, and the ready line.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastverify.follow import Tail
from fastverify.redact import mask_text
from fastverify.sglang import allreduce, loglines

__all__ = [
    "LineFacts",
    "LogRing",
    "LogTail",
    "mask",
    "parse",
    "parse_progress",
    "parse_throughput",
]


def mask(text: str, secrets: Iterable[str]) -> str:
    """`text` with known secret values and secret flag/assignment values masked."""
    return mask_text(text, secrets)


@dataclass(frozen=True)
class LineFacts:
    record: Mapping[str, Any] | None
    progress: tuple[str, float, str] | None

    @property
    def throughput(self) -> float | None:
        r = self.record
        if r is not None and r.get("kind") == "decode":
            return r.get("gen_throughput")
        return None


def parse(line: str) -> LineFacts:
    """Everything the daemon and the exporter read from one line, parsed once."""
    return LineFacts(loglines.parse_line(line), parse_progress(line))


def parse_progress(line: str) -> tuple[str, float, str] | None:
    """(phase, percent 0..100, message) for SGLang's startup milestones, else None.

    Lines of TP ranks other than 0 are ignored (every rank prints the same milestones)."""
    m = loglines.TP_RANK.search(line)
    if m and m.group(1) != "0":
        return None
    if loglines.READY_TEXT in line:
        return "ready", 100.0, "server is ready"
    m = loglines.CHECKPOINT_SHARDS.search(line)
    if m:
        pct = float(m.group(1))
        return "weights", 5.0 + 0.75 * pct, f"loading weights {pct:.0f}%"
    if loglines.LOAD_WEIGHT_BEGIN_TEXT in line:
        return "weights", 5.0, "loading weights"
    if loglines.LOAD_WEIGHT_END_TEXT in line:
        return "weights", 80.0, "weights loaded"
    if allreduce.BUILT_TEXT in line:
        return (
            "autotune",
            81.0,
            (
                "FlashInfer PCIe-IPC workspace built; tuning its all-reduce tactics "
                "(measured at the first start, read from the cache after)"
            ),
        )
    if allreduce.AUTOTUNED_TEXT in line:
        return "autotune", 82.0, "FlashInfer PCIe-IPC all-reduce tactics ready"
    if loglines.CAPTURE_BEGIN_TEXT in line:  # before the per-phase milestones
        return "cuda_graph", 82.0, "capturing CUDA graphs"
    if loglines.CAPTURE_END_TEXT in line:
        return "cuda_graph", 95.0, "CUDA graphs captured"
    if "Captur" in line:
        return _capture_progress(line)
    return None


def _capture_progress(line: str) -> tuple[str, float, str] | None:
    """A capture phase's begin/end milestone (`Capture target prefill CUDA graph begin.
    backend=breakable, ...`) or its tqdm bar (`Capturing batches (bs=8 ...)`, 0.5.17's
    prefill `Capturing num tokens (num_tokens=8192 ...)`), as progress between 82 and 95%."""
    rec = loglines.parse_sglang_line(line)
    if rec is None or rec.get("kind") != "capture_progress":
        return None
    what = " ".join(x for x in (rec.get("role"), rec.get("phase")) if x)
    if rec.get("event") == "begin":
        backend = f" (backend {rec['backend']})" if rec.get("backend") else ""
        return "cuda_graph", 82.0, f"capturing {what} CUDA graphs{backend}"
    if rec.get("event") == "end":
        took = f" in {rec['elapsed_s']:.1f} s" if rec.get("elapsed_s") is not None else ""
        return "cuda_graph", 90.0, f"{what} CUDA graphs captured{took}"
    pct = float(rec.get("percent") or 0)
    size = (f"{rec['num_tokens']} tokens" if rec.get("num_tokens") is not None
            else f"batch size {rec['bs']}" if rec.get("bs") is not None else "")  # fmt: skip
    step = f"{rec.get('current')}/{rec.get('total')}"
    where = f"{what} " if what else ""
    return "cuda_graph", 82.0 + 0.13 * pct, f"capturing {where}CUDA graphs {step} {size}".rstrip()


def parse_throughput(line: str) -> float | None:
    """Decode throughput (tokens/s) of a decode batch line, else None."""
    return parse(line).throughput


class LogRing:
    """The last `size` log lines (engine and daemon), with sequence numbers for followers."""

    def __init__(self, size: int = 5000):
        self._lines: collections.deque[dict[str, Any]] = collections.deque(maxlen=size)
        self._seq = 0
        self._cond = threading.Condition()

    def add(self, line: str, source: str = "engine") -> None:
        with self._cond:
            self._seq += 1
            self._lines.append(
                {"seq": self._seq, "ts": time.time(), "source": source, "line": line}
            )
            self._cond.notify_all()

    def tail(self, n: int) -> list[dict[str, Any]]:
        with self._cond:
            items = list(self._lines)
        return items[-n:] if n > 0 else []

    @property
    def seq(self) -> int:
        return self._seq

    def since(self, seq: int, timeout: float) -> list[dict[str, Any]]:
        """Lines with seq > `seq`, waiting up to `timeout` for at least one."""
        with self._cond:
            if self._seq <= seq:
                self._cond.wait(timeout)
            return [e for e in self._lines if e["seq"] > seq]


class LogTail(Tail):
    """Follow an engine log, calling `on_line(masked line)` per complete line."""

    def __init__(
        self,
        path: Path,
        on_line: Callable[[str], None],
        *,
        secrets: Iterable[str] = (),
        interval: float = 0.02,
    ):
        known = list(secrets)
        super().__init__(
            path, on_line, interval_s=interval, transform=lambda line: mask_text(line, known)
        )
        self.path = Path(path)
        self.secrets = known
