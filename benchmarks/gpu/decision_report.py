"""The figures of a `spec_sglang.py` run beside their goals: what the plan's serving model
predicts (fastverify.speculation.plan, from the run's own cost file and SGLang's histogram under
its forced accept length) against what SGLang served, per concurrency and prompt length. Each
bench window is compared with the model's prediction of that window (its length, every client
starting at once after the warm-up: `serving.serve(window_s=)`); the long run is beside it.

    python benchmarks/gpu/decision_report.py RAW_DIR [--out benchmarks/results/FILE.json]
        [--histogram FILE] [--input-len N] [--prefill-points FILE] [--replicate RAW2 ...]

RAW_DIR holds the run's raw outputs (spec-costs-8b.json, and spec-costs-8b-inN.json for costs
measured at N-token prompts: each window is predicted from those nearest its own prompt
length; bench-MODE-cC-inN.json,
accept-histogram-forced-3.json): one call's raw tarball unpacked. Modes compared: baseline (a
baseline server) and fixed3 (EAGLE-3 at 3 steps, the plan's "eagle" prediction), and, when the
run served them, adaptive3 (the plan served at the planned acceptance) and adaptive2 (the same
config at the lower forced acceptance, against baseline). `--replicate` pools the windows of
other runs of the same steps (another card, another server instance) with RAW's: each window
is then the mean of its runs, with every run's figure and the spread beside it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fastverify.sglang import request_stamps  # noqa: E402
from fastverify.speculation import costs as spec_costs  # noqa: E402
from fastverify.speculation import plan as spec_plan  # noqa: E402
from fastverify.speculation import serving  # noqa: E402
from fastverify.speculation.acceptance import Acceptance  # noqa: E402

PREDICTED_MODE = {"baseline": "baseline", "fixed1": "eagle", "fixed2": "eagle", "fixed3": "eagle",
                  "adaptive3": "adaptive"}  # fmt: skip
GOAL_PREDICTION = 0.05  # served within 5% of the prediction
GOAL_VS_BASELINE = 0.97  # adaptive at the lower acceptance >= 0.97x baseline
OUTPUT_LEN = 128
SHORT_PROMPT = 128  # the prompt length of spec-costs-8b.json and of the between-keys figures


def benches(raw: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    """Each bench window by (mode, concurrency, prompt length). A fixed mode is named by the
    draft steps the server itself reported (bench's `accept_steps`, from SGLang's server info),
    not by the file's tag: the tag says what the step asked for."""
    out = {}
    for p in raw.glob("bench-*-c*-in*.json"):
        m = re.fullmatch(r"bench-(\w+)-c(\d+)-in(\d+)\.json", p.name)
        if not m:
            continue
        b, mode = json.loads(p.read_text()), m[1]
        served = b.get("accept_steps")
        if fixed_steps(mode) and served and f"fixed{served}" != mode:
            b["tagged"], mode = mode, f"fixed{served}"
        b["timeline"] = prefill_batching(raw, p.name)
        out[(mode, int(m[2]), int(m[3]))] = b
    return out


ONE_FORWARD_S = 1e-3  # first tokens this close together left the server in one prefill forward


