"""The suite's xdist scheduler (tests/support/schedule.py), driven as xdist's controller
drives it, with workers that record what they are sent: whole files, the dockerd files on
one worker, the longest first, at most one CPU-bound file per core while a waiting one can
start instead, and the next file only when the current one is on its last test."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support import schedule


class Worker:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def started(files: dict[str, int], seconds: dict[str, float], workers: int, cores: int):
    """A scheduler over `files` (name -> number of tests) after its first distribution."""
    config = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"], option=SimpleNamespace())
    sched = schedule.LongestFirst(config, durations=seconds)
    sched.cores = cores
    collection = [f"{f}::test_{i}" for f, n in files.items() for i in range(n)]
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    return sched, nodes, collection


def files_sent(node: Worker, collection: list[str]) -> list[str]:
    out: list[str] = []
    for i in node.sent:
        f = schedule.file_of(collection[i])
        if f not in out:
            out.append(f)
    return out


def finish(sched, node: Worker, collection: list[str], upto: int) -> None:
    """Report node's sent tests done until `upto` are left pending."""
    pending = [i for i in node.sent if not sched.assigned_work[node][sched._split_scope(
        collection[i])][collection[i]]]  # fmt: skip
    for i in pending[: len(pending) - upto]:
        sched.mark_test_complete(node, i)


def test_longest_waiting_files_first_and_one_cpu_bound_file_per_core() -> None:
    files = {"tests/integration/test_a.py": 3, "tests/integration/test_b.py": 3,
             "tests/integration/test_c.py": 3, "tests/unit/test_u1.py": 3,
             "tests/unit/test_u2.py": 3, "tests/contract/test_k.py": 3}  # fmt: skip
    seconds = {"tests/integration/test_a.py": 10, "tests/integration/test_b.py": 300,
               "tests/integration/test_c.py": 50, "tests/unit/test_u1.py": 5,
               "tests/unit/test_u2.py": 1, "tests/contract/test_k.py": 100}  # fmt: skip
    sched, nodes, collection = started(files, seconds, workers=3, cores=1)
    first = [files_sent(n, collection) for n in nodes]
    # one CPU-bound file (the longest: the contract one) beside the longest waiting ones
    assert first == [["tests/contract/test_k.py"], ["tests/integration/test_b.py"],
                     ["tests/integration/test_c.py"]]  # fmt: skip
    # nothing more is sent before a worker's file is down to its last test
    finish(sched, nodes[1], collection, upto=2)
    assert files_sent(nodes[1], collection) == ["tests/integration/test_b.py"]
    # the CPU-bound file still runs: the next file is the waiting one left
    finish(sched, nodes[1], collection, upto=1)
    assert files_sent(nodes[1], collection)[1:] == ["tests/integration/test_a.py"]
    # only CPU-bound files are left: they go out, longest first, on any worker
    finish(sched, nodes[2], collection, upto=1)
    assert files_sent(nodes[2], collection)[1:] == ["tests/unit/test_u1.py"]


def test_the_dockerd_files_are_one_unit_on_one_worker() -> None:
    docker = sorted(schedule.GROUPS)
    files = {**dict.fromkeys(docker, 1), "tests/integration/test_a.py": 2}
    _, nodes, collection = started(files, {}, workers=2, cores=2)
    sent = [files_sent(n, collection) for n in nodes]
    assert sorted(docker) in [sorted(s) for s in sent], sent
    assert ["tests/integration/test_a.py"] in sent, sent


def test_a_file_the_durations_do_not_name_counts_as_unknown_s() -> None:
    files = {"tests/integration/test_new.py": 1, "tests/integration/test_old.py": 1}
    seconds = {"tests/integration/test_old.py": schedule.UNKNOWN_S - 1}
    _, nodes, collection = started(files, seconds, workers=1, cores=1)
    assert files_sent(nodes[0], collection)[0] == "tests/integration/test_new.py"
