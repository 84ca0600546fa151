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
    mode = "baseline"                  # or "eagle3", or "adaptive" (EAGLE-3 with SGLang's
                                       # --speculative-adaptive and `spec plan`'s config)
    adaptive_config = ""               # that config; "" = the plan in state_dir
                                       # (adaptive-config.json, `fastverifyctl spec plan`)
    nnodes = 1                         # >1: one server over several nodes (SGLang --nnodes)
    node_rank = 0                      # this node's rank (SGLang/fastverifyd --node-rank)
    dist_init_addr = ""                # "HOST:PORT" of node 0 (SGLang --dist-init-addr)
    env_passthrough = ["HF_TOKEN"]     # daemon env vars handed to the engine (values masked)
    weight_cache = "off"               # SGLang's weight cache (0.5.17+) as a second process
                                       # group: "auto" (use it where it can serve, else load
                                       # from disk with a warning), "on" (a start it cannot
                                       # serve fails), "off"; docs/weight-cache.md
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
    tcp_listen = ""                    # "" = off; "127.0.0.1:7070" needs token_file (or
                                       # tls_client_ca); off loopback only with TLS
    token_file = ""                    # NAME:TOKEN lines (or one TOKEN), chmod 600
    tls_cert = ""                      # PEM certificate of the TCP door (with tls_key)
    tls_key = ""                       # its private key (chmod 600)
    tls_client_ca = ""                 # CA of client certificates: mutual TLS, required
    metrics_listen = "127.0.0.1:9464"  # "" = exporter off
    web_config_file = ""               # exporter-toolkit web config for /metrics (TLS, basic
                                       # auth: the YAML node_exporter's --web.config.file reads)
    health_listen = ""                 # "HOST:PORT" for /livez /readyz /startupz ("" = off)
    declarative = false                # profile and mode come from this file (a Kubernetes
                                       # manifest): state.json is not restored and
                                       # `profile set` is refused unless it is a --canary
    profile_dirs = ["/etc/fastverify/profiles"]
    default_profile = "nccl-default"
    readiness_timeout_s = 1800
    stop_grace_s = 30
    gpu_release_timeout_s = 60
    nccl_debug = false                 # add NCCL_DEBUG=INFO + SUBSYS=INIT,ENV,TUNING per start
    sim_load_seconds = 3.0
    sim_sglang_version = "0.5.23"      # the SGLang release the sim plays (0.5.1 .. 0.5.23)
    trace_period_s = 0                 # profile windows; 0 = off (sim default: 60)
    trace_steps = 5
    restart_backoff_s = [1, 60]        # initial, max
    restart_burst = 5                  # crashes within restart_window_s before FAILED
    restart_window_s = 300
    watch_interval_s = 30              # after READY: SGLang's /health_generate every N s (0 = off)
    watch_timeout_s = 40               # no answer within N s = unresponsive (SGLang answers 503
                                       # itself after SGLANG_HEALTH_CHECK_TIMEOUT, 20 s)
    watch_failures = 2                 # non-200 answers in a row = unresponsive
    watch_retry_s = 5                  # after a failed check, the next one N s after its answer
    recover_retries = 3                # FAILED: retry the last good profile N times (0 = never)
    recover_backoff_s = [60, 900]      # initial, max delay between those retries (doubling)
    log_level = "info"
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify import paths

