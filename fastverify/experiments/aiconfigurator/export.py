"""Export this host's measured collectives into AIConfigurator's database layout, as a
custom system its own loader reads (`--systems-paths DIR,default --system NAME`).

AIConfigurator 0.12.0's layout (aiconfigurator_core/systems/, read by its compiled engine,
`perf_database/table_view.rs`):

    <root>/<system>.yaml                      the SKU: gpu (flops, memory), node, misc.nccl_version
    <root>/data/<system>/comm/nccl/<nccl version>/nccl_perf.parquet
        framework, version, device, op_name (all_reduce, all_gather, reduce_scatter,
        alltoall), kernel_source (NCCL), nccl_dtype (half, int8), num_gpus,
        message_size (ELEMENTS of nccl_dtype: 4096 half = 8 KiB), latency (ms)
    <root>/data/<system>/comm/sglang/<sglang version>/custom_allreduce_perf.parquet
        ... allreduce_dtype (bfloat16), num_gpus, message_size (elements), latency (ms),
        backend (sglang_graph | sglang_eager): what SGLang's TP all-reduce costs; the models'
        CustomAllReduce ops read it
    <root>/data/<system>/<op family>/...      gemm, attention, moe, mla, ...: per-kernel tables
    each version directory has a collection_meta.yaml (schema_version, provenance, runtime,
    tables: {name: {status}}).

What is exported: fastverify preflight's all-reduce per size and rank count of one profile
(NCCL's own choice: nccl-default), in CUDA graphs (per op, graph of N all-reduces: the
`sglang_graph` rows) and eager (the `sglang_eager` rows), both tables, `provenance:
collected`. The compute tables are the base SKU's own (a symlink per op family: AIC's kernel
data measured by NVIDIA on that GPU); fastverify's rehearse measures whole forwards, not
AIConfigurator's per-kernel (m, n, k) cells, so its compute is set beside AIC's prediction
(compare.py), not written into kernel tables. Rows of the base SKU's tables that fastverify
did not measure (other collectives, rank counts) are kept, marked by their own
`framework`/`version` columns.

Runs in AIConfigurator's venv (scripts/aiconfigurator-venv.sh: pandas, pyarrow, yaml); the
CLI builds the spec here and hands it over as JSON:

    python -m fastverify.experiments.aiconfigurator.export SPEC.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"half": 2, "bfloat16": 2, "int8": 1}
SGLANG_DB_VERSION = "0.5.14"  # the sglang slot AIConfigurator 0.12.0 queries ("current")


def allreduce_rows(report: Mapping[str, Any], profile: str = "nccl-default") -> list[dict]:
    """[{num_gpus, bytes, graph_ms, eager_ms}] from a preflight report (one profile)."""
    prof = next((p for p in report["profiles"] if p["profile"] == profile), None)
    if prof is None:
        names = ", ".join(p["profile"] for p in report["profiles"])
        raise ValueError(f"no profile {profile!r} in the preflight report ({names})")
    out = []
    for s in prof["sizes"]:
        graph = ((s.get("graph") or {}).get("batch") or {}).get("per_op_p50_us")
        eager = ((s.get("eager") or {}).get("batch") or {}).get("per_op_mean_us")
        if graph is None and eager is None:
            continue
        out.append(
            {
                "num_gpus": int(report["world_size"]),
                "bytes": int(s["bytes"]),
                "graph_ms": graph / 1000 if graph is not None else None,
                "eager_ms": eager / 1000 if eager is not None else None,
                "nccl_choice": f"{s.get('nccl_algo')}/{s.get('nccl_proto')}",
            }
        )
    return out


def spec_from_preflight(
    report: Mapping[str, Any],
    *,
    name: str,
    base_system: str,
    source: str,
    profile: str = "nccl-default",
) -> dict[str, Any]:
    """The export spec (JSON) for one preflight report: what `write` needs."""
    nccl = str(report.get("nccl_version") or "unknown").split("+")[0]
    return {
        "name": name,
        "base_system": base_system,
        "device": report.get("gpu"),
        "nccl_version": nccl,
        "num_gpus_per_node": int(report["world_size"]),
        "source": source,
        "profile": profile,
        "rows": allreduce_rows(report, profile),
    }


def _meta(framework: str, version: str, table: str, source: str) -> str:
    return (
        "# written by fastverify.experiments.aiconfigurator.export\n"
        f"# from: {source}\n"
        "schema_version: 1\n"
        "provenance: collected\n"
        f"runtime:\n  framework: {framework}\n  version: {version}\n"
        f"tables:\n  {table}:\n    status: complete\n"
    )


def write(spec: Mapping[str, Any], out_root: Path) -> dict[str, Any]:
    """Write the custom system under `out_root` (a systems root); returns what was written.
    Needs AIConfigurator's venv (pandas, pyarrow, yaml, aiconfigurator_core)."""
    import importlib.resources as res

    import pandas as pd
    import yaml

    base_root = Path(str(res.files("aiconfigurator_core") / "systems"))
    base_yaml = yaml.safe_load((base_root / f"{spec['base_system']}.yaml").read_text())
    base_data = base_root / base_yaml["data_dir"]
    name = spec["name"]
    data = out_root / "data" / name
    rows: Sequence[Mapping[str, Any]] = spec["rows"]
    ngpus = {r["num_gpus"] for r in rows}
    # the SKU: the base's GPU, this host's GPU count and NCCL version
    sku = dict(base_yaml)
    sku["data_dir"] = f"data/{name}"
    sku["node"] = {**base_yaml["node"], "num_gpus_per_node": spec["num_gpus_per_node"]}
    sku["misc"] = {**base_yaml.get("misc", {}), "nccl_version": spec["nccl_version"]}
    out_root.mkdir(parents=True, exist_ok=True)
    (out_root / f"{name}.yaml").write_text(
        f"# fastverify export: {spec['base_system']}'s GPU, this host's collectives\n"
        f"# ({spec['source']}, profile {spec['profile']})\n" + yaml.safe_dump(sku, sort_keys=False)
    )
    data.mkdir(parents=True, exist_ok=True)
    for fam in sorted(p.name for p in base_data.iterdir() if p.is_dir() and p.name != "comm"):
        link = data / fam
        if not link.exists():
            link.symlink_to(base_data / fam, target_is_directory=True)
    written: dict[str, Any] = {"system": str(out_root / f"{name}.yaml"), "tables": {}}
    # NCCL: this host's all_reduce rows; the base's other rows kept
    base_nccl_dir = base_data / "comm" / "nccl" / str(base_yaml["misc"]["nccl_version"])
    base_nccl = pd.read_parquet(base_nccl_dir / "nccl_perf.parquet")
    keep = base_nccl[~((base_nccl.op_name == "all_reduce") & base_nccl.num_gpus.isin(ngpus))]
    ours = pd.DataFrame(
        [
            {
                "framework": "fastverify",
                "version": spec["nccl_version"],
                "device": spec["device"],
                "op_name": "all_reduce",
                "kernel_source": "NCCL",
                "nccl_dtype": "half",
                "num_gpus": r["num_gpus"],
                "message_size": r["bytes"] // DTYPE_BYTES["half"],
                "latency": r["graph_ms"],
            }
            for r in rows
            if r["graph_ms"] is not None
        ]
    )
    nccl = pd.concat([keep.astype({"version": str}), ours], ignore_index=True)
    nccl_dir = data / "comm" / "nccl" / spec["nccl_version"]
    nccl_dir.mkdir(parents=True, exist_ok=True)
    nccl.to_parquet(nccl_dir / "nccl_perf.parquet", index=False)
    (nccl_dir / "collection_meta.yaml").write_text(
        _meta("nccl", spec["nccl_version"], "nccl_perf", spec["source"])
    )
    written["tables"]["nccl_perf"] = {"rows": len(nccl), "fastverify_rows": len(ours)}
    # SGLang's TP all-reduce: graph and eager from the same measurement
    base_ar_path = base_data / "comm" / "sglang" / SGLANG_DB_VERSION
    base_ar = pd.read_parquet(base_ar_path / "custom_allreduce_perf.parquet")
    keep = base_ar[~base_ar.num_gpus.isin(ngpus)]
    ar = []
    for r in rows:
        for backend, key in (("sglang_graph", "graph_ms"), ("sglang_eager", "eager_ms")):
            if r[key] is None:
                continue
            ar.append(
                {
                    "framework": "fastverify",
                    "version": SGLANG_DB_VERSION,
                    "device": spec["device"],
                    "op_name": "all_reduce",
                    "kernel_source": f"fastverify_preflight_{spec['profile']}_{key[:-3]}",
                    "allreduce_dtype": "bfloat16",
                    "num_gpus": r["num_gpus"],
                    "message_size": r["bytes"] // DTYPE_BYTES["bfloat16"],
                    "latency": r[key],
                    "backend": backend,
                }
            )
    allreduce = pd.concat([keep, pd.DataFrame(ar)], ignore_index=True)
    ar_dir = data / "comm" / "sglang" / SGLANG_DB_VERSION
    ar_dir.mkdir(parents=True, exist_ok=True)
    allreduce.to_parquet(ar_dir / "custom_allreduce_perf.parquet", index=False)
    (ar_dir / "collection_meta.yaml").write_text(
        _meta("sglang", SGLANG_DB_VERSION, "custom_allreduce_perf", spec["source"])
    )
    written["tables"]["custom_allreduce_perf"] = {"rows": len(allreduce),
                                                  "fastverify_rows": len(ar)}  # fmt: skip
    for fw in sorted(p.name for p in (base_data / "comm").iterdir()):
        if fw not in ("nccl", "sglang") and not (data / "comm" / fw).exists():
            (data / "comm" / fw).symlink_to(base_data / "comm" / fw, target_is_directory=True)
    return written


def main(argv: list[str]) -> None:
    spec = json.loads(Path(argv[1]).read_text())
    print(json.dumps(write(spec, Path(argv[2])), indent=2))


if __name__ == "__main__":
    main(sys.argv)
