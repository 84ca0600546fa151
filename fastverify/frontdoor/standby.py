"""Whether a standby switch fits: the new engine started beside the serving one needs, per
GPU, its own KV pool, CUDA graphs, CUDA context and whatever weights it loads itself (an
EAGLE-3 drafter read from disk) while both share the weights a part of the daemon maps for
both (its `Sharing`).

The serving engine's own figures are SGLang's start-up lines, read as its log goes by
(`EngineMemory`: `Load weight end ... mem usage`, `KV Cache is allocated ... KV size`,
`... CUDA graph end ... mem usage`, `Init torch distributed ends. mem usage`), the same lines
on the sim and on a real server. The shared weights are what that part holds, one GPU's
memory what the engine reports (nvidia-smi, or the sim's simulated GPU). Without shared
weights, without a reading, or when it does not fit, the switch holds instead, and says
why. `decide` is the rule; fastverifyd reads the figures (daemon/frontdoor.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastverify.sglang.loglines import memory_record

GIB = float(1 << 30)
HEADROOM = 0.05  # of each GPU: the allocator's slack and the second CUDA context


@dataclass
class EngineMemory:
    """One engine's own memory on its fullest GPU (GiB), from its start-up lines."""

    ranks: dict[int, dict[str, float]] = field(default_factory=dict)
    tokens: dict[int, int] = field(default_factory=dict)  # each rank's first pool: the target's

    def read(self, line: str) -> None:
        rec = memory_record(line)
        if rec is None:
            return
        figures = self.ranks.setdefault(rec.rank, {})
        figures[rec.what] = figures.get(rec.what, 0.0) + rec.gib
        if rec.tokens is not None:
            self.tokens.setdefault(rec.rank, rec.tokens)

    @property
    def kv_tokens(self) -> int | None:
        return min(self.tokens.values()) if self.tokens else None

    def figures(self) -> dict[str, float] | None:
        """{kv, graphs, context, weights} of the fullest rank; None before its KV pool."""
        full = [f for f in self.ranks.values() if "kv" in f]
        if not full:
            return None
        top = max(full, key=lambda f: sum(v for k, v in f.items() if k != "pools"))
        return {k: top.get(k, 0.0) for k in ("kv", "graphs", "context", "weights")}


@dataclass(frozen=True)
class Fit:
    mode: str  # "standby" | "hold"
    why: str
    kv_tokens: int | None = None  # the standby engine's KV pool (--max-total-tokens) if smaller

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "why": self.why}
        if self.kv_tokens is not None:
            out["kv_tokens"] = self.kv_tokens
        return out


def _gib(x: float) -> str:
    return f"{x:.1f} GiB"


@dataclass(frozen=True)
class Sharing:
    """What a second engine of a mode would share with the serving one (a part of the
    daemon answers it: daemon/parts.py): `serves` whether it does, `why` why not, `bytes`
    what the shared memory holds on all GPUs together (None: unknown)."""

    serves: bool
    why: str | None = None
    bytes: int | None = None


NOTHING_SHARED = (
    "standby needs shared weights (none of the daemon's parts maps them for two engines): "
    "a second engine would load a second copy of the weights"
)


def decide(
    *,
    sharing: Sharing | None,
    gpu_bytes: int | None,
    tp: int,
    engine: dict[str, float] | None,
    kv_tokens: int | None,
    kv_share: float = 1.0,
) -> Fit:
    """`sharing`: what the two engines would share (None: nothing), with what it holds on
    all GPUs; `gpu_bytes`: one GPU's memory; `engine`: the serving engine's own GiB on its
    fullest GPU (`EngineMemory.figures`); `kv_share`: the standby engine's KV pool as a
    share of the serving one's."""
    if sharing is None or not sharing.serves:
        return Fit("hold", (sharing.why if sharing is not None else None) or NOTHING_SHARED)
    shared_bytes = sharing.bytes
    missing = [what for what, value in (
        ("the GPU's size (nvidia-smi)", gpu_bytes),
        ("the shared weights' bytes", shared_bytes),
        ("the serving engine's memory lines (KV Cache is allocated ...)", engine),
    ) if value is None]  # fmt: skip
    if missing or gpu_bytes is None or engine is None or shared_bytes is None:
        return Fit("hold", f"no memory reading here ({', '.join(missing)} unknown): the "
                   "overlap of two engines cannot be checked")  # fmt: skip
    shared = shared_bytes / tp / GIB
    gpu = gpu_bytes / GIB
    have = gpu * (1 - HEADROOM)
    rest = engine["graphs"] + engine["context"] + engine["weights"]
    old = engine["kv"] + rest
    new = engine["kv"] * kv_share + rest
    parts = f"graphs {_gib(engine['graphs'])}"
    if engine["context"] >= 0.05:
        parts += f" + context {_gib(engine['context'])}"
    if engine["weights"] >= 0.05:
        parts += f" + own weights {_gib(engine['weights'])}"
    where = f"beside {_gib(shared)} of shared weights"
    if kv_share >= 1:
        text = f"2 x (KV {_gib(engine['kv'])} + {parts}) {where}"
    else:
        text = (f"(KV {_gib(engine['kv'])} serving + {_gib(engine['kv'] * kv_share)} standby, "
                f"standby_kv_share {kv_share:g}) + 2 x ({parts}) {where}")  # fmt: skip
    need = shared + old + new
    small = None if kv_share >= 1 or kv_tokens is None else max(1, int(kv_tokens * kv_share))
    if need <= have:
        why = f"standby: {text} = {_gib(need)} fits in {gpu:.0f} GiB"
        if small is not None:
            why += (f"; the new engine serves with a KV pool of {small} tokens ({kv_share:.0%} "
                    "of the old one's) until its next restart")  # fmt: skip
        return Fit("standby", why, small)
    room = (have - shared - old - rest) / engine["kv"] if engine["kv"] else 0.0
    hint = (f"; [frontdoor] standby_kv_share = {int(room * 20) / 20:g} would fit (the new "
            "engine then serves with that smaller KV pool)" if room >= 0.05 else "")  # fmt: skip
    return Fit("hold", f"hold: {text} = {_gib(need)} does not fit in {gpu:.0f} GiB (less "
               f"{HEADROOM:.0%} headroom){hint}")  # fmt: skip
