"""Where the built tuner plugin is, and a ctypes binding to its own entry points.

`find_plugin()` looks, in order, at `$FASTVERIFY_TUNER_SO`, the image's install path
(`/usr/local/lib/fastverify/libnccl-tuner-fastverify.so`, built by the Dockerfile), a copy
packaged next to this module (`fastverify/tuner/_native/`) and the checkout's build
output (`native/tuner/build/`, written by `scripts/build-tuner.sh`).

`Plugin(path)` opens the library with ctypes. Inside a process where NCCL already loaded
it (NCCL_TUNER_PLUGIN=<same path>), the dynamic loader returns the same copy, so
`force()` steers NCCL's choices and `stats()` reads what the plugin did; the derivation
worker uses this to measure every candidate in one process.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from fastverify.tuner.table import ALGORITHMS, PROTOCOLS

LIB_NAME = "libnccl-tuner-fastverify.so"
SO_ENV = "FASTVERIFY_TUNER_SO"
TABLE_ENV = "FASTVERIFY_TUNER_TABLE"  # read by the plugin at communicator init
PLUGIN_NAME = (
    "fastverify"  # ncclTunerPlugin_vN.name: NCCL logs "TUNER/Plugin: Using fastverify (vN)"
)
IMAGE_PATH = Path("/usr/local/lib/fastverify") / LIB_NAME
ABI_VERSIONS = {
    5: "NCCL 2.28 and newer (2.30.7 ships with torch 2.14.1, SGLang 0.5.23's pin)",
    4: "NCCL 2.24 - 2.27",
    3: "NCCL 2.22 - 2.23",
}
REFUSED_ABI_VERSIONS = {2: "NCCL 2.21", 1: "NCCL 2.19 - 2.20"}


def candidates() -> list[Path]:
    out: list[Path] = []
    if env := os.environ.get(SO_ENV):
        out.append(Path(env))
    here = Path(__file__).resolve().parent
    out += [IMAGE_PATH, here / "_native" / LIB_NAME]
    out.append(here.parent.parent / "native" / "tuner" / "build" / LIB_NAME)
    return out


def find_plugin() -> Path | None:
    """The first existing plugin file (absolute), or None when it is not built."""
    for p in candidates():
        if p.is_file():
            return p.resolve()
    return None


def not_found_message() -> str:
    where = ", ".join(str(p) for p in candidates())
    return (
        f"the fastverify tuner plugin is not built (looked at {where}); "
        "build it with scripts/build-tuner.sh, or set FASTVERIFY_TUNER_SO"
    )


class _Stats(ctypes.Structure):
    _fields_ = [
        ("calls", ctypes.c_int64),
        ("applied", ctypes.c_int64),
        ("channels_set", ctypes.c_int64),
        ("unavailable", ctypes.c_int64),
        ("abi_mismatch", ctypes.c_int64),
        ("no_row", ctypes.c_int64),
        ("last_coll", ctypes.c_int32),
        ("last_default_algo", ctypes.c_int32),
        ("last_default_proto", ctypes.c_int32),
        ("last_algo", ctypes.c_int32),
        ("last_proto", ctypes.c_int32),
        ("last_channels", ctypes.c_int32),
        ("last_applied", ctypes.c_int32),
        ("last_bytes", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class Stats:
    """Counters since the last reset, and the last call's decision (-1: NCCL's own)."""

    calls: int
    applied: int
    channels_set: int
    unavailable: int
    abi_mismatch: int
    no_row: int
    last_coll: int
    last_default_algo: int
    last_default_proto: int
    last_algo: int
    last_proto: int
    last_channels: int
    last_applied: int
    last_bytes: int

    @property
    def default_choice(self) -> str | None:
        return choice_name(self.last_default_algo, self.last_default_proto)

    def to_dict(self) -> dict[str, int | str | None]:
        d: dict[str, int | str | None] = dict(asdict(self))
        d["default_choice"] = self.default_choice
        return d


def choice_name(algo: int, proto: int) -> str | None:
    """(1, 0) -> 'RING/LL' (the spelling of NCCL's TUNING lines); None when unset."""
    if not (0 <= algo < len(ALGORITHMS) and 0 <= proto < len(PROTOCOLS)):
        return None
    return f"{ALGORITHMS[algo].upper()}/{PROTOCOLS[proto].upper()}"


class Plugin:
    """ctypes view of the plugin's own functions (`fastverify_tuner_*`)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self.lib = ctypes.CDLL(self.path)
        lib = self.lib
        lib.fastverify_tuner_version.restype = ctypes.c_char_p
        lib.fastverify_tuner_force.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.fastverify_tuner_force.restype = ctypes.c_int
        lib.fastverify_tuner_stats.argtypes = [ctypes.POINTER(_Stats)]
        lib.fastverify_tuner_stats.restype = None
        lib.fastverify_tuner_reset_stats.restype = None
        lib.fastverify_tuner_context_rows.argtypes = [ctypes.c_void_p]
        lib.fastverify_tuner_context_rows.restype = ctypes.c_int

    def version(self) -> str:
        return self.lib.fastverify_tuner_version().decode()

    def force(self, algorithm: str | None, protocol: str | None, channels: int | None) -> None:
        """Force one candidate for every following collective (all None: off)."""
        a = -1 if algorithm is None else ALGORITHMS.index(algorithm)
        p = -1 if protocol is None else PROTOCOLS.index(protocol)
        c = -1 if channels is None else channels
        if self.lib.fastverify_tuner_force(a, p, c) != 0:
            raise ValueError(f"plugin refused force({algorithm}, {protocol}, {channels})")

    def stats(self) -> Stats:
        s = _Stats()
        self.lib.fastverify_tuner_stats(ctypes.byref(s))
        return Stats(**{f[0]: getattr(s, f[0]) for f in _Stats._fields_})

    def reset_stats(self) -> None:
        self.lib.fastverify_tuner_reset_stats()
