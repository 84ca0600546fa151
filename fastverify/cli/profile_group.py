"""The `fastverifyctl profile` group: options, shared helpers, lazy sub-command registration.

Each sub-command's module is imported only when that sub-command is invoked (or listed in
`--help`), so `profile list` does not pay for the click definitions of `show`, `validate`,
`new`, ... nor `profile set` for the offline commands. Modules that define commands with
`@profile.command(...)` register them on import; `set`/`current` are module attributes.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import click

from fastverify.cli.groups import SuggestingGroup

# sub-command -> (module, attribute or None when the module registers it on `profile`)
SUBCOMMANDS: dict[str, tuple[str, str | None]] = {
    "list": ("fastverify.cli.profile_list", None),
    "show": ("fastverify.cli.profile_cmds", None),
    "validate": ("fastverify.cli.profile_cmds", None),
    "diff": ("fastverify.cli.profile_cmds", None),
    "new": ("fastverify.cli.profile_cmds", None),
    "import-sitecustomize": ("fastverify.cli.profile_cmds", None),
    "import": ("fastverify.cli.profile_import", None),
    "vars": ("fastverify.cli.profile_cmds", None),
    "set": ("fastverify.cli.profile_switch", "set_cmd"),
    "current": ("fastverify.cli.profile_switch", "current_cmd"),
}


class _LazyProfileGroup(SuggestingGroup):
    """Sub-commands from SUBCOMMANDS, imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in SUBCOMMANDS:
            module_name, attr = SUBCOMMANDS[cmd_name]
            module = importlib.import_module(module_name)
            if attr is not None:
                return getattr(module, attr)
        return self.commands.get(cmd_name)


@click.group(cls=_LazyProfileGroup)
@click.option(
    "--dir",
    "profile_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="User profile directory (repeatable; searched before the shipped profiles). "
    "Default: $FASTVERIFY_PROFILE_DIRS, the daemon config's profile_dirs, "
    "/etc/fastverify/profiles as root.",
)
@click.option("--shipped-dir", type=click.Path(file_okay=False), hidden=True)
@click.pass_context
def profile(ctx: click.Context, profile_dirs: tuple[str, ...], shipped_dir: str | None) -> None:
    """List, show, validate, diff, create and set NCCL profiles."""
    parent = ctx.find_root().obj if ctx.parent is not None else None
    ctx.obj = {
        "socket": (parent or {}).get("socket"),
        "profile_dirs": list(profile_dirs),
        "shipped_dir": shipped_dir,
    }


def _topology(choice: str) -> Any:
    from fastverify.profiles.validate import Topology

    if choice == "nvlink":
        return Topology(has_nvlink=True, source="--topology nvlink")
    if choice == "pcie":
        return Topology(has_nvlink=False, source="--topology pcie")
    if choice == "unknown":
        return Topology(has_nvlink=None, source="--topology unknown")
    return None  # auto: the store detects lazily, only when a check needs it


def user_dirs(ctx: click.Context) -> list[Any]:
    """User profile dirs (Paths): --dir, else the daemon config's profile_dirs, else paths'
    default."""
    from pathlib import Path

    return [Path(d) for d in user_dir_strs(ctx)]


def user_dir_strs(ctx: click.Context) -> list[str]:
    """`user_dirs` as strings (no pathlib: the store takes either)."""
    from fastverify import paths

    obj = ctx.find_root().obj or {}
    given = (ctx.obj or {}).get("profile_dirs") or obj.get("profile_dirs")
    if given:
        return [paths.normalize(d) for d in given]
    if os.environ.get("FASTVERIFY_PROFILE_DIRS") or not os.path.exists(paths.config_file_str()):
        return paths.user_profile_dirs_str()  # no config file to read (nor a TOML parser)
    from fastverify.config.load import operator_profile_dirs

    return operator_profile_dirs()


def make_store(ctx: click.Context, topology: str = "auto") -> Any:
    from fastverify.profiles.store import ProfileStore

    obj = ctx.obj or {}
    return ProfileStore(user_dir_strs(ctx), obj.get("shipped_dir"), topology=_topology(topology))


def socket_of(ctx: click.Context) -> str | None:
    """The root's --socket (None: the default path)."""
    root = ctx.find_root().obj or {}
    return root.get("socket")
