"""The daemon's experiment lease (fastverify.daemon.lease): one at a time, refused to anyone
else with 409 naming it unless forced, and lapsed once its holder process is gone (a real
child process, killed and reaped)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fastverify.daemon.lease import Leases
from fastverify.daemon.resolve import RequestError


def test_one_lease_its_own_operations_pass_others_get_409_naming_it() -> None:
    book = Leases()
    lease = book.take("sweep", "2 profile(s) x 3 run(s)", pid=None)
    book.check(lease["id"], force=False, what="switch to ring-ll")  # its own: passes
    with pytest.raises(RequestError) as exc:
        book.check(None, force=False, what="switch to tree-ll")
    assert exc.value.status == 409 and exc.value.body["reason"] == "leased"
    assert "sweep (since" in str(exc.value.body["error"]) and "--force" in exc.value.body["error"]
    book.check(None, force=True, what="switch to tree-ll")  # forced: passes
    with pytest.raises(RequestError) as taken:
        book.take("tune", "", pid=None)
    assert taken.value.status == 409
    assert book.release("not-it") is None and book.current() is not None
    assert book.release(lease["id"])["id"] == lease["id"] and book.current() is None
    book.check(None, force=False, what="restart")  # nothing held: passes


def test_a_lease_lapses_when_its_holder_process_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    book = Leases()
    book.take("tune", "", pid=child.pid)
    assert book.current() is not None
    child.stdin.close()  # type: ignore[union-attr]
    child.wait(timeout=30)
    assert book.current() is None
    book.check(None, force=False, what="switch to ring-ll")


def test_bad_lease_requests_are_refused() -> None:
    book = Leases()
    with pytest.raises(RequestError) as exc:
        book.take("bench", "", pid=None)
    assert exc.value.status == 422 and "sweep, tune" in str(exc.value.body["error"])
    assert book.current() is None
