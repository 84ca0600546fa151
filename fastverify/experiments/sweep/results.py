"""The sweep's results file and what is computed from it.

`DIR/results.jsonl`: one JSON object per line, made durable as soon as it ends
(fastverify.durable: a torn last line from a crash is ended before the next record and
skipped on reading).

Record types in results.jsonl:
- `{"type": "sweep", "started_at", "config"}`: one per (re)start;
- `{"type": "measurement", "profile", "mode", "repeat", "tokens_per_second",
  "per_request_tokens_per_second", "accept_length", "ttft_ms", "itl_ms", ...}`;
- `{"type": "failure", "profile", "mode", "stage": "switch"|"bench", "reason", "message"}`.

Statistics (`summarize`): per (profile, mode) mean tok/s with a Student-t 95% CI;
speedup against the reference (the `reference` profile, else the first profile measured
in that mode) and whether the difference is significant (Welch, alpha 0.05; "too few runs"
below `stats.MIN_RUNS` = 3 runs on either side); the rank
within the mode and whether a profile is statistically tied with the best. EAGLE-3 rows
also get the same profile's baseline, the real speedup (EAGLE-3 / baseline) and the
break-even accept length (`stats.break_even_accept_length`, from per-request rates).

"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastverify.durable import append_jsonl, read_jsonl
from fastverify.experiments.common import stats
from fastverify.experiments.sweep import trial

# A (profile, mode) whose runs were cut short (another client's switch, a bench that failed
# after a run): its figures are shown, never ranked, compared or chosen.
INCOMPLETE = "incomplete"


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and make it durable before returning (a torn last line left by
    a crash is ended first, so the record is not lost with it)."""
    append_jsonl(path, record)


def load_records(path: Path) -> list[dict[str, Any]]:
    """Every complete record of `path` (a torn last line from a crash is ignored)."""
    return read_jsonl(path)


