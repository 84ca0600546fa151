"""The `--derive-tuner NAME` path of `fastverifyctl preflight`: options in, table and
profile out, progress on stderr, `--json` report on stdout, exit codes as preflight's.

Writes NAME.tuner.csv and NAME.env (extends the base profile, names the table) into the
first user profile directory unless `--tuner-dir` says otherwise, so `fastverifyctl
profile set NAME` applies it like any other profile; `--nccl-csv PATH` also writes the
table in the CSV format of NCCL's own example tuner plugin (fastverify.tuner.nccl_csv).
Measurements are kept in
`<state dir>/derive-tuner/NAME/` so an interrupted run resumes (`--fresh` starts over).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastverify.durable import atomic_write_text
from fastverify.experiments.derive_tuner import derive as dt


def run_cli(
    name: str,
    *,
    base: str,
    nproc: int | None,
    sizes: Sequence[int],
    rounds: int,
    channels: Sequence[int],
    extra_env: Mapping[str, str],
    tuner_dir: str | None,
    fresh: bool,
    backend: str,
    python: str,
    timeout_s: float,
    fake_costs: str,
    echo: Callable[[str], None],
    nccl_csv: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Run the derivation; returns (JSON-able report, human summary lines).
    Raises dt.DeriveError / preflight.PreflightError for the caller to map to exits."""
    from fastverify import paths
    from fastverify.experiments.preflight import hostcheck as pf_host
    from fastverify.experiments.preflight import inputs as pf_inputs
    from fastverify.profiles.effective import effective_env
    from fastverify.profiles.store import name_problem
    from fastverify.tuner.plugin import find_plugin

    if problem := name_problem(name):
        raise pf_host.PreflightError(f"profile {name!r}: {problem}")
    if backend == "nccl" and not pf_host.torch_available(python):
        raise pf_host.TorchMissing(
            "--derive-tuner needs PyTorch with CUDA in the ranks' interpreter"
        )
    world = nproc or (pf_host.visible_gpus() if backend == "nccl" else 2)
    if world < 2:
        raise dt.DeriveError(
            f"{world} GPU(s) visible: a tuner is derived with the rank count it will serve "
            "(2 or more; pass --nproc)"
        )
    base_profile = pf_inputs.load_profiles([base])[0]
    env = effective_env(base_profile, extra=dict(extra_env) or None)
    workdir = paths.state_dir() / "derive-tuner" / name
    if fresh and workdir.exists():
        shutil.rmtree(workdir)
    cfg = dt.DeriveConfig(
        world=world, sizes=tuple(sizes), rounds=rounds, channels=tuple(channels),
        backend=backend, python=python, timeout_s=timeout_s, workdir=str(workdir),
        fake_costs=fake_costs,
    )  # fmt: skip
    report = dt.derive(env, cfg, find_plugin() if backend == "nccl" else None, echo)
    out_dir = Path(tuner_dir) if tuner_dir else paths.user_profile_dirs()[0]
    table, profile = dt.write_outputs(report, name, out_dir, base_profile.name)
    doc = {k: v for k, v in report.items() if k != "table_rows"}
    doc.update(table=str(table), profile=str(profile), workdir=str(workdir))
    lines = [f"tuner table: {table} ({len(report['rows'])} rows)", f"profile:     {profile}"]
    for d in report["decisions"]:
        best, dflt = d.get("best_us"), d.get("default_us")
        lines.append(
            f"  {d['bytes']:>10} B  NCCL {d.get('nccl_default') or '?':<12} "
            + (f"{dflt:8.1f} us" if dflt is not None else "     n/a   ")
            + f"  best {d.get('best') or '-':<16} "
            + (f"{best:8.1f} us" if best is not None else "     n/a")
            + ("  (NCCL kept)" if d.get("keep_default") else "  -> row")
        )
    if nccl_csv:
        doc["nccl_csv"] = write_nccl_csv(table, Path(nccl_csv))
        lines.append(f"NCCL's tuner CSV: {nccl_csv} ({doc['nccl_csv']['rows']} rows)")
        lines += [f"  note: {n}" for n in doc["nccl_csv"]["notes"]]
    lines.append(f"apply with: fastverifyctl profile set {name}")
    return json.loads(json.dumps(doc, default=str)), lines


def write_nccl_csv(table: Path, out: Path) -> dict[str, Any]:
    """`table` (fastverify's format) as NCCL's example-plugin CSV at `out`; what was written
    and the notes on what NCCL's format could not carry."""
    from fastverify.tuner import nccl_csv
    from fastverify.tuner.table import check_table

    check = check_table(table)
    text, notes = nccl_csv.export(
        check.rows,
        [f"from {table.name}, fastverify's table", "load: NCCL_TUNER_PLUGIN=<NCCL's example "
         "plugin, 2.29+> NCCL_TUNER_CONFIG_FILE=<this file>"],
    )  # fmt: skip
    atomic_write_text(out, text, mode=0o644)
    rows = sum(1 for ln in text.splitlines() if ln and not ln.startswith("#"))
    return {"path": str(out), "rows": rows, "notes": notes}
