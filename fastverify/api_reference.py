"""The reference part of docs/reference/api.md, written from fastverify.api_models and
fastverify.api_answers: the endpoints, each request's fields (type, required, default,
meaning) and the status body's fields (with the sections the daemon's parts declare).

`python -m fastverify.api_reference` rewrites the block between BEGIN and END in
docs/reference/api.md (the prose around it is hand-written); the suite fails when the committed
block differs from what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fastverify import api_answers as a
from fastverify import api_models as m
from fastverify import api_schema as s

BEGIN = "<!-- BEGIN generated reference: python -m fastverify.api_reference; do not edit -->"
END = "<!-- END generated reference -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md"
COMMAND = "python -m fastverify.api_reference"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(f: s.Field) -> str:
    return "" if f.required or f.default is None else f"`{json.dumps(f.default)}`"


def _meaning(f: s.Field) -> str:
    extra = f" (checked as the config's `{f.mirrors}`)" if f.mirrors else ""
    return _cell(f.help + extra)


def _request_table(ep: m.Endpoint) -> list[str]:
    if ep.fields:
        rows = ["| field | type | required | default | meaning |", "|---|---|---|---|---|"]
        rows += [
            f"| `{f.name}` | {f.kind} | {'yes' if f.required else 'no'} | {_default(f)} | "
            f"{_meaning(f)} |"
            for f in ep.fields
        ]
        return rows
    if ep.query:
        rows = ["| query parameter | type | default | meaning |", "|---|---|---|---|"]
        rows += [f"| `{f.name}` | {f.kind} | {_default(f)} | {_meaning(f)} |" for f in ep.query]
        return rows
    return ["No body (`{}` or none)." if ep.method == "POST" else "No parameters."]


def _status_table(fields: tuple[s.Field, ...], prefix: str = "") -> list[str]:
    rows = ["| field | type | meaning |", "|---|---|---|"]
    rows += [f"| `{prefix}{f.name}` | {_cell(f.kind)} | {_cell(f.help)} |" for f in fields]
    return rows


def part_sections() -> tuple[s.Field, ...]:
    """The status sections the daemon's parts add (`parts`), as each part declares its own
    (`Part.SECTION`), in their order."""
    from fastverify.daemon.controller import PARTS

    return tuple(s.Field(p.STATUS, "object | null", p.SECTION) for p in PARTS if p.STATUS)


def render() -> str:
    """The generated block, markers included."""
    out: list[Any] = [BEGIN, "", "## Endpoints", ""]
    out += [
        "Every request and its `fastverify.client.ControlClient` method (the CLI calls these; "
        "a field a method does not know is refused before anything is sent).",
        "",
        "| request | what it does | client |",
        "|---|---|---|",
    ]
    out += [
        f"| [`{e.method} {e.path}`](#{_anchor(e)}) | {_cell(e.summary)} | `{e.client}()` |"
        for e in m.ENDPOINTS
    ]
    for e in m.ENDPOINTS:
        out += ["", f"### {e.method} {e.path}", "", e.summary, "", *_request_table(e), ""]
        out.append(_answer_line(e))
        if e.recorded:
            out += [
                "",
                f"Limits: a body of at most {e.max_body} bytes (413 beyond); with the "
                "other record requests, at most "
                f"{m.RECORD_BURST} at once and {m.RECORD_RATE_PER_S:g} a second after "
                "that per caller (uid, or certificate and token), 429 with `Retry-After` "
                "beyond.",
            ]
    status = f"`{m.STATUS.method} {m.STATUS.path}` answers one object:"
    out += ["", "## Status body", "", status, ""]
    out += [*_status_table(s.documented(a.StatusBody) + part_sections()), "", "`engine`:", ""]
    out += _status_table(s.documented(a.EngineStatus), "engine.")
    out += [
        "",
        "## Answers",
        "",
        "The models the answers above name (fastverify.api_answers); "
        "a field marked no may be absent.",
        "",
    ]
    for model in _answer_models():
        out += [f"### {model.__name__}", "", _doc(model), "", *_model_table(model), ""]
    out += [END]
    return "\n".join(out) + "\n"


_STATUS_MODELS = (a.StatusBody, a.EngineStatus)  # the Status body section's


def _answer_models() -> list[Any]:
    """Every model an answer names, each once, in the endpoints' order; a 202's and the
    errors' last."""
    found: list[Any] = []
    for tp in (*(e.answer for e in m.ENDPOINTS), a.Accepted, a.ApiError):
        found += [t for t in s.models_of(tp) if t not in found and t not in _STATUS_MODELS]
    return found


def _link(kind: str) -> str:
    """A field's kind with the models it names linked to their tables."""
    words = kind.split(" ")
    for i, word in enumerate(words):
        if word in _STATUS_MODELS_NAMES:
            words[i] = "[status body](#status-body)"
        elif word[:1].isupper():
            words[i] = f"[{word}](#{word.lower()})"
    return " ".join(words)


_STATUS_MODELS_NAMES = {t.__name__ for t in _STATUS_MODELS}


def _answer_line(e: m.Endpoint[Any, Any]) -> str:
    what = _link(s.json_kind(e.answer))
    if e.streams:
        post = e.method == "POST"
        what = (
            (
                f"{what}; with `stream: true`, NDJSON events until the result, the last "
                '`{"event": "result", ts, ...}` of it'
            )
            if post
            else f"NDJSON events: {what}"
        )
    notes = f"; {e.notes}" if e.notes else ""
    return f"Answer: {what}{notes}."


def _doc(model: Any) -> str:
    return " ".join((model.__doc__ or "").split()) if model.__doc__ else ""


def _model_table(model: Any) -> list[str]:
    required = model.__required_keys__
    rows = ["| field | type | always | meaning |", "|---|---|---|---|"]
    rows += [
        f"| `{f.name}` | {_cell(_link(f.kind))} | {'yes' if f.name in required else 'no'} "
        f"| {_cell(f.help)} |"
        for f in s.documented(model)
    ]
    return rows


def _anchor(e: m.Endpoint) -> str:
    """GitHub's anchor of the `### METHOD PATH` heading."""
    return f"{e.method} {e.path}".lower().replace("/", "").replace(" ", "-")


def splice(text: str, block: str) -> str:
    """`text` with its generated block replaced by `block`; ValueError without markers."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN!r} ... {END!r} block")
    return text[:start] + block + text[end + len(END) + 1 :]


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    new = splice(text, render())
    if new != text:
        DOC.write_text(new, encoding="utf-8")
        print(f"rewrote the reference in {DOC}")
    else:
        print(f"{DOC} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