def acceptance_of(ms: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs' accepted-drafts histograms summed (`accept_histogram`) and the accept curve
    L(k) they give (`accept_curve`; fastverify.speculation.curve), when the server reported
    them (EAGLE-3 at fixed steps)."""
    from fastverify.speculation.curve import AcceptCurve, add_histograms

    hists = [m["accept_histogram"] for m in ms if m.get("accept_histogram")]
    if not hists:
        return {}
    total = add_histograms(hists)
    steps = max((m.get("accept_steps") or 0) for m in ms) or len(total) - 1
    curves = [m for m in ms if m.get("accept_curve")]
    curve = AcceptCurve.from_histogram(total, steps).curve() if curves and steps else None
    return {"accept_histogram": total, "accept_curve": curve}


def _mean_of(values: list[float | None]) -> float | None:
    vals = [v for v in values if isinstance(v, int | float)]
    return stats.mean(vals) if vals else None


def summarize(
    records: Sequence[dict[str, Any]], reference: str | None = None, alpha: float = 0.05
) -> list[dict[str, Any]]:
    """One row per (profile, mode) in first-seen order, with the statistics described above."""
    order: list[tuple[str, str]] = []
    meas: dict[tuple[str, str], list[dict[str, Any]]] = {}
    fails: dict[tuple[str, str], dict[str, Any]] = {}
    for rec in records:
        kind = rec.get("type")
        if kind not in ("measurement", "failure"):
            continue
        key = (rec["profile"], rec["mode"])
        if key not in order:
            order.append(key)
        if kind == "measurement":
            meas.setdefault(key, []).append(rec)
        else:
            fails[key] = rec

    rows: list[dict[str, Any]] = []
    for key in order:
        profile, mode = key
        ms = meas.get(key, [])
        row: dict[str, Any] = {"profile": profile, "mode": mode}
        if ms:
            tps = [m["tokens_per_second"] for m in ms]
            ci = stats.mean_ci(tps)
            row.update(
                status="ok",
                reason=None,
                message=None,
                n=len(ms),
                samples=tps,
                tokens_per_second_mean=ci.mean,
                tokens_per_second_stdev=ci.stdev,
                ci95=None if ci.lo is None else [ci.lo, ci.hi],
                per_request_tokens_per_second_mean=_mean_of(
                    [m.get("per_request_tokens_per_second") for m in ms]
                ),
                accept_length_mean=_mean_of([m.get("accept_length") for m in ms]),
                ttft_p50_ms_mean=_mean_of([(m.get("ttft_ms") or {}).get("p50") for m in ms]),
                itl_p50_ms_mean=_mean_of([(m.get("itl_ms") or {}).get("p50") for m in ms]),
                itl_mean_ms_mean=_mean_of([(m.get("itl_ms") or {}).get("mean") for m in ms]),
            )
            row.update(acceptance_of(ms))
            sources = {str(m["acceptance_source"]) for m in ms if m.get("acceptance_source")}
            if sources:  # "measured", or SGLang's forced length (one label when all agree)
                row["acceptance_source"] = ", ".join(sorted(sources))
            fewest = min(int(m.get("completed") or 0) for m in ms)
            row["completed_min"] = fewest
            if fewest < stats.FEW_REQUESTS:  # its rates move in steps of one request
                row["few_requests"] = (
                    f"a window completed only {fewest} request(s) (under "
                    f"{stats.FEW_REQUESTS}: its rates are quantised; a longer --duration or a "
                    "shorter --output-len)"
                )
            if key in fails:  # a later run could not be taken: cut short, never ranked
                f = fails[key]
                row.update(status=INCOMPLETE, reason=f.get("reason"), message=f.get("message"),
                           stage=f.get("stage"))  # fmt: skip
                row["note"] = f"cut short after {len(ms)} run(s): {f.get('reason')}"
        else:
            f = fails.get(key, {})
            row.update(
                status="failed",
                reason=f.get("reason"),
                message=f.get("message"),
                stage=f.get("stage"),
                n=0,
                samples=[],
                tokens_per_second_mean=None,
                ci95=None,
            )
        rows.append(row)

    for mode in ("baseline", "eagle3"):
        ok = [r for r in rows if r["mode"] == mode and r["status"] == "ok"]
        if not ok:
            continue
        ref = next((r for r in ok if r["profile"] == reference), None) or ok[0]
        best = max(ok, key=lambda r: r["tokens_per_second_mean"])
        ranked = sorted(ok, key=lambda r: -r["tokens_per_second_mean"])
        for i, r in enumerate(ranked, 1):
            r["rank"] = i
            r["reference"] = ref["profile"]
            r["speedup_vs_reference"] = r["tokens_per_second_mean"] / ref["tokens_per_second_mean"]
            r["vs_reference"] = (
                "reference" if r is ref else stats.compare(r["samples"], ref["samples"], alpha)
            )
            vs_best = stats.compare(best["samples"], r["samples"], alpha)
            r["vs_best"] = (
                "best" if r is best
                else vs_best if vs_best in ("not significant", stats.TOO_FEW)
                else "slower"
            )  # fmt: skip

    baseline = {r["profile"]: r for r in rows if r["mode"] == "baseline" and r["status"] == "ok"}
    for r in rows:
        if r["mode"] != "eagle3" or r["status"] != "ok":
            continue
        base = baseline.get(r["profile"])
        if base is None:
            continue
        r["baseline_tokens_per_second"] = base["tokens_per_second_mean"]
        r["real_speedup"] = r["tokens_per_second_mean"] / base["tokens_per_second_mean"]
        r["speedup_significance"] = stats.compare(r["samples"], base["samples"], alpha)
        spec = r.get("per_request_tokens_per_second_mean") or r["tokens_per_second_mean"]
        b = base.get("per_request_tokens_per_second_mean") or base["tokens_per_second_mean"]
        accept = r.get("accept_length_mean")
        if accept and spec and b:
            r["break_even_accept_length"] = stats.break_even_accept_length(accept, spec, b)
    return rows


def best_row(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest ok row over every mode (the --apply-best winner)."""
    ok = [r for r in rows if r["status"] == "ok"]
    return max(ok, key=lambda r: r["tokens_per_second_mean"]) if ok else None


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Bar chart of mean tok/s per (profile, mode) with 95% CI error bars (matplotlib, Agg)."""
    from fastverify.experiments.common.plots import pyplot, save

    plt = pyplot()

    labels, heights, lo_err, hi_err, colors = [], [], [], [], []
    palette = {"baseline": "#4C72B0", "eagle3": "#DD8452"}
    for r in rows:
        labels.append(f"{r['profile']}\n{r['mode']}"
                      + ("\ntrial" if r.get("weights") == trial.DUMMY else ""))  # fmt: skip
        mean = r.get("tokens_per_second_mean") or 0.0
        heights.append(mean)
        ci = r.get("ci95")
        lo_err.append(mean - max(0.0, ci[0]) if ci else 0.0)  # a rate's bar stops at 0
        hi_err.append(ci[1] - mean if ci else 0.0)
        if r["status"] == INCOMPLETE:
            labels[-1] += "\nCUT SHORT"
        color = palette.get(r["mode"], "#888888") if r["status"] == "ok" else "#BBBBBB"
        colors.append(color + ("66" if r.get("weights") == trial.DUMMY else ""))  # faded
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(rows) + 2), 4.5))
    xs = range(len(rows))
    ax.bar(xs, heights, yerr=[lo_err, hi_err], capsize=4, color=colors, edgecolor="black")
    top = max(heights) if heights else 1.0
    for x, r in zip(xs, rows, strict=True):
        if r["status"] != "ok":
            what = f"cut short (n={r.get('n')})" if r["status"] == INCOMPLETE else "failed"
            ax.text(x, top * 0.02, what, ha="center", va="bottom", rotation=90, fontsize=9)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("output tokens/s (mean, 95% CI)")
    ax.set_title(title or "fastverify sweep")
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)
