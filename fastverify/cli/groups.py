"""`SuggestingGroup`: a click group that answers a misspelt sub-command with what was
probably meant (`No such command 'stauts' (did you mean status?)`), exit 2 as click's own;
and a Ctrl-C its command does not handle itself ends as `CMD: interrupted`, exit 130 (as
shells report SIGINT and the exit-code table says), never click's `Aborted!` with exit 1,
even one that Python could only print (inside a finalizer or an import's lock callback:
`fastverify.ctrl_c`, around the whole command)."""

from __future__ import annotations

from typing import Any

import click


class SuggestingGroup(click.Group):
    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else None
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib  # only on this path: the CLI starts without it

            known = self.list_commands(ctx)
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}?" if close else f"one of {', '.join(known)}"
            ctx.fail(f"No such command '{name}' ({hint}).")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from fastverify import ctrl_c

        try:
            with ctrl_c.never_lost():
                return super().invoke(ctx)
        except KeyboardInterrupt:  # the innermost group says it: its sub-command's full name
            from fastverify.cli.output import EXIT_INTERRUPTED

            name = " ".join([*ctx.command_path.split()[1:], ctx.invoked_subcommand or ""])
            click.echo(f"\n{name.strip()}: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
