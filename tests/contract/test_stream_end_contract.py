"""The front door's rule for a stream whose engine dies after its last event (relay.py:
the answer is whole once `STREAM_END` is relayed; nothing is cut) rests on SGLang's streams
ending so. Read in the pinned wheel's source: the OpenAI chat and completions streams and the
native /generate stream are `text/event-stream` responses whose generator's last statement
yields `data: [DONE]\\n\\n` (nothing follows it but the chunked body's end)."""

from __future__ import annotations

import ast
from pathlib import Path

from fastverify.frontdoor.relay import STREAM_END
from tests.support.contract import sglang_package

STREAMS = {  # file under sglang/srt/entrypoints -> its streaming generator
    "openai/serving_chat.py": "_generate_chat_stream",
    "openai/serving_completions.py": "_generate_completion_stream",
    "http_server.py": "stream_results",
}


def _source_root(sglang_python: Path) -> Path:
    return sglang_package(sglang_python) / "srt" / "entrypoints"


def test_sglangs_streams_end_with_the_event_the_front_door_reads(sglang_python: Path) -> None:
    root = _source_root(sglang_python)
    for name, function in STREAMS.items():
        tree = ast.parse((root / name).read_text())
        found = [n for n in ast.walk(tree)
                 if isinstance(n, ast.AsyncFunctionDef) and n.name == function]  # fmt: skip
        assert len(found) == 1, (name, function)
        last = found[0].body[-1]
        assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Yield), (name, last)
        assert isinstance(last.value.value, ast.Constant), (name, ast.dump(last))
        value = last.value.value.value
        assert (value.encode() if isinstance(value, str) else value) == STREAM_END, (name, value)
        media = [k.value.value for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", None) == "StreamingResponse"
                 for k in n.keywords
                 if k.arg == "media_type" and isinstance(k.value, ast.Constant)]  # fmt: skip
        assert "text/event-stream" in media, (name, media)
