"""`doctor`: find every source, other than the profile, that changes what NCCL sees.

Checks (all roots are parameters, so tests use real files in temporary directories):
- NCCL config files: `$NCCL_CONF_FILE`, `~/.nccl.conf`, `/etc/nccl.conf` (one finding
  per variable, with file:line);
- `NCCL_*` in the current environment, and in `/etc/environment`;
- `sitecustomize.py`, `usercustomize.py` and `.pth` files mentioning `NCCL_` on the
  site paths of each Python interpreter found (this one, plus configured ones: a
  server interpreter is asked for its paths with `-S`, so nothing of it runs);
- systemd units and drop-ins with `Environment=...NCCL_` or `EnvironmentFile=`
  pointing at a file that sets NCCL_*;
- the profiles themselves (invalid files, user profiles shadowing shipped ones);
- the GPU topology (`nvidia-smi topo -m` on PATH) and recommended profiles;
- the PCIe path between GPUs: ACS redirect, IOMMU, the driver's P2P table
  (fastverify.host.pcie, fastverify.profiles.doctor_pcie);
- tuner plugins: NCCL_TUNER_PLUGIN set outside the profiles, fastverify's plugin built
  or not (fastverify.profiles.doctor_tuner);
- SGLang itself: what the pinned SGLang adds to the NCCL environment for the configured TP
  size (`DoctorInputs.tp_size`, `sglang_args`), by `fastverify.sglang.envrules` applied to
  this environment's variables (`report.engine_env`, the `profile show --effective` view).

A finding has severity (error | warning | info), what, where (file:line) and fix.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.profiles import topology as topo_mod
from fastverify.profiles.effective import ETC_NCCL_CONF, is_nccl_tuning_var, read_nccl_conf

SYSTEMD_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
_ENV_LINE = re.compile(r"\s*Environment\s*=(.*)")
_ENVFILE_LINE = re.compile(r"\s*EnvironmentFile\s*=\s*-?(\S+)")


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "info"
    what: str
    where: str
    fix: str
    check: str

    def to_dict(self) -> dict[str, str]:
        return {
            "severity": self.severity,
            "check": self.check,
            "what": self.what,
            "where": self.where,
            "fix": self.fix,
        }


@dataclass
class DoctorInputs:
    """Where doctor looks; every default is the real host location."""

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    home: Path | None = None  # default: $HOME of env
    etc_dir: Path = Path("/etc")
    systemd_dirs: Sequence[Path] = tuple(Path(d) for d in SYSTEMD_DIRS)
    interpreters: Sequence[str] = ()  # extra interpreters (the server's); sys.executable always
    site_dirs: Sequence[Path] | None = None  # override interpreter discovery (tests)
    path_env: str | None = None  # PATH used to find nvidia-smi (default env's PATH)
    check_topology: bool = True  # also the PCIe path (lspci, IOMMU, nvidia-smi topo -p2p)
    sys_root: Path = Path("/")  # /sys and /proc/cmdline are read under it
    tp_size: int | None = None  # the server's TP size; None: SGLang's rules are not shown
    sglang_args: tuple[str, ...] = ()  # the server's extra SGLang args (daemon config)


@dataclass
class DoctorReport:
    findings: list[Finding] = field(default_factory=list)
    topology: topo_mod.GpuTopology | None = None
    pcie: Any = None  # fastverify.host.pcie.PcieReport (None: not checked)
    recommendations: list[topo_mod.Recommendation] = field(default_factory=list)
    interpreters: dict[str, list[str]] = field(default_factory=dict)
    engine_env: dict[str, Any] | None = None  # effective.engine_env_view for the TP size
    allreduce: dict[str, Any] | None = None  # the engine's backend (cli/doctor_engine.py)
    engine: dict[str, Any] | None = None  # whose engine: the daemon's, or this machine's

    @property
    def worst(self) -> str:
        sev = {f.severity for f in self.findings}
        return "error" if "error" in sev else "warning" if "warning" in sev else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.worst,
            "findings": [f.to_dict() for f in self.findings],
            "topology": self.topology.to_dict() if self.topology else None,
            "pcie": self.pcie.to_dict() if self.pcie else None,
            "recommendations": [r.to_dict() for r in self.recommendations],
            "interpreters": self.interpreters,
            "engine_env": self.engine_env,
            "allreduce": self.allreduce,
            "engine": self.engine,
        }


def check_conf_files(inputs: DoctorInputs, home: Path | None) -> list[Finding]:
    out: list[Finding] = []
    files: list[tuple[str, Path]] = []
    conf_env = inputs.env.get("NCCL_CONF_FILE", "")
    if conf_env:
        files.append(("NCCL_CONF_FILE", Path(conf_env)))
        p = Path(conf_env)
        if not p.is_file():
            out.append(
                Finding(
                    "warning",
                    f"NCCL_CONF_FILE={conf_env} is set but the file does not exist",
                    "environment",
                    "unset NCCL_CONF_FILE (NCCL then reads ~/.nccl.conf instead)",
                    "nccl-conf",
                )
            )
    if home is not None:
        files.append(("~/.nccl.conf", home / ".nccl.conf"))
    files.append(("/etc/nccl.conf", inputs.etc_dir / ETC_NCCL_CONF.name))
    for label, path in files:
        for cl in read_nccl_conf(path):
            severity = "warning" if is_nccl_tuning_var(cl.name) else "info"
            out.append(
                Finding(
                    severity,
                    f"{label} sets {cl.name}={cl.value}: NCCL applies it to every process that "
                    f"leaves {cl.name} unset",
                    f"{path}:{cl.line}",
                    f"move {cl.name} into a profile and delete the line (or set it explicitly "
                    "in every profile)",
                    "nccl-conf",
                )
            )
    return out


def check_environment(env: Mapping[str, str], etc_dir: Path) -> list[Finding]:
    out: list[Finding] = []
    for k in sorted(env):
        if is_nccl_tuning_var(k):
            out.append(
                Finding(
                    "warning",
                    f"{k}={env[k]} is set in this environment: a server started by hand "
                    "inherits it (the daemon removes it before starting the engine)",
                    "environment",
                    f"unset {k} in the shell/unit that sets it, or put it in a profile",
                    "environment",
                )
            )
    etc_env = etc_dir / "environment"
    try:
        text = etc_env.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        m = re.match(r"(?:export\s+)?(NCCL_[A-Za-z0-9_]*)\s*=", stripped)
        if m and is_nccl_tuning_var(m.group(1)):
            out.append(
                Finding(
                    "warning",
                    f"{etc_env} sets {m.group(1)} for every login session (pam_env)",
                    f"{etc_env}:{number}",
                    "remove the line; put the setting in a profile",
                    "environment",
                )
            )
    return out


_SITE_QUERY = (
    "import json, site, sys; "
    "paths = list(sys.path) + list(site.getsitepackages()) + [site.getusersitepackages()]; "
    "print(json.dumps([p for p in dict.fromkeys(paths) if p]))"
)


def interpreter_site_dirs(python: str, timeout: float = 10.0) -> list[str] | str:
    """Site directories of `python` (asked with -S so its sitecustomize never runs), or an
    error message."""
    try:
        proc = subprocess.run(
            [python, "-S", "-c", _SITE_QUERY],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {python}: {exc}"
    if proc.returncode != 0:
        return f"{python} exited {proc.returncode}: {proc.stderr.strip()[:200]}"
    try:
        return [str(p) for p in json.loads(proc.stdout)]
    except ValueError:
        return f"{python}: unexpected output {proc.stdout[:100]!r}"


def check_site_dirs(dirs: Sequence[Path], label: str) -> list[Finding]:
    out: list[Finding] = []
    seen: set[Path] = set()
    for d in dirs:
        try:
            d = d.resolve()
        except OSError:
            continue
        if d in seen or not d.is_dir():
            continue
        seen.add(d)
        candidates = [d / "sitecustomize.py", d / "usercustomize.py"]
        with contextlib.suppress(OSError):
            candidates += sorted(d.glob("*.pth"))
        for f in candidates:
            try:
                text = f.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            lines = [i for i, ln in enumerate(text.splitlines(), start=1) if "NCCL_" in ln]
            if not lines:
                continue
            if f.suffix == ".pth":
                fix = "remove the NCCL_ lines (every `import` line of a .pth runs at start-up)"
            else:
                fix = (
                    f"fastverifyctl profile import-sitecustomize {f} --name NAME, then delete "
                    f"{f.name} (it runs in every Python process, the server included)"
                )
            out.append(
                Finding(
                    "warning",
                    f"{f.name} ({label}) mentions NCCL_ on line(s) "
                    f"{', '.join(map(str, lines[:10]))}: it can change NCCL settings at "
                    "interpreter start, after the profile is applied",
                    f"{f}:{lines[0]}",
                    fix,
                    "python-site",
                )
            )
    return out


def check_systemd(dirs: Sequence[Path]) -> list[Finding]:
    out: list[Finding] = []
    for base in dirs:
        if not base.is_dir():
            continue
        files: list[Path] = []
        try:
            files += sorted(p for p in base.glob("*.service") if p.is_file())
            files += sorted(p for p in base.glob("*.d/*.conf") if p.is_file())
        except OSError:
            continue
        for f in files:
            try:
                text = f.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                m = _ENV_LINE.match(line)
                if m and "NCCL_" in m.group(1):
                    names = sorted(set(re.findall(r"NCCL_[A-Za-z0-9_]*", m.group(1))))
                    out.append(
                        Finding(
                            "warning",
                            f"{f.name} sets {', '.join(names)} with Environment=",
                            f"{f}:{number}",
                            "remove the Environment= line; the daemon applies profiles "
                            "(a unit-level NCCL_* hides what the profile says when the "
                            "server runs outside the daemon)",
                            "systemd",
                        )
                    )
                    continue
                m = _ENVFILE_LINE.match(line)
                if m:
                    target = Path(m.group(1))
                    try:
                        body = target.read_text(encoding="utf-8", errors="replace")
                    except OSError:
                        continue
                    names = sorted(set(re.findall(r"^\s*(NCCL_[A-Za-z0-9_]*)=", body, re.M)))
                    names = [n for n in names if is_nccl_tuning_var(n)]
                    if names and "fastverify" not in str(target):
                        out.append(
                            Finding(
                                "warning",
                                f"{f.name} loads {target} which sets {', '.join(names)}",
                                f"{f}:{number}",
                                "drop the EnvironmentFile= line or remove NCCL_* from that "
                                "file; use a profile",
                                "systemd",
                            )
                        )
    return out


def check_profiles(store: Any) -> list[Finding]:
    out: list[Finding] = []
    for entry, _profile, problems in store.list_entries():
        errors = [p for p in problems if p.severity == "error"]
        if errors:
            out.append(
                Finding(
                    "error",
                    f"profile {entry.name} is invalid: {errors[0].message}"
                    + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""),
                    f"{errors[0].path}:{errors[0].line}",
                    f"fastverifyctl profile validate {entry.path}",
                    "profiles",
                )
            )
        if entry.shadows is not None:
            out.append(
                Finding(
                    "info",
                    f"user profile {entry.name} overrides the shipped one",
                    str(entry.path),
                    f"intended? compare: fastverifyctl profile diff {entry.shadows} {entry.path}",
                    "profiles",
                )
            )
    return out


def run(inputs: DoctorInputs, store: Any | None = None) -> DoctorReport:
    """Run every check; returns the findings, the topology and the recommendations."""
    report = DoctorReport()
    home_str = inputs.env.get("HOME")
    home = inputs.home or (Path(home_str) if home_str else None)
    report.findings += check_conf_files(inputs, home)
    report.findings += check_environment(inputs.env, inputs.etc_dir)
    from fastverify.profiles.doctor_tuner import check_tuner

    report.findings += check_tuner(inputs.env, home, inputs.etc_dir, Finding)
    if inputs.site_dirs is not None:
        report.interpreters["(given)"] = [str(d) for d in inputs.site_dirs]
        report.findings += check_site_dirs(list(inputs.site_dirs), "site path")
    else:
        for python in dict.fromkeys([sys.executable, *inputs.interpreters]):
            dirs = interpreter_site_dirs(python)
            if isinstance(dirs, str):
                report.findings.append(
                    Finding("warning", dirs, python, "check the interpreter path", "python-site")
                )
                continue
            report.interpreters[python] = dirs
            report.findings += check_site_dirs([Path(d) for d in dirs], python)
    systemd_dirs = list(inputs.systemd_dirs)
    if home is not None:
        systemd_dirs.append(home / ".config" / "systemd" / "user")
    report.findings += check_systemd(systemd_dirs)
    if inputs.check_topology:
        path_env = inputs.path_env if inputs.path_env is not None else inputs.env.get("PATH")
        report.topology = topo_mod.detect(path_env)
        if report.topology is None:
            report.findings.append(
                Finding(
                    "info",
                    "GPU topology unknown: nvidia-smi not found or failed",
                    "PATH",
                    "run doctor on the GPU host (LL128 checks need the topology)",
                    "topology",
                )
            )
        else:
            report.findings.append(
                Finding("info", report.topology.summary(), "nvidia-smi topo -m", "", "topology")
            )
        from fastverify.host import pcie
        from fastverify.profiles.doctor_pcie import check_pcie

        report.pcie = pcie.collect(pcie.HostInputs(path_env=path_env, sys_root=inputs.sys_root))
        gpus = len(report.topology.gpus) if report.topology is not None else 0
        report.findings += check_pcie(report.pcie, gpus, Finding)
    available: set[str] = set()
    if store is not None:
        if report.topology is not None:
            store.topology = report.topology.to_topology()  # validate against this host's links
        report.findings += check_profiles(store)
        available = {e.name for e in store.entries()}
    if inputs.tp_size is not None:
        from fastverify.profiles.effective import engine_env_view

        report.engine_env = engine_env_view(
            inputs.env, inputs.tp_size, extra_args=tuple(inputs.sglang_args)
        )
    if inputs.check_topology:
        report.recommendations = topo_mod.recommend(report.topology, available)
        from fastverify.host.pcie import P2P_OFF_PROFILE as name

        if report.pcie is not None and report.pcie.status == "redirect" and name in available:
            first = topo_mod.Recommendation(name, report.pcie.message())
            report.recommendations = [first] + [
                r for r in report.recommendations if r.profile != name
            ]
    return report
