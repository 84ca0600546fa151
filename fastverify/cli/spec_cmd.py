"""`fastverifyctl spec plan`: how many draft steps pay at each batch size on this host;
`fastverifyctl spec validate`: the stored plan served, beside what it predicts;
`fastverifyctl spec costs` (spec_costs_cmd.py): what a decode step and a draft+verify cycle
cost on the serving engine, per batch size and step count, measured in trials on dummy weights.

Acceptance comes from the daemon (`GET /v1/acceptance`: the accept curve a real-weights
EAGLE-3 bench recorded; `fastverify.daemon.acceptance`), costs from the serving engine's
own table (the sim publishes one) or a cost file (`--costs FILE`: a `rehearse` grid, or the
`--output` of `spec costs`; `fastverify.experiments.engine_costs`). The plan
(`fastverify.speculation.plan`) is stored by the daemon with SGLang's adaptive config
(`POST /v1/spec/plan`), which `mode set adaptive` then serves.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

import click

from fastverify.api_models import ACCEPTANCE, SERVER_ARGV, SPEC_PLAN, STATUS, STORE_SPEC_PLAN
from fastverify.cli.daemon_call import call_daemon, socket_option
from fastverify.cli.groups import SuggestingGroup
from fastverify.cli.options import (
    Decorator,
    batch_size_list,
    duration_option,
    file_option,
    flag,
    json_option,
    maybe_count,
)
from fastverify.cli.output import (
    EXIT_BUSY,
    EXIT_PROBLEMS,
    EXIT_USAGE,
    emit_json,
    fail,
    fail_with_reason,
    table,
)
from fastverify.cli.spec_costs_cmd import costs
from fastverify.sglang.forced import label_of_record as forced_label

NO_ACCEPTANCE = (
    "no real-weights acceptance is recorded for the model and drafter EAGLE-3 serves here: "
    "serve EAGLE-3 with real weights (fastverifyctl mode set eagle3) and run fastverifyctl "
    "bench --dataset FILE (your prompts; fastverify-docs is shipped) through the daemon (it "
    "records the accepted-drafts histograms), then run spec plan again"
)


def concurrency_list(default: str, help: str) -> Decorator:
    """--concurrency (`concurrencies`): the comma list of concurrencies `plan` predicts for
    and `validate` serves."""
    return click.option("--concurrency", "concurrencies", default=default, show_default=True,
                        callback=batch_size_list, help=help)  # fmt: skip


@click.group(cls=SuggestingGroup)
def spec() -> None:
    """Speculation shaped to the host: steps per batch size, SGLang's adaptive config."""


spec.add_command(costs)


def pick_record(
    records: dict[str, Any],
    serving: dict[str, Any] | None,
    allow_synthetic: bool,
    allow_forced: bool = False,
) -> tuple[dict[str, Any] | None, str, str]:
    """The record to plan with: the newest usable one measured on the serving model,
    drafter and topk (synthetic prompts only with `allow_synthetic`; acceptance SGLang
    forced only with `allow_forced`, whatever the prompts: they do not move it); else None,
    why and the refusal's reason ("forced_not_allowed": only forced acceptance is recorded)."""
    from fastverify.speculation.records import matching

    mine = matching(records, serving)
    real = [r for r in mine if not r.get("synthetic")]
    forced = [r for r in matching(records, serving, allow_forced=True) if r.get("forced")]
    if allow_forced and (forced or real):
        return sorted([*forced, *real], key=lambda r: -float(r.get("measured_at") or 0))[0], "", ""
    if real:
        return real[0], "", ""
    if mine and allow_synthetic:
        return mine[0], "", ""
    if forced:
        labels = ", ".join(sorted({str(r.get("acceptance_source")) for r in forced}))
        return (
            None,
            (
                f"only acceptance SGLang forced is recorded for {_who(serving)} ({labels}, "
                f"{len(forced)} record(s)): SGLang set the accept length, no drafter earned it; "
                "plan with it only if that is what you mean: fastverifyctl spec plan "
                "--allow-forced"
            ),
            "forced_not_allowed",
        )
    have = [r for r in records.values() if isinstance(r, dict)]
    if mine:
        why = (
            f"only synthetic acceptance (random token ids, {len(mine)} record(s)) is recorded "
            f"for {_who(serving)}: bench with your prompts (--dataset FILE, or "
            "fastverify-docs) or plan with it anyway (--allow-synthetic)"
        )
        return None, why, "no_acceptance"
    other = sorted({_who(r) + ("" if r.get("usable") else f" ({r.get('why_not_usable')})")
                    for r in have})  # fmt: skip
    seen = f"; recorded: {'; '.join(other)}" if other else ""
    return None, f"{NO_ACCEPTANCE} (serving {_who(serving)}{seen})", "no_acceptance"


