"""Whether a standby switch fits: the new engine started beside the serving one needs, per
GPU, its own KV pool, CUDA graphs and activations (and an EAGLE-3 drafter read from disk)
while both share the weights a part of the daemon maps for both (its `Sharing`). Decided
from what the serving engine holds now (NVML per process) against each GPU's memory;
without shared weights, without a reading, or when it does not fit, the switch holds
instead, and says why. `decide` is the rule; fastverifyd reads the figures
(daemon/frontdoor.py `standby_fit`)."""

from __future__ import annotations

from dataclasses import dataclass

GIB = float(1 << 30)
HEADROOM = 0.05  # of each GPU: the allocator's slack and the second CUDA context


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


@dataclass(frozen=True)
class Fit:
    mode: str  # "standby" | "hold"
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"mode": self.mode, "why": self.why}


def decide(
    *,
    sharing: Sharing | None,
    gpu_bytes: int | None,
    tp: int,
    engine_bytes: int | None,
) -> Fit:
    """`sharing`: what the two engines would share (None: nothing), with what it holds on
    all GPUs; `gpu_bytes`: one GPU's memory; `engine_bytes`: what the serving engine's
    processes hold on all their GPUs together, the shared weights excluded (NVML counts
    them with the processes that map them for both)."""
    if sharing is None or not sharing.serves:
        return Fit("hold", (sharing.why if sharing is not None else None) or NOTHING_SHARED)
    shared_bytes = sharing.bytes
    if gpu_bytes is None or engine_bytes is None or shared_bytes is None:
        return Fit("hold", "no GPU memory reading here (nvidia-smi and NVML): the overlap "
                   "of two engines cannot be checked")  # fmt: skip
    per_engine = engine_bytes / tp
    shared = shared_bytes / tp
    need = shared + 2 * per_engine
    have = gpu_bytes * (1 - HEADROOM)
    text = (f"2 x {per_engine / GIB:.1f} GiB (KV pool, graphs, activations) beside "
            f"{shared / GIB:.1f} GiB of shared weights = {need / GIB:.1f} GiB per GPU")  # fmt: skip
    if need <= have:
        return Fit("standby", f"standby: {text} fits in {gpu_bytes / GIB:.0f} GiB")
    return Fit("hold", f"hold: {text} does not fit in {gpu_bytes / GIB:.0f} GiB (less "
               f"{HEADROOM:.0%} headroom); a smaller KV share for the switch would")  # fmt: skip
