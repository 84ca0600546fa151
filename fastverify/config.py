"""The daemon's configuration: TOML file + command-line overrides -> one frozen `Config`.

File layout (every key optional; see `docs/config.example.toml`):

    [server]                 # what the engine serves
    model_path = "/models/Kimi-K2.5"
    draft_model_path = "/models/Kimi-K2.5-eagle3"
    tp_size = 8
    host = "127.0.0.1"
    port = 30000
    python = "/usr/bin/python3"        # the server's interpreter
    sglang_flags = "auto"              # "auto" (ask the installed SGLang) | "new" | "old"
    load_format = "auto"               # SGLang --load-format; "dummy" = trial mode (random
                                       # weights: timings real, accept length meaningless)
    extra_args = ["--mem-fraction-static", "0.85"]
    mode = "baseline"                  # or "eagle3"
    env_passthrough = ["HF_TOKEN"]     # daemon env vars handed to the engine (values masked)
    [server.env]                       # extra variables for the engine (not NCCL_*: use profiles)
    SGLANG_TORCH_PROFILER_DIR = "/var/lib/fastverify/traces"
    [server.eagle3]
    num_steps = 3
    topk = 1
    num_draft_tokens = 4

    [daemon]
    engine = "auto"                    # auto | sglang | sim
    state_dir = "/var/lib/fastverify"
    socket = "/run/fastverify/control.sock"
    socket_group = "fastverify"
    tcp_listen = ""                    # "" = off; "127.0.0.1:7070" needs token_file
    token_file = ""
    metrics_listen = "127.0.0.1:9464"  # "" = exporter off
    profile_dirs = ["/etc/fastverify/profiles"]
    default_profile = "nccl-default"
    readiness_timeout_s = 1800
    stop_grace_s = 30
    gpu_release_timeout_s = 60
    nccl_debug = false                 # add NCCL_DEBUG=INFO + SUBSYS=INIT,ENV,TUNING per start
    sim_load_seconds = 3.0
    trace_period_s = 0                 # profile windows; 0 = off (sim default: 60)
    trace_steps = 5
    restart_backoff_s = [1, 60]        # initial, max
    restart_burst = 5                  # crashes within restart_window_s before FAILED
    restart_window_s = 300
    log_level = "info"
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify import paths

MODES = ("baseline", "eagle3")
ENGINES = ("auto", "sglang", "sim")
# SGLang 0.5.23's `--load-format` choices (sglang/srt/arg_groups/choices.py
# LOAD_FORMAT_CHOICES; tests/contract checks them against the real package).
LOAD_FORMATS = (
    "auto", "pt", "safetensors", "instanttensor", "npcache", "dummy", "sharded_state",
    "presharded", "gguf", "expert_pack", "bitsandbytes", "mistral", "layered", "flash_rl",
    "remote", "remote_instance", "fastsafetensors", "private", "runai_streamer",
)  # fmt: skip
TRIAL_LOAD_FORMAT = "dummy"  # random weights: a timing trial, never production numbers


def weights_label(load_format: str | None) -> str:
    """ "dummy" for a trial server (`--load-format dummy`), "real" for every other format."""
    return "dummy" if load_format == TRIAL_LOAD_FORMAT else "real"


def load_format_problem(value: object) -> str | None:
    """Why `value` is not a load format SGLang 0.5.23 accepts (None when it is one)."""
    if isinstance(value, str) and value in LOAD_FORMATS:
        return None
    return f"load_format {value!r}: expected one of {', '.join(LOAD_FORMATS)}"


class ConfigError(ValueError):
    """A configuration problem, phrased as `file: key: what is wrong (what would be right)`."""


@dataclass(frozen=True)
class Eagle3Params:
    num_steps: int = 3
    topk: int = 1
    num_draft_tokens: int = 4


@dataclass(frozen=True)
class ServerConfig:
    model_path: str = ""
    draft_model_path: str = ""
    tp_size: int = 8
    host: str = "127.0.0.1"
    port: int = 30000
    python: str = ""  # "" = the daemon's own interpreter
    sglang_flags: str = "auto"
    load_format: str = "auto"  # SGLang --load-format ("dummy": trial mode)
    extra_args: tuple[str, ...] = ()
    mode: str = "baseline"
    eagle3: Eagle3Params = field(default_factory=Eagle3Params)
    env: dict[str, str] = field(default_factory=dict)
    env_passthrough: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class DaemonConfig:
    engine: str = "auto"
    state_dir: str = ""
    socket: str = ""
    socket_group: str = "fastverify"
    tcp_listen: str = ""
    token_file: str = ""
    metrics_listen: str = "127.0.0.1:9464"
    profile_dirs: tuple[str, ...] = ()
    default_profile: str = "nccl-default"
    readiness_timeout_s: float = 1800.0
    stop_grace_s: float = 30.0
    gpu_release_timeout_s: float = 60.0
    nccl_debug: bool = False
    sim_load_seconds: float = 3.0
    trace_period_s: float | None = None  # None = engine default (sim: 60, sglang: off)
    trace_steps: int = 5
    restart_backoff_s: tuple[float, float] = (1.0, 60.0)
    restart_burst: int = 5
    restart_window_s: float = 300.0
    log_level: str = "info"


@dataclass(frozen=True)
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    source: str = ""  # the file it came from, "" for defaults

    @property
    def state_dir(self) -> Path:
        return Path(self.daemon.state_dir) if self.daemon.state_dir else paths.state_dir()

    @property
    def socket_path(self) -> Path:
        return Path(self.daemon.socket) if self.daemon.socket else paths.socket_path()

    @property
    def profile_dirs(self) -> list[Path]:
        if self.daemon.profile_dirs:
            return [Path(p) for p in self.daemon.profile_dirs]
        return paths.user_profile_dirs()


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    """Instantiate a config dataclass from a TOML table, refusing unknown keys and bad types."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        default = getattr(cls(), key)
        if dataclasses.is_dataclass(default):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key}: expected a table")
            kwargs[key] = _build(type(default), value, f"{where}.{key}")
            continue
        kwargs[key] = _coerce(value, default, f"{where}.{key}")
    return cls(**kwargs)


