"""`doctor` findings about tuner plugins: a NCCL_TUNER_PLUGIN (or the example tuner's
NCCL_TUNER_CONFIG_FILE) set outside the profiles, and whether fastverify's plugin is built.

NCCL loads the tuner named by NCCL_TUNER_PLUGIN for every communicator of a process
that has it set, from the environment or an nccl.conf (conf files fill variables the
environment leaves unset). Set there, it changes algorithm/protocol choices under every
profile, invisibly to the profile; fastverify's tuner profiles set it themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastverify.profiles.effective import ETC_NCCL_CONF, read_nccl_conf
from fastverify.tuner import plugin as plugin_mod

NAMES = ("NCCL_TUNER_PLUGIN", "NCCL_TUNER_CONFIG_FILE")


def check_tuner(
    env: Mapping[str, str], home: Path | None, etc_dir: Path, finding: Any
) -> list[Any]:
    """Findings (built with `finding(severity, what, where, fix, check)`)."""
    out = []
    sources: list[tuple[str, str, str]] = []  # (name, value, where)
    for name in NAMES:
        if env.get(name):
            sources.append((name, env[name], "environment"))
    files: list[Path] = []
    if env.get("NCCL_CONF_FILE"):
        files.append(Path(env["NCCL_CONF_FILE"]))
    elif home is not None:
        files.append(home / ".nccl.conf")
    files.append(etc_dir / ETC_NCCL_CONF.name)
    for f in files:
        for cl in read_nccl_conf(f):
            if cl.name in NAMES:
                sources.append((cl.name, cl.value, f"{f}:{cl.line}"))
    for name, value, where in sources:
        out.append(
            finding(
                "warning",
                f"{name}={value} is set outside the profiles: NCCL then loads that tuner "
                "under every profile that leaves it unset and changes algorithm/protocol "
                "choices the profile does not show",
                where,
                f"remove it there; use a tuner profile (FASTVERIFY_TUNER_TABLE=NAME.tuner.csv, "
                f"`fastverifyctl preflight --derive-tuner NAME`) which sets {NAMES[0]} itself",
                "tuner",
            )
        )
    so = plugin_mod.find_plugin()
    if so is not None:
        out.append(finding("info", f"fastverify tuner plugin built: {so}", str(so), "", "tuner"))
    else:
        out.append(
            finding(
                "info",
                "fastverify tuner plugin not built (tuner profiles cannot be used here)",
                "scripts/build-tuner.sh",
                "build it with scripts/build-tuner.sh (the image has it built)",
                "tuner",
            )
        )
    return out
