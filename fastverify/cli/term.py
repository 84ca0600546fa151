"""What reaches the operator's terminal: text fastverifyctl did not write itself (a lease's
description, a failure's `why`, a reason, an engine's log lines) never carries a control
sequence (ESC[2J, OSC 52 clipboard writes, ESC[8m hidden text, a bare CR overwriting a line,
bidirectional overrides).

`safe(text)` shows every such character as a visible escape (`\\x1b`, `\\u202e`), keeping
tabs and, unless `newlines=False`, newlines. `install()` puts it in front of stdout and
stderr, so every `click.echo` of every command goes through it; the rich displays (tables,
progress) write their own styling to the raw stream (`raw`) and pass their cells through
`safe` themselves. JSON output escapes the same characters as `\\u00XX` (`json_safe`), which
JSON readers turn back into the original text.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

# C0 controls but TAB and LF, DEL, C1 controls, and the bidirectional formatting characters
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_LINE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
_NON_ASCII_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _show(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def safe(text: str, *, newlines: bool = True) -> str:
    """`text` with every control character shown as an escape (see the module docstring)."""
    return (_UNSAFE if newlines else _UNSAFE_LINE).sub(_show, text)


def json_safe(text: str) -> str:
    """A JSON document (json.dumps already escapes C0 controls) with DEL, the C1 controls and
    the bidirectional characters escaped as JSON escapes too."""
    return _NON_ASCII_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class SafeStream:
    """A text stream whose writes pass through `safe`; everything else is the wrapped one's."""

    def __init__(self, stream: TextIO) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        self.raw.write(safe(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def install() -> None:
    """Put `safe` in front of sys.stdout and sys.stderr (once)."""
    if not isinstance(sys.stdout, SafeStream):
        sys.stdout = SafeStream(sys.stdout)
    if not isinstance(sys.stderr, SafeStream):
        sys.stderr = SafeStream(sys.stderr)


def raw(stream: Any) -> Any:
    """The stream under a SafeStream (for rich, which writes its own escape codes)."""
    return stream.raw if isinstance(stream, SafeStream) else stream