def _coerce(value: Any, default: Any, where: str) -> Any:
    if isinstance(default, dict):
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ConfigError(f"{where}: expected a table of string values, got {value!r}")
        return dict(value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(default, tuple):
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(value)
    if isinstance(default, float) or default is None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _check(cfg: Config, where: str) -> Config:
    if cfg.server.mode not in MODES:
        raise ConfigError(f"{where}: server.mode: {cfg.server.mode!r} (expected one of {MODES})")
    problem = load_format_problem(cfg.server.load_format)
    if problem:
        raise ConfigError(f"{where}: server.{problem}")
    if cfg.daemon.engine not in ENGINES:
        raise ConfigError(
            f"{where}: daemon.engine: {cfg.daemon.engine!r} (expected one of {ENGINES})"
        )
    if cfg.daemon.tcp_listen and not cfg.daemon.token_file:
        raise ConfigError(
            f"{where}: daemon.tcp_listen is set but daemon.token_file is empty "
            "(TCP control needs a token)"
        )
    nccl = sorted(k for k in cfg.server.env if k.startswith("NCCL_"))
    if nccl:
        raise ConfigError(
            f"{where}: server.env sets {', '.join(nccl)}: NCCL settings belong in "
            "profiles (the profile is the whole truth about NCCL)"
        )
    if not 1 <= cfg.server.tp_size <= 64:
        raise ConfigError(f"{where}: server.tp_size: {cfg.server.tp_size} (expected 1..64)")
    return cfg


def load(path: Path | None, overrides: dict[str, dict[str, Any]] | None = None) -> Config:
    """Load `path` (missing default file = defaults), apply `{"server": {...}, "daemon": {...}}`
    overrides (command-line flags; None values ignored), validate, and return a Config."""
    data: dict[str, Any] = {}
    source = ""
    explicit = path is not None
    path = path or paths.config_file()
    if path.exists():
        source = str(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from None
    elif explicit:
        raise ConfigError(f"{path}: no such config file")
    for section, values in (overrides or {}).items():
        table = data.setdefault(section, {})
        table.update({k: v for k, v in values.items() if v is not None})
    unknown = set(data) - {"server", "daemon"}
    if unknown:
        raise ConfigError(
            f"{source or path}: unknown table(s) {sorted(unknown)} (expected [server], [daemon])"
        )
    where = source or "config"
    cfg = Config(
        server=_build(ServerConfig, data.get("server", {}), f"{where}: server"),
        daemon=_build(DaemonConfig, data.get("daemon", {}), f"{where}: daemon"),
        source=source,
    )
    return _check(cfg, where)