def _who(r: dict[str, Any] | None) -> str:
    r = r or {}
    return (f"model {r.get('model')}, drafter {r.get('drafter')}, topk {r.get('topk')}, "
            f"{r.get('steps')} steps")  # fmt: skip


def _serving_identity(ctx: click.Context, profile: str, as_json: bool) -> dict[str, Any] | None:
    """Model, drafter, topk and steps EAGLE-3 is served with on `profile` (the daemon's argv)."""
    from fastverify.speculation.records import identity_of

    out = call_daemon(ctx, SERVER_ARGV, as_json=as_json, profile=profile, mode="eagle3")
    argv = out.get("argv") or []
    return identity_of(list(argv))


@spec.command("plan")
@click.option("--profile", default=None,
              help="The profile whose costs and serving the plan is for (default: the "
              "one served). Needed while a trial or a lease holds the engine, with "
              "--costs.")  # fmt: skip
@click.option("--costs", "costs_file", type=click.Path(dir_okay=False), default=None,
              help="A cost file: a `rehearse` grid measured on a GPU, or the --output of "
              "`spec costs` (trials on this engine); default: the serving engine's own cost "
              "table (the sim publishes one while it serves EAGLE-3).")  # fmt: skip
@click.option("--zero-skip-costs", "zero_skip_file", type=click.Path(dir_okay=False),
              default=None,
              help="With --costs FILE of `spec costs`: the steps-0 pass measured again with "
              "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 in the engine's environment (`spec "
              "costs --trials 0`, same engine, host and batch sizes): prices the plan's "
              "advice on that flag.")  # fmt: skip
@click.option("--allreduce-backend", default=None,
              help="With --costs: the grid's all-reduce table for this backend (e.g. "
              "pcie_ipc) instead of its default one.")  # fmt: skip
@maybe_count(
    "--max-batch", "Largest batch size to plan (default: the costs' max running requests)."
)
@concurrency_list("1,2,4,8,16,32,64", "Concurrencies the end-to-end prediction is made for.")
@maybe_count("--input-len", "Prompt tokens of the workload (default: the recorded bench's).")
@maybe_count("--output-len", "Output tokens of the workload (default: the recorded bench's).", 2)
@click.option("--lower-accept-length", type=float, default=None,
              help="The lower acceptance the config must survive (accept length at the "
              "recorded steps); default: each draft position 35% less likely (the field's "
              "3.0 -> 2.0 at 3 steps).")  # fmt: skip
@click.option("--floor", type=click.FloatRange(0.5, 1.0), default=0.97, show_default=True,
              help="What a drafting tier may fall to, x a baseline server, at the lower "
              "acceptance.")  # fmt: skip
