"""Two daemon operations every engine experiment (sweep, `spec costs`) runs the same way.

- `switch(client, body, timeout_s, emit)`: `POST /v1/profile` and wait; a 409 (another switch
  in flight) is waited out a few times; any refusal comes back as a result dict
  (`result` "failed", `reason`, `message`) instead of an exception, so a caller records it
  and goes on.
- `capture_under_load(client, load, steps, emit)`: a profile window (`POST
  /v1/trace/capture`) while a background closed loop (`load`, a BenchConfig) keeps the
  engine busy at exactly `load.concurrency` requests in flight: the window records forward
  steps, and they need traffic. A line every PROGRESS_EVERY_S while it waits. Returns the
  daemon's analysis (or None), the error when there is none (a timed-out window says so),
  and the seconds it took.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

SWITCH_ATTEMPTS = 5
CAPTURE_TIMEOUT_S = 180.0
PROGRESS_EVERY_S = 10.0  # a line while a profile window waits for its steps


def switch(
    client: Any,
    body: dict[str, Any],
    timeout_s: float,
    emit: Callable[[str], None],
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The daemon's result of a switch (ok, unchanged, rolled_back or failed), never raising
    for an API refusal (422 keeps the daemon's problems as the message). `on_event`: the
    operation's events as they happen (state, progress of the load, engine lines), streamed."""
    from fastverify.client import ApiError

    for attempt in range(SWITCH_ATTEMPTS):
        try:
            if on_event is None:
                return client.set_profile(**{**body, "wait": True}, timeout=timeout_s)
            return _streamed(client, body, timeout_s, on_event)
        except ApiError as exc:
            if exc.status == 409 and attempt < SWITCH_ATTEMPTS - 1:  # another switch in flight
                emit(f"  daemon busy ({exc}); retrying in 2 s")
                time.sleep(2.0)
                continue
            data = dict(exc.body)
            data.setdefault("result", "failed")
            if exc.status == 422:
                data.setdefault("reason", "invalid_profile")
                problems = data.get("problems")
                if problems and not data.get("message"):
                    data["message"] = "; ".join(str(p) for p in problems)
            data.setdefault("reason", f"http_{exc.status}")
            data.setdefault("message", str(exc))
            return data
    raise AssertionError("unreachable")


def _streamed(
    client: Any, body: dict[str, Any], timeout_s: float, on_event: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    from fastverify import api_models as m
    from fastverify.client import ConnectionLost

    with _ctrl_c_held():  # until the daemon has said whether it took the switch
        events = iter(client.follow(m.SET_PROFILE, timeout=timeout_s, **{**body, "stream": True}))
        first = next(events, None)
    for ev in itertools.chain([first] if first is not None else [], events):
        if ev.get("event") == "result":
            return {k: v for k, v in ev.items() if k not in ("event", "ts")}
        on_event(ev)
    raise ConnectionLost("the daemon's event stream ended without the switch's result")


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Ctrl-C held back while a switch request is on its way, raised once the daemon has
    answered it (its first event, or its refusal): an interrupt in between would leave this
    client not knowing whether a switch starts, and the restore after it might find nothing
    to queue behind (answered `unchanged`, then the switch starts). Where Python's own Ctrl-C
    handler is not installed (another thread, SIGINT ignored), nothing changes."""
    held: list[int] = []
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if held:
            raise KeyboardInterrupt


def capture_under_load(
    client: Any, load: Any, steps: int, emit: Callable[[str], None] | None = None
) -> tuple[dict[str, Any] | None, str | None, float]:
    """(analysis, error, wall seconds) of one profile window of `steps` steps taken while
    `load` (BenchConfig: url, concurrency, lengths) runs beside it as a steady closed loop:
    each of its `concurrency` clients sends its next request when its last one finished
    (never more in flight than that, so prefills do not pile up in the server's queue)."""
    from fastverify.client import ApiError
    from fastverify.experiments.bench.load import keep_loaded

    got: dict[str, Any] = {}
    done = threading.Event()
    counts: dict[str, int] = {}
    loader = threading.Thread(
        target=keep_loaded, args=(load, done, counts), name="trace-load", daemon=True
    )
    t0 = time.monotonic()
    ticker = threading.Thread(
        target=_progress, args=(emit, done, t0, steps, load.concurrency, counts),
        name="trace-progress", daemon=True,
    )  # fmt: skip
    try:  # from the load's start: a Ctrl-C at any point stops it, and this process can exit
        loader.start()
        if emit is not None:
            emit(f"  trace window: {steps} step(s) under a steady load of {load.concurrency} "
                 f"request(s) in flight ({load.input_len}-token prompts) ...")  # fmt: skip
            ticker.start()
        while time.monotonic() - t0 < CAPTURE_TIMEOUT_S:
            try:
                got["analysis"] = client.capture_trace(steps=steps, timeout=CAPTURE_TIMEOUT_S)
                break
            except ApiError as exc:
                # refused while the daemon has not yet seen the load's first request
                if exc.status == 409 and exc.body.get("reason") == "capture_refused":
                    got["error"] = str(exc)
                    done.wait(0.2)
                    continue
                got["error"] = str(exc)
                got["timed_out"] = exc.body.get("reason") == "timed_out"
                break
            except OSError as exc:
                got["error"] = str(exc)
                break
        else:
            got.update(timed_out=True, error=f"no window within {CAPTURE_TIMEOUT_S:.0f} s")
    finally:
        done.set()
        if loader.ident is not None:  # started (a Ctrl-C may come before)
            loader.join(5.0)
    analysis = got.get("analysis")
    error = got.get("error")
    if analysis is None and got.get("timed_out"):
        error = f"TIMED OUT ({error})"
    return (analysis if isinstance(analysis, dict) else None), error, time.monotonic() - t0


def _progress(
    emit: Callable[[str], None],
    done: threading.Event,
    t0: float,
    steps: int,
    concurrency: int,
    counts: dict[str, int],
) -> None:
    """A line every PROGRESS_EVERY_S while the window waits: a minute without output looks
    like a hang."""
    while not done.wait(PROGRESS_EVERY_S):
        emit(
            f"  trace window: waiting for {steps} step(s) for {time.monotonic() - t0:.0f} s "
            f"(load: {concurrency} request(s) in flight, {counts.get('finished', 0)} "
            f"finished, {counts.get('failed', 0)} failed; the daemon gives up after its "
            "capture timeout)"
        )
