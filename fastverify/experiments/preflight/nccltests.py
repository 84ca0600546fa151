"""Read nccl-tests `all_reduce_perf` output and set it side by side with a preflight report.

`parse(text)` reads one or more concatenated `all_reduce_perf` runs (each starts with
`# nccl-tests version ...` and has a `# nThread .. nGpus .. graph: N ..` line) and returns
one row per measured size: bytes, count, type, redop, the number of ranks, the CUDA-graph
launch count (`-G`; 0 = eager), and for out-of-place and in-place: time (us), algbw and
busbw (GB/s), #wrong.

`compare(preflight_profile, rows)` pairs those rows with a preflight profile's sizes by
byte count. Timed the same way as nccl-tests (back-to-back calls between one event pair;
a graph of many all-reduces): preflight's batched eager mean against nccl-tests' eager
in-place time (preflight reduces in place), preflight's batched graph per-op p50 against
the `-G` in-place time, and the ratio preflight / nccl-tests. Preflight's per-call p50s
(an event pair around each call, so host overhead shows when the GPU waits) are listed too.

`matrix(pairs)` builds the whole side-by-side record of several runs (profiles x paths such
as NVLink and P2P off): one row per (profile, size, mode, path) with a numeric `ratio`, and
a summary per (profile, path, mode) with the ratio range and the sizes outside 10%.

Command lines: `python -m fastverify.experiments.preflight.nccltests PREFLIGHT.json NCCLTESTS.txt
[--profile NAME]` prints the comparison of one profile as JSON;
`python -m fastverify.experiments.preflight.nccltests matrix OUT.json
PATH:PROFILE:PREFLIGHT.json:NCCLTESTS.txt ...` writes the matrix.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

_HEADER = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+).*?graph:\s*(\d+)")
_VERSION = re.compile(r"#\s*nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)")
_RANK = re.compile(r"#\s+Rank\s+\d+ .* device\s+\d+ \[[^\]]*\]\s+(.+?)\s*$")


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "N/A"


def parse(text: str) -> dict[str, Any]:
    """Rows of every run in `text`, plus the version and GPU names seen."""
    rows: list[dict[str, Any]] = []
    version: dict[str, str] | None = None
    gpus: list[str] = []
    nranks, graph = 1, 0
    for line in text.splitlines():
        if m := _VERSION.match(line):
            version = {"nccl_tests": m.group(1), "nccl_headers": m.group(2),
                       "nccl_library": m.group(3)}  # fmt: skip
            gpus = []
            continue
        if m := _HEADER.match(line):
            nranks = int(m.group(1)) * int(m.group(2))
            graph = int(m.group(3))
            continue
        if m := _RANK.match(line):
            gpus.append(m.group(1))
            nranks = max(nranks, len(gpus))
            continue
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split()
        if len(parts) < 13 or not parts[0].isdigit():
            continue
        rows.append(
            {
                "bytes": int(parts[0]),
                "count": int(parts[1]),
                "type": parts[2],
                "redop": parts[3],
                "nranks": nranks,
                "graph_launches": graph,
                "gpu": gpus[0] if gpus else None,
                "out_of_place": {
                    "time_us": _num(parts[5]),
                    "algbw_gbs": _num(parts[6]),
                    "busbw_gbs": _num(parts[7]),
                    "wrong": parts[8],
                },
                "in_place": {
                    "time_us": _num(parts[9]),
                    "algbw_gbs": _num(parts[10]),
                    "busbw_gbs": _num(parts[11]),
                    "wrong": parts[12],
                },
            }
        )
    return {"version": version, "rows": rows}


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def compare(profile: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per preflight size: preflight p50s, nccl-tests times, and their ratios."""
    eager = {r["bytes"]: r for r in rows if r["graph_launches"] == 0}
    graph = {r["bytes"]: r for r in rows if r["graph_launches"] > 0}
    out = []
    for size in profile["sizes"]:
        nbytes = size["bytes"]
        e, g = eager.get(nbytes), graph.get(nbytes)
        pf_eager = (size["eager"].get("batch") or {}).get("per_op_mean_us")
        pf_graph = (size["graph"].get("batch") or {}).get("per_op_p50_us")
        nt_eager = e["in_place"]["time_us"] if e else None
        nt_graph = g["in_place"]["time_us"] if g else None
        r_e, r_g = _ratio(pf_eager, nt_eager), _ratio(pf_graph, nt_graph)
        out.append(
            {
                "tokens": size.get("tokens"),
                "bytes": nbytes,
                "preflight_eager_per_call_p50_us": size["eager"].get("p50_us"),
                "preflight_graph_per_replay_p50_us": size["graph"].get("p50_us"),
                "preflight_eager_batch_us": pf_eager,
                "preflight_graph_batch_us": pf_graph,
                "nccl_tests_eager_in_place_us": nt_eager,
                "nccl_tests_eager_out_of_place_us": e["out_of_place"]["time_us"] if e else None,
                "nccl_tests_graph_in_place_us": nt_graph,
                "nccl_tests_graph_out_of_place_us": g["out_of_place"]["time_us"] if g else None,
                "ratio_eager": r_e,
                "ratio_graph": r_g,
                "within_10pct_eager": None if r_e is None else abs(r_e - 1.0) <= 0.10,
                "within_10pct_graph": None if r_g is None else abs(r_g - 1.0) <= 0.10,
            }
        )
    return out


MODES = {
    # mode: (preflight figure, nccl-tests graph launches > 0, what is compared)
    "eager": ("preflight_eager_batch_us", False, "back-to-back eager mean per op vs "
              "nccl-tests eager in-place time"),
    "graph": ("preflight_graph_batch_us", True, "per op inside one CUDA graph vs "
              "nccl-tests -G in-place time"),
}  # fmt: skip


