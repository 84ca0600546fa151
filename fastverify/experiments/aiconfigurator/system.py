"""Feed AIConfigurator this host: a preflight report becomes a custom system in its database
layout (fastverify.experiments.aiconfigurator.export), written by AIConfigurator's own
venv (it needs pandas/pyarrow; scripts/aiconfigurator-venv.sh makes one). The command:

    fastverifyctl aiconfigurator export PREFLIGHT.json --name NAME --out SYSTEMS_DIR \\
        [--base-system h200_sxm] [--profile nccl-default] --python AIC_PYTHON
    aiconfigurator cli estimate --systems-paths SYSTEMS_DIR,default --system NAME ...
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from fastverify.experiments.aiconfigurator.export import spec_from_preflight

REPO = Path(__file__).resolve().parents[3]


def export(
    report_path: Path, name: str, out: Path, python: str, base: str, profile: str
) -> dict[str, Any]:
    """Write system NAME under `out` from the preflight report; returns what was written.
    Raises ValueError (bad report or name) and RuntimeError (the venv's export failed)."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"--name {name!r}: letters, digits and _ only (a system file name)")
    try:
        report = json.loads(report_path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{report_path}: cannot read the preflight report ({exc})") from None
    if not isinstance(report, dict) or "profiles" not in report or "world_size" not in report:
        raise ValueError(f"{report_path}: not a preflight report (no profiles / world_size)")
    spec = spec_from_preflight(report, name=name, base_system=base, source=str(report_path),
                               profile=profile)  # fmt: skip
    if not spec["rows"]:
        raise ValueError(f"{report_path}: profile {profile} has no measured sizes")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(spec, fh)
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.run(
            [python, "-m", "fastverify.experiments.aiconfigurator.export", fh.name, str(out)],
            capture_output=True, text=True, env=env, check=False, timeout=600,
        )  # fmt: skip
    finally:
        os.unlink(fh.name)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"the export in {python} failed: {last}")
    return json.loads(proc.stdout)
