"""FlashInfer's copy-engine all-reduce in a kineto trace: many kernels, ONE all-reduce.

When FlashInfer's autotuner picks a copy-engine tactic (`pcie_ipc_ce_ring.cuh`, 4 and 8
ranks), one all-reduce is no single kernel: on the caller's stream a flag wait and then an
add or a memcpy per ring step and piece, closed by a publish + wait handshake; a publish
per step on a flag stream; memcpys on a copy stream (`fastverify.sglang.allreduce.
CE_KERNELS`). `fold` turns those kernels back into all-reduces:

- a group is a run of copy-engine kernels on one device with no other kernel between them
  on the caller's stream (the streams that carry the group's flag waits and adds): the
  model's compute between two all-reduces always runs there (a trace with no other kernel
  on those streams: any other kernel on the device);
- a group holds as many all-reduces as its caller's stream has closing handshakes (a run
  of publishes), which separates all-reduces issued back to back; the handshakes are only
  told apart from per-step publishes when those run elsewhere (a flag stream) or not at
  all (the memop variant); otherwise the group is one all-reduce;
- each all-reduce spans from its first kernel's or memcpy's start to its last one's end
  (the device-to-device copies between the same two compute kernels are its own) and is
  reported as one kernel named CE_NAME, with the correlation of its first kernel (for the
  CPU-range fallback).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from fastverify.sglang import allreduce

CE_NAME = f"{allreduce.KERNEL_NAMESPACE}ce_ring_all_reduce (copy-engine: flag, add, memcpy)"


class _KernelLike(Protocol):
    """What fold reads of a kernel record, read-only (events.Kernel is a NamedTuple)."""

    @property
    def device(self) -> Any: ...
    @property
    def ts(self) -> float: ...
    @property
    def dur(self) -> float: ...
    @property
    def name(self) -> str: ...
    @property
    def tid(self) -> Any: ...


K = TypeVar("K", bound=_KernelLike)


def is_ce(name: str) -> bool:
    return allreduce.ce_role(name) is not None


def _main_tids(group: Sequence[_KernelLike]) -> set[Any]:
    tids = {k.tid for k in group if allreduce.ce_role(k.name) in ("add", "wait", "memop_wait")}
    return tids or {k.tid for k in group}


def _calls(group: Sequence[K]) -> list[list[K]]:
    """Split one group into its all-reduces (see the module docstring)."""
    roles = [allreduce.ce_role(k.name) for k in group]
    adds = Counter(k.tid for k, r in zip(group, roles, strict=True) if r == "add")
    waits = Counter(k.tid for k, r in zip(group, roles, strict=True) if r in ("wait", "memop_wait"))
    main = (adds or waits or Counter(k.tid for k in group)).most_common(1)[0][0]
    off_main = any(r == "publish" and k.tid != main for k, r in zip(group, roles, strict=True))
    memop = "memop_wait" in roles
    if not (off_main or memop):
        return [list(group)]
    # ends of the closing handshakes on the caller's stream: a run of publishes and as many
    # flag waits after them (one each on the flat ring, two on the island schedule); the
    # call ends with the last of those waits (the next call's first step also starts with
    # a wait)
    ends: list[int] = []
    seq = [i for i, k in enumerate(group) if k.tid == main]
    j = 0
    while j < len(seq):
        if roles[seq[j]] != "publish":
            j += 1
            continue
        published = 0
        while j < len(seq) and roles[seq[j]] == "publish":
            published += 1
            j += 1
        last = seq[j - 1]
        while published and j < len(seq) and roles[seq[j]] == "wait":
            last = seq[j]
            published -= 1
            j += 1
        ends.append(last)
    if len(ends) <= 1:
        return [list(group)]
    # the next call's side streams wait for an event recorded after this handshake, so in
    # start order every kernel after a handshake's last wait belongs to the next call
    calls: list[list[K]] = []
    start = 0
    for n, end in enumerate(ends):
        stop = len(group) if n == len(ends) - 1 else end + 1
        calls.append(list(group[start:stop]))
        start = stop
    return [c for c in calls if c]


def fold(
    kernels: Sequence[K],
    boundaries: Mapping[Any, Sequence[tuple[float, Any]]],
    make: Callable[[K, float, float, str], K],
    memcpys: Mapping[Any, Sequence[tuple[float, float]]] | None = None,
) -> list[K]:
    """`kernels` with every copy-engine kernel replaced by one entry per all-reduce.

    boundaries: device -> sorted (start, stream) of every other kernel on that device;
    memcpys: device -> sorted (start, duration) of its device-to-device copies (a copy
    between the same two boundaries as a group belongs to it: the ring's first copy starts
    before any of its kernels). make(first kernel, start, duration, name) builds an entry."""
    out: list[K] = [k for k in kernels if not is_ce(k.name)]
    by_device: dict[Any, list[K]] = {}
    for k in kernels:
        if is_ce(k.name):
            by_device.setdefault(k.device, []).append(k)
    for device, ce in by_device.items():
        ce.sort(key=lambda k: k.ts)
        main = _main_tids(ce)
        others = boundaries.get(device, ())
        starts = [t for t, tid in others if tid in main]
        if not starts:  # no other kernel shares their stream: any kernel on the device
            starts = [t for t, _ in others]
        copies = list((memcpys or {}).get(device, ()))
        copy_starts = [c[0] for c in copies]
        groups: list[list[K]] = [[ce[0]]]
        for prev, cur in itertools.pairwise(ce):
            between = bisect.bisect_right(starts, cur.ts) - bisect.bisect_right(starts, prev.ts)
            if between > 0:
                groups.append([cur])
            else:
                groups[-1].append(cur)
        for group in groups:
            # the copies after the boundary before this group and before the one after it
            i = bisect.bisect_right(starts, group[0].ts)
            lo = starts[i - 1] if i > 0 else float("-inf")
            hi = starts[i] if i < len(starts) else float("inf")
            mine = copies[
                bisect.bisect_right(copy_starts, lo) : bisect.bisect_left(copy_starts, hi)
            ]
            calls = _calls(group)
            spans = [[min(k.ts for k in c), max(k.ts + k.dur for k in c)] for c in calls]
            for ts, dur in mine:  # to the first call that has not ended before it starts
                j = next((n for n, sp in enumerate(spans) if ts < sp[1]), len(spans) - 1)
                spans[j][0] = min(spans[j][0], ts)
                spans[j][1] = max(spans[j][1], ts + dur)
            for call, (t0, t1) in zip(calls, spans, strict=True):
                out.append(make(call[0], t0, t1 - t0, CE_NAME))
    out.sort(key=lambda k: (str(k.device), k.ts))
    return out
