"""Run every benchmarks/bench_*.py and write benchmarks/RESULTS.md from benchmarks/results/*.json.

Each benchmark runs as its own subprocess (one at a time, so they do not compete for the
CPU), with the arguments in ARGS that keep the whole suite to a few minutes. Every
benchmark writes its figures to benchmarks/results/NAME.json; this runner then describes
the machine (CPU model, cores, RAM, kernel, Python), lists each figure with its goal and
the ratio to it, and keeps every other results file in a list. Figures, never asserts: a
missed goal is reported, not failed.

    python benchmarks/run.py                 # run everything, then write RESULTS.md
    python benchmarks/run.py --only cli daemon
    python benchmarks/run.py --report-only   # just re-render RESULTS.md from the JSON files
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS_DIR = BENCH / "results"
REPORT = BENCH / "RESULTS.md"
RUNS_FILE = RESULTS_DIR / "runner.json"

# Arguments per benchmark that keep the suite to a few minutes on a 2-core machine.
ARGS: dict[str, list[str]] = {
    "attacks": ["--seconds", "10"],
    "cli": ["--runs", "40"],
    "daemon": ["--seconds", "10", "--idle-seconds", "10"],
    "exporter": [],
    "profiles": ["--runs", "20"],
    "switch": ["--switches", "6"],
    "spec": ["--stage", "robust"],  # ~30 min; e2e and coverage by hand (docs/guides/speculation.md)
}
TIMEOUT_S = 600


# ---------------------------------------------------------------------------- machine
def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    os_name = platform.platform()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    try:
        allowed = len(os.sched_getaffinity(0))
    except AttributeError:
        allowed = os.cpu_count()
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "cpu_model": cpu,
        "logical_cpus": os.cpu_count(),
        "cpus_available": allowed,
        "ram_gib": round(ram / 2**30, 1) if ram else None,
        "kernel": platform.release(),
        "os": os_name,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "commit": commit or None,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


# ---------------------------------------------------------------------------- running
def discover() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in BENCH.glob("bench_*.py"))


def run_one(name: str, timeout: float) -> dict[str, Any]:
    argv = [sys.executable, str(BENCH / f"bench_{name}.py"), *ARGS.get(name, [])]
    print(f"== {name}: {' '.join(argv[1:])}", flush=True)
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTVERIFY_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        code, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out = "timeout", f"{exc.stdout or ''}{exc.stderr or ''}"
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
    wall = time.monotonic() - t0
    print(out.rstrip()[-3000:], flush=True)
    print(f"== {name}: exit {code} in {wall:.1f} s\n", flush=True)
    return {"bench": name, "argv": argv[1:], "exit": code, "wall_s": round(wall, 1)}


# ---------------------------------------------------------------------------- figures
Figure = dict[str, Any]  # name, value (str), goal (str), ratio (float|None), met (bool|None)


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def fig(
    name: str, value: str, goal: str = "", ratio: float | None = None, met: bool | None = None
) -> Figure:
    return {"name": name, "value": value, "goal": goal, "ratio": ratio, "met": met}


CLICK = "python -c 'import click'"


def figures_cli(d: dict) -> list[Figure]:
    """Ratios to `import click` measured in the same run (wall and child CPU medians) first,
    then the references: fastest runs, supervisorctl, an eager import, the old absolute goal."""
    cmds = d.get("commands", {})
    goal = d.get("goal_ms", 60.0)
    goal_ratio = d.get("goal_ratio_to_import_click", 1.3)
    goal_cmds = d.get("goal_commands", ["fastverifyctl status", "fastverifyctl profile list"])
    click_wall = _get(cmds, CLICK, "median_ms")
    click_cpu = _get(cmds, CLICK, "cpu_median_ms")
    out = []
    ratios = d.get("ratio_to_import_click") or {}
    for name in ratios:
        held = name in goal_cmds
        pairs = (("wall", "median_ms", click_wall), ("child CPU", "cpu_median_ms", click_cpu))
        for kind, key, ref in pairs:
            v = _get(cmds, name, key)
            if v is None or not ref:
                continue
            r = v / ref
            out.append(
                fig(
                    f"`{name}` vs `import click`, {kind} (median)",
                    f"{v:.1f} vs {ref:.1f} ms",
                    f"<= {goal_ratio}x" if held else "",
                    r,
                    r <= goal_ratio if held else None,
                )
            )
    counted = d.get("instructions") or {}
    for name, r in ratios.items():  # where valgrind counted them: the same on any load
        if r.get("instructions") is None:
            continue
        held = name in goal_cmds
        out.append(
            fig(
                f"`{name}` vs `import click`, instructions (callgrind, once)",
                f"{counted[name] / 1e6:.1f} M vs {counted[CLICK] / 1e6:.1f} M",
                f"<= {goal_ratio}x" if held else "",
                r["instructions"],
                r["instructions"] <= goal_ratio if held else None,
            )
        )
    for before in sorted(RESULTS_DIR.glob("cli-before-*.json")):
        # an earlier same-bench run kept for comparison (e.g. before a start-up change)
        try:
            b = json.loads(before.read_text())
        except ValueError:
            continue
        rb = b.get("ratio_to_import_click") or {}
        parts = [
            f"{n.removeprefix('fastverifyctl ')} {r['wall']:.2f}x / {r['cpu']:.2f}x"
            for n, r in rb.items()
        ]
        if parts:
            out.append(
                fig(
                    f"before: `{before.name}` ({b.get('when', '?')}), ratio to `import click`"
                    " wall / CPU",
                    "; ".join(parts),
                )
            )
    mins = [(n, _get(cmds, n, "min_ms")) for n in (*ratios, CLICK)]
    mins = [(n, v) for n, v in mins if v is not None]
    if mins:
        short = [n.removeprefix("fastverifyctl ").removeprefix("python -c ") for n, _ in mins]
        names = " / ".join(short)
        values = " / ".join(f"{v:.1f}" for _, v in mins) + " ms"
        out.append(fig(f"fastest run (min): {names}", values))
    st = _get(cmds, "fastverifyctl status", "median_ms")
    sup = _get(cmds, "supervisorctl status", "median_ms")
    floor = _get(cmds, "python -c pass (interpreter floor)", "median_ms")
    if st is not None and sup is not None:
        out.append(
            fig(
                "`fastverifyctl status` vs `supervisorctl status` (same run)",
                f"{st:.1f} vs {sup:.1f} ms",
                "faster than supervisorctl",
                st / sup,
                st < sup,
            )
        )
    eager = _get(cmds, "python -c eager click+rich+prometheus_client", "median_ms")
    if st is not None and eager:
        out.append(
            fig(
                "`fastverifyctl status` vs an eager import of click+rich+prometheus_client",
                f"{st:.1f} vs {eager:.1f} ms",
                "below the eager import",
                st / eager,
                st < eager,
            )
        )
    if st is not None:
        ref = f" (`import click` alone: {click_wall:.1f} ms here)" if click_wall else ""
        out.append(
            fig(
                "`fastverifyctl status` wall time (median; old absolute goal)",
                f"{st:.1f} ms{ref}",
                f"< {goal:.0f} ms",
                st / goal,
                st < goal,
            )
        )
    imp = d.get("status_imports_in_process_median_ms")
    if imp is not None:
        out.append(
            fig(
                "imports of `fastverifyctl status` (fastverify.ctl + client), in-process",
                f"{imp:.1f} ms",
            )
        )
    if floor is not None:
        cpu = _get(cmds, "python -c pass (interpreter floor)", "cpu_median_ms")
        extra = f" (child CPU {cpu:.1f} ms)" if cpu is not None else ""
        out.append(fig("`python -c pass` (interpreter floor, reference)", f"{floor:.1f} ms{extra}"))
    return out


def figures_daemon(d: dict) -> list[Figure]:
    out = []
    idle = d.get("idle", {})
    secs = idle.get("seconds")
    for key, label in (
        ("daemon", "fastverifyd alone"),
        ("engine_group", "sim engine group"),
        ("daemon_plus_engine", "fastverifyd + sim"),
    ):
        part = idle.get(key)
        if part:
            out.append(
                fig(f"{label}: RSS / USS at idle", f"{part['rss_mib']} / {part['uss_mib']} MiB")
            )
            out.append(
                fig(f"{label}: idle CPU over {secs} s", f"{part['cpu_percent']:.2f} % of one core")
            )
    sc = d.get("scrapers_during_switches")
    if sc:
        out.append(
            fig(
                f"/metrics with {sc['scrapers']} concurrent scrapers during {sc['switches']} "
                "switches: p50 / p99 / max",
                f"{sc['p50_ms']:.1f} / {sc['p99_ms']:.1f} / {sc['max_ms']:.1f} ms "
                f"({sc['scrapes']} scrapes, {sc['errors']} errors)",
                "no errors, max < 2 s",
                sc["max_ms"] / 2000,
                sc["errors"] == 0 and sc["max_ms"] < 2000,
            )
        )
    goal = d.get("goal_ratio", 0.99)
    served = d.get("served", {})
    base = _get(served, "A_no_exporter", "mean_tokens_per_second")
    for key, label in (
        ("B_exporter", "with the exporter (scraped every 1 s)"),
        ("C_exporter_and_trace_windows", "with exporter + trace windows every 5 s"),
    ):
        v = _get(served, key, "mean_tokens_per_second")
        if v is not None and base:
            r = v / base
            out.append(
                fig(
                    f"served tok/s {label} vs without (sim, EAGLE-3)",
                    f"{v:.1f} vs {base:.1f} tok/s",
                    f">= {goal:.0%}",
                    r,
                    r >= goal,
                )
            )
    return out


def figures_switch(d: dict) -> list[Figure]:
    out = []
    goal = d.get("goal_fraction", 0.05)
    ready = _get(d, "engine_time_to_ready_s", "median")
    own = d.get("daemon_own_work_fraction_of_engine_start")
    if own is not None:
        out.append(
            fig(
                "switch: daemon's own work / engine time-to-ready (sim)",
                f"{d.get('daemon_own_work_s', 0) * 1000:.0f} ms of {ready or 0:.2f} s",
                f"<= {goal:.0%} (ratio <= {1 + goal:.2f})",
                1 + own,
                own <= goal,
            )
        )
    paired = d.get("overhead_fraction_of_engine_start")
    if paired is not None:
        out.append(
            fig(
                "switch: wall time minus engine ready+stop, / engine time-to-ready",
                f"{d.get('overhead_s', 0) * 1000:.0f} ms",
                f"<= {goal:.0%}",
                1 + paired,
                paired <= goal,
            )
        )
    lag = d.get("readiness_detection_lag_s")
    if lag is not None:
        out.append(
            fig(
                "switch: readiness detection lag (engine ready -> daemon notices)",
                f"{lag * 1000:.0f} ms",
            )
        )
    wall = _get(d, "switch_wall_s", "median")
    if wall is not None:
        out.append(fig("switch wall time (median, client side)", f"{wall:.2f} s"))
    return out


def figures_exporter(d: dict) -> list[Figure]:
    out = []
    ours1 = _get(d, "metrics", "ours", "one_scraper")
    plain1 = _get(d, "metrics", "plain", "one_scraper")
    if ours1:
        p99 = ours1["p99_ms"]
        out.append(
            fig(
                "/metrics p50 / p99, one scraper",
                f"{ours1['p50_ms']:.2f} / {p99:.2f} ms",
                "p99 < 2 ms",
                p99 / 2.0,
                p99 < 2.0,
            )
        )
    if plain1:
        out.append(
            fig(
                "plain prometheus-client exporter p50 / p99 (same run)",
                f"{plain1['p50_ms']:.2f} / {plain1['p99_ms']:.2f} ms",
            )
        )
    o50 = _get(d, "metrics", "ours", "fifty_connections", "per_second")
    p50 = _get(d, "metrics", "plain", "fifty_connections", "per_second")
    if o50 and p50:
        r = o50 / p50
        out.append(
            fig(
                "/metrics throughput, 50 connections, vs plain exporter",
                f"{o50:.0f} vs {p50:.0f} scrapes/s",
                ">= 75% of plain",
                r,
                r >= 0.75,
            )
        )
    lps = _get(d, "logs", "mixed", "lines_per_second")
    if lps:
        out.append(
            fig(
                "log lines/s (mixed lines)",
                f"{lps:,.0f}",
                ">= 300k/s",
                lps / 300_000,
                lps >= 300_000,
            )
        )
    traces = d.get("traces", {})
    naive = _get(traces, "naive_json", "mb_per_second")
    for key, label in (("fast_json", "plain JSON"), ("fast_gz", "gzipped")):
        v = _get(traces, key, "mb_per_second")
        if v:
            out.append(
                fig(
                    f"trace analysis MB/s ({label})",
                    f"{v:.0f} MB/s",
                    ">= 150 MB/s",
                    v / 150,
                    v >= 150,
                )
            )
            if naive:
                out.append(
                    fig(
                        f"trace analysis ({label}) vs naive json.load + loop",
                        f"{v:.0f} vs {naive:.0f} MB/s",
                        "faster than naive",
                        v / naive,
                        v > naive,
                    )
                )
    return out


def figures_profiles(d: dict) -> list[Figure]:
    out = []
    for name, s in (d.get("cli_wall") or {}).items():
        cmd = name if name.startswith("python") else f"fastverifyctl {name}"
        out.append(fig(f"`{cmd}` wall time (median)", f"{s['median_ms']:.1f} ms"))
    per = d.get("validator_per_file") or {}
    if per:
        worst = max(v["load_with_extends_median_ms"] for v in per.values())
        out.append(
            fig(
                "profile validation, slowest shipped file (load + extends + validate)",
                f"{worst:.3f} ms",
                "< 50 ms",
                worst / 50,
                worst < 50,
            )
        )
    return out


def figures_spec_robust(d: dict) -> list[Figure]:
    """bench_spec.py --stage robust: adaptive against the better fixed mode at the recorded
    acceptance and against baseline at the lower one, at every concurrency."""
    x, y = d["min_adaptive_over_better_fixed"], d["min_lower_adaptive_over_baseline"]
    concs = ", ".join(d["rows"])
    return [
        fig(f"adaptive / better fixed mode at L={d['accept_length']}, worst of c={concs}",
            f"{x:.4f}", ">= 0.97", x / 0.97, x >= 0.97),
        fig(f"adaptive / baseline at L={d['lower_accept_length']} (plan made at "
            f"{d['accept_length']}), worst of c={concs}", f"{y:.4f}", ">= 0.97", y / 0.97,
            y >= 0.97),
    ]  # fmt: skip


def figures_spec_e2e(d: dict) -> list[Figure]:
    """bench_spec.py --stage e2e: served / the plan's end-to-end prediction per prompt length."""
    out = []
    for n, v in d["prompt_lens"].items():
        w = v["worst_adaptive_ratio"]
        out.append(fig(f"adaptive served / predicted, {n}-token prompts, worst concurrency",
                       f"{w:.4f}", "within 5%", abs(w - 1) / 0.05, abs(w - 1) <= 0.05))  # fmt: skip
    return out


