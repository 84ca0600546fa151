"""`fastverifyctl profile set|current`, and the operation runner shared with `mode set` and
`restart`: POST to the daemon, follow its events (a progress bar on a terminal, one line per
phase otherwise), and turn the result into an exit code.

Engine log lines are shown only with `-v`, or as an excerpt of the failed engine's own log
(the result's `log_tail`) when the operation fails; `-q` prints the result alone. The
progress never goes backwards within one start (an EAGLE-3 start loads the drafter's weights
after the model's: that is a phase of its own, not a restart of the bar). Ctrl-C while an
operation runs asks whether to cancel it (on a terminal) or leaves it running and says how
to cancel it (`fastverifyctl cancel`).

Exit codes (fastverify.cli.output; docs/reference/api.md): 0 READY and verified (or nothing to do),
1 failed or rolled back, 2 usage or invalid profile/mode, 3 daemon unreachable, 4 another
operation in flight (pass --queue to wait) or a sweep/tune holds the daemon's lease (pass
--force to switch anyway), 5 connection lost after the daemon accepted,
7 cancelled, 130 interrupted (the operation goes on in the daemon).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from fastverify.api_models import SET_PROFILE
from fastverify.cli.daemon_call import (
    STATUS_TIMEOUT_S,
    api_error_exit,
    client_for,
    describe_op,
    socket_option,
    status_command,
    unavailable_exit,
)
from fastverify.cli.options import follow_options
from fastverify.cli.output import (
    EXIT_CANCELLED,
    EXIT_INTERRUPTED,
    EXIT_LOST,
    EXIT_OK,
    emit_json,
    fail,
)
from fastverify.cli.output import EXIT_PROBLEMS as EXIT_FAILED
from fastverify.cli.output import EXIT_USAGE as EXIT_INVALID
from fastverify.config import MODES

ANSWER_TIMEOUT_S = 300.0  # validation (SGLang's argv parser) before the event stream starts


def result_exit(result: dict[str, Any]) -> int:
    outcome = result.get("result")
    if outcome in ("ok", "unchanged"):  # unchanged: it already served (no restart)
        return EXIT_OK
    return EXIT_CANCELLED if outcome == "cancelled" else EXIT_FAILED


def describe_result(result: dict[str, Any], quiet: bool = False) -> str:
    """The result's lines: the outcome last when it is ok (scripts read the last line), and
    first when it failed, the clients' view of the switch beside it unless `quiet`."""
    from fastverify.cli.switch_figures import clients_line

    clients = None if quiet else clients_line(result)
    if result.get("result") == "ok":
        ok = f"ok: {result.get('message') or result.get('profile')}"
        return (f"{clients}\n" if clients else "") + ok
    parts = [f"{result.get('result')}: {result.get('message') or result.get('reason')}"]
    if clients:
        parts.append(f"  {clients}")
    if result.get("line") and result.get("line") not in (result.get("message") or ""):
        parts.append(f"  log line: {result['line']}")
    if result.get("log") and result["log"] not in parts[0]:
        parts.append(f"  log: {result['log']}")
    return "\n".join(parts)


