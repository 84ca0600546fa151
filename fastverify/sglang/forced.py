"""SGLang's forced acceptance: `SGLANG_SIMULATE_ACC_LEN=L` in the server's environment makes
every verify pass accept a length SGLang samples around L, whatever the drafter guessed (a
benchmark knob; `SIMULATE_ACC_LEN` before 0.5.3). `SGLANG_SIMULATE_ACC_METHOD` says how it
samples: `match-expected` (floor or ceiling of L, weighted so the mean is L) or `multinomial`
(a normal around L, rounded).

The variables' names, kinds and defaults and the methods SGLang's source accepts are each
release's facts (`env.simulate_acceptance`, read from the wheel by scripts/sglang_facts.py).
This module says whether an environment forces acceptance (`of`), the label everything
measured under it carries (`label`: "forced (SGLANG_SIMULATE_ACC_LEN=L)", else "measured"),
and samples one pass's accept length as SGLang's `_sample_simulated_acc_len` does
(`sample`; the sim serves with it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MEASURED = "measured"  # the label of acceptance the drafter earned
# the key of the engine settings the daemon hands the exporter a drafting server's label
# under (not a profile setting: fastverify_spec_acceptance_source_info carries it)
SETTINGS_KEY = "acceptance_source"


class ForcedError(ValueError):
    """A forced-acceptance variable SGLang would not honour as written. `field`: which
    ("length", "method", "token_mode"); `variable`: its name."""

    def __init__(self, message: str, field: str, variable: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.variable = variable


@dataclass(frozen=True)
class Forced:
    """Acceptance forced by SGLang: `length` (L, bonus token included) sampled by `method`."""

    variable: str  # the length variable's name in the played release
    length: float
    method: str
    token_mode: str | None = None

    @property
    def label(self) -> str:
        return f"forced ({self.variable}={self.length:g})"

    def to_dict(self) -> dict[str, Any]:
        return {"source": "forced", "label": self.label, "variable": self.variable,
                "accept_length": self.length, "method": self.method,
                "token_mode": self.token_mode}  # fmt: skip


def spec(facts: Any = None) -> dict[str, Any] | None:
    """The release's forced-acceptance facts (None: the release has none)."""
    if facts is None:
        from fastverify.sglang.facts import resolve
        from fastverify.sglang.versions import PINNED_VERSION

        facts = resolve(PINNED_VERSION)
    return (facts.env or {}).get("simulate_acceptance")


def variable(facts: Any = None) -> str | None:
    """The name of the length variable in the release (None: it has none)."""
    s = spec(facts)
    return s["vars"]["length"]["name"] if s else None


def of(env: Mapping[str, str] | None, facts: Any = None) -> Forced | None:
    """The acceptance `env` forces on a server of the release `facts` stand for (default: the
    pinned one); None when it forces none. ForcedError for a value SGLang would ignore (a
    length that is no number: it warns and serves the drafter's acceptance) or fail on at the
    first verify pass (a method or token mode its source does not accept)."""
    s = spec(facts)
    if s is None or not env:
        return None
    roles = s["vars"]
    name = roles["length"]["name"]
    raw = env.get(name)
    if raw is None or (roles["length"]["kind"] != "float" and raw == ""):
        return None
    try:
        length = float(raw)
    except ValueError:
        raise ForcedError(
            f"{name}={raw!r} is not a number: SGLang ignores it (a warning, then the "
            f"drafter's own acceptance); give the accept length to force, e.g. {name}=3.0",
            "length",
            name,
        ) from None
    if not math.isfinite(length):
        raise ForcedError(f"{name}={raw!r}: give a finite accept length, e.g. {name}=3.0",
                          "length", name)  # fmt: skip
    if roles["length"]["kind"] == "float" and length <= 0:
        return None  # SGLang: off unless > 0
    method = _choice(env, roles.get("method"), s.get("methods"), "method")
    mode = _choice(env, roles.get("token_mode"), s.get("token_modes"), "token_mode")
    return Forced(name, length, str(method), mode)


def _choice(
    env: Mapping[str, str], var: dict[str, Any] | None, allowed: list[str] | None, field: str
) -> str | None:
    if var is None:
        return None
    value = env.get(var["name"], var.get("default"))
    if allowed and value not in allowed:
        raise ForcedError(
            f"{var['name']}={value!r}: SGLang accepts {' or '.join(map(repr, allowed))} (any "
            f"other value fails the server at its first verify pass)",
            field,
            var["name"],
        )
    return value


def label(forced: Forced | None) -> str:
    """What acceptance measured under `forced` is: "forced (VAR=L)", or "measured"."""
    return forced.label if forced is not None else MEASURED


def label_of_record(forced: Mapping[str, Any] | None) -> str:
    """The label of a `Forced.to_dict()` kept in a record (None: "measured")."""
    return str(forced["label"]) if forced else MEASURED


def label_of(env: Mapping[str, str] | None, facts: Any = None) -> str:
    """`label(of(env, facts))`, "measured" where the value is one SGLang would not honour."""
    try:
        return label(of(env, facts))
    except ForcedError:
        return MEASURED


def sample(forced: Forced, max_len: int, rng: random.Random) -> int:
    """One verify pass's accept length in 1..max_len (draft positions + 1), as SGLang's
    `_sample_simulated_acc_len` draws it (one draw per pass, shared by the batch)."""
    if forced.method == "multinomial":
        value = min(max(rng.gauss(forced.length, 1.0), 1.0), float(max_len))
        return round(value)
    if forced.method == "match-expected":
        value = max(1.0, min(float(max_len), forced.length))
        lower = int(value // 1)
        upper = lower + 1 if lower < max_len else lower
        if lower == upper:
            return lower
        return upper if rng.random() < value - lower else lower
    raise ValueError(f"Invalid simulate_acc_method: {forced.method}")


def expected_length(forced: Forced, max_len: int) -> float:
    """The mean of `sample` over passes: what a bench of the server measures."""
    if forced.method == "match-expected":
        return max(1.0, min(float(max_len), forced.length))
    # round(clamp(N(L, 1), 1, max_len)): the mass of each integer's rounding interval

    def cdf(x: float) -> float:
        return 0.5 * (1.0 + math.erf((x - forced.length) / math.sqrt(2.0)))

    total = 0.0
    for k in range(1, max_len + 1):
        lo = -math.inf if k == 1 else k - 0.5
        hi = math.inf if k == max_len else k + 0.5
        total += k * (cdf(hi) - cdf(lo))
    return total
