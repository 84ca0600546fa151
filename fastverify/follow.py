"""Follow growing text files line by line, surviving rotation and truncation (`tail -F`).

`FileFollower(path, from_end=False).read_lines()` returns the complete lines appended since
the last call (a partial last line waits for its newline). Rotation (the path now names a
different inode: logrotate's create mode) drains the old file, then continues at the start
of the new one; truncation (copytruncate: the size fell below our offset, or the first bytes
changed because the file was truncated and rewritten past our offset between two reads)
restarts at offset 0; a missing file is waited for. Non-UTF-8 bytes are replaced.

`Tail(path, on_line)` runs a follower in a thread and calls `on_line` per line.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Self

log = logging.getLogger("fastverify.follow")

_MAX_PARTIAL = 1 << 20  # a "line" longer than this is emitted as is
_HEAD = 64  # first bytes remembered to notice a truncate-and-rewrite between two reads


class FileFollower:
    """See the module docstring. Not thread-safe: one reader per follower."""

    def __init__(self, path: str | Path, *, from_end: bool = False) -> None:
        self.path = Path(path)
        self._fh: BinaryIO | None = None
        self._ino: tuple[int, int] | None = None
        self._partial = b""
        self._head = b""
        self._from_end = from_end
        self.rotations = 0
        self.truncations = 0

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _open(self, seek_end: bool) -> bool:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115
        except OSError:
            return False
        st = os.fstat(fh.fileno())
        self._fh = fh
        self._head = b""
        self._ino = (st.st_dev, st.st_ino)
        if seek_end:
            fh.seek(0, os.SEEK_END)
        return True

    def _drain(self) -> bytes:
        assert self._fh is not None
        chunks = []
        while True:
            data = self._fh.read(1 << 20)
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)

    def read_lines(self) -> list[str]:
        data = b""
        if self._fh is None:
            if not self._open(seek_end=self._from_end):
                return []
            self._from_end = False  # only the first open skips existing content
        try:
            st = os.stat(self.path)
            current = (st.st_dev, st.st_ino)
        except OSError:
            current = None
        if current is not None and current != self._ino:
            data = self._drain()  # what the old file got before it was rotated away
            self.close()
            self.rotations += 1
            if self._open(seek_end=False):
                data += self._drain()
        else:
            assert self._fh is not None
            pos = self._fh.tell()
            size = os.fstat(self._fh.fileno()).st_size
            if size < pos or (pos and self._head_changed()):
                self.truncations += 1
                self._partial = b""
                self._fh.seek(0)
            data = self._drain()
        self._remember_head()
        return self._split(data)

    def take_partial(self) -> str | None:
        """The incomplete last line, handed over once (a writer that died mid-line)."""
        if not self._partial:
            return None
        raw, self._partial = self._partial, b""
        return raw.rstrip(b"\r").decode("utf-8", "replace")

    def _head_changed(self) -> bool:
        """Truncated and rewritten past our offset between two reads: the first bytes differ."""
        assert self._fh is not None
        if not self._head:
            return False
        return os.pread(self._fh.fileno(), len(self._head), 0) != self._head

    def _remember_head(self) -> None:
        if self._fh is not None and len(self._head) < _HEAD:
            self._head = os.pread(self._fh.fileno(), _HEAD, 0)

    def _split(self, data: bytes) -> list[str]:
        if not data:
            return []
        buf = self._partial + data
        parts = buf.split(b"\n")
        self._partial = parts.pop()
        if len(self._partial) > _MAX_PARTIAL:
            parts.append(self._partial)
            self._partial = b""
        return [p.rstrip(b"\r").decode("utf-8", "replace") for p in parts]


class Tail:
    """A thread that follows `path` with a FileFollower and calls `on_line(line)` for every
    complete line (tqdm's `\\r` redraws keep their last frame); `recent` holds the last
    `keep` lines. `stop()` reads what remains, then ends. The one tailer of the project:
    the daemon's engine log, the standalone exporter's `--log-file`."""

    def __init__(
        self,
        path: str | Path,
        on_line: Callable[[str], None],
        *,
        interval_s: float = 0.02,
        keep: int = 400,
        transform: Callable[[str], str] | None = None,
    ) -> None:
        self.follower = FileFollower(path)
        self.on_line = on_line
        self.interval_s = interval_s
        self.transform = transform
        self.recent: deque[str] = deque(maxlen=keep)
        self._stop = threading.Event()
        self._passes = 0  # read passes done, for caught_up
        self._passed = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name=f"tail-{Path(path).name}", daemon=True
        )

    def start(self) -> Self:
        self._thread.start()
        return self

    def read_now(self) -> list[str]:
        """Read and deliver what is there now (before `start`: a catch-up on the caller's
        thread)."""
        lines = []
        for raw in self.follower.read_lines():
            lines.append(raw)
        return self._deliver(lines)

    def _deliver(self, raws: list[str]) -> list[str]:
        lines = []
        for raw in raws:
            line = raw.rsplit("\r", 1)[-1] if "\r" in raw else raw
            if self.transform is not None:
                line = self.transform(line)
            self.recent.append(line)
            lines.append(line)
            try:
                self.on_line(line)
            except Exception:  # a subscriber's bug must not stop the tail
                log.exception("log subscriber failed")
        return lines

    def caught_up(self, timeout: float) -> bool:
        """Wait until every line the file held at this call has been delivered (a read pass
        that began after the call has ended); False if that took longer than `timeout`.
        True at once when the tail's thread is not running."""
        with self._passed:
            after = self._passes + 2  # the pass under way may have begun before this call
            return self._passed.wait_for(
                lambda: self._passes >= after or not self._thread.is_alive(), timeout
            )

    def _run(self) -> None:
        while True:
            stopping = self._stop.is_set()
            self.read_now()
            with self._passed:
                self._passes += 1
                self._passed.notify_all()
            if stopping:
                rest = self.follower.take_partial()
                if rest:
                    self._deliver([rest])
                self.follower.close()
                with self._passed:
                    self._passed.notify_all()
                return
            self._stop.wait(self.interval_s)

    def stop(self, timeout: float = 2.0) -> None:
        """Read what remains, then stop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