def figures_spec_coverage(d: dict) -> list[Figure]:
    """bench_spec.py --stage coverage: how often the plan's 95% interval held the served value."""
    share = d["covered"] / d["of"]
    return [fig(f"served tok/s inside the plan's 95% interval, {d['of']} seeded runs",
                f"{d['covered']} / {d['of']}", ">= 90%", share / 0.9, share >= 0.9)]  # fmt: skip


def figures_attacks(d: dict) -> list[Figure]:
    """bench_attacks.py: a legitimate client's worst success and p99 under each attack."""
    out = []
    for name, phase in d["phases"].items():
        legit = phase["legit"].values()
        ok = min(r["success"] or 0 for r in legit)
        p99 = max(r["p99_s"] or 0 for r in legit)
        rss = phase["rss_peak_mib"]
        met = ok >= 1.0 and p99 < 1.0 and rss < 200
        out.append(fig(f"{name}: legitimate success / p99 / daemon RSS",
                       f"{ok:.0%} / {p99 * 1000:.0f} ms / {rss:.0f} MiB",
                       "100% / < 1 s / < 200 MiB", p99, met))  # fmt: skip
    return out


EXTRACTORS: dict[str, Callable[[dict], list[Figure]]] = {
    "attacks": figures_attacks,
    "cli": figures_cli,
    "daemon": figures_daemon,
    "switch": figures_switch,
    "exporter": figures_exporter,
    "profiles": figures_profiles,
    "spec-robust-sim": figures_spec_robust,
    "spec-e2e-sim": figures_spec_e2e,
    "spec-coverage-sim": figures_spec_coverage,
}
NOTES = {
    "attacks": "One fastverifyd on the sim (control socket, mutual-TLS TCP door, exporter; a"
    " 31 MiB journal), each attack for 10 s from the legitimate client's own uid and address"
    " while it asks its door every 0.1 s; RSS is the daemon's peak. The same script on the"
    " tree before the defences: results/attacks-before-db46385.json (the first six attacks:"
    " 0% success under five, 5.4 GiB RSS under the history flood).",
    "cli": "Every command runs as a real subprocess, interleaved round-robin with the others"
    " (first round dropped), `status` and `profile list` against a running fastverifyd (sim);"
    " child CPU is user + system time from getrusage; on the venv `./scripts/run` makes, its"
    " console script and python, without PYTHONPATH: what a user runs (the bytecode is what that"
    " install compiled, as a wheel's is). Wall time includes interpreter start-up"
    " and, on a shared host, time spent waiting for a CPU: the same-run ratios to"
    " `import click`, the CPU ratios above all, are the figures to read across machines"
    " and loads.",
    "daemon": "Served tok/s is closed-loop streaming load on the sim (EAGLE-3 mode), runs in the"
    " order A B C C B A, each on a fresh daemon; the sim's step times come from its cost"
    " model, so the ratios show CPU taken from the server by the daemon and exporter.",
    "switch": "Sim engine; see bench_switch.py for the two ways the overhead is computed.",
    "spec-robust-sim": "Sim engine (TP 8, ring-ll): one EAGLE-3 load at the recorded acceptance"
    " gives the per-request histograms and the engine's costs, the plan (its stated lower"
    " acceptance), then baseline, EAGLE-3 and adaptive serve every concurrency, and adaptive"
    " again at the lower acceptance; the sim's cost model, not a GPU.",
    "spec-e2e-sim": "Sim engine: the plan's prediction of each bench window (its replays of it)"
    " against what the window served, 128- and 1024-token prompts.",
    "spec-coverage-sim": "Sim engine with --sim-accept-spread: each run records acceptance on"
    " its own seed, plans, and serves adaptive on another seed.",
}
TITLES = {
    "cli": "CLI start-up (bench_cli.py)",
    "attacks": "A legitimate client under attack (bench_attacks.py)",
    "daemon": "Daemon footprint and the cost of observing (bench_daemon.py)",
    "switch": "Switch overhead (bench_switch.py)",
    "exporter": "Exporter (bench_exporter.py)",
    "profiles": "Profiles (bench_profiles.py)",
    "spec-robust-sim": "Speculation: robustness of the plan's config (bench_spec.py)",
    "spec-e2e-sim": "Speculation: end-to-end prediction (bench_spec.py)",
    "spec-coverage-sim": "Speculation: interval coverage (bench_spec.py)",
}


