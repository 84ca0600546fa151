"""A stop flag that signal handlers may set: no locks, and it wakes the main thread.

Python runs signal handlers in the main thread, but the kernel may deliver a
process-directed signal (SIGTERM from the daemon) to any thread. A main thread blocked
in an untimed lock wait (threading.Event.wait()) is then never interrupted and the
handler never runs; and a handler that itself takes a lock (Event.set()) can deadlock
against the very wait it interrupted. `StopFlag` avoids both: handlers only set a plain
attribute and write a byte to a pipe, and `signal.set_wakeup_fd` makes the C-level
handler write to the same pipe from whichever thread received the signal, so the main
thread, sleeping in select() on that pipe, wakes up at once and runs the handler.
Idle cost: none (no polling).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time


class StopFlag:
    """Create in the main thread, after forking; `set()` is safe from handlers and threads."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._old_wakeup = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self.flag = False

    def set(self) -> None:
        self.flag = True
        with contextlib.suppress(OSError):
            os.write(self._w, b"\0")

    def is_set(self) -> bool:
        return self.flag

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until set (or `timeout` seconds); return whether it is set."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.flag:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                with contextlib.suppress(BlockingIOError, OSError):
                    while os.read(self._r, 4096):
                        pass
            # a pending Python-level handler runs at the next bytecode boundary, before
            # the loop condition is tested again
        return self.flag

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(self._old_wakeup)
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
