"""What a server process will really see: the clean environment and NCCL's config files.

`effective_env(profile, base_env, extra)` is the environment the daemon starts the
engine with: a clean base (only the names in `BASE_NAMES` / `BASE_PREFIXES`, from
`base_env` or os.environ) + the profile's resolved env + `extra` (the daemon's own
additions, e.g. NCCL_DEBUG when configured). Every inherited `NCCL_*` tuning variable
is removed first, so the profile is the whole truth about NCCL. A tuner profile
(FASTVERIFY_TUNER_TABLE) gets the table as an absolute path and NCCL_TUNER_PLUGIN=<the
built plugin> (fastverify.profiles.tuner.tuner_env).

NCCL itself still fills variables left unset from config files (src/misc/param.cc):
`$NCCL_CONF_FILE` when set and non-empty, else `$HOME/.nccl.conf`, then
`/etc/nccl.conf`; a file never overrides a variable already set, and within one file
the first line for a name wins. `conf_file_values()` reproduces that reading (NCCL's
own line rules: `#` in column 0 is a comment, lines without `=` are skipped, the name
is everything before the first `=`, untrimmed) and `effective_view()` marks every
variable with where it comes from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastverify.profiles.model import Profile
from fastverify.profiles.nccl_vars import METADATA_ONLY

# Inherited from the daemon's environment into the engine's; everything else is dropped.
# Hugging Face settings (HF_TOKEN, HF_HOME, HF_ENDPOINT, ...) are not here: they carry
# secrets or redirect downloads, so only those the configuration names in
# `[server] env_passthrough` reach the engine (the daemon adds them as `extra`).
BASE_NAMES: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH",
    "VIRTUAL_ENV", "CONDA_PREFIX", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME",
    "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
)  # fmt: skip
BASE_PREFIXES: tuple[str, ...] = ("LC_",)
ETC_NCCL_CONF = Path("/etc/nccl.conf")


def is_nccl_tuning_var(name: str) -> bool:
    """True for every `NCCL_*` name NCCL reads (NCCL_VERSION is image metadata, not tuning)."""
    return name.startswith("NCCL_") and name not in METADATA_ONLY


def clean_base(base_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `base_env` (default os.environ), NCCL_* never included."""
    src = os.environ if base_env is None else base_env
    return {
        k: v
        for k, v in src.items()
        if (k in BASE_NAMES or k.startswith(BASE_PREFIXES)) and not is_nccl_tuning_var(k)
    }


def effective_env(
    profile: Profile,
    base_env: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Clean base + profile env + extra (the environment to exec the engine with)."""
    env = clean_base(base_env)
    env.update(profile.env)
    if profile.env.get("FASTVERIFY_TUNER_TABLE"):  # a tuner profile: absolute paths
        from fastverify.profiles.tuner import tuner_env

        env.update(tuner_env(profile))
    if extra:
        env.update(extra)
    return env


@dataclass(frozen=True)
class ConfLine:
    line: int
    name: str
    value: str


def read_nccl_conf(path: Path) -> list[ConfLine]:
    """The assignments NCCL would read from one config file ([] when it cannot be read)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    out: list[ConfLine] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        text = raw.decode("utf-8", errors="replace")
        if text.endswith("\r"):
            text = text[:-1]
        if text.startswith("#") or "=" not in text:
            continue
        name, value = text.split("=", 1)
        if name == "":
            continue
        out.append(ConfLine(number, name[:1023], value[:1023]))
    return out


@dataclass(frozen=True)
class ConfFile:
    """One config file NCCL would read for a given environment, in precedence order."""

    label: str  # "NCCL_CONF_FILE" | "~/.nccl.conf" | "/etc/nccl.conf"
    path: Path


def conf_files(env: Mapping[str, str], etc_conf: Path = ETC_NCCL_CONF) -> list[ConfFile]:
    """The files NCCL reads for a process with environment `env` (existing or not)."""
    files: list[ConfFile] = []
    user = env.get("NCCL_CONF_FILE", "")
    if user:
        files.append(ConfFile("NCCL_CONF_FILE", Path(user)))
    elif env.get("HOME"):
        files.append(ConfFile("~/.nccl.conf", Path(env["HOME"]) / ".nccl.conf"))
    files.append(ConfFile("/etc/nccl.conf", Path(etc_conf)))
    return files


@dataclass(frozen=True)
class EffectiveVar:
    """A variable the server will see, and where it comes from."""

    name: str
    value: str
    source: str  # "profile" | "extends:NAME" | "daemon" | "base" | a ConfFile label
    path: str | None = None
    line: int | None = None
    shadowed_by_conf: bool = False  # (unused for conf rows) kept for symmetry in JSON

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "path": self.path,
            "line": self.line,
        }


