"""The tune report a person reads: `report.md` with PNG plots beside it (matplotlib, the
`plot` extra; without it the report and the output say the plots were skipped and how to
get them), and `decision.json` (the `--json` document) in the output directory.

The report shows the plan, the funnel (how many candidates each stage kept), each stage's
table, the decision with its evidence and confidence intervals, and what would change it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastverify.durable import atomic_write_json, atomic_write_text
from fastverify.experiments.common.stats import cell, interval
from fastverify.experiments.tune.candidates import tp1_text
from fastverify.experiments.tune.plan import loads_text


def _fmt(v: Any, digits: int = 1) -> str:
    if isinstance(v, list | tuple) and len(v) == 2 and all(isinstance(x, float) for x in v):
        return interval(v)
    return cell(v, digits).replace("|", "/")


def md_table(heads: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    out += ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows]
    return out


def funnel(result: Mapping[str, Any], data: Mapping[str, Mapping[str, Any]]) -> list[tuple]:
    """(stage, candidates left after it) along the funnel."""
    steps = []
    cands = data.get("candidates", {}).get("candidates", [])
    steps.append(
        ("candidates", len(cands) + (1 if data.get("derive_tuner", {}).get("candidate") else 0))
    )
    if "survivors" in data.get("preflight", {}):
        steps.append(("preflight", len(data["preflight"]["survivors"])))
    if "ranked" in data.get("rehearse", {}):
        steps.append(("rehearse", len(data["rehearse"]["ranked"])))
    trial = data.get("trial", {}).get("rows")
    if trial is not None:
        steps.append(("trial (ran)", sum(1 for r in trial if r["mode"] == "baseline")))
        steps.append(
            (
                "trial passed",
                sum(1 for r in trial if r["mode"] == "baseline" and r["status"] == "ok"),
            )
        )
    if data.get("confirm", {}).get("finalists"):
        steps.append(("finalists (real weights)", len(data["confirm"]["finalists"])))
    if result.get("decision", {}).get("profile"):
        steps.append(("decision", 1))
    return steps


PLOT_FILES = ("funnel.png", "trial.png", "decision.png")


def draw_plots(out: Path, result: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """Draw the report's PNGs into `out`: {"files": {name: file}, "skipped": None, or the
    note saying why none were drawn and how to get them}."""
    from fastverify.experiments.common.plots import missing_note

    if note := missing_note():
        return {"files": {}, "skipped": note}
    return {"files": _draw(out, result, data), "skipped": None}


def _draw(out: Path, result: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, str]:
    from fastverify.experiments.common.plots import pyplot, save, simulated_tag

    plt = pyplot()
    sim = simulated_tag((result.get("decision") or {}).get("engine"))
    from matplotlib.ticker import MaxNLocator

    made = {}
    steps = funnel(result, data)
    if steps:
        fig, ax = plt.subplots(figsize=(6.5, 0.5 * len(steps) + 1.2))
        names = [s[0] for s in steps][::-1]
        ax.barh(names, [s[1] for s in steps][::-1], color="#4C72B0")
        for y, v in enumerate([s[1] for s in steps][::-1]):
            ax.text(v, y, f" {v}", va="center")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a count: whole ticks
        ax.set_xlabel("profiles left")
        ax.set_title(f"tune funnel{sim}")
        made["funnel"] = save(fig, out / "funnel.png").name
    opts = data.get("decide", {}).get("options") or []
    if opts:
        fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(opts) + 2), 4.2))
        heights = [o["tokens_per_second"] for o in opts]
        lo = [o["tokens_per_second"] - max(0.0, o["ci95"][0]) if o.get("ci95") else 0 for o in opts]
        hi = [o["ci95"][1] - o["tokens_per_second"] if o.get("ci95") else 0 for o in opts]
        colors = ["#4C72B0" if o["mode"] == "baseline" else "#DD8452" for o in opts]
        hatches = ["" if o["evidence"] == "measured" else "//" for o in opts]
        bars = ax.bar(
            range(len(opts)), heights, yerr=[lo, hi], capsize=4, color=colors, edgecolor="black"
        )
        for b, h in zip(bars, hatches, strict=True):
            b.set_hatch(h)
        ax.set_xticks(range(len(opts)))
        ax.set_xticklabels(
            [f"{o['profile']}\n{o['mode']}\n{o['evidence']}" for o in opts], fontsize=8
        )
        ax.set_ylabel("output tokens/s (real weights; 95% CI)")
        hatched = " (hatched: predicted from the trial)" if any(hatches) else ""
        ax.set_title(f"decision: finalists{hatched}{sim}")
        ax.grid(axis="y", alpha=0.3)
        made["decision"] = save(fig, out / "decision.png").name
    trial = data.get("trial", {}).get("rows") or []
    if trial:
        from fastverify.experiments.sweep.results import plot

        # a trial row is on dummy weights unless the cached weights served it real weights
        rows = [dict(r, weights=r.get("weights") or "dummy") for r in trial]
        real = sum(r["weights"] != "dummy" for r in rows)
        on = (
            "dummy weights"
            if not real
            else f"{len(rows) - real} on dummy weights, {real} on real weights (faded: dummy)"
        )
        plot(rows, out / "trial.png", title=f"trial: {on} (tok/s, 95% CI){sim}")
        made["trial"] = "trial.png"
    return made


def write(
    out: Path,
    result: Mapping[str, Any],
    data: Mapping[str, Mapping[str, Any]],
    plan: Mapping[str, Any],
) -> Path:
    """Write report.md and decision.json into `out` (the PNGs are `result["plots"]`, drawn
    by `draw_plots` first); returns report.md's path."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "decision.json", result, sort_keys=False, mode=0o644)
    drawn = result.get("plots") or {}
    plots = drawn.get("files") or {}
    d = result["decision"]
    eng = d.get("engine") or {}
    sim = (
        f"; SIMULATED: the {eng.get('kind')} engine playing SGLang {eng.get('version')}, "
        "not a measurement of hardware"
        if eng.get("simulated")
        else ""
    )
    lines = ["# fastverify tune", ""]
    lines += [
        f"**Decision: {d['profile']} / {d['mode']} / backend {d['backend']}** "
        f"({'applied' if d['applied'] else 'not applied'}{sim})",
        "",
        f"Why: {d['why']}",
        "",
    ]
    lines += [f"Warning: {w}" for w in result.get("warnings") or []]
    lines += [""] if result.get("warnings") else []
    changes = data.get("decide", {}).get("changes") or []
    if changes:
        lines += ["What would change it:", ""] + [f"- {c}" for c in changes] + [""]
    lines += [
        f"Loads: {loads_text(result['loads'])}; wall {result['wall_s'] / 60:.1f} min.",
        "",
    ]
    if "decision" in plots:
        lines += [f"![decision]({plots['decision']})", ""]
    if drawn.get("skipped"):
        lines += [f"Plots: {drawn['skipped']}.", ""]
    lines += ["## Plan", ""]
    lines += md_table(
        ("stage", "estimate s", "from", "work", "note"),
        [
            (
                s["name"],
                s["estimate_s"],
                s["source"],
                s["units"],
                s.get("skip_reason") or s.get("note") or "",
            )
            for s in plan.get("stages", [])
        ],
    )
    if plan.get("budget_note"):
        lines += ["", f"Budget: {plan['budget_note']}"]
    lines += ["", "## Funnel", ""]
    lines += md_table(("after", "profiles"), funnel(result, data))
    if "funnel" in plots:
        lines += ["", f"![funnel]({plots['funnel']})"]
    lines += ["", "## Stages", ""]
    lines += md_table(
        ("stage", "status", "planned s", "wall s", "loads planned", "loads", "earlier runs",
         "reason"),
        [(s["name"], s["status"], s.get("planned_s"), s["wall_s"], _loads(s.get("planned_loads")),
          _loads(s.get("loads")), _earlier(s.get("earlier_runs")), s["reason"] or "")
         for s in result["stages"]],
    )  # fmt: skip
    lines += [
        "",
        "Planned: the plan's estimate when the stage started (the ETA it used; the plan above "
        "is the one made at the tune's start). Loads: the engine starts the daemon recorded "
        "during the stage, by kind. Earlier runs: a run cut by Ctrl-C (its put-back of what "
        "served before included) or one that failed, before --resume ran the stage again.",
    ]
    lines += _stage_sections(data, plots)
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n", mode=0o644)
    return path


