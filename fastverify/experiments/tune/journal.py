"""The tune journal: what `fastverifyctl tune` has done, durable enough for `--resume`.

One directory per host under the daemon's state dir (`<state dir>/tune/`, or this user's
state dir when the daemon's is not writable here):

- `journal.jsonl`: append-only, one JSON object per line, fsync'ed per record:
  `{"event": "start", "ts", "config", "run_id"}`, `{"event": "plan", "plan"}`,
  `{"event": "stage_started", "name", "ts", "planned_s", "planned_loads"}`,
  `{"event": "stage_finished", "name", "status": "done"|"skipped"|"failed", "wall_s",
  "reason", "data", "planned_s", "planned_loads", "loads"}`, `{"event": "stage_interrupted",
  "name", "wall_s", "planned_s", "planned_loads", "loads"}` (Ctrl-C: the stage's time and
  loads so far, putting back what served before included), `{"event": "end"}`. `planned_s`
  and `planned_loads` are the plan's estimate when the stage started; `loads` the engine
  starts the daemon recorded during it, by kind (real, cached, disk, dummy). A torn last
  line (kill -9 mid-write) is ignored on reading.
- `times.json`: this host's recorded stage times (per unit: a profile, a run), read by the
  plan's estimates on the next tune.

`--resume` continues the newest journal that has no `end`: finished stages (done or
skipped) are not run again, a failed or interrupted one is. A new tune without `--resume`
sets an unfinished journal aside as `journal-<run id>.jsonl`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from fastverify.durable import append_jsonl, atomic_write_json, read_jsonl

FINISHED = ("done", "skipped")


class Journal:
    """The tune journal in `directory` (created)."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "journal.jsonl"
        self.times_path = self.dir / "times.json"
        self.records = read_jsonl(self.path)

    # -- state of the journal on disk
    def unfinished(self) -> bool:
        """A tune was started here and has not ended (what --resume continues)."""
        return any(r.get("event") == "start" for r in self.records) and not any(
            r.get("event") == "end" for r in self.records
        )

    def start_record(self) -> dict[str, Any] | None:
        return next((r for r in self.records if r.get("event") == "start"), None)

    def finished(self) -> dict[str, dict[str, Any]]:
        """name -> its last `stage_finished` record with a finished status (done/skipped)."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.records:
            if r.get("event") == "stage_finished":
                if r.get("status") in FINISHED:
                    out[r["name"]] = r
                else:
                    out.pop(r["name"], None)
        return out

    def last_of(self, name: str) -> dict[str, Any] | None:
        """The last `stage_finished` record of a stage, whatever its status."""
        recs = [
            r for r in self.records if r.get("event") == "stage_finished" and r.get("name") == name
        ]
        return recs[-1] if recs else None

    def attempts(self, name: str) -> list[dict[str, Any]]:
        """Every run of a stage this journal saw end, in order: its `stage_finished` records
        (whatever their status) and `stage_interrupted` ones (Ctrl-C)."""
        ends = ("stage_finished", "stage_interrupted")
        return [r for r in self.records if r.get("event") in ends and r.get("name") == name]

    # -- writing
    def begin(self, config: dict[str, Any]) -> str:
        """Start a new tune: an unfinished journal is set aside first. Returns the run id."""
        if self.records:
            old = self.start_record() or {}
            aside = self.dir / f"journal-{old.get('run_id') or int(time.time())}.jsonl"
            os.replace(self.path, aside)
            self.records = []
        run_id = time.strftime("%Y%m%d-%H%M%S")
        self.append({"event": "start", "ts": time.time(), "run_id": run_id, "config": config})
        return run_id

    def append(self, record: dict[str, Any]) -> None:
        record.setdefault("ts", time.time())
        append_jsonl(self.path, record)
        self.records.append(record)

    # -- recorded stage times (this host)
    def times(self) -> dict[str, Any]:
        try:
            data = json.loads(self.times_path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def record_time(self, key: str, seconds_per_unit: float) -> None:
        """Keep the newest few per-unit times of `key` (e.g. preflight per profile)."""
        data = self.times()
        values = [v for v in data.get(key, []) if isinstance(v, int | float)][-4:]
        data[key] = [*values, round(float(seconds_per_unit), 3)]
        atomic_write_json(self.times_path, data, indent=1, mode=0o644)
