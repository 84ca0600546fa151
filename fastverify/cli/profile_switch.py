"""`fastverifyctl profile set|current`, and the operation runner shared with `mode set` and
`restart`: POST to the daemon, stream its events (rich progress bar on a terminal, plain
lines otherwise), and turn the result into an exit code.

Exit codes (also in docs/api.md):
  0  the new profile is READY and verified
  1  the switch failed (rolled back to the last good profile, or failed outright)
  2  usage error or invalid profile/mode (HTTP 422/400)
  3  the daemon is unreachable
  4  another switch is in flight (HTTP 409; pass --queue to wait for it)
  5  the connection ended before the daemon sent a result (check `fastverifyctl status`)
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from fastverify.cli.output import (
    EXIT_BUSY,
    EXIT_LOST,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    emit_json,
    fail,
)
from fastverify.cli.output import EXIT_PROBLEMS as EXIT_FAILED
from fastverify.cli.output import EXIT_USAGE as EXIT_INVALID


def client_for(ctx: click.Context, timeout: float | None = 30.0) -> Any:
    from fastverify.client import ControlClient

    obj = ctx.find_root().obj or {}
    return ControlClient(obj.get("socket"), timeout=timeout)


def call_daemon(
    ctx: click.Context,
    method: str,
    path: str,
    body: Any = None,
    *,
    as_json: bool,
    timeout: float | None = 30.0,
) -> Any:
    """One API call; an unreachable daemon or an API error is printed and exits the CLI."""
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        return client_for(ctx, timeout=timeout).request(method, path, body)
    except DaemonUnavailable as exc:
        if as_json:
            emit_json({"error": str(exc), "reachable": False})
        else:
            click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    except ApiError as exc:
        sys.exit(api_error_exit(exc, as_json))


def api_error_exit(exc: Any, as_json: bool) -> int:
    """Print an ApiError's body and return the matching exit code."""
    status = exc.status
    body = exc.body
    if as_json:
        emit_json(dict(body, http_status=status))
    else:
        click.echo(f"error: {body.get('error') or exc}", err=True)
        for problem in body.get("problems", [])[1:]:
            click.echo(f"  {problem}", err=True)
        if status == 409 and body.get("in_flight"):
            f = body["in_flight"]
            click.echo(
                f"  in flight: {f.get('kind')} {f.get('profile')}/{f.get('mode')} "
                f"(id {f.get('id')}, {f.get('elapsed_s', 0):.1f} s)",
                err=True,
            )
    if status == 409:
        return EXIT_BUSY
    if status in (400, 422):
        return EXIT_INVALID
    return EXIT_FAILED


def result_exit(result: dict[str, Any]) -> int:
    return EXIT_OK if result.get("result") == "ok" else EXIT_FAILED


def describe_result(result: dict[str, Any]) -> str:
    if result.get("result") == "ok":
        return f"ok: {result.get('message') or result.get('profile')}"
    parts = [f"{result.get('result')}: {result.get('message') or result.get('reason')}"]
    if result.get("line") and result.get("line") not in (result.get("message") or ""):
        parts.append(f"  log line: {result['line']}")
    if result.get("log") and result["log"] not in parts[0]:
        parts.append(f"  log: {result['log']}")
    return "\n".join(parts)


def run_operation(
    ctx: click.Context,
    path: str,
    body: dict[str, Any],
    *,
    as_json: bool,
    no_wait: bool,
    quiet: bool = False,
) -> int:
    """POST an operation and follow it to its result; returns the exit code."""
    from fastverify.client import ApiError, DaemonUnavailable

    client = client_for(ctx, timeout=None)
    try:
        if no_wait:
            resp = client.post(path, dict(body, wait=False), timeout=60)
            if as_json:
                emit_json(resp)
            else:
                op = resp.get("op", {})
                click.echo(
                    f"accepted: {op.get('kind')} {op.get('profile')}/{op.get('mode')}"
                    f" (id {op.get('id')})"
                )
            return EXIT_OK
        if as_json:
            try:
                result = client.post(path, dict(body, wait=True, stream=False))
            except ApiError as exc:
                if exc.status == 502 and "result" in exc.body:
                    emit_json(exc.body)
                    return EXIT_FAILED
                raise
            emit_json(result)
            return result_exit(result)
        events = client.stream("POST", path, dict(body, wait=True, stream=True))
        if sys.stdout.isatty() and not quiet:
            result = _follow_rich(events)
        else:
            result = _follow_plain(events, quiet)
    except DaemonUnavailable as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_UNAVAILABLE
    except ApiError as exc:
        return api_error_exit(exc, as_json)
    except (ConnectionError, OSError) as exc:
        click.echo(f"error: lost the connection to fastverifyd: {exc}", err=True)
        return EXIT_LOST
    if result is None:
        click.echo(
            "error: the daemon closed the stream without a result; see `fastverifyctl status`",
            err=True,
        )
        return EXIT_LOST
    out = describe_result(result)
    click.echo(out, err=result.get("result") != "ok")
    return result_exit(result)