def _loads(loads: Mapping[str, int] | None) -> str:
    return loads_text(loads) if loads else "-"


def _earlier(runs: Sequence[Mapping[str, Any]] | None) -> str:
    """A stage's earlier runs: `interrupted 41.2 s (1 real (1 cached), 1 dummy)`."""
    return "; ".join(f"{r['status']} {r['wall_s']:.1f} s ({_loads(r.get('loads'))})"
                     for r in runs or ()) or "-"  # fmt: skip


def _stage_sections(data: Mapping[str, Mapping[str, Any]], plots: Mapping[str, str]) -> list:
    lines: list[str] = []
    inv = data.get("inventory") or {}
    if inv:
        versions = inv.get("versions")
        v: dict[str, Any] = versions if isinstance(versions, dict) else {}
        lines += ["", "### Inventory", ""]
        lines += md_table(
            ("fact", "value"),
            [
                (
                    "engine",
                    f"{inv['engine']['name']} (TP {inv['engine']['tp_size']}, "
                    f"simulated: {inv['engine']['simulated']})",
                ),
                ("GPUs / topology", f"{inv['gpus']} / {inv['topology_summary']}"),
                ("doctor", inv["doctor"]["status"]),
                *[(k, v.get(k) or "not installed") for k in v],
                ("SGLang adds", "; ".join(inv.get("sglang_adds") or []) or "nothing"),
                *[
                    (f"backend {b['backend']}", f"{_fmt(b['possible'])}: {b['why']}")
                    for b in inv.get("backends", [])
                ],
            ],
        )
    cands = data.get("candidates") or {}
    if cands:
        lines += ["", "### Candidates", ""]
        lines += md_table(
            ("profile", "source", "backend", "CUDA graphs", "description"),
            [
                (c["name"], c["source"], c["backend"], c["cuda_graph"], c["description"])
                for c in cands.get("candidates", [])
            ],
        )
        for r in cands.get("rejected", []):
            lines.append(f"- rejected {r['name']}: {'; '.join(r['problems'])}")
        tp1 = tp1_text(cands.get("tp1"))
        if tp1:
            lines.append(f"- {tp1}")
    for name in ("preflight", "rehearse"):
        if data.get(name, {}).get("table"):
            lines += _section(name.capitalize(), name, data[name]["table"])
    trial = data.get("trial") or {}
    if trial.get("rows"):
        cached = any(r.get("weights") == "real" for r in trial["rows"])
        what = ("baselines on real weights cached real weights; EAGLE-3 on dummy weights: "
                "timings real, accept lengths not" if cached
                else "dummy weights: timings real, accept lengths not")  # fmt: skip
        lines += _section(f"Trial ({what})", "trial", trial["rows"])
        lines += _too_few_runs(trial["rows"]) + _quantised(trial["rows"])
        conc = trial.get("concurrency") or 1
        lines += [
            "",
            f"Break-even (`break_even_accept_length`) is for {conc} concurrent request(s) (the "
            "trial's -c): the accept length at which one EAGLE-3 draft+verify cycle per "
            "request matches the baseline's decode tokens/s per request at that concurrency "
            "(fastverify.speculation.breakeven, the computation behind /metrics' "
            f'fastverify_spec_breakeven_accept_length{{concurrency="{conc}"}}; '
            "docs/guides/tune.md).",
        ]
        if trial.get("compared_with_rehearsal"):
            lines += [
                "",
                "Rehearsal vs trial: " + ("; ".join(trial["disagreements"]) or "no disagreement"),
            ]
        else:
            lines += ["", "Rehearsal vs trial: no rehearsal on this host to compare with."]
        if "trial" in plots:
            lines += ["", f"![trial]({plots['trial']})"]
    conf = data.get("confirm") or {}
    if conf.get("rows"):
        rows = conf["rows"] + [conf[k] for k in ("eagle3", "adaptive") if conf.get(k)]
        lines += _section("Confirm (real weights)", "confirm", _vs_best(rows))
        if conf.get("from_trial"):
            note = "The finalists' rows are the trial's (cached real weights):"
            lines += ["", note, "none was reloaded."]
        lines += _too_few_runs(rows) + _quantised(rows)
        lines += ["", f"EAGLE-3: {conf.get('eagle3_why')}", "", "Accept lengths:", ""]
        lines += _accept_lengths(conf)
    dec = data.get("decide") or {}
    if dec.get("options"):
        lines += _section("Decision options", "decide", dec["options"])
    return lines


