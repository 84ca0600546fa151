"""Manifests as text: documents (plain dicts and lists) dumped by PyYAML, with a comment
header per file. Multi-line text (a profile, a dashboard, the daemon's configuration) is a
literal block where YAML can hold it as it is, else PyYAML's double-quoted string with its
escapes: every ConfigMap value reads back byte for byte."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import yaml

# Line breaks besides "\n" that a YAML reader folds: PyYAML's emitter writes them raw in a
# block or single-quoted scalar (which then reads back as "\n"), so such text is quoted.
OTHER_BREAKS = ("\x85", "\u2028", "\u2029")
WIDTH = 1 << 20  # never fold a long line (dashboard JSON, quoted text)


class _Dumper(yaml.SafeDumper):
    """SafeDumper with block-style lists under their key, as Kubernetes manifests are
    written, and literal blocks for multi-line text."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if any(b in value for b in OTHER_BREAKS) else "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def comment(lines: Iterable[str]) -> str:
    """`# line` per line (a blank line stays a bare `#`)."""
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def dump(docs: Sequence[Any], header: Iterable[str] = ()) -> str:
    """The documents, `---` between them, after the header's comment lines."""
    body = yaml.dump_all(
        docs,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=WIDTH,
    )
    return comment(header) + body
