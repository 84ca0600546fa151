"""`fastverifyctl tune`: the plan, the funnel's progress, the decision and its report.

Imports stay light (fastverify.experiments.tune only inside the command; rich only on a
terminal; matplotlib only for the report's plots). On a terminal, progress shows the
stage and an ETA; piped, one line per event on stderr. `--json` prints the decision
document on stdout (the same as DIR/decision.json).

Exit codes: 0 decided (and applied unless --no-apply); 1 a stage failed or the decision
could not be applied; 2 usage (bad option, unknown profile, output dir in use: a new one or
--force, nothing to resume: a new tune); 3 daemon unreachable (continue with --resume); 130
interrupted (--resume). `--reuse PATH` (fastverify.experiments.tune.reuse): 0 reused and
serving; 1 refused (another fingerprint, a failed check); 2 no decision record at PATH.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from fastverify.cli.daemon_call import client_for, daemon_run
from fastverify.cli.experiment_common import bar_note, stderr_bar
from fastverify.cli.options import (
    accept_length_option,
    backend_option,
    count_option,
    flag,
    json_option,
    measurement_options,
    output_dir_option,
)
from fastverify.cli.options import env_pairs as parse_env_pairs
from fastverify.cli.output import EXIT_PROBLEMS, EXIT_USAGE, daemon_exit, emit_json, fail, table


def _mmss(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    return f"{s // 60}:{s % 60:02d}"


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The plan as text (printed before any load)."""
    from fastverify.experiments.tune.plan import loads_text

    out = ["plan (estimates; 'default' = nothing recorded on this host yet):"]
    for s in plan["stages"]:
        what = s["units"] if s["will_run"] else (s.get("skip_reason") or s.get("note"))
        state = "" if s["will_run"] else ("  [skip] " if s.get("skip_reason") else "  [done] ")
        out.append(
            f"  {s['name']:<13}{state}{_mmss(s['estimate_s']):>7}  {what}"
            + (f"  ({s['source']})" if s["will_run"] else "")
            + (f"; {s['note']}" if s["will_run"] and s.get("note") else "")
        )
    budget = plan.get("budget_s")
    out.append(
        f"  total ~{plan['total_s'] / 60:.1f} min"
        + (f" (budget {budget / 60:.1f} min)" if budget else "")
        + f"; loads planned: {loads_text(plan['loads'])}; finalists {plan['finalists']}, "
        + "trial candidates "
        f"{plan['trial_candidates']}"
    )
    if plan.get("budget_note"):
        out.append(f"  {plan['budget_note']}")
    return out


def simulated_note(decision: dict[str, Any]) -> str:
    """` (simulated: ...)` for a decision the sim engine measured, else ''."""
    eng = decision.get("engine") or {}
    if not eng.get("simulated"):
        return ""
    return (
        f" (simulated: the {eng.get('kind')} engine playing SGLang {eng.get('version')}, not a "
        "measurement of hardware)"
    )


class Progress:
    """Stage + ETA: a rich status line on a terminal, one stderr line per event otherwise."""

    def __init__(self, quiet_plan: bool = False) -> None:
        self.tty = sys.stderr.isatty()
        self._live: Any = None
        self._task: Any = None
        self.stage = "starting"

    def __enter__(self) -> Progress:
        if self.tty:
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            self._live = stderr_bar(
                SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()
            )
            self._task = self._live.add_task("tune: planning")
        return self

    def _note(self, text: str) -> None:
        bar_note(self._live, text)

    def __call__(self, e: dict[str, Any]) -> None:
        kind = e["event"]
        if kind == "plan":
            if e.get("resumed"):
                self._note(
                    f"resuming the tune in {e['journal']} (with the options it started with)"
                )
            for line in plan_lines(e["plan"]):
                self._note(line)
            self._note(f"journal: {e['journal']}; output: {e['output']}")
            return
        eta = f"ETA {_mmss(e.get('eta_s'))}"
        if e.get("over_s"):  # the stage ran past its estimate: what is left of it is unknown
            eta += f" after this stage ({_mmss(e['over_s'])} over its estimate)"
        if kind == "stage":
            self.stage = f"[{e['index']}/{e['total']}] {e['name']}"
            st = e["status"]
            if st == "started":
                text = f"{self.stage}: started ({eta})"
            elif st == "finished earlier":
                text = f"{self.stage}: finished earlier, not run again"
            else:
                text = (
                    f"{self.stage}: {st} in {e.get('wall_s', 0):.1f} s"
                    + (f" ({e['reason']})" if e.get("reason") else "")
                    + f"; {eta}"
                )
            self._note(text)
        else:
            text = f"{self.stage}: {e['text']}"
            if self._live is None:
                click.echo(f"{text} ({eta})" if e.get("eta_s") is not None else text, err=True)
        if self._live is not None:
            from rich.markup import escape

            from fastverify.cli.term import safe

            line = escape(safe(f"tune {self.stage} - {eta}", newlines=False))
            self._live.update(self._task, description=line)

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)


def _profiles(value: str | None) -> tuple[str, ...]:
    if not value or value.strip() == "all":
        return ()
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if len(set(names)) != len(names):
        raise click.BadParameter(f"a profile is named twice in {value!r}")
    return names


