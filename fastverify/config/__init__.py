"""The daemon's configuration: a TOML file + fastverifyd's options -> one frozen `Config`.

Every key is declared once, as a typed field of its table's dataclass (`cfg.restart.backoff_s`
is the key `restart.backoff_s`) with its validator, help, flag and old name (`fields`); the
rest is derived: the tables, the key list and old names (`keys`),
the loader (`load`), the checks over several keys (`cross`), fastverifyd's options
(`flags`) and the generated reference and example file (`reference`: docs/reference/config.md,
docs/reference/config.example.toml; `python -m fastverify.config.reference` writes them).
"""

from fastverify.config.cross import tcp_problems, weight_cache_problems
from fastverify.config.dump import dumps, relayout
from fastverify.config.fields import (
    ADAPTIVE_CONFIG_NAME,
    ENGINES,
    LOAD_FORMATS,
    LOG_LEVELS,
    MODES,
    REQUEST_METRICS_DIR,
    SPEC_MODES,
    TRIAL_LOAD_FORMAT,
    ApiConfig,
    Config,
    DaemonConfig,
    Eagle3Params,
    ExporterConfig,
    FrontdoorConfig,
    RestartConfig,
    ServerConfig,
    SimConfig,
    WatchConfig,
    load_format_problem,
    weights_label,
)
from fastverify.config.flags import add_flags, overrides
from fastverify.config.keys import FIELDS, FLAGS, KEYS, PER_OPERATION, TABLES, KeyInfo
from fastverify.config.load import ConfigError, FieldProblem, load, validate_fields
from fastverify.config.validators import Validator

__all__ = [
    "ADAPTIVE_CONFIG_NAME",
    "ENGINES",
    "FIELDS",
    "FLAGS",
    "KEYS",
    "LOAD_FORMATS",
    "LOG_LEVELS",
    "MODES",
    "PER_OPERATION",
    "REQUEST_METRICS_DIR",
    "SPEC_MODES",
    "TABLES",
    "TRIAL_LOAD_FORMAT",
    "ApiConfig",
    "Config",
    "ConfigError",
    "DaemonConfig",
    "Eagle3Params",
    "ExporterConfig",
    "FieldProblem",
    "FrontdoorConfig",
    "KeyInfo",
    "RestartConfig",
    "ServerConfig",
    "SimConfig",
    "Validator",
    "WatchConfig",
    "add_flags",
    "dumps",
    "load",
    "load_format_problem",
    "overrides",
    "relayout",
    "tcp_problems",
    "validate_fields",
    "weight_cache_problems",
    "weights_label",
]