@click.option(
    "--min-gain",
    type=click.FloatRange(0.0, 1.0),
    default=0.02,
    show_default=True,
    help="What drafting must win by at the recorded acceptance (0.02 = 2%).",
)
@click.option("--window", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Also predict a bench window of this many seconds (what `spec validate` "
              "or `bench -d` measures), with its window-to-window spread.")  # fmt: skip
@flag("--allow-synthetic", "Plan with random-token acceptance when no prompt set was benched.")
@flag(
    "--allow-forced",
    "Plan with acceptance SGLang forced (SGLANG_SIMULATE_ACC_LEN in the "
    "server's environment; refused without this flag): the newest record, forced or "
    "measured.",
)
@file_option("--output", help="Also write SGLang's --speculative-adaptive-config here.")
@click.option("--other-host", is_flag=True,
              help="Plan with a cost file or acceptance recorded on a host of another "
              "fingerprint (refused by default, naming the facts that differ).")  # fmt: skip
@json_option("Print the plan as JSON.")
@socket_option
@click.pass_context
def plan(
    ctx: click.Context,
    profile: str | None,
    costs_file: str | None,
    zero_skip_file: str | None,
    allreduce_backend: str | None,
    max_batch: int | None,
    concurrencies: list[int],
    input_len: int | None,
    output_len: int | None,
    lower_accept_length: float | None,
    floor: float,
    min_gain: float,
    window: float | None,
    allow_synthetic: bool,
    allow_forced: bool,
    output: str | None,
    other_host: bool,
    as_json: bool,
) -> None:
    """SGLang's --speculative-adaptive-config for this host and workload, and what SGLang
    will do with it: per batch-size tier the config whose time-averaged speedup (SGLang's
    controller replayed on the recorded acceptance) is best while it stays above --floor x
    baseline at a lower acceptance; per concurrency the end-to-end prediction (tok/s, TTFT,
    ITL, prefill vs decode) with a 95% interval. Stored in the daemon's state dir (mode
    adaptive serves it)."""
    from fastverify.speculation import costs as spec_costs
    from fastverify.speculation import plan as spec_plan
    from fastverify.speculation import serving
    from fastverify.speculation.acceptance import Acceptance

    def stop(message: str, code: int, reason: str) -> NoReturn:
        fail_with_reason("spec plan", message, code, reason, as_json)

    status = call_daemon(ctx, STATUS, as_json=as_json)
    held = _held(status)
    if held and not (costs_file and profile):
        stop(f"{held}: its engine's costs are not the profile's serving costs; wait for it, "
             "or plan from a cost file for a named profile (--costs FILE --profile NAME)",
             EXIT_BUSY, "engine_held")  # fmt: skip
    profile = profile or status.get("profile")
    if not profile:
        stop(f"the daemon serves no profile (state {status.get('state')}): name one "
             "(--profile NAME)", EXIT_PROBLEMS, "no_profile")  # fmt: skip
    serving_id = _serving_identity(ctx, str(profile), as_json)
    records = call_daemon(ctx, ACCEPTANCE, as_json=as_json).get("curves") or {}
    rec, why, reason = pick_record(records, serving_id, allow_synthetic, allow_forced)
    if rec is None:
        stop(why, EXIT_USAGE if reason == "forced_not_allowed" else EXIT_PROBLEMS, reason)
    assert rec is not None
    host = _host_check(status, rec, costs_file, other_host, stop)
    try:
        if costs_file:
            costs = spec_costs.from_file(costs_file, allreduce_backend, zero_skip_file)
        elif allreduce_backend:
            raise spec_costs.CostsError("--allreduce-backend picks a table of a --costs grid")
        elif zero_skip_file:
            raise spec_costs.CostsError("--zero-skip-costs goes beside --costs FILE (the "
                                        "`spec costs` file of the same engine)")  # fmt: skip
        elif profile != status.get("profile"):
            raise spec_costs.CostsError(
                f"the engine serves {status.get('profile')}, not {profile}: its costs are not "
                f"{profile}'s; give them (--costs FILE, e.g. spec costs on {profile})"
            )
        else:
            costs = _engine_costs(status)
        acceptance = Acceptance.from_requests(rec["requests"], int(rec["steps"]))
    except (spec_costs.CostsError, ValueError) as exc:
        stop(str(exc), EXIT_PROBLEMS, "bad_input")
    workload = serving.Workload(
        input_len or int(rec.get("input_len") or 128),
        output_len or int(rec.get("output_len") or 256),
    )
    f_low = spec_plan.DEFAULT_F_LOW
    if lower_accept_length is not None:
        if not 1.0 <= lower_accept_length < acceptance.length(acceptance.steps):
            stop(f"--lower-accept-length {lower_accept_length}: must be in 1.0 .. the "
                 f"recorded {acceptance.length(acceptance.steps):.2f} (at "
                 f"{acceptance.steps} steps)", EXIT_USAGE, "bad_input")  # fmt: skip
        f_low = acceptance.factor_for(lower_accept_length)
    try:
        p = spec_plan.make_plan(acceptance, costs, workload=workload, concurrencies=concurrencies,
                                max_batch=max_batch, f_low=f_low, floor=floor,
                                min_gain=min_gain, window_s=window)  # fmt: skip
    except ValueError as exc:
        stop(str(exc), EXIT_PROBLEMS, "bad_input")
    if p.memory is not None and not p.memory["fits"]:
        m = p.memory
        stop(f"the config's CUDA graphs need {m['graphs_gb']:.2f} GB (by step count: "
             f"{m['graphs_gb_by_steps']}) and the server has {m['room_for_graphs_gb']:.2f} GB "
             "for them: it would fail at capture; plan with fewer steps (--max-batch, a lower "
             "recorded steps) or free memory (--mem-fraction-static); nothing was stored",
             EXIT_PROBLEMS, "does_not_fit")  # fmt: skip
    engine = status.get("engine") or {}
    p.extra["for"] = {
        "profile": profile,
        "costs_from": "file"
        if costs_file
        else f"engine {engine.get('name')} serving {status.get('profile')}/{status.get('mode')}",
        "engine": engine.get("name"),
        "simulated": bool(engine.get("simulated")),
    }
    p.extra["host"] = host
    p.extra["acceptance"] = {k: rec.get(k) for k in (
        "profile", "mode", "model", "drafter", "topk", "steps", "weights", "dataset",
        "synthetic", "sampling", "verifies", "measured_at", "forced")}  # fmt: skip
    p.extra["acceptance"]["acceptance_source"] = forced_label(rec.get("forced"))
    if output:
        try:
            spec_plan.write_adaptive_config(p, output)
        except OSError as exc:
            stop(f"--output {output}: cannot write ({exc.strerror or exc}); nothing was stored",
                 EXIT_PROBLEMS, "cannot_write")  # fmt: skip
    stored = call_daemon(ctx, STORE_SPEC_PLAN, as_json=as_json, plan=p.to_dict(),
                         adaptive_config=p.adaptive_config())  # fmt: skip
    p.adaptive_config_path = stored["adaptive_config"]
    data = p.to_dict()
    if output:
        data["output"] = output
    if as_json:
        emit_json(data)
        return
    _print(data)


def _host_check(
    status: dict[str, Any], rec: dict[str, Any], costs_file: str | None, other_host: bool, stop: Any
) -> dict[str, Any]:
    """The acceptance record and the cost file against this host's fingerprint: another
    host's refused (unless --other-host), one without a fingerprint noted."""
    from fastverify.host import here

    fp = (status.get("daemon") or {}).get("fingerprint")
    items = [("acceptance record", f"of {_who(rec)}", rec.get("fingerprint"))]
    if costs_file:
        items.append(("cost file", costs_file, here.recorded_in(costs_file)))
    lines, refusal, verdicts = here.check(items, fp, other_host, "--other-host")
    if refusal:
        stop(refusal, EXIT_PROBLEMS, "other_host")
    for line in lines:
        click.echo(f"spec plan: {line}", err=True)
    return {"fingerprint": (fp or {}).get("id"), "checked": verdicts}


def _held(status: dict[str, Any]) -> str | None:
    """Why the engine's costs are not the serving profile's now (a trial, a lease)."""
    from fastverify.lease_record import describe

    lease = status.get("lease")
    if lease:
        return f"an experiment holds the daemon: {describe(lease)}"
    if status.get("trial"):
        return (f"the engine runs a trial on dummy weights ({status.get('profile')}/"
                f"{status.get('mode')})")  # fmt: skip
    return None


def _engine_costs(status: dict[str, Any]) -> Any:
    from fastverify.sglang import client as engine_client
    from fastverify.speculation import costs as spec_costs

    url = (status.get("engine") or {}).get("url")
    if not url:
        raise spec_costs.CostsError(
            f"the daemon serves no engine (state {status.get('state')}) to read costs from; "
            "start one, or give --costs FILE (a `rehearse` grid or `spec costs` trials)"
        )
    try:
        info = engine_client.server_info(url, timeout=10.0)
    except (OSError, ValueError, engine_client.EngineHTTPError) as exc:
        msg = f"cannot read the engine's server info at {url}: {exc}"
        raise spec_costs.CostsError(msg) from None
    return spec_costs.from_engine_info(info)


def _print(data: dict[str, Any]) -> None:
    acc = data["acceptance"]
    who = data["for"]
    curve = "  ".join(f"{k}:{v:.2f}" for k, v in data["accept_curve"].items())
    lo, hi = data["accept_interval"]
    ds = acc.get("dataset") or {}
    synthetic = " SYNTHETIC (random token ids)" if acc.get("synthetic") else ""
    forced = acc.get("forced")
    if forced:
        synthetic = ""  # the prompts do not move a forced length
        click.echo(f"acceptance: {str(acc['acceptance_source']).upper()}: SGLang set the accept "
                   f"length ({forced.get('method')}), the drafter did not earn it; the plan is "
                   "for a drafter of that acceptance (--allow-forced)")  # fmt: skip
    click.echo(
        f"acceptance: {acc['model']} + drafter {acc['drafter']} (topk {acc['topk']}) at "
        f"{acc['steps']} steps on {ds.get('name')}{synthetic}, temperature "
        f"{acc['sampling']['temperature']:g}, {data['requests']} requests / {acc['verifies']} "
        f"verify passes; L(k): {curve} (L({acc['steps']}) 95% [{lo:.2f}, {hi:.2f}], requests "
        "resampled)"
    )
    click.echo(f"plan for profile {who['profile']}; costs: {data['costs']['source']} "
               f"({who['costs_from']})")  # fmt: skip
    low = data["lower_acceptance"]["accept_length"]
    click.echo(f"a tier drafts where it wins by {data['min_gain']:.0%} and stays >= "
               f"{data['floor']:.2f}x baseline if acceptance falls to {low:.2f} "
               "(--lower-accept-length, --floor)")  # fmt: skip
    rows = []
    for key, t in data["tiers"].items():
        sizes = t["batch_sizes"]
        span = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        per = t["per_batch_size"]
        sp = [v["speedup"] for v in per.values()]
        sl = [v["speedup_if_lower"] for v in per.values()]
        sp_text, sl_text = _range(sp), _range(sl)
        if not any(t["config"]["candidate_steps"]):  # [0]: the adaptive server's 0-step cycle
            sp_text += " (no drafting)"
        rows.append((key, span, t["config"]["candidate_steps"], sp_text, sl_text,
                     t["what_would_change"]))  # fmt: skip
    table(("key", "batch", "candidates", "x baseline", f"x if L={low:.2f}", "what would change it"),
          rows, title="speculation plan (SGLang's tiers; 0 steps = no drafting)")  # fmt: skip
    wl = data["workload"]
    prow = []
    for c, pr in data["predictions"].items():
        ad, base, eg = pr["adaptive"], pr["baseline"], pr["eagle"]
        lo, hi = pr["adaptive_ci"]
        g = pr["gain"]
        prow.append((c, f"{base['tokens_per_second']:.1f}", f"{eg['tokens_per_second']:.1f}",
                     f"{ad['tokens_per_second']:.1f} [{lo:.1f}, {hi:.1f}]",
                     f"{pr['if_lower']['adaptive']['tokens_per_second']:.1f}",
                     f"{ad['ttft_ms']['p50']:.0f}", f"{ad['itl_ms_mean']:.1f}",
                     f"x{g['ratio']:.2f}: decode {g['decode_saves']:+.1%}, prefill "
                     f"{g['prefill_saves']:+.1%}"))  # fmt: skip
    table(("conc", "baseline tok/s", f"eagle-{acc['steps']} tok/s", "adaptive tok/s [95%]",
           f"adaptive if L={low:.2f}", "TTFT p50 ms", "ITL ms", "adaptive vs baseline"),
          prow, title=f"end to end: {wl['input_len']}-token prompts, {wl['output_len']} "
          "output tokens, closed loop")  # fmt: skip
    mem = data.get("memory")
    if mem:
        est = " (estimated from the recorded server's)" if mem["graphs_estimated"] else ""
        room = mem["room_for_graphs_gb"]
        click.echo(
            f"memory: drafter {mem['draft_weights_gb'] or '?'} GB weights; CUDA graphs "
            f"{mem['graphs_gb']:.2f} GB for steps {list(mem['graphs_gb_by_steps'])}{est}"
            + (f" of {room:.2f} GB free for them" if room is not None else "")
            + f"; KV pool {mem['kv_tokens']} tokens: up to {mem['max_running_requests']} "
            f"requests of {mem['tokens_per_request']} tokens"
        )
    skip = data.get("skip_zero_step_extend")
    if skip:
        click.echo(("recommended: " if skip["recommended"] else "note: ") + skip["why"])
    if data["unpriced_batch_sizes"]:
        click.echo(f"not priced (no measured costs; they run the tier below them): "
                   f"{_ranges(data['unpriced_batch_sizes'])}")  # fmt: skip
    for note in (data["costs"].get("notes") or {}).values():
        if isinstance(note, str) and note.startswith("steps 0"):
            click.echo(f"note: {note}")
    if data.get("context_note"):
        click.echo(f"note: {data['context_note']}")
    click.echo(data["why"])
    if data["drafts"]:
        click.echo(f"adaptive config: {data['adaptive_config']} (serve it: fastverifyctl mode "
                   "set adaptive)")  # fmt: skip
    else:
        click.echo(
            f"adaptive config: {data['adaptive_config']} (stored, but it never drafts: "
            "fastverifyctl mode set baseline serves the same without the drafter)"
        )


def _range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}"


