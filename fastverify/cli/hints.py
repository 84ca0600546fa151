"""Command hints that act on the daemon this command talked to.

A hint printed to the user (`fastverifyctl cancel`, `fastverifyctl profile set X`, in the
CLI's own words or the daemon's) is pasted as is: on a shared host, without the `--socket`
(or the TCP door) this command used, it would act on another daemon. `carry_door(args)`, called
with the door options once they are known (--socket or $FASTVERIFY_SOCKET, --host, --token-file,
--tls-*: paths and addresses, never a secret), makes every `fastverifyctl CMD` this process
writes to stdout or stderr from then on read `fastverifyctl --socket PATH CMD`; a `--json`
document is written as it is (`unhinted`).
"""

from __future__ import annotations

import sys
from typing import Any

# where a hint starts (compiled on first use, with shlex: most runs print no hint)
_HINT = r"(?<![\w./-])fastverifyctl(?= [a-z])"


def with_door(text: str, args: list[str]) -> str:
    """`text` with `args` after every `fastverifyctl` that starts a command hint."""
    if not args or "fastverifyctl" not in text:
        return text
    import re
    import shlex

    door = "fastverifyctl " + shlex.join(args)
    return re.sub(_HINT, lambda _m: door, text)


class _Hinting:
    """A text stream whose writes carry the door in their hints (everything else passes)."""

    def __init__(self, stream: Any, args: list[str]) -> None:
        self._stream = stream
        self.door = args

    def write(self, s: Any) -> int:
        if isinstance(s, str):
            self._stream.write(with_door(s, self.door))
            return len(s)
        return self._stream.write(s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def unhinted(stream: Any) -> Any:
    """The stream under the hints: a JSON document is data, printed as it is (a recorded
    command or a tool's name is a fact about what ran, not a hint to paste)."""
    return stream._stream if isinstance(stream, _Hinting) else stream


def carry_door(args: list[str]) -> None:
    """From now on, hints written to stdout and stderr carry `args` (the door options)."""
    if not args:
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _Hinting):
            stream.door = args
        elif stream is not None:
            setattr(sys, name, _Hinting(stream, args))