# Each stage's table in the report: its columns, the keys of its rows.
_COLUMNS: dict[str, tuple[str, ...]] = {
    "preflight": ("profile", "status", "wall_s", "decode_ratio_to_fastest", "verdict"),
    "rehearse": ("profile", "status", "decode_ms", "cycle_ms", "breakeven_accept_length",
                 "baseline_tokens_per_s", "eagle3_tokens_per_s"),
    "trial": ("profile", "mode", "weights", "status", "tokens_per_second_mean", "ci95",
              "decode_step_ms",
              "spec_cycle_ms", "trace_step_ms", "allreduce_per_step",
              "break_even_accept_length", "eagle3_verdict", "reason"),
    "confirm": ("profile", "mode", "status", "tokens_per_second_mean", "ci95", "n", "vs_best",
                "reason"),
    "decide": ("profile", "mode", "evidence", "tokens_per_second", "ci95", "accept_length",
               "break_even"),
}  # fmt: skip


def _section(title: str, stage: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A stage's heading and its table (the columns of `_COLUMNS[stage]`)."""
    keys = _COLUMNS[stage]
    return ["", f"### {title}", "", *md_table(keys, [[r.get(k) for k in keys] for r in rows])]


def _vs_best(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`vs_best` over all the rows, both modes: `best` once, the others as a ratio to it."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("tokens_per_second_mean")]
    top = max(ok, key=lambda r: r["tokens_per_second_mean"], default=None)
    out = []
    for r in rows:
        if r is top:
            vs = "best"
        elif r in ok and top is not None:
            vs = f"x{r['tokens_per_second_mean'] / top['tokens_per_second_mean']:.3f}"
        else:
            vs = None
        out.append({**r, "vs_best": vs})
    return out


def _accept_lengths(conf: Mapping[str, Any]) -> list[str]:
    """One accept length per line with its source, the one the decision uses marked."""
    used = conf.get("accept_length")
    before = conf.get("accept_length_before")
    out = []
    source = conf.get("accept_length_before_source")
    if before is not None and (before != used or source != conf.get("accept_length_source")):
        # from another source: shown also where the measurement gives the same number
        after = "superseded by" if before != used else "the same as"
        out.append(f"- {_fmt(before, 2)}: {source} (known before the confirmation; {after} "
                   "the measurement below)")  # fmt: skip
    if used is not None:
        out.append(f"- {_fmt(used, 2)}: {conf.get('accept_length_source')} (the decision uses it)")
    return out or ["- none known"]


def _quantised(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A flag under a table for each row a window of which completed too few requests."""
    flagged = [r for r in rows if r.get("few_requests")]
    if not flagged:
        return []
    return [""] + [f"- QUANTISED {r['profile']}/{r['mode']}: {r['few_requests']}" for r in flagged]


def _too_few_runs(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A note under a table whose CIs come from fewer than MIN_RUNS runs."""
    from fastverify.experiments.common.stats import MIN_RUNS

    few = sorted({int(r.get("n") or 0) for r in rows if r.get("ci95") and (r.get("n") or 0)
                  < MIN_RUNS})  # fmt: skip
    if not few:
        return []
    return [
        "",
        f"Note: these 95% CIs come from {few[0]} run(s) each: too few runs to trust them "
        f"(two runs of a quiet server often agree to the decimal); --repeats {MIN_RUNS} or "
        "more gives an interval that means something.",
    ]
