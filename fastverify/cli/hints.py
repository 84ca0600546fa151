"""Command hints that act on the daemon this command talked to.

A hint printed to the user (`fastverifyctl cancel`, `fastverifyctl profile set X`, in the
CLI's own words or the daemon's) is pasted as is: on a shared host, without the `--socket`
(or the TCP door) this command used, it would act on another daemon. `carry_door(obj)`, called
with the door options once they are known (--socket or $FASTVERIFY_SOCKET, --host, --token-file,
--tls-*: paths and addresses, never a secret), makes every `fastverifyctl CMD` this process
writes to stdout or stderr from then on read `fastverifyctl --socket PATH CMD`.
"""

from __future__ import annotations

import re
import shlex
import sys
from typing import Any

# the door options as the root's ctx.obj keys them, and their flags
DOOR_FLAGS = (("socket", "--socket"), ("host", "--host"), ("token_file", "--token-file"),
              ("tls_ca", "--tls-ca"), ("tls_cert", "--tls-cert"), ("tls_key", "--tls-key"))  # fmt: skip
_HINT = re.compile(r"(?<![\w./-])fastverifyctl(?= [a-z])")


def door_args(obj: Any) -> list[str]:
    """The door options in `obj` (the root's ctx.obj) as command-line arguments."""
    if not isinstance(obj, dict):
        return []
    out: list[str] = []
    for key, flag in DOOR_FLAGS:
        if obj.get(key):
            out += [flag, str(obj[key])]
    return out


def with_door(text: str, args: list[str]) -> str:
    """`text` with `args` after every `fastverifyctl` that starts a command hint."""
    if not args or "fastverifyctl" not in text:
        return text
    return _HINT.sub(lambda _m: "fastverifyctl " + shlex.join(args), text)


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


def carry_door(obj: Any) -> None:
    """From now on, hints written to stdout and stderr carry the door options in `obj`."""
    args = door_args(obj)
    if not args:
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _Hinting):
            stream.door = args
        elif stream is not None:
            setattr(sys, name, _Hinting(stream, args))
