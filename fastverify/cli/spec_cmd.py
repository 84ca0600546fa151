"""`fastverifyctl spec plan`: how many draft steps pay at each batch size on this host.

Acceptance comes from the daemon (`GET /v1/acceptance`: the accept curve a real-weights
EAGLE-3 bench recorded; `fastverify.daemon.acceptance`), costs from the serving engine's
own table (the sim publishes one) or a `rehearse` grid (`--costs FILE`). The plan
(`fastverify.speculation.plan`) is stored by the daemon with SGLang's adaptive config
(`POST /v1/spec/plan`), which `mode set adaptive` then serves.
"""

from __future__ import annotations

from typing import Any

import click

from fastverify.cli.daemon_call import call_daemon, socket_option
from fastverify.cli.output import EXIT_PROBLEMS, emit_json, fail, table

NO_ACCEPTANCE = (
    "no real-weights acceptance is recorded: serve EAGLE-3 with real weights "
    "(fastverifyctl mode set eagle3) and run fastverifyctl bench through the daemon (it "
    "records the accepted-drafts histogram), then run spec plan again"
)


@click.group()
def spec() -> None:
    """Speculation shaped to the host: steps per batch size, SGLang's adaptive config."""


def _batch_sizes(_ctx: Any, _param: Any, value: str) -> list[int]:
    try:
        sizes = sorted({int(v) for v in value.split(",") if v.strip()})
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers") from None
    if not sizes or sizes[0] < 1:
        raise click.BadParameter(f"{value!r}: batch sizes must be >= 1")
    return sizes


def pick_curve(curves: dict[str, Any], profile: str | None) -> dict[str, Any] | None:
    """The usable record to plan with: the serving profile's newest, else the newest."""
    usable = [r for r in curves.values() if isinstance(r, dict) and r.get("usable")]
    if not usable:
        return None
    mine = [r for r in usable if r.get("profile") == profile]
    return max(mine or usable, key=lambda r: (r.get("steps", 0), r.get("measured_at", 0)))


@spec.command("plan")
@click.option("--batch-sizes", default="1,2,4,8,16,32,64", show_default=True,
              callback=_batch_sizes, help="The tiers to plan (SGLang routes a batch to the "
              "largest tier at or below its size).")  # fmt: skip
@click.option("--costs", "costs_file", type=click.Path(dir_okay=False), default=None,
              help="A `rehearse` grid (JSON) measured on a GPU; default: the serving "
              "engine's own cost table (the sim publishes one).")  # fmt: skip
@click.option("--allreduce-backend", default=None,
              help="With --costs: the grid's all-reduce table for this backend (e.g. "
              "pcie_ipc) instead of its default one.")  # fmt: skip