# ---------------------------------------------------------------------------- report
def _fmt_ratio(r: float | None) -> str:
    return "" if r is None else f"{r:.3f}"


def _verdict(met: bool | None) -> str:
    return "" if met is None else ("met" if met else "**missed**")


def render(mach: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# Benchmark results",
        "",
        f"Written by `python benchmarks/run.py` on {now}"
        f" at commit `{mach.get('commit')}`. Figures, never asserts: a missed goal is reported",
        "here, not failed. Figures on the sim engine come from its cost model and this host's",
        "CPU, never from GPUs; they show what fastverify itself costs, not what a GPU server does.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {mach['cpu_model']} |",
        f"| cores | {mach['logical_cpus']} logical, {mach['cpus_available']} available to us |",
        f"| RAM | {mach['ram_gib']} GiB |",
        f"| kernel | {mach['kernel']} |",
        f"| OS | {mach['os']} |",
        f"| Python | {mach['python']} |",
        f"| load average at the end (1/5/15 min) | {' / '.join(map(str, mach['loadavg']))} |",
        "",
    ]
    if runs:
        lines += ["## Runs", "", "| benchmark | arguments | exit | wall s |", "|---|---|---|---|"]
        for r in runs:
            args = " ".join(r["argv"][1:]) or "(defaults)"
            lines.append(f"| bench_{r['bench']}.py | `{args}` | {r['exit']} | {r['wall_s']} |")
        lines.append("")
    lines += ["## Figures", ""]
    known = set()
    summary: list[tuple[str, Figure]] = []
    for name, extract in EXTRACTORS.items():
        path = RESULTS_DIR / f"{name}.json"
        if not path.exists():
            continue
        known.add(path.name)
        try:
            data = json.loads(path.read_text())
            figs = extract(data)
        except (ValueError, KeyError, TypeError) as exc:
            lines += [f"### {TITLES[name]}", "", f"(could not read {path.name}: {exc})", ""]
            continue
        when = data.get("when") or data.get("measured_at") or "?"
        lines += [
            f"### {TITLES[name]}",
            "",
            f"`results/{path.name}`, measured {when}.",
            "",
            "| figure | value | goal | ratio | |",
            "|---|---|---|---|---|",
        ]
        for f in figs:
            lines.append(
                f"| {f['name']} | {f['value']} | {f['goal']} | {_fmt_ratio(f['ratio'])} "
                f"| {_verdict(f['met'])} |"
            )
            if f["met"] is not None:
                summary.append((name, f))
        lines.append("")
        if name in NOTES:
            lines += [NOTES[name], ""]
    if summary:
        met = sum(1 for _, f in summary if f["met"])
        lines[lines.index("## Figures") + 1 : lines.index("## Figures") + 1] = [
            "",
            f"{met} of {len(summary)} goals met. Ratio = value / goal (for goals of the form",
            "'at least', >= 1 is met; for 'at most', <= 1 is met); comparisons name both sides.",
        ]
    others = sorted(p for p in RESULTS_DIR.glob("*") if p.is_file() and p.name not in known)
    others = [p for p in others if p.name != RUNS_FILE.name]
    if others:
        lines += [
            "## Other result files",
            "",
            "Kept as measured (GPU runs and the like; not re-run by this runner):",
            "",
        ]
        for p in others:
            what = ""
            if p.suffix == ".json":
                try:
                    data = json.loads(p.read_text())
                    what = data.get("what") or data.get("description") or ""
                    if not what and isinstance(data, dict):
                        what = "keys: " + ", ".join(list(data)[:8])
                except (ValueError, AttributeError):
                    what = "(unreadable JSON)"
            lines.append(f"- `results/{p.name}`" + (f": {what}" if what else ""))
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="benchmark names (cli, daemon, ...)")
    ap.add_argument("--skip", nargs="*", default=[], help="benchmark names to leave out")
    ap.add_argument("--report-only", action="store_true", help="only re-render RESULTS.md")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="per benchmark, seconds")
    args = ap.parse_args()
    runs: list[dict[str, Any]] = []
    if not args.report_only:
        names = [n for n in discover() if (not args.only or n in args.only) and n not in args.skip]
        t0 = time.monotonic()
        for name in names:
            runs.append(run_one(name, args.timeout))
        print(f"all benchmarks: {time.monotonic() - t0:.0f} s")
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        # --only/--skip: keep the earlier runs of the benchmarks not re-run this time
        earlier = json.loads(RUNS_FILE.read_text()).get("runs", []) if RUNS_FILE.exists() else []
        fresh = {r["bench"] for r in runs}
        runs = [r for r in earlier if r["bench"] not in fresh] + runs
        runs.sort(key=lambda r: r["bench"])
        RUNS_FILE.write_text(json.dumps({"runs": runs, "when": time.time()}, indent=2) + "\n")
    elif RUNS_FILE.exists():
        runs = json.loads(RUNS_FILE.read_text()).get("runs", [])
    REPORT.write_text(render(machine(), runs) + "\n")
    print(f"wrote {REPORT.relative_to(REPO)}")
    return 1 if any(r["exit"] != 0 for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
