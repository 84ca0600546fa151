"""How the suite is handed out to pytest-xdist's workers with `--dist loadfile`
(./scripts/test), and the per-file durations that order it.

A unit of work is a test file (its module fixtures, a daemon or a tune, start once), or the
files of one of `GROUPS` together (the files that start the private dockerd: a worker holds
its data root's lock for the worker's whole session, so a second worker's dockerd would wait
for the end of the first's session). Units start longest first, by the seconds
tests/durations.json recorded for their files (a file it does not name counts as
`UNKNOWN_S`): a long file never starts last with the other workers idle. A worker is given
its next unit only when it runs the last test of its current one (xdist's own schedulers
queue two units ahead), so the queue is handed out as late as it can be.

Files of `CPU_BOUND` directories (the real SGLang with torch, pip installs and containers,
unit tests) keep a core busy while they run; the others mostly wait on a daemon's events (a
tune or sweep file uses about a fifth of a core). At most one CPU-bound unit per core runs
at a time while a waiting one is left to start instead: measured with the waiting files
first, the CPU-bound ones ran four to six at once later and took 3.3 times as long.

`pytest -n 6 --dist loadfile --record-durations` rewrites tests/durations.json from its run;
a file that is added or slowed down only starts later than it should until then.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
UNKNOWN_S = 20.0  # a file the durations do not name: as a mid-sized integration file
CPU_BOUND = ("tests/unit/", "tests/contract/", "tests/deployment/")
# files that run on one worker, one after the other (xdist's own xdist_group mark cannot be
# read here: the controller does not collect, and pytest 9 ignores the name xdist gives
# the grouped tests)
GROUPS = {
    f"tests/deployment/{name}": "dockerd"
    for name in ("test_compose_live.py", "test_container.py", "test_kubernetes_identity.py")
}


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError):
        return {}


def write_durations(seconds: dict[str, float], path: Path = DURATIONS) -> None:
    rounded = {f: round(s, 1) for f, s in sorted(seconds.items())}
    path.write_text(json.dumps(rounded, indent=0) + "\n")


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class LongestFirst(LoadScopeScheduling):
    """xdist's scope scheduling with scope = the test's group, else its file; units in
    decreasing recorded duration; the next unit given when one test of the current is left."""

    def __init__(self, config: pytest.Config, log=None, durations: dict[str, float] | None = None):
        super().__init__(config, log)
        self.durations = load_durations() if durations is None else durations
        self.cores = os.cpu_count() or 1

    def _split_scope(self, nodeid: str) -> str:
        file = file_of(nodeid)
        return GROUPS.get(file, file)

    def unit_seconds(self, nodeids: dict[str, bool]) -> float:
        files = {file_of(n) for n in nodeids}
        return sum(self.durations.get(f, UNKNOWN_S) for f in files)

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # a node was added later
            for node in self.nodes:
                self._reschedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        if not self.collection:
            return
        units: dict[str, dict[str, bool]] = {}
        for nodeid in self.collection:
            units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
        order = sorted(units.items(), key=lambda kv: -self.unit_seconds(kv[1]))
        self.workqueue = OrderedDict(order)
        for _ in range(len(self.nodes) - len(self.workqueue)):  # more workers than units
            self.assigned_work.popitem()[0].shutdown()
        for node in self.nodes:
            self._reschedule(node)

    @staticmethod
    def cpu_bound(unit: dict[str, bool]) -> bool:
        return file_of(next(iter(unit))).startswith(CPU_BOUND)

    def _assign_work_unit(self, node) -> None:
        """The longest unit of the kind that fits: a CPU-bound one while fewer than one per
        core run, else a waiting one (the longest of any kind where one kind is left)."""
        running = sum(
            self.cpu_bound(unit) and not all(unit.values())
            for work in self.assigned_work.values()
            for unit in work.values()
        )
        want_cpu = running < self.cores
        for scope, unit in self.workqueue.items():
            if self.cpu_bound(unit) == want_cpu:
                self.workqueue.move_to_end(scope, last=False)
                break
        super()._assign_work_unit(node)

    def _reschedule(self, node) -> None:
        # A worker runs a test only once it knows the next one (for module teardowns): one
        # test left is when it needs more.
        if node.shutting_down:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) <= 1:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()