def conf_file_values(env: Mapping[str, str], etc_conf: Path = ETC_NCCL_CONF) -> list[EffectiveVar]:
    """Variables NCCL would set from config files because `env` leaves them unset."""
    taken = set(env)
    out: list[EffectiveVar] = []
    for cf in conf_files(env, etc_conf):
        for cl in read_nccl_conf(cf.path):
            if cl.name in taken:
                continue
            taken.add(cl.name)
            out.append(EffectiveVar(cl.name, cl.value, cf.label, str(cf.path), cl.line))
    return out


def effective_view(
    profile: Profile,
    base_env: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    etc_conf: Path = ETC_NCCL_CONF,
    include_base: bool = False,
) -> list[EffectiveVar]:
    """Every NCCL-relevant variable the server will see, each with its source.

    Profile variables first (file order of the resolved env), then the daemon's
    `extra`, then values from NCCL config files for names left unset. Base
    variables (PATH, HOME, ...) are listed only with `include_base`.
    """
    env = effective_env(profile, base_env, extra)
    rows: list[EffectiveVar] = []
    if include_base:
        for k, v in clean_base(base_env).items():
            if k not in profile.env and not (extra and k in extra):
                rows.append(EffectiveVar(k, v, "base"))
    tuner = {}
    if profile.env.get("FASTVERIFY_TUNER_TABLE"):
        from fastverify.profiles.tuner import tuner_env

        tuner = tuner_env(profile)
    for k, v in profile.env.items():
        if (extra and k in extra) or k in tuner:
            continue
        setter = profile.env_sources.get(k, profile.name)
        if setter == profile.name:
            rows.append(EffectiveVar(k, v, "profile", str(profile.path), profile.lines.get(k)))
        else:
            rows.append(EffectiveVar(k, v, f"extends:{setter}"))
    for k, v in tuner.items():
        if not (extra and k in extra):
            rows.append(EffectiveVar(k, v, "tuner"))
    for k, v in (extra or {}).items():
        rows.append(EffectiveVar(k, v, "daemon"))
    rows.extend(conf_file_values(env, etc_conf))
    return rows


def engine_env_view(
    env: Mapping[str, str],
    tp_size: int,
    *,
    cuda_graph: bool = True,
    custom_all_reduce: bool = True,
    extra_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """What SGLang's own NCCL rules (`fastverify.sglang.envrules`, pinned version) do to
    `env` for a server at TP `tp_size`: `EngineEnv.to_dict()` plus `tp_size` and `lines`
    (one line per variable, with its reason). Used by `profile show --effective` and doctor."""
    from fastverify.sglang.envrules import engine_env
    from fastverify.sglang.launch import LaunchArgs

    launch = LaunchArgs(model_path="model", tp_size=tp_size, extra_args=tuple(extra_args))
    launch = launch.with_(
        cuda_graph=cuda_graph and launch.flag("--disable-cuda-graph") is None,
        custom_all_reduce=custom_all_reduce and launch.flag("--disable-custom-all-reduce") is None,
    )
    rules = engine_env(launch, env)
    return {**rules.to_dict(), "tp_size": tp_size, "lines": rules.lines()}
