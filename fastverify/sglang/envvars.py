"""SGLang's `SGLANG_*` variables as fastverify reads them: each declared variable's parser
kind from the release's facts (`kinds`: `srt/environ.py`'s `class Envs`, read from the
wheel into fastverify/sglang/facts/<release>.json), how SGLang's EnvBool and EnvInt read a
value, and the names of the variables the TP all-reduce dispatch reads
(`fastverify.sglang.allreduce`).

Light on purpose (no dataclass, no regex): `profiles.validate` imports it on
`fastverifyctl profile list`'s path, and the facts file is read only when a profile sets an
`SGLANG_*` variable.
"""

from __future__ import annotations

import functools

# The variables that choose TP all-reduce backends (declared in the facts; named here
# because fastverify.sglang.allreduce reads them)
ENABLE_VAR = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
MAX_NUMEL_VAR = "SGLANG_PCIE_IPC_MAX_NUMEL"
ONE_STAGE_VAR = "SGLANG_USE_1STAGE_ALLREDUCE"
DETERMINISTIC_VAR = "SGLANG_ENABLE_DETERMINISTIC_INFERENCE"
CUSTOM_V2_VAR = "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2"
CUSTOM_V2_MAX_KB_VAR = "SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB"
ALLREDUCE_VARS = (
    ENABLE_VAR, MAX_NUMEL_VAR, ONE_STAGE_VAR, CUSTOM_V2_VAR, CUSTOM_V2_MAX_KB_VAR,
)  # fmt: skip

# How SGLang's EnvBool reads a value (srt/environ.py, case-insensitive). Not in the facts
# (they hold names and kinds); tests/contract/test_allreduce_contract.py checks these
# against the installed package's parser.
BOOL_TRUE = ("true", "1", "yes", "y")
BOOL_FALSE = ("false", "0", "no", "n")


def env_bool(value: str | None) -> bool | None:
    """SGLang's EnvBool reading of a value (None: unset or invalid, i.e. the default)."""
    if value is None:
        return None
    v = value.lower()
    if v in BOOL_TRUE:
        return True
    if v in BOOL_FALSE:
        return False
    return None


def env_int(value: str | None) -> int | None:
    """SGLang's EnvInt reading of a value (None: unset or not an int)."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def pinned() -> str:
    """The release whose variables profiles are checked against (the pinned SGLang)."""
    from fastverify.sglang.versions import PINNED_VERSION

    return PINNED_VERSION


@functools.lru_cache(maxsize=4)
def kinds(version: str | None = None) -> dict[str, str]:
    """Every `SGLANG_*` variable release `version` (default: the pinned one) declares, with
    how SGLang parses its value: bool, int, float, str, tuple or json. An `Env*WithAlias`
    (a variable that also answers to an older name) parses as its base kind."""
    from fastverify.sglang import facts

    declared = facts.resolve(version or pinned()).sglang_vars
    return {name: kind.removesuffix("withalias") for name, kind in declared.items()}
