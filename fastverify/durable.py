"""Durable files: the one home of how fastverify writes a state file or a journal so that a
crash (kill -9, power cut, full disk) leaves something readable.

- `atomic_write_bytes` / `atomic_write_text` / `atomic_write_json`: a temp file in the same
  directory, fsync, rename over the target (or link, which refuses an existing one), fsync
  of the directory: a reader sees the old file or the new one, never a torn one.
- `append_jsonl`: one JSON object per line, fsync'ed before returning: the whole record or
  nothing (short writes are continued; a write or fsync that fails, e.g. on a full disk,
  truncates the file back to where it was and raises). A torn last line (the crash came
  mid-write) is closed with a newline first, so the new record never glues onto it and is
  lost with it.
- `scan_jsonl` / `read_jsonl`: every complete record of a JSON-lines file; unreadable lines
  (the torn one, bad UTF-8, a value that is not an object) are skipped and counted.
- `read_json`: a JSON file someone named (a config, a cost file), its failure to read or
  parse raised as the caller's error with the path and the line.

Standard library only: the GPU rank scripts, which run without fastverify on their import
path, load this file by its path (experiments/common/rank_support.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

COMPACT = (",", ":")


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a new file in `path` durable."""
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def atomic_write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    mode: int | None = None,
    overwrite: bool = True,
) -> None:
    """Write `data` to `path` atomically (parents created). `mode`: the file's permission
    bits (default: mkstemp's 0600). `overwrite=False`: FileExistsError when `path` exists,
    even when another writer creates it meanwhile (the temp file is linked, not renamed)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if overwrite:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)
            os.unlink(tmp)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str, **kw: Any) -> None:
    """`atomic_write_bytes` of `text` in UTF-8 (same keywords)."""
    atomic_write_bytes(path, text.encode("utf-8"), **kw)


def atomic_write_json(
    path: str | os.PathLike[str],
    data: Any,
    *,
    indent: int | None = 2,
    sort_keys: bool = True,
    **kw: Any,
) -> None:
    """`data` as JSON (and a final newline), written atomically (`atomic_write_bytes`)."""
    text = json.dumps(data, indent=indent, sort_keys=sort_keys, default=str) + "\n"
    atomic_write_text(path, text, **kw)


def append_jsonl(
    path: str | os.PathLike[str],
    record: Any,
    *,
    sort_keys: bool = False,
    compact: bool = True,
    mode: int = 0o640,
) -> None:
    """Append `record` as one JSON line and fsync it. A torn last line is ended first."""
    line = json.dumps(
        record, sort_keys=sort_keys, separators=COMPACT if compact else None, default=str
    )
    data = line.encode("utf-8") + b"\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, mode)
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        try:
            view = memoryview(data)
            while view:  # a full disk writes part of the record, then refuses the rest
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
                view = view[written:]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):  # the whole record or nothing
                os.ftruncate(fd, size)
                os.fsync(fd)
            raise
    finally:
        os.close(fd)


def scan_jsonl(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """(every JSON object of a JSON-lines file, how many non-blank lines were unreadable).
    A missing file has no records."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return [], 0
    records: list[dict[str, Any]] = []
    bad = 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:  # a torn line, or bad UTF-8 (UnicodeDecodeError is one)
            bad += 1
            continue
        if isinstance(rec, dict):
            records.append(rec)
        else:
            bad += 1
    return records, bad


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every JSON object of a JSON-lines file (unreadable lines skipped)."""
    return scan_jsonl(path)[0]


def read_json(path: str | os.PathLike[str], error: type[Exception]) -> Any:
    """The JSON value in `path`; `error("PATH: cannot read (why)")` or `error("PATH: line N:
    not JSON (why)")` when it cannot be read or parsed."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{path}: line {exc.lineno}: not JSON ({exc.msg})") from None
    except RecursionError:
        raise error(f"{path}: not JSON fastverify reads (nested too deeply)") from None
