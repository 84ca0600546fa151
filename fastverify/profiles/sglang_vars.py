"""The `SGLANG_*` variables a profile may set: names and values as SGLang 0.5.23 reads them.

Names and kinds come from the pinned release's facts (`fastverify.sglang.envvars.kinds`:
every variable `srt/environ.py` declares, read from the wheel); a name close to one of them
that is not one is a typo (an error with a did-you-mean), any other unknown `SGLANG_*` name
an error too (a profile holds only what the release declares: env_policy). Values by
SGLang's parsers (`EnvBool`: 1/0, true/false, yes/no, y/n in any case; `EnvInt`: a Python
int); SGLang itself warns and falls back to the default on a bad value, fastverify refuses
it. The all-reduce variables get their own checks (`fastverify.sglang.allreduce`).
"""

from __future__ import annotations

from fastverify.problems import Severity
from fastverify.sglang import envvars

# SGLang overwrites these from its server flags (srt/arg_groups/serving_hook.py)
FLAG_OWNED = {
    envvars.DETERMINISTIC_VAR: "--enable-deterministic-inference",
    "SGLANG_ENABLE_TORCH_COMPILE": "--enable-torch-compile",
}
_BOOLS = "1/0, true/false, yes/no or y/n"


def suggest(name: str) -> list[str]:
    import difflib  # only for a name SGLang does not declare (keeps `profile list` light)

    return difflib.get_close_matches(name, envvars.kinds(), n=2, cutoff=0.85)


def check_name(name: str) -> tuple[Severity, str] | None:
    """(severity, message) for an `SGLANG_*` name, or None when SGLang declares it."""
    kinds = envvars.kinds()
    if name in kinds:
        return None
    upper = name.upper()
    if upper != name and upper in kinds:
        return "error", f"{name}: names are case-sensitive; SGLang reads {upper} (write that)"
    close = suggest(name)
    if close:
        return "error", (f"unknown SGLang variable {name} (did you mean {' or '.join(close)}?)")
    return "error", (
        f"SGLang {envvars.pinned()} declares no variable {name} in srt/environ.py "
        "(a profile holds only the variables SGLang declares; check the spelling)"
    )


def check_value(name: str, value: str) -> tuple[Severity, str] | None:
    """(severity, message) for a bad value of a declared `SGLANG_*` variable, or None."""
    kind = envvars.kinds().get(name)
    if kind is None:
        return None
    if kind == "bool" and envvars.env_bool(value) is None:
        return "error", (
            f"{value!r} is not a boolean SGLang reads (write {_BOOLS}; SGLang would warn "
            "and use the default)"
        )
    if kind == "int":
        n = envvars.env_int(value)
        if n is None or value.strip() != value or "_" in value:
            return "error", f"{value!r} is not an integer (write a plain number, e.g. 0)"
        if name == envvars.MAX_NUMEL_VAR and n < 0:
            return "error", (
                f"{n} elements: expected 0 (size the workspace from the decode width) "
                "or a positive element count"
            )
        if name == envvars.CUSTOM_V2_MAX_KB_VAR and n <= 0:
            return "error", f"{n} KiB: expected a positive size in KiB"
    if kind == "float":
        try:
            float(value)
        except ValueError:
            return "error", f"{value!r} is not a number"
    if name in FLAG_OWNED:
        return "warning", (
            f"SGLang sets {name} from {FLAG_OWNED[name]} at start-up, so the profile's "
            f"value is overwritten (pass {FLAG_OWNED[name]} in the server's extra args)"
        )
    return None
