"""The prompts `fastverifyctl bench` sends, and what they are called in an acceptance record.

A speculative server's acceptance is the workload's property: random token ids at
temperature 0 say little about a user's prompts. `load(spec)` reads a prompt set:

- `fastverify-docs`: the prompt set shipped with fastverify (`prompts/fastverify-docs.jsonl`,
  questions and tasks written from this project's own documentation; license-clean);
- a JSONL file, one prompt per line: {"text": "..."} or {"prompt": "..."} (text, the server
  tokenizes it), or {"input_ids": [...]} (token ids, for a server run with
  `--skip-tokenizer-init`), or SGLang `bench_serving`'s `custom` lines
  ({"conversations": [{"content"|"value": ...}, ...]}, the first turn), or OpenAI-style
  {"messages": [{"role": "user", "content": ...}, ...]} (the first user turn);
- a ShareGPT JSON file (what `bench_serving --dataset-name sharegpt` reads): a list of
  {"conversations"|"conversation": [{"from": ..., "value": ...}, ...]}, the first turn.
A line that is none of these is an error naming the file, the line and what was expected.

`Dataset.identity` is what a record is keyed by: the name, the format, a content hash and
the prompt count; `SYNTHETIC` is bench's random token ids (labelled "synthetic": never
planned with unless the user says so).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

SHIPPED = "fastverify-docs"
SYNTHETIC = "synthetic"


class DatasetError(ValueError):
    """A prompt file that cannot be read (file, line, what is wrong, what would be right)."""


@dataclass(frozen=True)
class Dataset:
    name: str
    format: str
    prompts: tuple[dict[str, Any], ...]  # each {"text": str} or {"input_ids": [int]}
    sha256: str

    @property
    def identity(self) -> dict[str, Any]:
        return {"name": self.name, "format": self.format, "sha256": self.sha256[:16],
                "prompts": len(self.prompts), "synthetic": False}  # fmt: skip


def synthetic_identity(input_len: int) -> dict[str, Any]:
    """Bench's random token ids (see the module docstring)."""
    return {"name": SYNTHETIC, "format": "random-ids", "input_len": input_len,
            "synthetic": True}  # fmt: skip


def load(spec: str) -> Dataset:
    if spec == SHIPPED:
        text = resources.files("fastverify.experiments.bench").joinpath(
            "prompts", f"{SHIPPED}.jsonl").read_text(encoding="utf-8")  # fmt: skip
        return _parse(text, SHIPPED, f"{SHIPPED} (shipped)")
    p = Path(spec)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(
            f"--dataset {spec}: cannot read ({exc.strerror or exc}); give a JSONL or "
            f"ShareGPT JSON file of prompts, or {SHIPPED} for the shipped set"
        ) from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"--dataset {spec}: not UTF-8 text ({exc.reason})") from None
    return _parse(text, p.name, str(p))


def _parse(text: str, name: str, where: str) -> Dataset:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: line {exc.lineno}: not JSON ({exc.msg})") from None
        prompts = [_prompt(row, where, i + 1, sharegpt=True) for i, row in enumerate(rows)]
        fmt = "sharegpt"
    else:
        prompts, fmt = [], "jsonl"
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{where}: line {n}: not JSON ({exc.msg})") from None
            prompts.append(_prompt(row, where, n))
    prompts = [p for p in prompts if p]
    if not prompts:
        raise DatasetError(f"{where}: no prompts (one JSON object per line, or a ShareGPT list)")
    return Dataset(name, fmt, tuple(prompts), digest)


def _prompt(row: Any, where: str, n: int, sharegpt: bool = False) -> dict[str, Any]:
    what = "entry" if sharegpt else "line"
    expected = (
        '{"text": ...}, {"prompt": ...}, {"input_ids": [...]}, {"conversations": [...]} or '
        '{"messages": [...]}'
    )
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: {what} {n}: expected an object like {expected}")
    if isinstance(row.get("input_ids"), list):
        ids = row["input_ids"]
        if not ids or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                              for t in ids):  # fmt: skip
            raise DatasetError(f"{where}: {what} {n}: input_ids must be non-negative ints")
        return {"input_ids": list(ids)}
    for key in ("text", "prompt"):
        if isinstance(row.get(key), str):
            return {"text": row[key]} if row[key].strip() else {}
    convs = row.get("conversations", row.get("conversation"))
    if isinstance(convs, list) and convs and isinstance(convs[0], dict):
        first = convs[0].get("content", convs[0].get("value"))
        if isinstance(first, str):
            return {"text": first} if first.strip() else {}
    msgs = row.get("messages")
    if isinstance(msgs, list):
        for m in msgs:
            if (
                isinstance(m, dict)
                and m.get("role") == "user"
                and isinstance(m.get("content"), str)
            ):
                return {"text": m["content"]}
    raise DatasetError(f"{where}: {what} {n}: no prompt; expected {expected}")
