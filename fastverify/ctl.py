"""`fastverifyctl`: the operator's command line, a thin client of the daemon's control API.

Every sub-command lives in a module under `fastverify.cli` and is imported only when
it is invoked, so `fastverifyctl status` never pays for rich, prometheus-client or
jinja2 (the CLI start-up budget is tens of milliseconds). Heavy imports (torch,
sglang) never happen on this path at all.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from fastverify import __version__
from fastverify.cli.daemon_call import DOOR_OPTIONS, door_args
from fastverify.cli.groups import SuggestingGroup
from fastverify.cli.hints import carry_door

# command name -> "module:attribute" (a click command or group)
COMMANDS: dict[str, tuple[str, str]] = {
    "profile": (
        "fastverify.cli.profile_group:profile",
        "List, show, validate, diff, create and set profiles.",
    ),
    "doctor": (
        "fastverify.cli.doctor_cmd:doctor",
        "Find everything else that changes what NCCL sees.",
    ),
    "status": ("fastverify.cli.status_cmd:status", "Daemon and engine state."),
    "verify": ("fastverify.cli.verify_cmd:verify", "Re-run the verifiers on the serving engine."),
    "mode": (
        "fastverify.cli.daemon_cmds:mode",
        "Get or set the decoding mode (baseline|eagle3|adaptive).",
    ),
    "restart": (
        "fastverify.cli.daemon_cmds:restart",
        "Restart the engine with the active profile.",
    ),
    "logs": (
        "fastverify.cli.daemon_cmds:logs",
        "Show (or follow) the daemon's and engine's log; parse log files.",
    ),
    "history": ("fastverify.cli.daemon_cmds:history", "Switch journal."),
    "cancel": (
        "fastverify.cli.daemon_cmds:cancel",
        "Stop the switch in flight and put the previous profile back.",
    ),
    "server": (
        "fastverify.cli.daemon_cmds:server",
        "Server argv: show and check with SGLang's parser.",
    ),
    "trace": (
        "fastverify.cli.trace_cmds:trace",
        "Capture and analyze profiler traces (verify time, all-reduces).",
    ),
    "render": (
        "fastverify.cli.render_cmd:render",
        "Render systemd units, the compose stack, or Kubernetes manifests.",
    ),
    "bench": (
        "fastverify.cli.bench_cmd:bench",
        "Closed-loop load against the running server.",
    ),
    "sweep": (
        "fastverify.cli.sweep_cmd:sweep",
        "Baseline-first profile sweep with statistics.",
    ),
    "preflight": (
        "fastverify.cli.preflight_cmd:preflight",
        "NCCL all-reduce + CUDA-graph check per profile, no model.",
    ),
    "tune": (
        "fastverify.cli.tune_cmd:tune",
        "From a new host to a decided, applied profile, mode and backend.",
    ),
    "sglang": (
        "fastverify.cli.sglang_cmds:sglang",
        "SGLang releases: facts per version and the supported range.",
    ),
    "rehearse": (
        "fastverify.cli.rehearse_cmd:rehearse",
        "Does speculation pay? Verify cycle per profile, no model.",
    ),
    "aiconfigurator": (
        "fastverify.cli.aiconfigurator_cmd:aiconfigurator",
        "Export this host's preflight measurements as an AIConfigurator system.",
    ),
    "spec": (
        "fastverify.cli.spec_cmd:spec",
        "Steps per batch size from the measured accept curve; costs measured on the engine; "
        "SGLang's adaptive config.",
    ),
}


def door_options(f: Any) -> Any:
    """--host, --token-file, --tls-ca, --tls-cert, --tls-key, each with its variable."""
    for flag, key, env, text in reversed(DOOR_OPTIONS):
        f = click.option(flag, key, envvar=env, show_envvar=True, default=None, help=text)(f)
    return f


class LazyGroup(SuggestingGroup):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target[0].split(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help text comes from the table above, so `--help` imports nothing.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup)
@click.option(
    "--socket",
    "socket_path",
    envvar="FASTVERIFY_SOCKET",
    type=click.Path(dir_okay=False, readable=False),
    default=None,
    show_envvar=True,
    help="Daemon control socket, for every command that talks to fastverifyd (each of them "
    "also takes --socket; default: /run/fastverify/control.sock as root, "
    "else $XDG_RUNTIME_DIR/fastverify/control.sock).",
)
@door_options
@click.version_option(__version__, prog_name="fastverifyctl")
@click.pass_context
def cli(ctx: click.Context, socket_path: str | None, **door: str | None) -> None:
    """fastverify: NCCL tuning profiles for SGLang, switched, verified and observed.

    Every command that talks to fastverifyd also takes --socket, --host, --token-file and
    --tls-* after its name.
    """
    ctx.obj = {"socket": socket_path, **{k: v for k, v in door.items() if v}}
    carry_door(door_args(ctx.obj))  # a pasted hint acts on this daemon, not the default one


def main() -> None:
    from fastverify.cli import term

    term.install()  # nothing a caller wrote reaches the terminal raw (cli/term.py)
    try:
        cli(prog_name="fastverifyctl")
    except (ConnectionError, TimeoutError) as exc:
        # The safety net behind every command's own handling: a daemon that is stopped,
        # overloaded or resets the connection is "unreachable" (exit 3), never a traceback.
        from fastverify.cli.output import EXIT_UNAVAILABLE

        msg = str(exc) or type(exc).__name__
        if not msg.startswith("fastverifyd") and "fastverifyd" not in msg:
            msg = f"lost the connection to fastverifyd ({msg}); see `fastverifyctl status`"
        click.echo(f"error: {msg}", err=True)
        sys.exit(EXIT_UNAVAILABLE)


if __name__ == "__main__":
    main()
