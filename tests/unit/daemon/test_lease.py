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
    lease, overrode = book.take("sweep", "2 profile(s) x 3 run(s)", pid=None, holder="uid 0")
    assert overrode is None
    assert book.check(lease["id"], False, "switch to ring-ll", "uid 0") is None  # its own
    with pytest.raises(RequestError) as exc:
        book.check(None, force=False, what="switch to tree-ll", holder="uid 0")
    assert exc.value.status == 409 and exc.value.body["reason"] == "leased"
    assert "sweep (uid 0, since" in str(exc.value.body["error"])
    assert "--force" in exc.value.body["error"] and "id" not in exc.value.body["lease"]
    # its id from another identity is no better than none
    with pytest.raises(RequestError):
        book.check(lease["id"], force=False, what="switch to tree-ll", holder="uid 1001")
    forced = book.check(None, force=True, what="switch to tree-ll", holder="uid 1001")
    assert forced is not None and forced["id"] == lease["id"]  # the caller records it
    with pytest.raises(RequestError) as taken:
        book.take("tune", "", pid=None, holder="uid 0")
    assert taken.value.status == 409
    assert book.release("not-it", "uid 0") is None and book.current() is not None
    with pytest.raises(RequestError) as other:
        book.release(lease["id"], "uid 1001")
    assert other.value.status == 403 and book.current() is not None
    assert book.release(lease["id"], "uid 0")["id"] == lease["id"] and book.current() is None
    assert book.check(None, force=False, what="restart") is None  # nothing held


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