def _fmt_event(ev: dict[str, Any], t0: float) -> str | None:
    at = f"[{ev.get('ts', time.time()) - t0:7.2f}s]"
    kind = ev.get("event")
    if kind == "accepted":
        op = ev.get("op", {})
        what = f"{op.get('kind')} {op.get('profile')}/{op.get('mode')}"
        return f"{at} {what} accepted (id {op.get('id')})"
    if kind == "state":
        why = f" ({ev['why']})" if ev.get("why") else ""
        return f"{at} state {ev.get('state')}{why}"
    if kind == "progress":
        return f"{at} {ev.get('message')} ({ev.get('percent', 0):.0f}%)"
    if kind == "engine":
        return f"{at} engine pid {ev.get('pid')}, log {ev.get('log')}"
    if kind == "verify":
        return f"{at} verify: {ev.get('message')}"
    if kind == "log":
        prefix = "  |" if ev.get("source") == "engine" else "  *"
        return f"{prefix} {ev.get('line')}"
    return None


def _follow_plain(events: Any, quiet: bool) -> dict[str, Any] | None:
    t0 = None
    shown: tuple[str, int] = ("", -1)  # (phase, tens of percent) last printed
    for ev in events:
        if t0 is None:
            t0 = ev.get("ts", time.time())
        if ev.get("event") == "result":
            return ev
        if quiet and ev.get("event") == "log":
            continue
        if ev.get("event") == "progress":
            # Plain output is for logs and pipes: one line per phase and per 10 %.
            step = (str(ev.get("phase")), int(ev.get("percent", 0)) // 10)
            if step == shown:
                continue
            shown = step
        line = _fmt_event(ev, t0)
        if line:
            click.echo(line)
    return None


def _follow_rich(events: Any) -> dict[str, Any] | None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(highlight=False)
    t0 = None
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
            if t0 is None:
                t0 = ev.get("ts", time.time())
            kind = ev.get("event")
            if kind == "result":
                bar.update(task, completed=100)
                return ev
            if kind == "progress":
                bar.update(task, completed=ev.get("percent", 0), description=ev.get("message", ""))
            elif kind == "state":
                bar.update(task, description=str(ev.get("state", "")).lower())
                if ev.get("state") in ("STARTING", "ROLLING_BACK"):
                    bar.update(task, completed=0)
            line = _fmt_event(ev, t0)
            if line:
                bar.console.print(line, markup=False)
    return None


@click.command("set")
@click.argument("name")
@click.option("--mode", type=click.Choice(["baseline", "eagle3"]), default=None,
              help="Decoding mode (default: keep the current one).")  # fmt: skip
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Readiness timeout for this switch in seconds (then roll back).")  # fmt: skip
@click.option("--no-wait", is_flag=True, help="Return once the daemon accepted the switch.")
@click.option(
    "--force", is_flag=True, help="Accept profiles refused without it (e.g. LL128 over PCIe)."
)
@click.option("--queue", is_flag=True, help="Wait for a switch in flight instead of failing (409).")
@click.option("--trial", is_flag=True,
              help="Timing trial: SGLang --load-format dummy (random weights, fast load; "
              "everything it serves is labelled weights=dummy).")  # fmt: skip
@click.option("--quiet", "-q", is_flag=True, help="Do not stream the engine's log lines.")
@click.option("--json", "as_json", is_flag=True, help="Print the final result as JSON.")
@click.pass_context
def set_cmd(
    ctx: click.Context,
    name: str,
    mode: str | None,
    timeout_s: float | None,
    no_wait: bool,
    force: bool,
    queue: bool,
    trial: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """Switch the daemon to profile NAME; exit 0 only when READY and verified.

    Exit codes: 0 ok, 1 failed/rolled back, 2 invalid profile or usage, 3 daemon unreachable,
    4 another switch in flight, 5 connection lost before the result.
    """
    body: dict[str, Any] = {"name": name, "force": force, "queue": queue}
    if mode:
        body["mode"] = mode
    if timeout_s:
        body["timeout_s"] = timeout_s
    if trial:
        body["load_format"] = "dummy"
    sys.exit(run_operation(ctx, "/v1/profile", body, as_json=as_json, no_wait=no_wait, quiet=quiet))


@click.command("current")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def current_cmd(ctx: click.Context, as_json: bool) -> None:
    """The daemon's active profile and mode (and its state)."""
    from fastverify.client import ApiError, DaemonUnavailable

    try:
        st = client_for(ctx).get("/v1/status")
    except DaemonUnavailable as exc:
        fail(f"error: {exc}", EXIT_UNAVAILABLE)
    except ApiError as exc:
        sys.exit(api_error_exit(exc, as_json))
    if as_json:
        emit_json(
            {k: st.get(k) for k in ("profile", "mode", "state", "last_good", "last_good_mode")}
        )
        return
    trial = " [trial: dummy weights]" if st.get("trial") else ""
    click.echo(f"{st.get('profile')} ({st.get('mode')}) {st.get('state')}{trial}")
