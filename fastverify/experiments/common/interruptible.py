"""`asyncio.run` for a load a user may Ctrl-C at any moment: Ctrl-C always ends it as
KeyboardInterrupt, raised once the event loop is closed.

asyncio.run's own Ctrl-C handler leaves gaps: a Ctrl-C while the loop is being made raises
inside its constructor (seen once in about 100 runs of a Ctrl-C'd `spec
costs` on Python 3.11: a half-made loop, "Exception ignored" from its `__del__`, a coroutine
never awaited); one while the loop closes raises there; and a load that swallows its
cancellation (3.11's `asyncio.wait_for` can, when its timeout races the cancel) ends as if
nothing happened, so the command runs on. Here the Ctrl-C is only noted while the loop is
made and closed, cancels the load's task while it runs, and is raised after the loop is
closed, whatever the load made of the cancellation. Outside the main thread, or where
Python's own Ctrl-C handler is not installed (SIGINT ignored), this is asyncio.run.

A Ctrl-C that Python could only print (inside a finalizer or a callback: `fastverify.ctrl_c`)
is raised by `run` before it starts its load.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastverify import ctrl_c

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to its end in a new event loop; KeyboardInterrupt on Ctrl-C (above)."""
    try:
        ctrl_c.raise_swallowed()
    except KeyboardInterrupt:
        main.close()  # never started: no "never awaited" warning
        raise
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return asyncio.run(main)
    pressed: list[int] = []
    running: dict[str, Any] = {}

    def on_ctrl_c(signum: int, _frame: Any) -> None:
        pressed.append(signum)
        task, loop = running.get("task"), running.get("loop")
        if task is not None and loop is not None and not task.done():
            task.cancel()
            loop.call_soon_threadsafe(lambda: None)  # wake a select() with a long timeout

    async def tracked() -> T:
        running["task"] = asyncio.current_task()
        if pressed:  # before the task existed
            raise asyncio.CancelledError
        return await main

    result: list[T] = []
    signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        with asyncio.Runner() as runner:  # made and closed under on_ctrl_c
            running["loop"] = runner.get_loop()
            try:
                result.append(runner.run(tracked()))
            except asyncio.CancelledError:
                if not pressed:
                    raise
            finally:
                running.clear()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        main.close()  # never awaited when Ctrl-C came first: no "never awaited" warning
    if pressed:
        raise KeyboardInterrupt
    return result[0]