MODES = ("baseline", "eagle3", "adaptive")
SPEC_MODES = ("eagle3", "adaptive")  # the modes that draft (EAGLE-3)
ADAPTIVE_CONFIG_NAME = "adaptive-config.json"  # `spec plan` writes it into the state dir
# where speculative servers write SGLang's per-request metrics (--export-metrics-to-file);
# the exporter reads the histograms there and deletes each hour's file (it holds prompts)
REQUEST_METRICS_DIR = "request-metrics"
ENGINES = ("auto", "sglang", "sim")
LOG_LEVELS = ("debug", "info", "warning", "error")
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
    """Configuration problems, one per line: `file:line: key: what is wrong (expected ...)`."""


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
    nnodes: int = 1  # one server over nnodes nodes (SGLang --nnodes); tp_size is the total
    node_rank: int = 0
    dist_init_addr: str = ""  # HOST:PORT of node 0's torch.distributed rendezvous
    adaptive_config: str = ""  # mode adaptive: SGLang's config ("" = the state dir's plan)
    weight_cache: str = "off"  # off | auto | on (fastverify.daemon.weight_cache)
    # A timing trial's EAGLE-3 step count (topk 1, num_draft_tokens = steps + 1, as SGLang's
    # adaptive worker runs them): set per operation by the API (`eagle3_steps` of a dummy-
    # weights switch, `fastverifyctl spec costs`), never read from the file or persisted.
    steps_override: int | None = None

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
    tls_cert: str = ""  # the TCP door's certificate and key (TLS; required off loopback)
    tls_key: str = ""
    tls_client_ca: str = ""  # CA of the client certificates required (mutual TLS)
    metrics_listen: str = "127.0.0.1:9464"
    web_config_file: str = ""  # exporter-toolkit web config for /metrics ("" = plain HTTP)
    health_listen: str = ""  # HTTP /livez /readyz /startupz for an orchestrator ("" = off)
    declarative: bool = False  # profile/mode from the configuration (Kubernetes), not the API
    profile_dirs: tuple[str, ...] = ()
    default_profile: str = "nccl-default"
    readiness_timeout_s: float = 1800.0
    stop_grace_s: float = 30.0
    gpu_release_timeout_s: float = 60.0
    nccl_debug: bool = False
    sim_load_seconds: float = 3.0
    sim_sglang_version: str = "0.5.23"  # the SGLang release the sim plays (its facts)
    trace_period_s: float | None = None  # None = engine default (sim: 60, sglang: off)
    trace_steps: int = 5
    restart_backoff_s: tuple[float, float] = (1.0, 60.0)
    restart_burst: int = 5
    restart_window_s: float = 300.0
    watch_interval_s: float = 30.0
    watch_timeout_s: float = 40.0
    watch_failures: int = 2
    watch_retry_s: float = 5.0
    recover_retries: int = 3
    recover_backoff_s: tuple[float, float] = (60.0, 900.0)
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