def matrix_rows(
    profile: dict[str, Any], rows: list[dict[str, Any]], path: str
) -> list[dict[str, Any]]:
    """One row per (size, mode) of one preflight profile against one nccl-tests run."""
    out = []
    algo = {s["bytes"]: (s.get("nccl_algo"), s.get("nccl_proto")) for s in profile["sizes"]}
    counts = {s["bytes"]: s.get("counts") for s in profile["sizes"]}
    for c in compare(profile, rows):
        for mode, (key, graphed, _) in MODES.items():
            nt = c["nccl_tests_graph_in_place_us" if graphed else "nccl_tests_eager_in_place_us"]
            pf = c[key]
            ratio = _ratio(pf, nt)
            out.append(
                {
                    "profile": profile["profile"],
                    "path": path,
                    "mode": mode,
                    "tokens": c["tokens"],
                    "bytes": c["bytes"],
                    "preflight_us": pf,
                    "nccl_tests_us": nt,
                    "ratio": ratio,
                    "within_10pct": None if ratio is None else abs(ratio - 1.0) <= 0.10,
                    "preflight_minus_nccl_tests_us": None if pf is None or nt is None
                    else pf - nt,
                    "nccl_tests_out_of_place_us": c[
                        "nccl_tests_graph_out_of_place_us" if graphed
                        else "nccl_tests_eager_out_of_place_us"
                    ],
                    "preflight_per_call_p50_us": c[
                        "preflight_graph_per_replay_p50_us" if graphed
                        else "preflight_eager_per_call_p50_us"
                    ],
                    "nccl_algo": algo[c["bytes"]][0],
                    "nccl_proto": algo[c["bytes"]][1],
                    "preflight_counts": counts[c["bytes"]],
                }
            )  # fmt: skip
    return out


def matrix(pairs: list[tuple[str, str, dict[str, Any], str]]) -> dict[str, Any]:
    """`pairs`: (path label, profile name, preflight report, nccl-tests output text)."""
    rows: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    for path, name, report, text in pairs:
        prof = next((p for p in report["profiles"] if p["profile"] == name), None)
        if prof is None:
            raise ValueError(f"no profile {name!r} in the preflight report for {path}")
        parsed = parse(text)
        if not parsed["rows"]:
            raise ValueError(f"no all_reduce_perf rows in the nccl-tests output for {path}/{name}")
        meta.setdefault("world_size", report.get("world_size"))
        meta.setdefault("gpu", report.get("gpu"))
        meta.setdefault("nccl_version", report.get("nccl_version"))
        meta.setdefault("torch", report.get("torch"))
        meta.setdefault("nccl_tests", parsed["version"])
        rows.extend(matrix_rows(prof, parsed["rows"], path))
    summary = []
    for key in sorted({(r["profile"], r["path"], r["mode"]) for r in rows}):
        group = [r for r in rows if (r["profile"], r["path"], r["mode"]) == key]
        ratios = [r["ratio"] for r in group if r["ratio"] is not None]
        summary.append(
            {
                "profile": key[0],
                "path": key[1],
                "mode": key[2],
                "sizes": len(group),
                "ratio_min": min(ratios) if ratios else None,
                "ratio_max": max(ratios) if ratios else None,
                "all_within_10pct": bool(ratios) and len(ratios) == len(group)
                and all(r["within_10pct"] for r in group),
                "outside_10pct_bytes": [r["bytes"] for r in group if r["within_10pct"] is False],
                "missing_bytes": [r["bytes"] for r in group if r["ratio"] is None],
            }
        )  # fmt: skip
    return {
        **meta,
        "ratio": "preflight / nccl-tests (in-place times)",
        "modes": {m: v[2] for m, v in MODES.items()},
        "rows": rows,
        "summary": summary,
    }


def main_matrix(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="preflight vs nccl-tests, every profile and path")
    p.add_argument("out")
    p.add_argument("pairs", nargs="+", metavar="PATH:PROFILE:PREFLIGHT.json:NCCLTESTS.txt")
    args = p.parse_args(argv)
    pairs = []
    for item in args.pairs:
        parts = item.split(":", 3)
        if len(parts) != 4:
            p.error(f"expected PATH:PROFILE:PREFLIGHT.json:NCCLTESTS.txt, got {item!r}")
        path, name, pf, nt = parts
        try:
            with open(pf, encoding="utf-8") as fh:
                report = json.load(fh)
            with open(nt, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, ValueError) as exc:
            print(f"{item}: {exc}", file=sys.stderr)
            return 2
        pairs.append((path, name, report, text))
    try:
        doc = matrix(pairs)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "matrix":
        return main_matrix(argv[1:])
    p = argparse.ArgumentParser(description="preflight vs nccl-tests, side by side (JSON)")
    p.add_argument("preflight_json")
    p.add_argument("nccl_tests_output")
    p.add_argument("--profile", default="nccl-default")
    args = p.parse_args(argv)
    with open(args.preflight_json, encoding="utf-8") as fh:
        report = json.load(fh)
    with open(args.nccl_tests_output, encoding="utf-8") as fh:
        parsed = parse(fh.read())
    prof = next((x for x in report["profiles"] if x["profile"] == args.profile), None)
    if prof is None:
        print(f"no profile {args.profile!r} in {args.preflight_json}", file=sys.stderr)
        return 2
    json.dump(
        {
            "profile": args.profile,
            "world_size": report.get("world_size"),
            "gpu": report.get("gpu"),
            "nccl_version": report.get("nccl_version"),
            "nccl_tests": parsed["version"],
            "sizes": compare(prof, parsed["rows"]),
        },
        sys.stdout,
        indent=1,
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
