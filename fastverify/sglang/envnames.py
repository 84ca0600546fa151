"""Moved to fastverify.sglang.envvars; kept for the modules still importing it here."""

from fastverify.sglang.envvars import (
    ALLREDUCE_VARS,
    BOOL_FALSE,
    BOOL_TRUE,
    CUSTOM_V2_MAX_KB_VAR,
    CUSTOM_V2_VAR,
    DETERMINISTIC_VAR,
    ENABLE_VAR,
    MAX_NUMEL_VAR,
    ONE_STAGE_VAR,
    env_bool,
    env_int,
)

__all__ = [
    "ALLREDUCE_VARS",
    "BOOL_FALSE",
    "BOOL_TRUE",
    "CUSTOM_V2_MAX_KB_VAR",
    "CUSTOM_V2_VAR",
    "DETERMINISTIC_VAR",
    "ENABLE_VAR",
    "MAX_NUMEL_VAR",
    "ONE_STAGE_VAR",
    "env_bool",
    "env_int",
]
