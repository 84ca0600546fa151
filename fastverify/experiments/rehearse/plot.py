"""The rehearse report's plot: per profile and path, the decode step beside the speculative
cycle, the break-even accept length above each pair (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(report: dict[str, Any], path: Path) -> Path:
    """Per profile and path: the decode step beside the speculative cycle (verify compute,
    verify all-reduce, drafter), the break-even accept length written above each pair
    (matplotlib, Agg; the sweep's plot style)."""
    from fastverify.experiments.common.plots import pyplot, save

    plt = pyplot()

    rows = [r for r in report["profiles"] if r.get("status") == "ok"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) + 2), 4.5))
    labels = []
    top = 0.0
    for i, r in enumerate(rows):
        x = 2.5 * i
        ar = r.get("allreduce_ms_per_verify") or r["exposed_comm_ms"]
        compute = max(0.0, r["verify_ms"] - ar)
        bars = (
            (x, r["decode_ms"], 0.0, "#4C72B0", "decode step"),
            (x + 1, compute, 0.0, "#DD8452", "verify: compute"),
            (x + 1, ar, compute, "#C44E52", "verify: all-reduce"),
            (x + 1, r["drafter_ms"], r["verify_ms"], "#8172B2", "drafter"),
        )
        for pos, size, bottom, color, name in bars:
            ax.bar(pos, size, bottom=bottom, color=color, edgecolor="black",
                   label=name if i == 0 else None)  # fmt: skip
        height = r["verify_ms"] + r["drafter_ms"]
        top = max(top, height, r["decode_ms"])
        ax.text(
            x + 0.5,
            height * 1.02,
            f"break-even\n{r['breakeven_accept_length']:.2f}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
        labels.append((x + 0.5, f"{r['profile']}\n{r['path']}"))
    ax.set_xticks([x for x, _ in labels])
    ax.set_xticklabels([t for _, t in labels], fontsize=8)
    ax.set_ylim(0, top * 1.25 if top else 1.0)
    timed = {"nccl": "CUDA-graph replays"}.get(report.get("backend") or "nccl",
                                              "eager forwards on CPU ranks")  # fmt: skip
    ax.set_ylabel(f"ms (p50 of {timed})")
    accept = report.get("accept_length")
    note = f", accept length {accept:.2f}" if accept else ""
    ax.set_title(
        f"fastverify rehearse: {report['model']}, TP={report['world_size']}, "
        f"K={report['draft_tokens']}{note}"
    )
    ax.grid(axis="y", alpha=0.3)
    # beside the axes, where no break-even label can be under it
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save(fig, path)
