"""Whether a standby switch fits, and with which KV pool: the new engine started beside the
serving one needs, per GPU, its own KV pool, CUDA graphs, CUDA context and whatever weights
it loads itself (an EAGLE-3 drafter read from disk) while both share the weights a part of
the daemon maps for both (its `Sharing`).

The serving engine's own figures are SGLang's start-up lines, read as its log goes by
(`EngineMemory`: `Load weight begin. avail mem`, `Load weight end ... mem usage`, `KV Cache
is allocated ... KV size`, `... CUDA graph end ... mem usage`, `Init torch distributed
ends. mem usage`), the same lines on the sim and on a real server. The shared weights are
what that part holds, one GPU's memory what the engine reports (nvidia-smi, or the sim's
simulated GPU). Without shared weights, without a reading, or when it does not fit, the
switch holds instead, and says why.

The pool: SGLang sizes it as (free memory after its load) - (free memory before its load) x
(1 - --mem-fraction-static) (`_profile_available_bytes`; from 0.5.19 the shared weights'
bytes are added to the pre-load figure, `account_preloaded_weights`), so an engine started
beside another one, with the same fraction, gets a much smaller pool. A standby start
therefore always gets `--max-total-tokens` (standby_kv_share x a cold start's tokens: the
serving engine's own, or, when a standby start capped it, the pool it was a share of) and a
`--mem-fraction-static` (`Fit.mem_fraction`) high enough that the budget SGLang computes
from a low estimate of its pre-load memory covers that pool; the cap trims the rest. Both
replace the profile's values for that start only. `decide` is the rule; fastverifyd reads
the figures (daemon/frontdoor.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fastverify.sglang.loglines import memory_record

GIB = float(1 << 30)
HEADROOM = 0.05  # of each GPU: the allocator's slack and the second CUDA context
# What the standby engine finds used beside the serving one before its weights load, beyond
# the serving engine's start-up figures: its own CUDA context and the serving engine's
# memory no line names (activations, the allocator's blocks). Measured on an H100 (SGLang
# 0.5.17, tests/fixtures/sglang-0.5.17-h100-standby): 0.78 GB between the serving engine's
# last `avail mem` and the standby's `Load weight begin`; twice that, to stay low.
BESIDE_MARGIN_GIB = 1.5
# SGLang's budget over the pool it allocates from it (0.09 GB on that H100 start)
BUDGET_MARGIN_GIB = 0.25
MAX_MEM_FRACTION = 0.95  # above it SGLang keeps too little slack for activations


@dataclass
class EngineMemory:
    """One engine's own memory on its fullest GPU (GiB), from its start-up lines; the free
    memory before its weights loaded (the lowest rank's: SGLang takes the minimum); `beside`:
    the GiB another engine held on that GPU then (a standby start's serving engine), which
    has since gone."""

    ranks: dict[int, dict[str, float]] = field(default_factory=dict)
    tokens: dict[int, int] = field(default_factory=dict)  # each rank's first pool: the target's
    before_load: dict[int, float] = field(default_factory=dict)  # each rank's first: the target's
    beside: float = 0.0
    capped_from: int | None = None  # a standby start's: the cold pool its cap was a share of

    def read(self, line: str) -> None:
        rec = memory_record(line)
        if rec is None:
            return
        if rec.what == "free_before_load":
            self.before_load.setdefault(rec.rank, rec.gib)
            return
        figures = self.ranks.setdefault(rec.rank, {})
        figures[rec.what] = figures.get(rec.what, 0.0) + rec.gib
        if rec.tokens is not None:
            self.tokens.setdefault(rec.rank, rec.tokens)

    @property
    def kv_tokens(self) -> int | None:
        return min(self.tokens.values()) if self.tokens else None

    @property
    def cold_tokens(self) -> int | None:
        """The pool a cold start gets (tokens): its own, unless a standby start capped it."""
        return self.capped_from or self.kv_tokens

    @property
    def free_alone(self) -> float | None:
        """The free memory before its load as it would have been with no other engine
        beside it: what the GPU offers an engine beside the shared weights alone."""
        return min(self.before_load.values()) + self.beside if self.before_load else None

    def figures(self) -> dict[str, float] | None:
        """{kv, graphs, context, weights} of the fullest rank; None before its KV pool."""
        full = [f for f in self.ranks.values() if "kv" in f]
        if not full:
            return None
        top = max(full, key=lambda f: sum(v for k, v in f.items() if k != "pools"))
        return {k: top.get(k, 0.0) for k in ("kv", "graphs", "context", "weights")}


@dataclass(frozen=True)
class Fit:
    """The decision: `mode`, `why`; for a standby start the pool it gets (`kv_tokens`,
    `kv_gib`), the --mem-fraction-static that gives it (`mem_fraction`), the GiB the
    serving engine holds beside it (`beside`) and the cold pool the share is of
    (`cold_tokens`), both for the new engine's `EngineMemory`."""

    mode: str  # "standby" | "hold"
    why: str
    kv_tokens: int | None = None
    kv_gib: float | None = None
    mem_fraction: float | None = None
    beside: float = 0.0
    cold_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "why": self.why}
        if self.kv_tokens is not None:
            out.update(kv_tokens=self.kv_tokens, kv_gib=round(self.kv_gib or 0.0, 2),
                       mem_fraction_static=self.mem_fraction)  # fmt: skip
        return out


def _gib(x: float) -> str:
    return f"{x:.1f} GiB"


@dataclass(frozen=True)
class Sharing:
    """What a second engine of a mode would share with the serving one (a part of the
    daemon answers it: daemon/parts.py): `serves` whether it does, `why` why not, `bytes`
    what the shared memory holds on all GPUs together (None: unknown), `preloaded` whether
    the engine adds those bytes to its pre-load memory (SGLang 0.5.19+)."""

    serves: bool
    why: str | None = None
    bytes: int | None = None
    preloaded: bool = False


NOTHING_SHARED = (
    "standby needs shared weights (none of the daemon's parts maps them for two engines): "
    "a second engine would load a second copy of the weights"
)


def mem_fraction_for(kv: float, own: float, free: float, preloaded: float) -> float:
    """The --mem-fraction-static under which SGLang's budget, (free - own) - (free +
    preloaded) x (1 - s), is at least `kv` + BUDGET_MARGIN_GIB: `free` the pre-load free
    memory, `own` the weights the engine loads itself, `preloaded` the shared weights it adds
    back (0 before 0.5.19). Rounded up to 3 decimals; a lower `free` only raises it."""
    need = (kv + own + preloaded + BUDGET_MARGIN_GIB) / (free + preloaded)
    return math.ceil(need * 1000) / 1000


def _pool_text(tokens: int, gib: float, share: float, fraction: float, free: float,
               serving: int, cold: int) -> str:  # fmt: skip
    if share >= 1:
        which = ("the same as the serving one's" if cold == serving else
                 "the same as a cold start's")  # fmt: skip
    else:
        which = (f"{share:.0%} of a cold start's {cold} tokens: fewer tokens in flight "
                 "until the next cold start (a hold switch, a crash restart, a daemon "
                 "start)")  # fmt: skip
    return (f"; the new engine's KV pool: {tokens} tokens ({_gib(gib)}, {which}), through "
            f"--max-total-tokens {tokens} and --mem-fraction-static {fraction:g} for this "
            f"start only (about {_gib(free)} free before its load; the next cold start uses "
            "the configured value)")  # fmt: skip


def _share_hint(room_gib: float, kv: float) -> str:
    """The standby_kv_share that a pool of at most `room_gib` would be (none below 5%)."""
    room = room_gib / kv if kv else 0.0
    if room < 0.05:
        return ""
    return (f"; [frontdoor] standby_kv_share = {int(room * 20) / 20:g} would fit (the new "
            "engine then serves with that smaller KV pool)")  # fmt: skip


def decide(
    *,
    sharing: Sharing | None,
    gpu_bytes: int | None,
    tp: int,
    engine: dict[str, float] | None,
    kv_tokens: int | None,
    free_alone: float | None = None,
    kv_share: float = 1.0,
    cold_tokens: int | None = None,
) -> Fit:
    """`sharing`: what the two engines would share (None: nothing), with what it holds on
    all GPUs; `gpu_bytes`: one GPU's memory; `engine`: the serving engine's own GiB on its
    fullest GPU (`EngineMemory.figures`), `kv_tokens` its pool, `free_alone` its
    `EngineMemory.free_alone`; `kv_share`: the standby engine's KV pool as a share of
    `cold_tokens`, a cold start's pool (`EngineMemory.cold_tokens`; None: `kv_tokens`), so
    that switch after switch the share stays a share of the same pool."""
    if sharing is None or not sharing.serves:
        return Fit("hold", (sharing.why if sharing is not None else None) or NOTHING_SHARED)
    shared_bytes = sharing.bytes
    missing = [what for what, value in (
        ("the GPU's size (nvidia-smi)", gpu_bytes),
        ("the shared weights' bytes", shared_bytes),
        ("the serving engine's memory lines (KV Cache is allocated ...)", engine),
        ("its pool's tokens (KV Cache is allocated ... #tokens)", kv_tokens),
        ("the free memory before its load (Load weight begin. avail mem=...)", free_alone),
    ) if value is None]  # fmt: skip
    if (missing or gpu_bytes is None or engine is None or shared_bytes is None
            or kv_tokens is None or free_alone is None):  # fmt: skip
        return Fit("hold", f"no memory reading here ({', '.join(missing)} unknown): the "
                   "overlap of two engines cannot be checked")  # fmt: skip
    shared = shared_bytes / tp / GIB
    gpu = gpu_bytes / GIB
    have = gpu * (1 - HEADROOM)
    rest = engine["graphs"] + engine["context"] + engine["weights"]
    old = engine["kv"] + rest
    cold = cold_tokens or kv_tokens
    tokens = max(1, round(cold * kv_share))
    kv_new = engine["kv"] * tokens / kv_tokens
    kv_cold = engine["kv"] * cold / kv_tokens
    new = kv_new + rest
    parts = f"graphs {_gib(engine['graphs'])}"
    if engine["context"] >= 0.05:
        parts += f" + context {_gib(engine['context'])}"
    if engine["weights"] >= 0.05:
        parts += f" + own weights {_gib(engine['weights'])}"
    where = f"beside {_gib(shared)} of shared weights"
    if tokens == kv_tokens:
        text = f"2 x (KV {_gib(engine['kv'])} + {parts}) {where}"
    else:
        text = (f"(KV {_gib(engine['kv'])} serving + {_gib(kv_new)} standby, "
                f"standby_kv_share {kv_share:g}) + 2 x ({parts}) {where}")  # fmt: skip
    need = shared + old + new
    if need > have:
        hint = _share_hint(have - shared - old - rest, kv_cold)
        return Fit("hold", f"hold: {text} = {_gib(need)} does not fit in {gpu:.0f} GiB (less "
                   f"{HEADROOM:.0%} headroom){hint}")  # fmt: skip
    # what the new engine will find free before its load: low, so its budget is not short
    free = free_alone - old - BESIDE_MARGIN_GIB
    preloaded = shared if sharing.preloaded else 0.0
    own = engine["weights"]
    fraction = mem_fraction_for(kv_new, own, free, preloaded) if free > 0 else math.inf
    if fraction > MAX_MEM_FRACTION:
        top = MAX_MEM_FRACTION * (free + preloaded) - preloaded - own - BUDGET_MARGIN_GIB
        hint = _share_hint(min(top, kv_new), kv_cold)
        return Fit("hold", f"hold: {text} = {_gib(need)} fits in {gpu:.0f} GiB, but with "
                   f"about {_gib(free)} free before its load the new engine's pool of "
                   f"{tokens} tokens ({_gib(kv_new)}) needs --mem-fraction-static "
                   f"{fraction:.3g}, above {MAX_MEM_FRACTION:g}{hint}")  # fmt: skip
    why = (f"standby: {text} = {_gib(need)} fits in {gpu:.0f} GiB"
           + _pool_text(tokens, kv_new, kv_share, fraction, free, kv_tokens, cold))  # fmt: skip
    return Fit("standby", why, tokens, kv_new, fraction, old, cold)


POOL_FLAGS = ("--max-total-tokens", "--mem-fraction-static")


def with_pool(argv: list[str], fit: Fit) -> list[str]:
    """`argv` for a standby start: the pool the fit chose (`--max-total-tokens`) and the
    --mem-fraction-static whose budget covers it, appended (SGLang's parser keeps an
    option's last value: the profile's own stay in place, overridden for this start only)."""
    if fit.kv_tokens is None or fit.mem_fraction is None:
        return argv
    return [*argv, POOL_FLAGS[0], str(fit.kv_tokens), POOL_FLAGS[1], f"{fit.mem_fraction:g}"]


def without_pool(argv: list[str]) -> list[str]:
    """`argv` without the pair of flags `with_pool` added (the argv the profile builds; the
    daemon may add its own after them): the last `--max-total-tokens N --mem-fraction-static
    F` in a row."""
    for i in range(len(argv) - 4, -1, -1):
        if (argv[i], argv[i + 2]) == POOL_FLAGS:
            return argv[:i] + argv[i + 4 :]
    return argv
