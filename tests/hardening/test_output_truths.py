"""What the CLI prints must be true and labelled, through the real `fastverifyctl` (and a real
daemon on the sim): help text as printed, an adopted engine's status and crash reason, the
sweep's closing lines."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.support.harness import DaemonHarness, run_ctl


def test_spec_plan_help_prints_percent_signs_once() -> None:
    r = run_ctl("spec", "plan", "--help")
    assert r.returncode == 0, r.stderr
    assert "35% less likely" in r.stdout and "%%" not in r.stdout, r.stdout


def test_an_adopted_engine_is_not_shown_as_a_load_and_its_crash_has_a_reason(
    tmp_path: Path,
) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        loaded = d.ctl("status")
        assert "ready in:" in loaded.stdout, loaded.stdout
        d.kill9()
        d.restart_daemon()
        st = d.status()
        assert st["engine"]["adopted"] is True
        shown = d.ctl("status").stdout
        assert "ready in:" not in shown and "adopted:" in shown, shown
        os.kill(st["engine"]["pid"], signal.SIGKILL)
        d.wait_for(lambda: d.status()["restarts"]["total"] == 1, 30, "the crash counted")
        failure = d.status()["last_failure"]
        assert failure["reason"] == "exited" and "?" not in failure["reason"], failure
        assert "exit status" in failure["message"], failure
        d.wait_state("READY", 60)


def test_a_sweep_says_restored_once(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False, config={"daemon": {"trace_period_s": 0}}) as d:
        r = d.ctl("sweep", "ring-ll", "--repeats", "1", "--duration", "0.5", "--output-len",
                  "16", "--output", str(tmp_path / "s"), "--no-plot", timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        said = (r.stdout + r.stderr).splitlines()
        restored = [x for x in said if "restored:" in x]
        assert len(restored) == 1, said


def test_profile_validate_says_nothing_of_the_content_of_a_file_it_never_read(
    tmp_path: Path,
) -> None:
    d = tmp_path / "profiles"
    d.mkdir()
    (tmp_path / "elsewhere.env").write_text("NCCL_ALGO=Ring\n")
    (d / "link.env").symlink_to(tmp_path / "elsewhere.env")
    (d / "big.env").write_text("NCCL_ALGO=Ring\n" * 80_000)
    r = run_ctl("profile", "--dir", str(d), "validate", "link", "big")
    assert r.returncode == 1, r.stdout + r.stderr
    said = r.stdout + r.stderr
    assert "symbolic link" in said and "larger than" in said, said
    assert "description" not in said, said


def _png_text(path: Path) -> str:
    """The figure's text as the PNG carries it (save() writes every text artist of the
    figure into its Description)."""
    from PIL import Image

    with Image.open(path) as img:
        return img.text.get("Description", "")


def test_the_sims_sweep_says_simulated_in_its_table_and_its_plot(tmp_path: Path) -> None:
    out = tmp_path / "s"
    with DaemonHarness(tmp_path, metrics=False, config={"daemon": {"trace_period_s": 0}}) as d:
        # a window that a request finishes in even on a machine 10x as busy (what is tested is
        # the label, not the figure)
        r = d.ctl("sweep", "ring-ll", "--repeats", "1", "--duration", "3", "--output-len",
                  "4", "--output", str(out), timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    title = next(x for x in r.stdout.splitlines() if x.startswith("# sweep: "))
    assert "SIMULATED (the sim engine playing SGLang " in title, title
    shown = _png_text(out / "sweep.png")
    assert "SIMULATED (the sim engine playing SGLang " in shown, shown


def test_tunes_plots_say_what_they_show(tmp_path: Path) -> None:
    """trial.png names the weights each bar had (4 of 5 from the weight cache: real), the
    decision plot mentions hatching only where a bar is hatched, and every plot of the sim
    says SIMULATED."""
    from fastverify.experiments.tune import report

    engine = {"kind": "sim", "version": "0.5.23", "simulated": True}
    rows = [{"profile": p, "mode": "baseline", "status": "ok", "tokens_per_second_mean": 90.0,
             "ci95": [88.0, 92.0], "weights": "dummy" if p == "tree-ll" else "real"}
            for p in ("ring-ll", "ring-ll-8ch", "ring-simple", "pcie-ipc", "tree-ll")]  # fmt: skip
    options = [{"profile": "ring-ll", "mode": "baseline", "tokens_per_second": 91.0,
                "ci95": [90.0, 92.0], "evidence": "measured"}]  # fmt: skip
    data = {"candidates": {"candidates": rows}, "trial": {"rows": rows},
            "decide": {"options": options}}  # fmt: skip
    result = {"decision": {"profile": "ring-ll", "mode": "baseline", "engine": engine}}
    drawn = report.draw_plots(tmp_path, result, data)
    assert sorted(drawn["files"]) == ["decision", "funnel", "trial"], drawn
    trial_text = _png_text(tmp_path / "trial.png")
    assert "1 on dummy weights, 4 on real weights" in trial_text, trial_text
    assert "trial on dummy weights" not in trial_text, trial_text
    decision_text = _png_text(tmp_path / "decision.png")
    assert "hatched" not in decision_text, decision_text
    for name in ("trial.png", "decision.png", "funnel.png"):
        assert "SIMULATED" in _png_text(tmp_path / name), name


def test_rehearse_plot_labels_are_all_visible_and_say_what_was_timed(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Read from the figure's own artists, laid out as saved: no break-even label lies under
    the legend, and a gloo run's y-axis does not speak of CUDA-graph replays (gloo ranks run
    no graphs)."""
    from fastverify.experiments.common import plots
    from fastverify.experiments.rehearse.plot import plot

    seen: list[tuple[str, list[str]]] = []
    real_save = plots.save

    def save(fig: Any, path: Path) -> Path:
        fig.tight_layout()
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent(renderer)
        labels = [t for t in ax.texts if t.get_text().startswith("break-even")]
        assert len(labels) == 3
        hidden = [t.get_text() for t in labels if t.get_window_extent(renderer).overlaps(legend)]
        seen.append((ax.get_ylabel(), hidden))
        return real_save(fig, path)

    monkeypatch.setattr(plots, "save", save)
    rows = [
        {"profile": p, "path": "PIX", "status": "ok", "decode_ms": 30.0, "verify_ms": 30.0,
         "exposed_comm_ms": 25.0, "allreduce_ms_per_verify": 25.0, "drafter_ms": 6.0,
         "breakeven_accept_length": 1.2}
        for p in ("ring-ll", "ring-simple", "pcie-ipc")
    ]  # fmt: skip
    for backend, timed in (("nccl", "CUDA-graph replays"), ("gloo", "eager forwards")):
        report = {"profiles": rows, "model": "tiny", "world_size": 2, "draft_tokens": 4,
                  "accept_length": None, "backend": backend}  # fmt: skip
        plot(report, tmp_path / f"{backend}.png")
        ylabel, hidden = seen[-1]
        assert timed in ylabel, ylabel
        assert hidden == [], hidden


def test_a_trace_line_puts_a_mean_beside_a_mean(tmp_path: Path) -> None:
    """The trial's trace line: the step time and the all-reduce time per step are both
    means over the window's steps (a p50 step beside a mean all-reduce read 12.03 ms of
    step against 12.40 ms of all-reduce)."""
    import re

    with DaemonHarness(tmp_path, metrics=True, config={"daemon": {"trace_period_s": 0}}) as d:
        r = d.ctl("sweep", "ring-ll", "--load-format", "dummy", "--repeats", "1",
                  "--duration", "0.5", "--output-len", "16", "--output", str(tmp_path / "s"),
                  "--no-plot", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(x for x in r.stderr.splitlines() if ": trace " in x)
    m = re.search(r"([\d.]+) ms/step, \d+ all-reduces \(([\d.]+) ms\), means over (\d+) steps",
                  line)  # fmt: skip
    assert m, line
    assert float(m[2]) <= float(m[1]) and int(m[3]) > 0, line