@click.command()
@click.option(
    "--model-config",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="The target model's config.json (for rehearse; GPUs only).",
)
@click.option(
    "--draft-config",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="The EAGLE-3 drafter's config.json (rehearse).",
)
@accept_length_option(
    "Real EAGLE-3 accept length (default: one recorded with real weights, "
    "else measured with one real EAGLE-3 load)."
)
@click.option(
    "--profiles",
    "profiles_opt",
    default="all",
    show_default=True,
    help="Candidates: NAME,NAME,... or all (shipped + user).",
)
@count_option("--finalists", 2, "Profiles confirmed with real weights.")
@click.option(
    "--budget",
    "budget",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="MINUTES",
    help="Lower the finalists (then the trial) to fit.",
)
@click.option(
    "--apply/--no-apply",
    default=True,
    show_default=True,
    help="Leave the decision serving (else put back what served before).",
)
@output_dir_option("Report directory (default: ./tune-YYYYmmdd-HHMMSS).")
@flag("--resume", "Continue the unfinished tune of this host.")
@click.option(
    "--reuse",
    "reuse_path",
    type=click.Path(exists=True),
    default=None,
    metavar="PATH",
    help="Apply the decision of an identical host (its decision.json, or a directory of "
    "cached decisions) after a cheap check (preflight of it, one short bench); refused, "
    "naming the changed facts, when the host fingerprints differ.",
)
@flag(
    "--force",
    "Start a new tune in an --output directory that holds one (its tune files replaced).",
)
@measurement_options
@click.option(
    "--env",
    "env_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Variables on top of every profile in preflight, rehearse and the tuner derivation "
    "(as their --env; repeatable).",
)
@backend_option("gloo: preflight and rehearse on two CPU ranks (tests).", hidden=True)
@json_option("Print the decision document as JSON.")
@click.pass_context
def tune(
    ctx: click.Context,
    model_config: str | None,
    draft_config: str | None,
    accept_length: float | None,
    profiles_opt: str,
    finalists: int,
    budget: float | None,
    apply: bool,
    output_dir: str | None,
    resume: bool,
    reuse_path: str | None,
    force: bool,
    repeats: int,
    duration: float,
    concurrency: int,
    input_len: int,
    output_len: int,
    switch_timeout: float,
    env_pairs: tuple[str, ...],
    backend: str,
    as_json: bool,
) -> None:
    """Decide which profile, backend and mode this host should serve, and apply it."""
    from fastverify.client import ApiError
    from fastverify.experiments.tune.context import TuneConfig
    from fastverify.experiments.tune.pipeline import TuneBusy, TuneError, run
    from fastverify.experiments.tune.plan import loads_text
    from fastverify.experiments.tune.reuse import ReuseError

    parse_env_pairs(env_pairs)  # a malformed pair is a usage error before anything runs
    cfg = TuneConfig(
        model_config=model_config,
        draft_config=draft_config,
        accept_length=accept_length,
        profiles=_profiles(profiles_opt),
        finalists=finalists,
        budget_min=budget,
        apply=apply,
        output_dir=output_dir or time.strftime("tune-%Y%m%d-%H%M%S"),
        repeats=repeats,
        duration_s=duration,
        concurrency=concurrency,
        input_len=input_len,
        output_len=output_len,
        switch_timeout_s=switch_timeout,
        backend=backend,
        env=env_pairs,
    )
    client = client_for(ctx, timeout=switch_timeout)
    if reuse_path and resume:
        fail("tune: --reuse and --resume exclude each other", EXIT_USAGE)
    journal_kept = (
        "\n(the tune's journal is kept: start the daemon and run `fastverifyctl tune --resume`)"
    )
    with (
        Progress() as progress,
        daemon_run("tune", busy=TuneBusy, usage=TuneError, unreachable=lambda: journal_kept,
                   interrupted="interrupted; continue with `fastverifyctl tune --resume`"),
    ):  # fmt: skip
        try:
            if reuse_path:
                from pathlib import Path

                from fastverify.experiments.tune import reuse

                result = reuse.run(client, cfg, Path(reuse_path), on_event=progress)
            else:
                result = run(client, cfg, resume=resume, force=force, on_event=progress)
        except ReuseError as exc:  # no usable decision record at PATH
            fail(f"tune --reuse: {exc}", EXIT_USAGE)
        except ApiError as exc:
            fail(
                f"tune: the daemon answered {exc} (continue with --resume)",
                daemon_exit(exc, EXIT_PROBLEMS),
            )
    d = result["decision"]
    if as_json:
        emit_json(result)
    else:
        table(
            ("stage", "status", "planned s", "wall s", "loads", "reason"),
            [
                (
                    s["name"],
                    s["status"],
                    "-" if s.get("planned_s") is None else f"{s['planned_s']:.0f}",
                    f"{s['wall_s']:.1f}"
                    + (f" (+{len(s['earlier_runs'])} earlier)" if s.get("earlier_runs") else ""),
                    loads_text(s["loads"]) if s.get("loads") else "-",
                    s["reason"] or "",
                )
                for s in result["stages"]
            ],
            title="tune",
        )
        click.echo(
            f"decision: {d['profile']}/{d['mode']} backend {d['backend']} "
            f"({'applied' if d['applied'] else 'not applied'}){simulated_note(d)}"
        )
        click.echo(f"why: {d['why']}")
        for warning in result.get("warnings") or []:
            click.echo(f"warning: {warning}")
        click.echo(
            f"loads: {loads_text(result['loads'])}; "
            f"{result['wall_s'] / 60:.1f} min; report: "
            + (result["report"] or f"{cfg.output_dir}/decision.json")
        )
        drawn = result.get("plots") or {}
        if drawn.get("skipped"):
            click.echo(drawn["skipped"])
        elif drawn.get("files"):
            click.echo("plots: " + ", ".join(sorted(drawn["files"].values())))
    failed = any(s["status"] == "failed" for s in result["stages"])
    if failed or (apply and not d["applied"]):
        sys.exit(EXIT_PROBLEMS)