@click.option("--min-gain", type=click.FloatRange(0.0, 1.0), default=0.05, show_default=True,
              help="What drafting must win by, with 95% confidence, at a tier (0.05 = 5%): "
              "the costs are known to a few percent, and a cycle does not show the drafter's "
              "memory or its prefill work.")  # fmt: skip
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="Also write SGLang's --speculative-adaptive-config here.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@socket_option
@click.pass_context
def plan(
    ctx: click.Context,
    batch_sizes: list[int],
    costs_file: str | None,
    allreduce_backend: str | None,
    min_gain: float,
    output: str | None,
    as_json: bool,
) -> None:
    """Per batch-size tier: the step count that maximises tokens/s (0 = no speculation),
    its speedup with a 95% interval, and what would change the answer. Writes SGLang's
    --speculative-adaptive-config into the daemon's state dir (mode adaptive serves it)."""
    from fastverify.speculation import costs as spec_costs
    from fastverify.speculation import plan as spec_plan
    from fastverify.speculation.curve import AcceptCurve

    status = call_daemon(ctx, "GET", "/v1/status", as_json=as_json)
    curves = call_daemon(ctx, "GET", "/v1/acceptance", as_json=as_json).get("curves") or {}
    rec = pick_curve(curves, status.get("profile"))
    if rec is None:
        dummy = [k for k, r in curves.items() if isinstance(r, dict) and not r.get("usable")]
        extra = f" (recorded but not usable: {', '.join(sorted(dummy))})" if dummy else ""
        if as_json:
            emit_json({"error": NO_ACCEPTANCE + extra, "reason": "no_acceptance"})
        fail(f"spec plan: {NO_ACCEPTANCE}{extra}", EXIT_PROBLEMS)
    curve = AcceptCurve.from_histogram(rec["histogram"], rec["steps"])
    try:
        if costs_file:
            costs = spec_costs.from_rehearse_grid(costs_file, allreduce_backend)
        elif allreduce_backend:
            raise spec_costs.CostsError("--allreduce-backend picks a table of a --costs grid")
        else:
            costs = _engine_costs(status)
    except spec_costs.CostsError as exc:
        fail(f"spec plan: {exc}", EXIT_PROBLEMS)
    p = spec_plan.make_plan(curve, costs, batch_sizes, min_gain)
    p.extra["profile"] = status.get("profile")  # whose costs (the engine's, or the grid's host)
    p.extra["acceptance"] = {k: rec[k] for k in ("profile", "mode", "steps", "weights",
                                                 "verifies", "measured_at")}  # fmt: skip
    if output:
        try:
            spec_plan.write_adaptive_config(p, output)
        except OSError as exc:
            fail(f"spec plan: --output {output}: cannot write ({exc.strerror or exc}); nothing "
                 "was stored", EXIT_PROBLEMS)  # fmt: skip
    stored = call_daemon(ctx, "POST", "/v1/spec/plan",
                         {"plan": p.to_dict(), "adaptive_config": p.adaptive_config()},
                         as_json=as_json)  # fmt: skip
    p.adaptive_config_path = stored["adaptive_config"]
    data = p.to_dict()
    if output:
        data["output"] = output
    if as_json:
        emit_json(data)
        return
    _print(data)


def _engine_costs(status: dict[str, Any]) -> Any:
    from fastverify.sglang import client as engine_client
    from fastverify.speculation import costs as spec_costs

    url = (status.get("engine") or {}).get("url")
    if not url:
        raise spec_costs.CostsError(
            f"the daemon serves no engine (state {status.get('state')}) to read costs from; "
            "start one, or give --costs FILE (a `rehearse` grid)"
        )
    try:
        info = engine_client.server_info(url, timeout=10.0)
    except (OSError, ValueError, engine_client.EngineHTTPError) as exc:
        msg = f"cannot read the engine's server info at {url}: {exc}"
        raise spec_costs.CostsError(msg) from None
    return spec_costs.from_engine_info(info)


def _print(data: dict[str, Any]) -> None:
    acc = data["acceptance"]
    curve = "  ".join(f"{k}:{v:.2f}" for k, v in data["accept_curve"].items())
    click.echo(
        f"acceptance: {acc['profile']}/{acc['mode']} at {acc['steps']} steps, "
        f"{acc['verifies']} verify passes ({acc['weights']} weights); L(k): {curve}"
    )
    click.echo(f"costs: {data['costs']['source']}")
    click.echo(f"a tier drafts when it wins by more than {data['min_gain']:.0%} with 95% "
               "confidence (--min-gain)")  # fmt: skip
    rows = []
    for bs, t in data["tiers"].items():
        lo, hi = t["ci"]
        rows.append((bs, t["steps"], f"{t['speedup']:.2f}x [{lo:.2f}, {hi:.2f}]",
                     f"{t['tokens_per_second']:.1f}", t["what_would_change"]))  # fmt: skip
    table(("batch", "steps", "speedup [95% CI]", "tok/s", "what would change it"), rows,
          title="speculation plan (0 steps = no drafting)")  # fmt: skip
    click.echo(data["why"])
    click.echo(f"adaptive config: {data['adaptive_config']} (serve it: fastverifyctl mode set "
               "adaptive)")  # fmt: skip
