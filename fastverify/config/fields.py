"""The configuration, declared once: each TOML table is a dataclass (its docstring says what
the table is for; a table inside a table is a field holding one), each key a typed field of
its table, named as the key, whose default is its default and whose `Annotated` `Key` says its
validator, help and flag. The reference, the example file, the loader's checks and
fastverifyd's flags are derived from these."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastverify import paths
from fastverify.config import validators as c
from fastverify.config.spec import Key

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


FRONTDOOR_MODES = ("off", "hold", "standby")


@dataclass(frozen=True)
class Eagle3Params:
    """EAGLE-3 speculative decoding (modes eagle3 and adaptive)."""

    num_steps: Annotated[int, Key(c.integer(1, 64), "Draft steps per verify pass.")] = 3
    topk: Annotated[int, Key(c.integer(1, 64), "Draft tokens kept per step.")] = 1
    num_draft_tokens: Annotated[int, Key(c.integer(1, 1024), "Draft tokens verified per pass.")] = 4


@dataclass(frozen=True)
class ServerConfig:
    """What the engine serves. The sim engine fills in placeholder model paths when empty."""

    model_path: Annotated[
        str, Key(c.argv_string(), "The model SGLang serves.", example="/models/Kimi-K2.5")
    ] = ""
    draft_model_path: Annotated[
        str,
        Key(c.argv_string(), "The EAGLE-3 drafter (modes eagle3 and adaptive).",
            example="/models/Kimi-K2.5-eagle3"),
    ] = ""  # fmt: skip
    tp_size: Annotated[
        int, Key(c.integer(1, 64), "Tensor-parallel size (over all nodes when nnodes > 1).")
    ] = 8
    host: Annotated[
        str,
        Key(c.string(nonempty=True, what="a host name or address"),
            "The server's HTTP endpoint (health, /metrics)."),
    ] = "127.0.0.1"  # fmt: skip
    port: Annotated[
        int, Key(c.integer(1, 65535), "The engine's HTTP port.", flag="--server-port")
    ] = 30000
    python: Annotated[
        str,
        Key(c.string(what='a path to a Python interpreter, or ""'),
            'The server\'s interpreter; "" = fastverifyd\'s own.'),
    ] = ""  # fmt: skip
    sglang_flags: Annotated[
        str,
        Key(c.choice(("auto", "new", "old")),
            'Which CUDA-graph flags SGLang takes: "auto" asks the installed SGLang (>= 0.5.21 '
            'is "new"); "new": --cuda-graph-backend-decode disabled; "old": '
            "--disable-cuda-graph."),
    ] = "auto"  # fmt: skip
    load_format: Annotated[
        str,
        Key(c.choice(LOAD_FORMATS),
            'SGLang --load-format; "dummy" = trial mode: random weights, real shapes, kernels '
            'and all-reduces (everything it serves is labelled weights="dummy").'),
    ] = "auto"  # fmt: skip
    extra_args: Annotated[
        tuple[str, ...],
        Key(c.str_list(c.argv_string()), "More SGLang arguments, appended to the argv "
            "fastverifyd builds.",
            example=["--mem-fraction-static", "0.85"]),
    ] = ()  # fmt: skip
    mode: Annotated[
        str,
        Key(c.choice(MODES),
            "The mode at first start: baseline, eagle3, or adaptive (EAGLE-3 with SGLang's "
            "--speculative-adaptive and `spec plan`'s config)."),
    ] = "baseline"  # fmt: skip
    eagle3: Eagle3Params = field(default_factory=Eagle3Params)
    env: Annotated[
        dict[str, str],
        Key(c.env_table,
            "Extra variables for the engine (not NCCL_*: NCCL settings live in profiles only).",
            example={"SGLANG_TORCH_PROFILER_DIR": "/var/lib/fastverify/traces"}),
    ] = field(default_factory=dict)  # fmt: skip
    env_passthrough: Annotated[
        tuple[str, ...],
        Key(c.passthrough_names,
            "Variables of fastverifyd's environment handed to the engine (values never "
            "printed). The engine gets a clean environment (PATH, HOME, LANG, LC_*, CUDA_*/"
            "NVIDIA_* device selection, ...) plus exactly these names; no HF_* variable is "
            "inherited otherwise (HF_TOKEN, HF_HOME, HF_ENDPOINT: name each one you need).",
            example=["HF_TOKEN", "HF_HOME"]),
    ] = ()  # fmt: skip
    nnodes: Annotated[
        int,
        Key(c.integer(1, 64),
            "> 1: one server over several nodes (SGLang --nnodes; tp_size is then the total "
            "over all nodes).", flag=True),
    ] = 1  # fmt: skip
    node_rank: Annotated[int, Key(c.integer(0, 63), "Multi-node: this node's rank.", flag=True)] = 0
    dist_init_addr: Annotated[
        str,
        Key(c.string(what='"HOST:PORT" of node 0, or ""'),
            "Multi-node: HOST:PORT of node 0's torch.distributed rendezvous (needed when "
            "nnodes > 1).", flag=True, example="leader.example:20000"),
    ] = ""  # fmt: skip
    adaptive_config: Annotated[
        str,
        Key(c.string(what='a path to an adaptive config JSON, or ""'),
            'Mode adaptive\'s SGLang config; "" = the plan in state_dir (adaptive-config.json, '
            "`fastverifyctl spec plan`)."),
    ] = ""  # fmt: skip
    weight_cache: Annotated[
        str,
        Key(c.choice(("off", "auto", "on")),
            "SGLang's weight cache (0.5.17+) as fastverifyd's second process group: \"auto\" = "
            "every baseline start maps the cached weights (a switch reloads none; a start it "
            'cannot serve loads from disk with a warning), "on" = such a start fails '
            "instead; docs/guides/weight-cache.md.", flag=True),
    ] = "off"  # fmt: skip
    # A timing trial's EAGLE-3 step count (topk 1, num_draft_tokens = steps + 1, as SGLang's
    # adaptive worker runs them): set per operation by the API (`eagle3_steps` of a dummy-
    # weights switch, `fastverifyctl spec costs`), never read from the file or persisted,
    # so it carries no Key.
    steps_override: int | None = None
    # With a front door ([frontdoor] mode != "off"), fastverifyd runs the engine on the
    # internal port of the loopback and keeps `host` and `port` (where clients connect)
    # here; derived at start-up (frontdoor/layout.py), never read from the file: no Key.
    public_port: int | None = None
    public_host: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class DaemonConfig:
    """The daemon itself: which engine, where its state lives, which profile it starts."""

    engine: Annotated[
        str,
        Key(c.choice(ENGINES),
            "What serves: sglang, the embedded sim, or auto (sglang when SGLang and a GPU "
            "are present, else sim).", flag=True),
    ] = "auto"  # fmt: skip
    state_dir: Annotated[
        str,
        Key(c.string(),
            'Durable state, journal and engine logs; "" = $FASTVERIFY_STATE_DIR, else '
            "/var/lib/fastverify as root or $XDG_STATE_HOME/fastverify.", flag=True),
    ] = ""  # fmt: skip
    declarative: Annotated[
        bool,
        Key(c.boolean,
            "true (Kubernetes): the profile is default_profile and the mode server.mode, at "
            "every start; state.json's profile is not restored, `profile set` is refused "
            "unless --canary (status shows it).", flag=True),
    ] = False  # fmt: skip
    profile_dirs: Annotated[
        tuple[str, ...],
        Key(c.str_list(what="a list of directory paths"),
            "Where profiles are found; [] = $FASTVERIFY_PROFILE_DIRS (':'-separated), else "
            "/etc/fastverify/profiles as root, else $XDG_CONFIG_HOME/fastverify/profiles; the "
            "shipped profiles are always searched last."),
    ] = ()  # fmt: skip
    default_profile: Annotated[
        str, Key(c.profile_name, "The profile of the first start (no state.json yet).")
    ] = "nccl-default"
    nccl_debug: Annotated[
        bool,
        Key(c.boolean,
            "NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING and a per-start "
            "NCCL_DEBUG_FILE, checked against the profile."),
    ] = False  # fmt: skip
    log_level: Annotated[
        str, Key(c.choice(LOG_LEVELS), "The daemon's own log level.", flag=True)
    ] = "info"


# The keys of the tables below lived in [daemon] once: each still reads its old name (`alias`).


@dataclass(frozen=True)
class ApiConfig:
    """The control API: its Unix socket, and the optional TCP door (token, TLS)."""

    socket: Annotated[
        str,
        Key(c.string(),
            'Control socket path; "" = $FASTVERIFY_SOCKET, else /run/fastverify/control.sock '
            "as root or $XDG_RUNTIME_DIR/fastverify/control.sock.", flag=True,
            alias="daemon.socket"),
    ] = ""  # fmt: skip
    socket_group: Annotated[
        str,
        Key(c.string(what="a group name or numeric gid"),
            "chgrp of the socket (mode 0660) when the group exists.",
            alias="daemon.socket_group"),
    ] = "fastverify"  # fmt: skip
    tcp_listen: Annotated[
        str,
        Key(c.listen(lowest_port=1),
            'HOST:PORT of the control API over TCP ("" = off); needs token_file or '
            "tls_client_ca, and off loopback TLS (tls_cert, tls_key).", flag=True,
            example="127.0.0.1:7070", alias="daemon.tcp_listen"),
    ] = ""  # fmt: skip
    token_file: Annotated[
        str,
        Key(c.string(),
            "Bearer tokens of the TCP door: NAME:TOKEN lines or one TOKEN (chmod 600, 16+ "
            "characters each; the name is recorded as who asked).", flag=True,
            example="/etc/fastverify/token", alias="daemon.token_file"),
    ] = ""  # fmt: skip
    tls_cert: Annotated[
        str,
        Key(c.string(what="a PEM certificate file path"),
            "PEM certificate of the TCP door: TLS (required off loopback); expired, "
            "unreadable or mismatched files stop start-up (exit 2).", flag=True,
            example="/etc/fastverify/tls/server.pem", alias="daemon.tls_cert"),
    ] = ""  # fmt: skip
    tls_key: Annotated[
        str,
        Key(c.string(what="a PEM private key file path"),
            "The tls_cert's private key (chmod 600).", flag=True,
            example="/etc/fastverify/tls/server.key", alias="daemon.tls_key"),
    ] = ""  # fmt: skip
    tls_client_ca: Annotated[
        str,
        Key(c.string(what="a PEM CA file path"),
            "CA whose client certificates the TCP door requires (mutual TLS).", flag=True,
            example="/etc/fastverify/tls/clients-ca.pem", alias="daemon.tls_client_ca"),
    ] = ""  # fmt: skip


@dataclass(frozen=True)
class ExporterConfig:
    """The HTTP endpoints observers read: Prometheus /metrics, the orchestrator's probes,
    profile windows."""

    metrics_listen: Annotated[
        str,
        Key(c.listen(lowest_port=0), 'HOST:PORT of Prometheus /metrics; "" = exporter off.',
            flag=True, alias="daemon.metrics_listen"),
    ] = "127.0.0.1:9464"  # fmt: skip
    web_config_file: Annotated[
        str,
        Key(c.string(what="an exporter-toolkit web config (YAML) path"),
            "exporter-toolkit web config for /metrics (TLS, client certificates, bcrypt basic "
            "auth: the YAML node_exporter's --web.config.file reads).", flag=True,
            example="/etc/fastverify/web-config.yml", alias="daemon.web_config_file"),
    ] = ""  # fmt: skip
    health_listen: Annotated[
        str,
        Key(c.listen(lowest_port=0),
            'HOST:PORT of /livez, /readyz (READY and verified) and /startupz for an '
            'orchestrator\'s probes ("" = off).', flag=True, example="0.0.0.0:8081",
            alias="daemon.health_listen"),
    ] = ""  # fmt: skip
    trace_period_s: Annotated[
        float | None,
        Key(c.number(0),
            "Seconds between profile windows (0 = off); unset = the engine's default (sim 60, "
            "sglang off).", example=60, alias="daemon.trace_period_s"),
    ] = None  # fmt: skip
    trace_steps: Annotated[
        int,
        Key(c.integer(1, 1000), "Forward steps per profile window.",
            alias="daemon.trace_steps"),
    ] = 5  # fmt: skip


@dataclass(frozen=True)
class RestartConfig:
    """Starting, stopping and restarting the engine: timeouts, crash backoff, recovery from
    FAILED."""

    readiness_timeout_s: Annotated[
        float,
        Key(c.number(0, lo_open=True),
            "Per start: seconds until health and SGLang's ready line.",
            alias="daemon.readiness_timeout_s"),
    ] = 1800.0  # fmt: skip
    stop_grace_s: Annotated[
        float,
        Key(c.number(0, lo_open=True),
            "Seconds from SIGTERM to SIGKILL of the engine's process group.",
            alias="daemon.stop_grace_s"),
    ] = 30.0  # fmt: skip
    gpu_release_timeout_s: Annotated[
        float,
        Key(c.number(0),
            "Seconds to wait for the engine's PIDs to leave GPU memory (NVML).",
            alias="daemon.gpu_release_timeout_s"),
    ] = 60.0  # fmt: skip
    backoff_s: Annotated[
        tuple[float, float],
        Key(c.backoff, "Crash restarts: initial and max delay (doubling).",
            alias="daemon.restart_backoff_s"),
    ] = (1.0, 60.0)  # fmt: skip
    burst: Annotated[
        int,
        Key(c.integer(0), "More crashes than this within window_s: FAILED.",
            alias="daemon.restart_burst"),
    ] = 5  # fmt: skip
    window_s: Annotated[
        float,
        Key(c.number(0, lo_open=True), "The window of burst, in seconds.",
            alias="daemon.restart_window_s"),
    ] = 300.0  # fmt: skip
    recover_retries: Annotated[
        int,
        Key(c.integer(0, 1000),
            "FAILED: retry the last good profile N times (0 = never); declarative: /livez "
            "answers 503 (and exit 3 under systemd) after them.",
            alias="daemon.recover_retries"),
    ] = 3  # fmt: skip
    recover_backoff_s: Annotated[
        tuple[float, float],
        Key(c.backoff, "Delay before those retries: initial and max (doubling).",
            alias="daemon.recover_backoff_s"),
    ] = (60.0, 900.0)  # fmt: skip


@dataclass(frozen=True)
class WatchConfig:
    """After READY: SGLang's /health_generate, so a hung engine counts as a crash
    (engine_unresponsive; docs/reference/api.md, "A hung engine")."""

    interval_s: Annotated[
        float,
        Key(c.number(0), "Seconds between checks (0 = off). The defaults leave READY at "
            "most interval_s + SGLang's 20 s (25 s) after an engine hangs, as kubelet's "
            "liveness defaults do (about 30 s).", alias="daemon.watch_interval_s"),
    ] = 5.0  # fmt: skip
    timeout_s: Annotated[
        float,
        Key(c.number(0, lo_open=True),
            "No answer within N s: engine_unresponsive (SGLang answers 503 itself after "
            "SGLANG_HEALTH_CHECK_TIMEOUT, 20 s, and logs why).", alias="daemon.watch_timeout_s"),
    ] = 22.0  # fmt: skip
    failures: Annotated[
        int,
        Key(c.integer(1, 100), "Non-200 answers in a row: engine_unresponsive (SGLang's "
            "own 503 comes after 20 s without output: one is already its verdict).",
            alias="daemon.watch_failures"),
    ] = 1  # fmt: skip
    retry_s: Annotated[
        float,
        Key(c.number(0), "After a failed check, the next one N s after its answer.",
            alias="daemon.watch_retry_s"),
    ] = 5.0  # fmt: skip


@dataclass(frozen=True)
class FrontdoorConfig:
    """A front door on the server's public port (the engine moves to an internal port) that
    holds new requests while a switch, restart or crash restart replaces the engine, so
    clients wait instead of failing; docs/guides/daemon.md."""

    mode: Annotated[
        str,
        Key(c.choice(FRONTDOOR_MODES),
            '"off": clients reach the engine directly and a switch takes the service down; '
            '"hold": requests wait in the front door while the engine is replaced; "standby": '
            "the new engine starts beside the serving one when both fit in memory, else hold.",
            flag="--frontdoor", alias="daemon.frontdoor_mode"),
    ] = "off"  # fmt: skip
    engine_port: Annotated[
        int,
        Key(c.integer(0, 65535),
            "The engine's internal port when the front door is on (0 = [server] port + 1); "
            "the exporter and the health watch read the engine there.",
            alias="daemon.frontdoor_engine_port"),
    ] = 0  # fmt: skip
    standby_port: Annotated[
        int,
        Key(c.integer(0, 65535),
            "The internal port a standby engine starts on beside the serving one (0 = the "
            "engine port + 1); the engines take turns on the two ports."),
    ] = 0  # fmt: skip
    standby_kv_share: Annotated[
        float,
        Key(c.fraction(),
            "The standby engine's KV pool as a share of a cold start's (1 = the same). Less "
            "lets two engines fit where the same would not, and the new engine then serves "
            "with that smaller pool (fewer tokens in flight) until the next cold start (a "
            "hold switch, a crash restart, a daemon start); switch after switch the share "
            "stays a share of the cold start's pool."),
    ] = 1.0  # fmt: skip
    queue_size: Annotated[
        int,
        Key(c.integer(0, 1_000_000),
            "Requests held at most; one more gets 503 with Retry-After.",
            alias="daemon.frontdoor_queue_size"),
    ] = 1024  # fmt: skip
    max_wait_s: Annotated[
        float,
        Key(c.number(0, lo_open=True),
            "Seconds a request is held at most; then 503 with Retry-After.",
            alias="daemon.frontdoor_max_wait_s"),
    ] = 300.0  # fmt: skip
    drain_timeout_s: Annotated[
        float,
        Key(c.number(0),
            "Seconds the old engine gets to finish the requests in flight before it stops; "
            "the ones it cuts are counted and named in the switch's result.",
            alias="daemon.frontdoor_drain_timeout_s"),
    ] = 60.0  # fmt: skip
    retry_after_s: Annotated[
        int,
        Key(c.integer(1, 3600), "The Retry-After of a refused request, in seconds.",
            alias="daemon.frontdoor_retry_after_s"),
    ] = 5  # fmt: skip


@dataclass(frozen=True)
class SimConfig:
    """The embedded sim engine (tests and demos)."""

    load_seconds: Annotated[
        float,
        Key(c.number(0), "Seconds the sim's simulated weight load takes.",
            flag="--sim-load-seconds", alias="daemon.sim_load_seconds"),
    ] = 3.0  # fmt: skip
    sglang_version: Annotated[
        str,
        Key(c.string(nonempty=True, what="an SGLang version (X.Y.Z)"),
            "The SGLang release the sim plays: its flags, metrics, spans and log lines "
            "(0.5.1 .. 0.5.23; `fastverifyctl sglang versions`).",
            flag="--sim-sglang-version", alias="daemon.sim_sglang_version"),
    ] = "0.5.23"  # fmt: skip


@dataclass(frozen=True)
class Config:
    """The whole configuration: one attribute per TOML table, in the order the example and
    the reference show them, then where it came from."""

    server: ServerConfig = field(default_factory=ServerConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    exporter: ExporterConfig = field(default_factory=ExporterConfig)
    restart: RestartConfig = field(default_factory=RestartConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    frontdoor: FrontdoorConfig = field(default_factory=FrontdoorConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    source: str = ""  # the file it came from, "" for defaults
    # keys the file or the command line set ("exporter.metrics_listen")
    given: frozenset[str] = field(default=frozenset(), compare=False)
    # one line per old key name the file used ("... is now [exporter] metrics_listen")
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def state_dir(self) -> Path:
        return Path(self.daemon.state_dir) if self.daemon.state_dir else paths.state_dir()

    @property
    def socket_path(self) -> Path:
        return Path(self.api.socket) if self.api.socket else paths.socket_path()

    @property
    def profile_dirs(self) -> list[Path]:
        if self.daemon.profile_dirs:
            return [Path(p) for p in self.daemon.profile_dirs]
        return paths.user_profile_dirs()