def _ranges(values: list[int]) -> str:
    out: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)


@spec.command("validate")
@concurrency_list("1", "Concurrencies to serve (one bench window each).")
@duration_option(60.0, "Seconds per window.")
@json_option("Print the comparison as JSON.")
@socket_option
@click.pass_context
def validate(ctx: click.Context, concurrencies: list[int], duration: float,
             as_json: bool) -> None:  # fmt: skip
    """Serve the stored plan and compare: for each concurrency one bench window of the
    plan's workload on the adaptive server the daemon serves, beside what the plan predicts
    for that window (its replays of it): output tok/s, time to first token (the prefill
    phase) and inter-token latency (the decode phase), served / predicted. Exit 1 when
    served tok/s is outside the plan's 95% interval for the window."""
    from fastverify.experiments.bench.load import BenchConfig, BenchError, run_bench
    from fastverify.speculation import plan as spec_plan

    status = call_daemon(ctx, STATUS, as_json=as_json)
    stored = call_daemon(ctx, SPEC_PLAN, as_json=as_json)
    url = (status.get("engine") or {}).get("url")
    if not stored.get("accept_requests"):
        fail_with_reason("spec validate", "no stored plan to validate (or one from before "
                         "this version): run fastverifyctl spec plan", EXIT_PROBLEMS, "no_plan",
                         as_json)  # fmt: skip
    if stored.get("drafts") is False:  # `mode set adaptive` refuses it: baseline serves that
        fail_with_reason("spec validate", "the stored plan drafts at no batch size: it is "
                         "what mode baseline serves (fastverifyctl mode set baseline); there is "
                         "no adaptive server to validate", EXIT_PROBLEMS, "never_drafts",
                         as_json)  # fmt: skip
    if status.get("mode") != "adaptive" or not url:
        fail_with_reason("spec validate", f"the daemon serves {status.get('profile')}/"
                         f"{status.get('mode')}, not the plan: fastverifyctl mode set adaptive "
                         "first", EXIT_PROBLEMS, "not_adaptive", as_json)  # fmt: skip
    rows: list[dict[str, Any]] = []
    outside: list[Any] = []
    for c in concurrencies:
        pred = spec_plan.replay_stored(stored, c, duration)
        wl = pred["workload"]
        click.echo(f"spec validate: {c} client(s), {duration:g} s window, "
                   f"{wl['input_len']}/{wl['output_len']} tokens ...", err=True)  # fmt: skip
        try:
            bench = BenchConfig(url=url, concurrency=c, duration=duration,
                                input_len=wl["input_len"], output_len=wl["output_len"],
                                warmup=1)  # fmt: skip
            r = run_bench(bench, phase=lambda line: click.echo(f"spec validate: {line}", err=True))
        except BenchError as exc:
            fail_with_reason("spec validate", f"bench failed at concurrency {c}: {exc}",
                             EXIT_PROBLEMS, "bench_failed", as_json)  # fmt: skip
        # the window's interval: its replays' spread and the acceptance's (stored per c)
        ci = ((stored.get("predictions") or {}).get(str(c)) or {}).get("adaptive_ci")
        half = 1.96 * pred["sd"]
        if ci:
            mid = (ci[0] + ci[1]) / 2 or 1.0
            half = math.hypot(half, (ci[1] - ci[0]) / 2 * pred["tokens_per_second"] / mid)
        lo, hi = pred["tokens_per_second"] - half, pred["tokens_per_second"] + half
        got = r.output_tokens_per_second
        ttft = (r.ttft_ms.get("p50") or 0.0) / 1e3
        itl = (r.itl_ms.get("mean") or 0.0) / 1e3
        row = {
            "concurrency": c, "window_s": duration,
            "tokens_per_second": {"served": round(got, 3),
                                  "predicted": round(pred["tokens_per_second"], 3),
                                  "ci": [round(lo, 3), round(hi, 3)],
                                  "ratio": round(got / pred["tokens_per_second"], 4)},
            "prefill_ttft_p50_s": {"served": round(ttft, 4), "predicted":
                                   round(pred["ttft_p50_s"], 4),
                                   "ratio": _ratio(ttft, pred["ttft_p50_s"])},
            "decode_itl_mean_s": {"served": round(itl, 5), "predicted":
                                  round(pred["itl_mean_s"], 5),
                                  "ratio": _ratio(itl, pred["itl_mean_s"])},
        }  # fmt: skip
        rows.append(row)
        if not lo <= got <= hi:
            outside.append(c)
    data = {"rows": rows, "outside_interval": outside, "plan_stored_at":
            stored.get("stored_at"), "decode_only": pred["decode_only"],
            "acceptance_source": (status.get("engine") or {}).get("acceptance_source")}  # fmt: skip
    if as_json:
        emit_json(data)
    else:
        out = []
        for shown in rows:
            t, p, d = (shown["tokens_per_second"], shown["prefill_ttft_p50_s"],
                       shown["decode_itl_mean_s"])  # fmt: skip
            out.append((
                shown["concurrency"],
                f"{t['served']:.1f} / {t['predicted']:.1f} [{t['ci'][0]:.1f}, {t['ci'][1]:.1f}]"
                f" x{t['ratio']:.3f}",
                f"{p['served']:.3f} / {p['predicted']:.3f}",
                f"{d['served'] * 1e3:.2f} / {d['predicted'] * 1e3:.2f}",
            ))  # fmt: skip
        heads = ("conc", "tok/s served / predicted [95%]", "TTFT p50 s (prefill)",
                 "ITL ms (decode)")  # fmt: skip
        source = data["acceptance_source"] or ""
        forced = f" ({source}: SGLang set the accept length)" if source.startswith("forced") else ""
        table(heads, out, title=f"spec validate: served / predicted{forced}")
    if outside:
        fail(f"spec validate: served tok/s outside the plan's 95% interval at concurrency "
             f"{', '.join(map(str, outside))}: re-plan (fastverifyctl spec plan)",
             EXIT_PROBLEMS)  # fmt: skip


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None
