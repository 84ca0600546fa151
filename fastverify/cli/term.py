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

import functools
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import re

# DEL, C1 controls and the bidirectional formatting characters; with the C0 controls but TAB
# and LF (`safe`), or but TAB (`safe(newlines=False)`)
_NON_ASCII = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CLASSES = {
    "text": "[\x00-\x08\x0b-\x1f" + _NON_ASCII + "]",
    "line": "[\x00-\x08\x0a-\x1f" + _NON_ASCII + "]",
    "json": "[" + _NON_ASCII + "]",
}


@functools.cache
def _unsafe(which: str) -> re.Pattern[str]:
    """The pattern of `_CLASSES[which]`, compiled on first use: most writes are printable
    text (`_printable`), and each of these costs a few hundred µs of every command's start-up
    to compile."""
    import re

    return re.compile(_CLASSES[which])


def _printable(text: str, keep: str) -> bool:
    """No character of any of the classes above is in `text`: every one of them is a control
    or format character, which `str.isprintable` refuses (as it does TAB and LF, which `keep`
    lets through)."""
    if text.isprintable():
        return True
    for ch in keep:
        text = text.replace(ch, "")
    return text.isprintable()


def _show(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def safe(text: str, *, newlines: bool = True) -> str:
    """`text` with every control character shown as an escape (see the module docstring)."""
    if _printable(text, "\t\n" if newlines else "\t"):
        return text
    return _unsafe("text" if newlines else "line").sub(_show, text)


def json_safe(text: str) -> str:
    """A JSON document (json.dumps already escapes C0 controls) with DEL, the C1 controls and
    the bidirectional characters escaped as JSON escapes too."""
    if _printable(text, "\n"):
        return text
    return _unsafe("json").sub(lambda m: f"\\u{ord(m.group()):04x}", text)


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
