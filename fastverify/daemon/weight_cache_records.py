"""What one weight-cache group is and what its starts leave in the state dir: the handle
(group.Member with the ranks and their fingerprint), `weight-cache.json` (the last start's
seconds per source and mode, the disk-load estimate a switch notice gives, one rank's weight
GiB) and the GPU memory the cache's processes hold (NVML, else SGLang's own accounting).
The group's supervision is group.py's, what differs for the cache weight_cache.py's."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from fastverify.daemon import procs
from fastverify.daemon.group import Member

TIMES_FILE = "weight-cache.json"  # the last start's figures per source (the switch notice)
GIB = 1 << 30


@dataclass
class CacheHandle(Member):
    """One weight-cache group (group.Member) and what its ranks said when ready."""

    env_paths: dict[str, str]
    ranks: int
    fingerprint: dict[str, Any] = field(default_factory=dict)
    rank_pids: list[int] = field(default_factory=list)

    @property
    def cache_id(self) -> str:
        return self.group_id

    def record(self) -> dict[str, Any]:
        return {
            **super().record(),
            "env_paths": self.env_paths,
            "ranks": self.ranks,
            "ready_s": self.ready_s,
        }


class CacheTimes:
    """`weight-cache.json` in the daemon's state store, read and written under `lock`."""

    def __init__(self, store: Any, lock: Any) -> None:
        self.store = store
        self._lock = lock

    def record(self, source: str, mode: str, seconds: float | None) -> None:
        """The last start's time per source and mode (the notice of the next switch)."""
        if seconds is None:
            return
        with self._lock:
            times = self.store.load_json(TIMES_FILE)
            times.setdefault(source, {})[mode] = round(float(seconds), 3)
            with contextlib.suppress(OSError):
                self.store.save_json(TIMES_FILE, times)

    def disk_estimate(self, mode: str, h: CacheHandle | None) -> str:
        """How long a disk start of `mode` takes, from the records: the last one of that
        mode, else of any mode, else the cache's (`h`) own disk load plus a start from it."""
        times = self.store.load_json(TIMES_FILE)
        disk = times.get("disk") or {}
        if isinstance(disk.get(mode), int | float):
            return f"~{disk[mode]:.0f} s, from the last recorded load"
        other = [v for v in disk.values() if isinstance(v, int | float)]
        if other:
            return f"~{other[-1]:.0f} s, from the last recorded disk load (another mode)"
        cached = [v for v in (times.get("cache") or {}).values() if isinstance(v, int | float)]
        if h is not None and h.ready_s and cached:
            return (
                f"~{h.ready_s + cached[-1]:.0f} s, from the records: the cache's disk load "
                f"{h.ready_s:.0f} s + a start from it {cached[-1]:.0f} s"
            )
        return "no load recorded yet"

    def record_weight_gb(self, gb: float | None) -> None:
        """A disk load's `Load weight end ... mem usage=X GB` (one rank's weights)."""
        if gb is None or gb <= 0:
            return
        with self._lock:
            times = self.store.load_json(TIMES_FILE)
            times["weight_gb_per_rank"] = float(gb)
            with contextlib.suppress(OSError):
                self.store.save_json(TIMES_FILE, times)

    def bytes_held(self, h: CacheHandle | None) -> tuple[int | None, str]:
        """GPU memory the processes of cache `h` hold: NVML per process where it answers,
        else SGLang's own accounting of this model's last disk load (`Load weight end ...
        mem usage=X GB` per rank, times the ranks), else unknown."""
        if h is None or not h.ready.is_set():
            return None, "no ready cache"
        got = procs.nvml_bytes([p.pid for p in procs.descendants(h.pid)])
        if got is not None:
            return got, "nvml"
        gb = self.store.load_json(TIMES_FILE).get("weight_gb_per_rank")
        if isinstance(gb, int | float) and gb > 0:
            return int(gb * GIB * h.ranks), "SGLang's last disk load (mem usage per rank x ranks)"
        return None, "unknown (no NVML here, no disk load recorded yet)"
