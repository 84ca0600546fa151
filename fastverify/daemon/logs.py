"""Engine log handling: tail the per-start log file, keep an in-memory ring, parse progress.

The engine writes its stdout/stderr straight into `state_dir/logs/<start>.log` (so it
survives a daemon crash). `LogTail` follows that file from a thread and hands every
complete line, with secret values masked, to its subscribers: the ring (for
`fastverifyctl logs`), the exporter hub (`hub.on_log_line`), the startup progress parser
and the operation's event stream.

`parse_progress(line)` turns SGLang's startup lines into `(phase, percent, message)`:
weights loading (including "Loading safetensors checkpoint shards: 50% Completed"),
CUDA-graph capture begin/end, and the ready line.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

READY_LINE = "The server is fired up and ready to roll!"

_SHARDS = re.compile(r"Loading \S+ checkpoint shards:\s*(\d+)%")
_RANK = re.compile(r"\sTP(\d+)\]")
_THROUGHPUT = re.compile(r"gen throughput \(token/s\):\s*([0-9.]+)")

# TOKEN but not TOKENS: counts such as --speculative-num-draft-tokens are not secrets
SECRET_NAME = re.compile(r"(TOKEN(?!S)|_KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


def is_secret_name(name: str) -> bool:
    """Names whose values are never shown: *_TOKEN, *_KEY, *_SECRET, *PASSWORD*, HF_TOKEN..."""
    return bool(SECRET_NAME.search(name))


def secret_values(env: dict[str, str]) -> list[str]:
    return sorted(
        (v for k, v in env.items() if is_secret_name(k) and len(v) >= 4), key=len, reverse=True
    )


def mask(text: str, secrets: Iterable[str]) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, "***")
    return text


def mask_env(env: dict[str, str]) -> dict[str, str]:
    return {k: ("***" if is_secret_name(k) else v) for k, v in env.items()}


def mask_argv(argv: list[str]) -> list[str]:
    """Hide the values of secret-looking flags (`--api-key X`, `--hf-token=X`)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        if arg.startswith("--"):
            flag, eq, _ = arg.partition("=")
            if is_secret_name(flag[2:].replace("-", "_")):
                if eq:
                    out.append(f"{flag}=***")
                    continue
                hide_next = True
        out.append(arg)
    return out


def parse_progress(line: str) -> tuple[str, float, str] | None:
    """(phase, percent 0..100, message) for SGLang's startup milestones, else None.

    Lines of TP ranks other than 0 are ignored (every rank prints the same milestones)."""
    m = _RANK.search(line)
    if m and m.group(1) != "0":
        return None
    if READY_LINE in line:
        return "ready", 100.0, "server is ready"
    m = _SHARDS.search(line)
    if m:
        pct = float(m.group(1))
        return "weights", 5.0 + 0.75 * pct, f"loading weights {pct:.0f}%"
    if "Load weight begin" in line:
        return "weights", 5.0, "loading weights"
    if "Load weight end" in line:
        return "weights", 80.0, "weights loaded"
    if "Capture cuda graph begin" in line:
        return "cuda_graph", 82.0, "capturing CUDA graphs"
    if "Capture cuda graph end" in line:
        return "cuda_graph", 95.0, "CUDA graphs captured"
    return None


def parse_throughput(line: str) -> float | None:
    m = _THROUGHPUT.search(line)
    return float(m.group(1)) if m else None


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


class LogTail:
    """Follow a growing log file from `offset`, calling `on_line(line)` per complete line."""

    def __init__(
        self,
        path: Path,
        on_line: Callable[[str], None],
        *,
        secrets: Iterable[str] = (),
        offset: int = 0,
        interval: float = 0.02,
    ):
        self.path = Path(path)
        self.on_line = on_line
        self.secrets = list(secrets)
        self.offset = offset
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"logtail-{self.path.name}", daemon=True
        )
        self.recent: collections.deque[str] = collections.deque(maxlen=400)

    def start(self) -> LogTail:
        self._thread.start()
        return self

    def _run(self) -> None:
        buf = b""
        fh = None
        while True:
            stopping = self._stop.is_set()
            if fh is None:
                try:
                    fh = open(self.path, "rb")  # noqa: SIM115 - held open while following
                    fh.seek(self.offset)
                except FileNotFoundError:
                    fh = None
            if fh is not None:
                chunk = fh.read(1 << 16)
                while chunk:
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for raw in lines:
                        self._emit(raw)
                    chunk = fh.read(1 << 16)
            if stopping:
                if buf:
                    self._emit(buf)
                if fh is not None:
                    fh.close()
                return
            self._stop.wait(self.interval)

    def _emit(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        # tqdm progress bars redraw with \r: keep the last frame.
        if "\r" in line:
            line = line.rsplit("\r", 1)[-1]
        line = mask(line, self.secrets)
        self.recent.append(line)
        try:
            self.on_line(line)
        except Exception:  # a subscriber's bug must not stop the tail
            import logging

            logging.getLogger("fastverifyd.logs").exception("log subscriber failed")

    def stop(self, timeout: float = 2.0) -> None:
        """Read what remains, then stop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
