"""A Ctrl-C that Python could only print is not lost: `never_lost()` keeps it and raises it.

Python's Ctrl-C handler raises KeyboardInterrupt wherever the main thread is; inside a
finalizer or a weakref callback it is only printed ("Exception ignored in: <function
_get_module_lock.<locals>.cb ...>": an import's module lock, seen once on a fresh machine
where a bench window's first imports compiled their bytecode) and the command runs on.
Under `never_lost()` such a Ctrl-C is kept, not printed, and raised as KeyboardInterrupt by
the next `raise_swallowed()` (a load about to start: `experiments.common.interruptible.run`)
or on leaving the block. Every fastverifyctl command runs under it (cli/groups.py), so this
module imports nothing beyond the standard library's basics.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

_swallowed: list[BaseException] = []  # the Ctrl-Cs Python could only print


@contextlib.contextmanager
def never_lost() -> Iterator[None]:
    """Keep a Ctrl-C that a finalizer or callback swallowed, and raise it (module docstring)."""
    previous = sys.unraisablehook

    def keep(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _swallowed.append(unraisable.exc_value)
        else:
            previous(unraisable)

    sys.unraisablehook = keep
    try:
        yield
    finally:
        sys.unraisablehook = previous
        raise_swallowed()


def raise_swallowed() -> None:
    """KeyboardInterrupt if a Ctrl-C was kept since the last call."""
    if _swallowed:
        _swallowed.clear()
        raise KeyboardInterrupt