class Follower:
    """What to print for each event of one operation: one line per phase, engine log lines
    only when verbose, and a progress that never goes backwards within one start."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self.t0: float | None = None
        self.accepted: dict[str, Any] | None = None
        self.percent = 0.0
        self.description = "waiting"
        self.stage: tuple[str, int] | None = None  # (phase, sub-load) last announced
        self.loads = 0  # weight loads seen in this start (2 for EAGLE-3: model, drafter)

    def _at(self, ev: dict[str, Any]) -> str:
        if self.t0 is None:
            self.t0 = ev.get("ts", time.time())
        return f"[{ev.get('ts', time.time()) - self.t0:7.2f}s]"

    def lines(self, ev: dict[str, Any]) -> list[str]:
        """The lines to print for `ev` (possibly none); updates percent/description."""
        at = self._at(ev)
        kind = ev.get("event")
        if kind == "accepted":
            self.accepted = ev.get("op") or {}
            return [f"{at} {describe_op({**self.accepted, 'elapsed_s': None})} accepted"]
        if kind == "state":
            state = str(ev.get("state", ""))
            if state in ("STARTING", "ROLLING_BACK"):  # a new start: the bar begins again
                self.percent, self.stage, self.loads = 0.0, None, 0
            self.description = state.lower()
            why = f" ({ev['why']})" if ev.get("why") else ""
            return [f"{at} state {state}{why}"]
        if kind == "progress":
            return self._progress(ev, at)
        if kind == "engine":
            return [f"{at} engine pid {ev.get('pid')}, log {ev.get('log')}"]
        if kind == "verify":
            return [f"{at} verify: {ev.get('message')}"]
        if kind == "log":
            if ev.get("source") == "engine":
                return [f"  | {ev.get('line')}"] if self.verbose else []
            return [f"  * {ev.get('line')}"]
        return []

    def _progress(self, ev: dict[str, Any], at: str) -> list[str]:
        phase = str(ev.get("phase") or "")
        pct = float(ev.get("percent") or 0.0)
        message = str(ev.get("message") or phase)
        if phase == "weights" and (self.loads == 0 or pct < self.percent):
            self.loads += 1  # the first load, or a later one (the EAGLE-3 drafter's)
        if phase == "weights" and self.loads > 1:
            message = message.replace("weights", "draft model weights", 1)
        self.percent = max(self.percent, pct)
        self.description = message
        stage = (phase, self.loads if phase == "weights" else 0)
        if stage == self.stage:
            return []
        self.stage = stage
        return [f"{at} {message} ({self.percent:.0f}%)"]


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def _on_interrupt(client: Any, follower: Follower, as_json: bool) -> int:
    """Ctrl-C while following an operation: ask whether to cancel it (terminal), else detach
    and say how to cancel. Returns the exit code."""
    op = follower.accepted
    if op is None:
        click.echo(
            "\ninterrupted before the daemon reported the operation started; it may still run "
            "(a queued one when the one in flight ends): check `fastverifyctl status`, "
            "cancel it with `fastverifyctl cancel`",
            err=True,
        )
        return EXIT_INTERRUPTED
    what = describe_op({**op, "elapsed_s": None})
    if not as_json and _interactive():
        try:
            answer = click.confirm(f"\ncancel the {what}?", default=False, err=True)
        except (click.Abort, EOFError, KeyboardInterrupt):
            answer = False
        if answer:  # cancelled: exit 7, as when a cancel from another shell ends it
            code = _cancel(client, as_json=False)
            return EXIT_CANCELLED if code == EXIT_OK else code
    click.echo(
        f"\ndetached: the {what} goes on in the daemon; follow it with `fastverifyctl status`, "
        "cancel it with `fastverifyctl cancel`",
        err=True,
    )
    return EXIT_INTERRUPTED


def _cancel(client: Any, as_json: bool) -> int:
    """POST /v1/cancel and report; shared by `fastverifyctl cancel` and the Ctrl-C prompt."""
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        resp = client.cancel()
    except DaemonUnavailable as exc:
        return unavailable_exit(exc, as_json)
    except ApiError as exc:
        return api_error_exit(exc, as_json)
    if resp is None:  # 404: nothing in flight
        if as_json:
            emit_json(
                {
                    "error": "no operation in flight",
                    "http_status": 404,
                    "result": "nothing_in_flight",
                }
            )
        else:
            click.echo("nothing to cancel: no operation is in flight", err=True)
        return EXIT_FAILED
    if as_json:
        emit_json(resp)
    else:
        op = resp.get("operation") or {}
        click.echo(
            f"cancelled: {describe_op(op)}; the previous profile is being put back "
            "(follow with `fastverifyctl status`)"
        )
    return EXIT_OK


def _status_or_exit(client: Any, as_json: bool) -> dict[str, Any] | int:
    """/v1/status within STATUS_TIMEOUT_S, or the exit code after printing why not."""
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        return client.status(timeout=STATUS_TIMEOUT_S)
    except DaemonUnavailable as exc:
        return unavailable_exit(exc, as_json)
    except ApiError as exc:
        return api_error_exit(exc, as_json)


def run_operation(
    ctx: click.Context,
    ep: Any,
    body: dict[str, Any],
    *,
    as_json: bool,
    no_wait: bool,
    quiet: bool = False,
    verbose: bool = False,
) -> int:
    """Ask for an operation (`ep`, an api_models endpoint, with the fields in `body`) and
    follow it to its result; returns the exit code."""
    from fastverify.client import ApiError, ConnectionLost, DaemonUnavailable

    client = client_for(ctx, timeout=None)
    status = _status_or_exit(client, as_json)
    if isinstance(status, int):
        return status
    flight = status.get("switch_in_flight")
    if body.get("queue") and flight and not as_json and not quiet:
        click.echo(
            f"waiting for the {describe_op(flight)} in flight to finish "
            "(queued; Ctrl-C stops waiting)",
            err=True,
        )
    answer_timeout = None if body.get("queue") else ANSWER_TIMEOUT_S
    follower = Follower(verbose=verbose)
    try:
        if no_wait:
            resp = client.call(ep, timeout=answer_timeout, **dict(body, wait=False))
            if as_json:
                emit_json(resp)
            else:
                click.echo(f"accepted: {describe_op({**resp.get('op', {}), 'elapsed_s': None})}")
            return EXIT_OK
        if as_json:
            try:
                result = client.call(ep, **dict(body, wait=True, stream=False))
            except ApiError as exc:
                if exc.status == 502 and "result" in exc.body:
                    emit_json(exc.body)
                    return result_exit(exc.body)
                raise
            emit_json(result)
            return result_exit(result)
        events = client.follow(
            ep, answer_timeout=answer_timeout, **dict(body, wait=True, stream=True)
        )
        if sys.stdout.isatty() and not quiet:
            result = _follow_rich(events, follower)
        else:
            result = _follow_plain(events, follower, quiet)
    except KeyboardInterrupt:
        return _on_interrupt(client, follower, as_json)
    except DaemonUnavailable as exc:
        return unavailable_exit(exc, as_json)
    except ApiError as exc:
        return api_error_exit(exc, as_json)
    except (ConnectionLost, OSError) as exc:
        click.echo(
            f"error: lost the connection to fastverifyd: {exc}; the operation may still be "
            "running: see `fastverifyctl status`",
            err=True,
        )
        return EXIT_LOST
    if result is None:
        click.echo(
            "error: the daemon closed the stream without a result; see `fastverifyctl status`",
            err=True,
        )
        return EXIT_LOST
    ok = result.get("result") in ("ok", "unchanged")
    if not ok and not verbose and not quiet:
        for line in failed_engine_excerpt(result):
            click.echo(line, err=True)
    click.echo(describe_result(result, quiet), err=not ok)
    if ok and not quiet and (note := left_decision(status, result)):
        click.echo(note, err=True)
    return result_exit(result)


def left_decision(before: dict[str, Any], result: dict[str, Any]) -> str | None:
    """`note: ...` when this operation switched away from the tuning decision that served."""
    dec = before.get("decision") or {}
    if not dec.get("serving"):
        return None
    now = (result.get("profile"), result.get("mode"))
    if now == (dec.get("profile"), dec.get("mode")) or None in now:
        return None
    return (
        f"note: tune's decision {dec['profile']}/{dec['mode']} no longer serves ({now[0]}/"
        f"{now[1]} does); `fastverifyctl profile set {dec['profile']} --mode {dec['mode']}` "
        "puts it back"
    )


def failed_engine_excerpt(result: dict[str, Any]) -> list[str]:
    """The failed (or cancelled) engine's own last log lines, as the daemon read them from
    that engine's log file (`log_tail`); never the rollback server's start-up."""
    tail = result.get("log_tail") or []
    if not tail:
        return []
    what = f"{result.get('profile')}/{result.get('mode')}"
    where = f", {result['log']}" if result.get("log") else ""
    return [f"last engine log lines ({what}{where}):", *(f"  | {line}" for line in tail)]


def _follow_plain(events: Any, follower: Follower, quiet: bool) -> dict[str, Any] | None:
    for ev in events:
        if ev.get("event") == "result":
            return ev
        lines = follower.lines(ev)
        if not quiet:
            for line in lines:
                try:
                    click.echo(line)
                except BrokenPipeError:  # the pipe's reader left (`| head -1`): not the daemon
                    _stdout_to_devnull()  # follow on quietly; the exit code is the result's
                    quiet = True
                    break
    return None


def _stdout_to_devnull() -> None:
    import os

    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, sys.stdout.fileno())
    os.close(fd)


def _follow_rich(events: Any, follower: Follower) -> dict[str, Any] | None:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from fastverify.cli.term import raw, safe

    console = Console(file=raw(sys.stdout), highlight=False)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("waiting", total=100)
        for ev in events:
            if ev.get("event") == "result":
                bar.update(task, completed=100)
                return ev
            for line in follower.lines(ev):
                bar.console.print(safe(line), markup=False)
            description = escape(safe(follower.description, newlines=False))
            bar.update(task, completed=follower.percent, description=description)
    return None


def _path_refusal(name: str) -> str | None:
    """`profile set ./x.env`: the daemon loads profiles by name only; say what to do."""
    if "/" in name or name.endswith(".env"):
        from fastverify.profiles.store import name_problem

        return name_problem(name, paths_allowed=False)
    return None


@click.command("set")
@click.argument("name")
@click.option("--mode", type=click.Choice(list(MODES)), default=None,
              help="Decoding mode (default: keep the current one).")  # fmt: skip
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Readiness timeout for this switch in seconds (then roll back).")  # fmt: skip
@click.option("--no-wait", is_flag=True, help="Return once the daemon accepted the switch.")
@click.option(
    "--force",
    is_flag=True,
    help="Accept profiles refused without it (e.g. LL128 over PCIe), and switch even while "
    "a sweep or tune holds the daemon (its lease).",
)
@click.option("--queue", is_flag=True, help="Wait for a switch in flight instead of failing (409).")
@click.option(
    "--restart", is_flag=True, help="Restart even when NAME (and the mode) is already serving."
)
@click.option("--trial", is_flag=True,
              help="Timing trial: SGLang --load-format dummy (random weights, fast load; "
              "everything it serves is labelled weights=dummy).")  # fmt: skip
@click.option("--canary", is_flag=True,
              help="Declarative daemon (Kubernetes pod): leave the manifest's profile on this "
              "pod on purpose (status shows the canary).")  # fmt: skip
@follow_options
@socket_option
@click.pass_context
def set_cmd(
    ctx: click.Context,
    name: str,
    mode: str | None,
    timeout_s: float | None,
    no_wait: bool,
    force: bool,
    queue: bool,
    restart: bool,
    trial: bool,
    canary: bool,
    **follow: bool,
) -> None:
    """Switch the daemon to profile NAME; exit 0 only when READY and verified.

    NAME and mode already serving: nothing is done (exit 0) unless --restart. Exit codes:
    0 ok, 1 failed/rolled back, 2 invalid profile or usage, 3 daemon unreachable, 4 another
    switch in flight or a sweep/tune's lease, 5 connection lost, 7 cancelled, 130 interrupted.
    """
    refusal = _path_refusal(name)
    if refusal:
        fail(f"error: {refusal}", EXIT_INVALID)
    body = {
        "name": name, "force": force, "queue": queue, "mode": mode or None,
        "timeout_s": timeout_s or None, "load_format": "dummy" if trial else None,
        "restart": restart or None,  # else the daemon answers "unchanged" when it already serves
        "canary": canary or None,  # a declarative daemon refuses the switch without it (403)
    }  # fmt: skip
    sys.exit(run_operation(ctx, SET_PROFILE, body, no_wait=no_wait, **follow))


@status_command("current", "Print JSON.")
def current_cmd(st: dict[str, Any], as_json: bool) -> None:
    """The daemon's active profile and mode (and its state)."""
    if as_json:
        emit_json(
            {k: st.get(k) for k in ("profile", "mode", "state", "last_good", "last_good_mode")}
        )
        return
    trial = " [trial: dummy weights]" if st.get("trial") else ""
    click.echo(f"{st.get('profile')} ({st.get('mode')}) {st.get('state')}{trial}")