def _show(value: Any) -> str:
    """A value as the operator wrote it (TOML/JSON-ish), kept short."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = '"' + value + '"'
    elif isinstance(value, list | tuple):
        text = "[" + ", ".join(_show(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "a table"
    else:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


Check = Callable[[Any], "str | None"]  # a value -> what is wrong (expected ...), or None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(lo: float, *, lo_open: bool = False, what: str = "seconds") -> Check:
    bound = f"> {lo:g}" if lo_open else f">= {lo:g}"

    def check(value: Any) -> str | None:
        if not _is_number(value) or not math.isfinite(value):
            return f"{_show(value)} is not a finite number (expected a number of {what} {bound})"
        if value < lo or (lo_open and value == lo):
            return f"{_show(value)} is out of range (expected a number of {what} {bound})"
        return None

    return check


def _integer(lo: int, hi: int | None = None) -> Check:
    expected = f"an integer in {lo}..{hi}" if hi is not None else f"an integer >= {lo}"

    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{_show(value)} is not an integer (expected {expected})"
        if value < lo or (hi is not None and value > hi):
            return f"{value} is out of range (expected {expected})"
        return None

    return check


def _choice(choices: tuple[str, ...]) -> Check:
    def check(value: Any) -> str | None:
        if value not in choices or not isinstance(value, str):
            return f"{_show(value)} is not allowed (expected one of {', '.join(choices)})"
        return None

    return check


def _string(*, nonempty: bool = False, what: str = "a string") -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{_show(value)} is not a string (expected {what})"
        if nonempty and not value.strip():
            return f"empty (expected {what})"
        return None

    return check


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"{_show(value)} (expected true or false)"


def _listen(*, lowest_port: int) -> Check:
    expected = f'"HOST:PORT" with PORT in {lowest_port}..65535, or "" for off'

    def check(value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{_show(value)} is not a string (expected {expected})"
        if value == "":
            return None
        _, sep, port = value.strip().rpartition(":")
        port = port if sep else value.strip()
        if not port.isdigit() or not lowest_port <= int(port) <= 65535:
            return f"{_show(value)} is not a listen address (expected {expected})"
        return None

    return check


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _str_list(item: Check | None = None, what: str = "a list of strings") -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            return f"{_show(value)} (expected {what})"
        for v in value:
            if item is not None and (why := item(v)):
                return why
        return None

    return check


def _passthrough_name(name: str) -> str | None:
    if not _ENV_NAME.fullmatch(name):
        return f"{_show(name)} is not a variable name (expected names like HF_TOKEN)"
    if name.startswith("NCCL_"):
        return (
            f"{name}: NCCL settings are not passed through (expected non-NCCL names; "
            "NCCL settings belong in profiles)"
        )
    return None


def _env_table(value: Any) -> str | None:
    expected = 'a table of string values, e.g. SGLANG_X = "1"'
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return f"{_show(value)} (expected {expected})"
    for k in value:
        if not _ENV_NAME.fullmatch(k):
            return f"{_show(k)} is not a variable name (expected {expected})"
    nccl = sorted(k for k in value if k.startswith("NCCL_"))
    if nccl:
        return (
            f"sets {', '.join(nccl)}: NCCL settings belong in profiles "
            "(the profile is the whole truth about NCCL; expected non-NCCL names)"
        )
    return None


def _backoff(value: Any) -> str | None:
    expected = "[initial, max] seconds with 0 < initial <= max, e.g. [1, 60]"
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(_is_number(v) and math.isfinite(v) for v in value)
    ):
        return f"{_show(value)} (expected {expected})"
    if not 0 < value[0] <= value[1]:
        return f"{_show(value)} is out of order or not positive (expected {expected})"
    return None


def _profile_name(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"{_show(value)} is not a string (expected a profile name such as nccl-default)"
    from fastverify.profiles.store import name_problem  # only when the key is set

    why = name_problem(value)
    return f"{why} (expected a profile name such as nccl-default)" if why else None


# Every configuration key and its check: the one validation the config loader and the
# daemon API share (the API calls `validate_fields` for request fields that mirror a key).
# dataclass fields an operation sets through the API, never a file: not in FIELDS, so a
# file that names one is refused as an unknown key
PER_OPERATION = frozenset({"server.steps_override"})

FIELDS: dict[str, Check] = {
    "server.model_path": _string(),
    "server.draft_model_path": _string(),
    "server.tp_size": _integer(1, 64),
    "server.host": _string(nonempty=True, what="a host name or address"),
    "server.port": _integer(1, 65535),
    "server.python": _string(what='a path to a Python interpreter, or ""'),
    "server.sglang_flags": _choice(("auto", "new", "old")),
    "server.extra_args": _str_list(),
    "server.mode": _choice(MODES),
    "server.adaptive_config": _string(what='a path to an adaptive config JSON, or ""'),
    "server.load_format": _choice(LOAD_FORMATS),
    "server.eagle3.num_steps": _integer(1, 64),
    "server.eagle3.topk": _integer(1, 64),
    "server.eagle3.num_draft_tokens": _integer(1, 1024),
    "server.env": _env_table,
    "server.env_passthrough": _str_list(_passthrough_name, "a list of variable names"),
    "server.nnodes": _integer(1, 64),
    "server.node_rank": _integer(0, 63),
    "server.dist_init_addr": _string(what='"HOST:PORT" of node 0, or ""'),
    "server.weight_cache": _choice(("off", "auto", "on")),
    "daemon.engine": _choice(ENGINES),
    "daemon.state_dir": _string(),
    "daemon.socket": _string(),
    "daemon.socket_group": _string(what="a group name or numeric gid"),
    "daemon.tcp_listen": _listen(lowest_port=1),
    "daemon.token_file": _string(),
    "daemon.tls_cert": _string(what="a PEM certificate file path"),
    "daemon.tls_key": _string(what="a PEM private key file path"),
    "daemon.tls_client_ca": _string(what="a PEM CA file path"),
    "daemon.metrics_listen": _listen(lowest_port=0),
    "daemon.web_config_file": _string(what="an exporter-toolkit web config (YAML) path"),
    "daemon.health_listen": _listen(lowest_port=0),
    "daemon.declarative": _boolean,
    "daemon.profile_dirs": _str_list(what="a list of directory paths"),
    "daemon.default_profile": _profile_name,
    "daemon.readiness_timeout_s": _number(0, lo_open=True),
    "daemon.stop_grace_s": _number(0, lo_open=True),
    "daemon.gpu_release_timeout_s": _number(0),
    "daemon.nccl_debug": _boolean,
    "daemon.sim_load_seconds": _number(0),
    "daemon.sim_sglang_version": _string(nonempty=True, what="an SGLang version (X.Y.Z)"),
    "daemon.trace_period_s": _number(0),
    "daemon.trace_steps": _integer(1, 1000),
    "daemon.restart_backoff_s": _backoff,
    "daemon.restart_burst": _integer(0),
    "daemon.restart_window_s": _number(0, lo_open=True),
    "daemon.watch_interval_s": _number(0),
    "daemon.watch_timeout_s": _number(0, lo_open=True),
    "daemon.watch_failures": _integer(1, 100),
    "daemon.watch_retry_s": _number(0),
    "daemon.recover_retries": _integer(0, 1000),
    "daemon.recover_backoff_s": _backoff,
    "daemon.log_level": _choice(LOG_LEVELS),
}
TABLES = ("server", "server.eagle3", "daemon")


@dataclass(frozen=True)
class FieldProblem:
    """One bad configuration value: `str()` is `path:line: key: what is wrong (expected ...)`
    (`path: key: ...` when the line is unknown, e.g. a command-line flag or an API field)."""

    path: str
    line: int
    key: str
    message: str  # "key: what is wrong (expected ...)"

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}" if where else self.message


def validate_fields(
    values: Mapping[str, Any],
    *,
    section: str | None = None,
    path: str = "",
    lines: Mapping[str, int] | None = None,
) -> list[FieldProblem]:
    """Check raw values (TOML or JSON types) of configuration keys; every problem, in order.

    Keys are dotted (`"daemon.readiness_timeout_s"`), or bare with `section="daemon"`.
    Unknown keys are problems. `path`/`lines` (key -> line) only say where each came from.
    The daemon API uses it for request fields that mirror a key, e.g.
    `validate_fields({"daemon.readiness_timeout_s": body["timeout_s"]})`, and reports
    `problem.message`.
    """
    out: list[FieldProblem] = []
    for raw_key, value in values.items():
        key = f"{section}.{raw_key}" if section else raw_key
        line = (lines or {}).get(key, 0)
        check = FIELDS.get(key)
        if check is None:
            table, _, name = key.rpartition(".")
            if key in TABLES:
                msg = f"{key}: {_show(value)} (expected a table [{key}])"
            else:
                known = sorted(
                    k.rpartition(".")[2] for k in FIELDS if k.rpartition(".")[0] == table
                )
                hint = (
                    f"known: {', '.join(known)}"
                    if known
                    else "known tables: " + ", ".join(f"[{t}]" for t in TABLES)
                )
                meant = _close(name if known else key, known or list(TABLES))
                msg = f"{key}: unknown key {name!r} ({meant}{hint})"
            out.append(FieldProblem(path, line, key, msg))
            continue
        why = check(value)
        if why:
            out.append(FieldProblem(path, line, key, f"{key}: {why}"))
    return out


def _close(name: str, known: list[str]) -> str:
    """`did you mean watch_interval_s? ` for a misspelt key, else ''."""
    import difflib

    close = difflib.get_close_matches(name, known, n=2, cutoff=0.75)
    return f"did you mean {' or '.join(close)}? " if close else ""


def _key_lines(text: str) -> dict[str, int]:
    """`{"daemon.log_level": 12, "daemon": 9, ...}`: where each key of a plain TOML file is.
    (Dotted keys and inline tables are not tracked; their problems carry no line.)"""
    out: dict[str, int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if m := re.fullmatch(r"\[\s*([A-Za-z0-9_.\-]+)\s*\](\s*#.*)?", s):
            table = m.group(1)
            out.setdefault(table, number)
        elif m := re.match(r"([A-Za-z0-9_\-]+)\s*=", s):
            out.setdefault(f"{table}.{m.group(1)}" if table else m.group(1), number)
    return out


def _flatten(data: Mapping[str, Any]) -> dict[str, Any]:
    """{"server": {"eagle3": {...}, "env": {...}}} -> {"server.eagle3.num_steps": ..., ...}
    (`server.env` stays one value: its keys are the operator's variable names)."""
    flat: dict[str, Any] = {}
    for name, value in data.items():
        if name in TABLES and isinstance(value, dict):
            for k, v in value.items():
                sub = f"{name}.{k}"
                if sub in TABLES and isinstance(v, dict):
                    flat.update({f"{sub}.{kk}": vv for kk, vv in v.items()})
                else:
                    flat[sub] = v
        else:
            flat[name] = value
    return flat


def _loopback(host: str) -> bool:
    import ipaddress

    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name may resolve anywhere


def tcp_problems(flat: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for a TCP door that would be unsafe or cannot work: no way to
    authenticate, plaintext off loopback, half a TLS setting."""
    out = []
    listen, token = flat.get("daemon.tcp_listen") or "", flat.get("daemon.token_file")
    cert, key, ca = (flat.get(f"daemon.tls_{k}") for k in ("cert", "key", "client_ca"))
    if listen and not token and not ca:
        out.append(("daemon.tcp_listen", "daemon.tcp_listen is set but daemon.token_file is "
                    "empty (expected a token_file, or tls_client_ca for client certificates: "
                    "TCP control needs a token or a certificate)"))  # fmt: skip
    if listen and not (cert and key) and not _loopback(listen.rpartition(":")[0] or listen):
        out.append(("daemon.tcp_listen", f"daemon.tcp_listen = {listen!r} is not a loopback "
                    "address and TLS is off: plaintext would carry the token in the clear; "
                    "set daemon.tls_cert and daemon.tls_key (fastverifyd --tls-cert FILE "
                    "--tls-key FILE), or listen on 127.0.0.1"))  # fmt: skip
    if bool(cert) != bool(key):
        have, lack = ("tls_cert", "tls_key") if cert else ("tls_key", "tls_cert")
        out.append((f"daemon.{have}", f"daemon.{have} is set but daemon.{lack} is empty "
                    "(expected both: a certificate and its private key)"))  # fmt: skip
    if ca and not cert:
        out.append(("daemon.tls_client_ca", "daemon.tls_client_ca is set but daemon.tls_cert "
                    "is empty (client certificates need the TLS door: set tls_cert and "
                    "tls_key)"))  # fmt: skip
    if (cert or key) and not listen:
        key = "daemon.tls_cert" if cert else "daemon.tls_key"
        out.append((key, f"{key} is set but daemon.tcp_listen is empty (TLS is for the "
                    "TCP door; set tcp_listen)"))  # fmt: skip
    return out


def weight_cache_problems(flat: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for a weight cache fastverifyd cannot own: the argv already manages SGLang's
    cache (server.extra_args), or `on` over several nodes."""
    setting = flat.get("server.weight_cache", "off")
    if setting == "off":
        return []
    out = []
    extra = flat.get("server.extra_args") or []
    own = sorted({a.partition("=")[0] for a in extra if isinstance(a, str)
                  and a.startswith("--weight-cache-")})  # fmt: skip
    if own:
        out.append(("server.weight_cache", f"server.weight_cache = {setting!r} and "
                    f"server.extra_args sets {', '.join(own)}: fastverifyd passes the weight-cache "
                    "flags itself (expected one of them: drop the flags, or weight_cache = "
                    '"off" to manage the cache yourself)'))  # fmt: skip
    nnodes = flat.get("server.nnodes", 1)
    if setting == "on" and isinstance(nnodes, int) and nnodes > 1:
        out.append(("server.weight_cache", f'server.weight_cache = "on" with server.nnodes = '
                    f"{nnodes}: fastverifyd runs the weight cache on one node (expected "
                    '"auto", which loads from disk there, or "off")'))  # fmt: skip
    return out


def _cross_problems(
    flat: Mapping[str, Any], where: Callable[[str], tuple[str, int]]
) -> list[FieldProblem]:
    out = [FieldProblem(*where(key), key, why) for key, why in tcp_problems(flat)]
    out += [FieldProblem(*where(key), key, why) for key, why in weight_cache_problems(flat)]
    nnodes = flat.get("server.nnodes", 1)
    rank = flat.get("server.node_rank", 0)
    if isinstance(nnodes, int) and isinstance(rank, int) and not isinstance(rank, bool):
        if rank >= nnodes:
            key = "server.node_rank"
            out.append(
                FieldProblem(
                    *where(key),
                    key,
                    f"{key} = {rank} with server.nnodes = {nnodes} "
                    f"(expected a rank in 0..{nnodes - 1})",
                )
            )
        if nnodes > 1 and not flat.get("server.dist_init_addr"):
            key = "server.nnodes"
            out.append(
                FieldProblem(
                    *where(key),
                    key,
                    f"{key} = {nnodes} but server.dist_init_addr is empty "
                    '(expected "HOST:PORT" of node 0, e.g. fastverifyd --dist-init-addr)',
                )
            )
    return out


def _build(cls: type, data: dict[str, Any]) -> Any:
    """Instantiate a config dataclass from an already validated TOML table."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        default = getattr(cls(), f.name)
        if dataclasses.is_dataclass(default):
            kwargs[f.name] = _build(type(default), value)
        elif isinstance(default, tuple):
            kwargs[f.name] = tuple(value)
        elif isinstance(default, float) or default is None:
            kwargs[f.name] = float(value)
        elif isinstance(default, dict):
            kwargs[f.name] = dict(value)
        else:
            kwargs[f.name] = value
    return cls(**kwargs)


def load(
    path: Path | None,
    overrides: dict[str, dict[str, Any]] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Config:
    """Load `path` (missing default file = defaults), apply `{"server": {...}, "daemon": {...}}`
    overrides (command-line flags; None values ignored), validate every key (all problems at
    once, each with file:line and key), and return a Config; ConfigError otherwise.
    `flags` (key -> `--flag`): a problem with a value the command line gave is blamed on its
    flag (`fastverifyd --nnodes: ...`), never on a config file that may not exist."""
    data: dict[str, Any] = {}
    source = ""
    text = ""
    explicit = path is not None
    path = path or paths.config_file()
    if path.exists():
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    elif explicit:
        raise ConfigError(f"{path}: no such config file")
    lines = _key_lines(text)
    flat = _flatten(data)
    problems = validate_fields(flat, path=source, lines=lines)
    given = {
        f"{section}.{k}": v
        for section, values in (overrides or {}).items()
        for k, v in values.items()
        if v is not None
    }

    def flag_of(key: str) -> str:
        flag = (flags or {}).get(key)
        return f"fastverifyd {flag}" if flag else "command line"

    for key, value in given.items():
        problems += [
            FieldProblem(
                flag_of(key), 0, key, f"{p.message.removeprefix(f'{key}: ')} (it sets {key})"
            )
            for p in validate_fields({key: value})
        ]
    merged = {**flat, **given}

    def where(key: str) -> tuple[str, int]:
        """Who gave `key` its value: a flag, the file's line, or the defaults."""
        if key in given:
            return flag_of(key), 0
        if key in flat:
            return source, lines.get(key, 0)
        return source or "the built-in defaults", 0

    problems += _cross_problems(merged, where)
    if problems:
        raise ConfigError("\n".join(str(p) for p in problems))
    nested: dict[str, dict[str, Any]] = {"server": {"eagle3": {}}, "daemon": {}}
    for key, value in merged.items():
        parts = key.split(".")
        table = nested[parts[0]]
        for part in parts[1:-1]:
            table = table.setdefault(part, {})
        table[parts[-1]] = value
    if not nested["server"]["eagle3"]:
        del nested["server"]["eagle3"]
    return Config(
        server=_build(ServerConfig, nested["server"]),
        daemon=_build(DaemonConfig, nested["daemon"]),
        source=source,
    )
