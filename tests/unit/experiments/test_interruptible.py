"""A load run by `interruptible.run` ends as KeyboardInterrupt on Ctrl-C wherever the Ctrl-C
lands: while the load runs, where the load swallows its cancellation, and while the event loop
is being made; the loop is closed and nothing is left unawaited. The Ctrl-C is a real SIGINT
sent to this process, handled by Python's own handler."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import warnings
from collections.abc import Iterator

import pytest

from fastverify import ctrl_c
from fastverify.experiments.common import interruptible


@pytest.fixture(autouse=True)
def python_ctrl_c() -> Iterator[None]:
    """Python's Ctrl-C handler, as in a terminal (a test worker may run with SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _ctrl_c() -> None:
    signal.raise_signal(signal.SIGINT)


def test_ctrl_c_while_the_load_runs() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def load() -> str:
        loops.append(asyncio.get_running_loop())
        _ctrl_c()
        await asyncio.sleep(30)
        return "finished"

    with pytest.raises(KeyboardInterrupt):
        interruptible.run(load())
    assert loops[0].is_closed()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_load_that_swallows_its_cancellation_still_ends_as_ctrl_c() -> None:
    async def load() -> str:
        _ctrl_c()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:  # as 3.11's wait_for may, racing its timeout
            return "swallowed"
        return "finished"

    with pytest.raises(KeyboardInterrupt):
        interruptible.run(load())


def test_ctrl_c_while_the_loop_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    made = asyncio.runners.events.new_event_loop

    def ctrl_c_then_make() -> asyncio.AbstractEventLoop:
        _ctrl_c()
        return made()

    monkeypatch.setattr(asyncio.runners.events, "new_event_loop", ctrl_c_then_make)
    started: list[bool] = []

    async def load() -> str:
        started.append(True)
        return "finished"

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            interruptible.run(load())
        gc.collect()
    assert not started
    assert not [w for w in seen if "never awaited" in str(w.message)], seen


def test_no_ctrl_c_returns_the_result() -> None:
    async def load() -> str:
        await asyncio.sleep(0)
        return "finished"

    assert interruptible.run(load()) == "finished"


class _SwallowsCtrlC:
    """A finalizer that a Ctrl-C lands in: Python can only print what it raises."""

    def __del__(self) -> None:
        _ctrl_c()


def test_a_ctrl_c_a_finalizer_swallowed_is_raised_before_the_next_load(
    capsys: pytest.CaptureFixture[str],
) -> None:
    started: list[bool] = []

    async def load() -> str:
        started.append(True)
        return "finished"

    with pytest.raises(KeyboardInterrupt), ctrl_c.never_lost():
        obj = _SwallowsCtrlC()
        del obj  # the KeyboardInterrupt goes to sys.unraisablehook, not up the stack
        gc.collect()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a never-awaited load would be an error
            interruptible.run(load())
    assert not started
    assert "Exception ignored" not in capsys.readouterr().err


def test_a_swallowed_ctrl_c_with_no_load_after_it_is_raised_on_leaving(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(KeyboardInterrupt), ctrl_c.never_lost():
        obj = _SwallowsCtrlC()
        del obj
    assert "Exception ignored" not in capsys.readouterr().err
    assert interruptible.run(asyncio.sleep(0, "next")) == "next"  # nothing left over


def test_other_unraisable_errors_still_reach_pythons_hook() -> None:
    seen: list[BaseException] = []

    class Raises:
        def __del__(self) -> None:
            raise ValueError("from a finalizer")

    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(u.exc_value)
    try:
        with ctrl_c.never_lost():
            obj = Raises()
            del obj
    finally:
        sys.unraisablehook = previous
    assert [type(e) for e in seen] == [ValueError]


def test_a_command_whose_ctrl_c_a_finalizer_swallowed_ends_interrupted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every fastverifyctl command: it ran to its end, but the Ctrl-C pressed meanwhile is
    its outcome (exit 130, `CMD: interrupted`), not a success."""
    import click

    from fastverify.cli.groups import SuggestingGroup
    from fastverify.cli.output import EXIT_INTERRUPTED

    top = SuggestingGroup("fastverifyctl")  # a group with no callback of its own

    @top.command()
    def work() -> None:
        obj = _SwallowsCtrlC()
        del obj
        click.echo("done")

    with pytest.raises(SystemExit) as ended:
        top.main(["work"], prog_name="fastverifyctl")
    assert ended.value.code == EXIT_INTERRUPTED
    out, err = capsys.readouterr()
    assert out == "done\n" and "work: interrupted" in err and "Exception ignored" not in err