def prefill_batching(raw: Path, name: str) -> dict[str, Any] | None:
    """How SGLang batched a served window's prefills, from its timeline (`bench --timeline`,
    timeline-MODE-cC-inN.jsonl beside the bench file): first tokens that reached the client
    together came out of one prefill forward. None where the window kept no timeline."""
    path = raw / name.replace("bench-", "timeline-").replace(".json", ".jsonl")
    if not path.exists():
        return None
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    firsts = sorted(r["first_token_s"] for r in rows if r.get("first_token_s") is not None)
    ttft = sorted(r["first_token_s"] - r["start_s"] for r in rows
                  if r.get("first_token_s") is not None)  # fmt: skip
    if not firsts:
        return None
    forwards = 1 + sum(b - a > ONE_FORWARD_S for a, b in itertools.pairwise(firsts))
    out = {"first_tokens": len(firsts), "prefill_forwards": forwards,
           "prompts_per_forward": round(len(firsts) / forwards, 2),
           "ttft_ms_min": round(ttft[0] * 1e3, 1),
           "ttft_ms_p50": round(ttft[len(ttft) // 2] * 1e3, 1)}  # fmt: skip
    # SGLang's own forwards where it sent its stamps
    forwards = request_stamps.prefill_forwards(r["server_s"] for r in rows if "server_s" in r)
    if forwards:
        prompts = sum(f.prompts for f in forwards)
        out |= {"server_prompts": prompts, "server_prefill_forwards": len(forwards),
                "server_forward_ms_mean": round(
                    1e3 * statistics.fmean(f.seconds for f in forwards), 2)}  # fmt: skip
    return out


def fixed_steps(mode: str) -> int | None:
    """The draft steps of a fixed mode's windows (fixed2: 2), None for the others."""
    return int(mode[5:]) if re.fullmatch(r"fixed\d", mode) else None


def cost_files(raw: Path) -> dict[int, Path]:
    """The run's cost files by the prompt length they were measured at: spec-costs-8b.json at
    128 tokens, spec-costs-8b-inN.json at N."""
    found = {SHORT_PROMPT: raw / "spec-costs-8b.json"}
    for p in raw.glob("spec-costs-8b-in*.json"):
        m = re.fullmatch(r"spec-costs-8b-in(\d+)\.json", p.name)
        if m:
            found[int(m[1])] = p
    return {n: p for n, p in found.items() if p.exists()}


def _gpu(doc: dict[str, Any]) -> str | None:
    return ((doc.get("fingerprint") or {}).get("facts") or {}).get("gpu_model")


def label(raw: Path) -> tuple[str, bool]:
    """What the figures were measured on: the serving GPU (the daemon's first status) and the
    cost files' own fingerprints. Costs of different GPUs or SGLang releases in one report
    would predict windows from another machine: refused. A plan made from another GPU's costs
    is said in the label, and its predictions are not judged (False)."""
    seen = set()
    for p in cost_files(raw).values():
        d = json.loads(p.read_text())
        seen.add((d.get("sglang_version"), d.get("tp_size"), _gpu(d)))
    if len(seen) != 1:
        engines = sorted(map(str, seen))
        raise SystemExit(f"{raw}: cost files of different engines or GPUs: {engines}")
    version, tp, costs_gpu = seen.pop()
    status = raw / "status-first-start.json"
    served = _gpu(json.loads(status.read_text()).get("daemon") or {}) if status.exists() else None
    served = served or costs_gpu or "unknown GPU"
    text = f"SGLang {version}, TP {tp}, one {served}, dummy weights, accept length forced by SGLang"
    if costs_gpu and costs_gpu != served:
        text += f"; planned from costs measured on {costs_gpu} (predictions not judged)"
    return text, costs_gpu in (None, served)


def costs_at(raw: Path, n: int) -> int:
    """The prompt length of the cost file nearest `n` (a window is predicted from the costs
    of its own context: a pass at 1024 tokens costs more than at 128)."""
    files = cost_files(raw)
    if not files:
        raise SystemExit(f"{raw}: no spec-costs-8b*.json")
    return min(files, key=lambda at: (abs(at - n), at))


def costs_path(raw: Path, n: int) -> Path:
    return cost_files(raw)[costs_at(raw, n)]


def prefill_points(path: Path | None, n: int) -> dict[str, Any] | None:
    """The prefill points of `spec_sglang.py`'s prefill_points step (a `spec costs` file of the
    baseline and steps-0 trials at batch 1) for n-token windows, when given and of n tokens."""
    if path is None:
        return None
    data = json.loads(path.read_text())
    return data if (data.get("bench") or {}).get("input_len") == n else None


def _costs(
    raw: Path, n: int, got: dict, points: Path | None = None
) -> tuple[spec_costs.Costs, str | None]:
    """The cost file for n-token windows; its prefill from `points` where they were measured
    at n tokens (a cost file measured before its prefill points were); else, when it measured
    one prefill point per mode, the baseline's second from the run's one-client bench of
    the longer prompt."""
    data = json.loads(costs_path(raw, n).read_text())
    base = data.get("prefill_ms", {}).get("baseline") or {}
    longest = max((n for (m, c, n) in got if m == "baseline" and c == 1), default=None)
    note = None
    extra = prefill_points(points, n)
    if extra is not None:
        data = spec_costs.with_prefill_points(data, extra)
        note = f"prefill points from {points.name} (measured {extra.get('measured_at')})"
    elif len(base) == 1 and longest and str(longest) not in base:
        b = got[("baseline", 1, longest)]
        base[str(longest)] = b["ttft_ms"]["p50"]
        note = f"baseline prefill at {longest} tokens from bench-baseline-c1-in{longest}.json"
    tmp = Path(tempfile.mkdtemp()) / "costs.json"
    tmp.write_text(json.dumps(data))
    return spec_costs.from_file(tmp), note


def baseline_from_costs(raw: Path, got: dict, input_len: int | None = None) -> list[int]:
    """The baseline at 128-token prompts from spec costs' own baseline windows (bench at each
    batch size, unique prompts, 5 s) where the run served no baseline_c window there: the
    same server and client, one second shorter. The concurrencies taken from it (none where
    the report is of another prompt length)."""
    journal = raw / "spec-costs-8b.journal.jsonl"
    if not journal.exists():
        return []
    taken, prompt = [], SHORT_PROMPT
    for line in journal.read_text().splitlines():
        r = json.loads(line)
        if r.get("record") == "plan":
            prompt = int(r["plan"]["bench"]["input_len"])
        if r.get("record") != "window" or r.get("steps") != "baseline" or r["status"] != "ok":
            continue
        if input_len not in (None, prompt):
            continue
        key = ("baseline", int(r["batch_size"]), prompt)
        if key not in got:
            got[key] = {"output_tokens_per_second": r["tokens_per_second"],
                        "config": {"duration": r["window_s"]}, "from": journal.name}  # fmt: skip
            taken.append(key[1])
    return sorted(taken)


def prefix_cache(raw: Path) -> dict[str, int]:
    """SGLang's own count of the prefill batches that took tokens from its radix cache, over
    the run's engine logs: windows whose prompts repeat read a server that hardly prefills
    (bench's synthetic prompts are unique per request and per run since 2026-12-06)."""
    batches = cached = 0
    for log in raw.glob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            m = re.search(r"Prefill batch.*#new-token: (\d+), #cached-token: (\d+)", line)
            if m:
                batches += 1
                cached += int(m[2]) > 0
    return {"prefill_batches": batches, "with_cached_tokens": cached}


def served_config(raw: Path, n: int) -> dict[str, Any] | None:
    """The adaptive config the run served at n-token prompts (its plan.json), when it kept it:
    a plan made later may differ, and the served windows ran this one."""
    path = raw / "plan.json"
    if not path.exists():
        return None
    return (json.loads(path.read_text()).get(str(n)) or {}).get("adaptive_config_json")


def window_prediction(
    mode: str,
    c: int,
    costs: spec_costs.Costs,
    acc: Acceptance,
    n: int,
    config: dict[str, Any],
    window_s: float,
    steps: int,
) -> float:
    """What a bench window of `window_s` at `c` clients measures by the serving model (every
    client starting at once after the warm-up, as bench's do; `serving.serve(window_s=)`),
    the mean over the plan's window seeds: a short window at many clients holds the first
    round's prefills, which the long run spreads out."""
    wl = serving.Workload(n, OUTPUT_LEN)
    return serving.mean_tokens_per_second(serving.window_runs(
        mode, c, costs, wl, acc, config=config, steps=steps, window_s=window_s,
        seeds=range(spec_plan.WINDOW_SEEDS)))  # fmt: skip


def pool(
    got: dict[tuple[str, int, int], dict[str, Any]],
    replicates: list[Path],
    input_len: int | None,
) -> list[dict[str, Any]]:
    """Fold the replicate runs' windows into `got`: a window served in several runs (other
    cards, other server instances) is read as the mean of its runs' tok/s, and each run's
    figure is kept beside it. One 6-s window at a near-tie cannot tell two configs apart:
    the same config on two H100s differed by up to 18% (2026-12-07). The windows served in
    more than one run, with their spread (max / min)."""
    runs: dict[tuple[str, int, int], list[float]] = {
        k: [b["output_tokens_per_second"]] for k, b in got.items()
    }
    for rep in replicates:
        for k, b in benches(rep).items():
            if input_len not in (None, k[2]):
                continue
            runs.setdefault(k, []).append(b["output_tokens_per_second"])
            got.setdefault(k, b)
    spread = []
    for k, tok_s in sorted(runs.items()):
        if len(tok_s) < 2:
            continue
        got[k] = {**got[k], "output_tokens_per_second": statistics.fmean(tok_s), "runs": tok_s}
        spread.append({"mode": k[0], "concurrency": k[1], "input_len": k[2],
                       "runs_tok_s": [round(t, 1) for t in tok_s],
                       "spread": round(max(tok_s) / min(tok_s), 4)})  # fmt: skip
    return spread


def report(
    raw: Path,
    histogram: Path | None = None,
    input_len: int | None = None,
    points: Path | None = None,
    replicates: list[Path] | None = None,
) -> dict[str, Any]:
    """The figures; `histogram`: the forced histogram the plan was made from when the raw dir
    lacks it (a call that planned from a carried one); `input_len`: that prompt length's
    windows only (a warm machine's raw dir holds every call's); `points`: prefill points
    measured apart (`prefill_points`), for a cost file measured without them; `replicates`:
    raw dirs of other runs of the same windows (`pool`), read beside RAW's."""
    replicates = replicates or []
    hist = json.loads((histogram or raw / "accept-histogram-forced-3.json").read_text())
    acc = Acceptance.from_requests([hist["histogram"]], int(hist["steps"]))
    got = {k: b for k, b in benches(raw).items() if input_len in (None, k[2])}
    base_from_costs = baseline_from_costs(raw, got, input_len)
    spread = pool(got, replicates, input_len)
    prompts = sorted({n for (_m, _c, n) in got})
    cs = sorted({c for (_m, c, _n) in got})
    rows, plans, used = [], {}, {}
    measured_on, same_gpu = label(raw)
    notes = {}
    for n in prompts:
        costs, notes[n] = _costs(raw, n, got, points)
        used[n] = costs_path(raw, n)
        p = spec_plan.make_plan(acc, costs, workload=serving.Workload(n, OUTPUT_LEN),
                                concurrencies=cs)  # fmt: skip
        d = p.to_dict()
        ran = served_config(raw, n)
        plans[n] = {"adaptive_config": d["adaptive_config_json"], "why": d["why"],
                    "served_config": ran}  # fmt: skip
        for (mode, c, nn), b in sorted(got.items()):
            if nn != n or mode not in PREDICTED_MODE:
                continue
            k = fixed_steps(mode) or acc.steps
            # the plan's own long-run figure, where it predicts this mode (eagle at its steps)
            long_run = (d["predictions"][str(c)][PREDICTED_MODE[mode]]["tokens_per_second"]
                        if k == acc.steps else None)  # fmt: skip
            # the config that served the window: its own record, else the run's plan.json
            own = ((b.get("served_by") or {}).get("server") or {}).get("adaptive_config")
            cfg = own or (ran if mode == "adaptive3" and ran else d["adaptive_config_json"])
            pred = window_prediction(PREDICTED_MODE[mode], c, costs, acc, n, cfg,
                                     float(b["config"]["duration"]), k)  # fmt: skip
            served = b["output_tokens_per_second"]
            at = costs_at(raw, n)  # costs of another context: shown, not judged
            judged = abs(served / pred - 1) <= GOAL_PREDICTION if at == n and same_gpu else None
            rows.append({"mode": mode, "concurrency": c, "input_len": n, "costs_at": at,
                         "predicted_tok_s": round(pred, 1), "served_tok_s": round(served, 1),
                         "served_over_predicted": round(served / pred, 4),
                         **({"served_runs": b["runs"]} if "runs" in b else {}),
                         "within_goal": judged,
                         "predicted_long_run_tok_s": long_run and round(long_run, 1),
                         "tagged": b.get("tagged"),
                         "prefill_batching": b.get("timeline"),
                         "accept_length": b.get("accept_length")})  # fmt: skip
    between = []
    for c in cs:
        base = got.get(("baseline", c, SHORT_PROMPT))
        fixed = {m: got[(m, c, SHORT_PROMPT)] for m in ("fixed1", "fixed2", "fixed3")
                 if (m, c, SHORT_PROMPT) in got}  # fmt: skip
        ada = got.get(("adaptive3", c, SHORT_PROMPT))
        if fixed:  # the baseline is a candidate where it was served there
            best = max([*([("baseline", base)] if base else []), *fixed.items()],
                       key=lambda kv: kv[1]["output_tokens_per_second"])  # fmt: skip
            r = ada and ada["output_tokens_per_second"] / best[1]["output_tokens_per_second"]
            between.append({"concurrency": c, "best_fixed": best[0],
                            "best_fixed_tok_s": round(best[1]["output_tokens_per_second"], 1),
                            "fixed_measured": sorted(fixed),
                            "adaptive_tok_s": ada and round(ada["output_tokens_per_second"], 1),
                            "ratio_to_best_fixed": r and round(r, 4),
                            "within_goal": r >= GOAL_VS_BASELINE if r else None,
                            "goal": "adaptive >= 0.97x the better fixed mode"})  # fmt: skip
    lower = []
    for c in cs:
        a2, base = got.get(("adaptive2", c, SHORT_PROMPT)), got.get(("baseline", c, SHORT_PROMPT))
        if a2 and base:
            r = a2["output_tokens_per_second"] / base["output_tokens_per_second"]
            lower.append({"concurrency": c, "ratio_to_baseline": round(r, 4),
                          "within_goal": r >= GOAL_VS_BASELINE,
                          "goal": "adaptive at forced 2.0 >= 0.97x baseline"})  # fmt: skip
    ratios = [r["served_over_predicted"] for r in rows if r["within_goal"] is not None]
    return {
        "kind": "decision-tools-real-sglang",
        "label": measured_on,
        "costs": {
            str(n): {
                "file": p.name,
                "source": json.loads(p.read_text()).get("source"),
                **({"prefill": notes[n]} if notes.get(n) else {}),
            }
            for n, p in used.items()
        },
        "forced_accept_histogram": hist,
        "plans": plans,
        "prediction_vs_served": rows,
        "prediction_goal": f"served within {GOAL_PREDICTION:.0%} of the prediction",
        "prediction_summary": {
            "n": len(ratios),
            "within_goal": sum(bool(r["within_goal"]) for r in rows),
            "not_judged": sum(r["within_goal"] is None for r in rows),
            "min_ratio": min(ratios, default=None),
            "max_ratio": max(ratios, default=None),
        },
        "between_keys": between,
        "lower_acceptance": lower,
        "baseline_from_costs_windows": base_from_costs,
        **(
            {"replicates": {"runs": [str(raw), *map(str, replicates)], "windows": spread}}
            if replicates
            else {}
        ),
        "prefix_cache": prefix_cache(raw),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("raw")
    ap.add_argument("--replicate", action="append", default=[], metavar="RAW",
                    help="another run's raw dir: its windows are pooled with RAW's (the "
                    "mean of the runs; the costs and plan stay RAW's)")  # fmt: skip
    ap.add_argument("--out", default="")
    ap.add_argument("--histogram", default="", help="the forced histogram, if not in RAW_DIR")
    ap.add_argument("--input-len", type=int, default=None, help="this prompt length only")
    ap.add_argument("--prefill-points", default="", help="prefill-points-inN.json of a "
                    "prefill_points step: the prefill of N-token windows' costs")  # fmt: skip
    a = ap.parse_args()
    rep = report(Path(a.raw), Path(a.histogram) if a.histogram else None, a.input_len,
                 Path(a.prefill_points) if a.prefill_points else None,
                 [Path(r) for r in a.replicate])  # fmt: skip
    text = json.dumps(rep, indent=1) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    for r in rep["prediction_vs_served"]:
        why = (f"costs at {r['costs_at']}" if r["costs_at"] != r["input_len"]
               else "costs of another GPU")  # fmt: skip
        off = {True: "", False: "  OFF", None: f"  ({why}: not judged)"}[r["within_goal"]]
        print(f"{r['mode']:>9} c={r['concurrency']:>2} in={r['input_len']:>4}: predicted "
              f"{r['predicted_tok_s']:8.1f}  served {r['served_tok_s']:8.1f}  "
              f"x{r['served_over_predicted']:.3f}{off}")  # fmt: skip
    print(json.dumps(rep["prediction_summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
