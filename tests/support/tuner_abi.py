"""ctypes views of the tuner ABI structs (v1..v5) and a fake NCCL cost table, so tests
call the real plugin's init/getCollInfo/finalize the way NCCL does.

Layouts follow NCCL's plugin headers (src/include/plugin/tuner/tuner_vN.h): a name
pointer followed by function pointers; the cost table is a flat float[numAlgo][numProto]
with -1 for "not available". On the GPU the same .so is loaded by NCCL 2.28.9 itself
(benchmarks/results/tuner-2gpu.json, tests/fixtures/nccl-2.28.9-tuner/).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

RESULT = ctypes.c_int
LOGGER = ctypes.CFUNCTYPE(
    None,
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_char_p,
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_char_p,
)  # fmt: skip  (the plugin always logs with fmt "%s" and one string)
VP = ctypes.c_void_p
PP = ctypes.POINTER(ctypes.c_void_p)
FPP = ctypes.POINTER(ctypes.POINTER(ctypes.c_float))
IP = ctypes.POINTER(ctypes.c_int)
SZ = ctypes.c_size_t

NUM_ALGO, NUM_PROTO = 7, 3
TREE, RING, PAT = 0, 1, 6
LL, LL128, SIMPLE = 0, 1, 2
ALLREDUCE, ALLGATHER = 4, 2


class V5(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("init", ctypes.CFUNCTYPE(RESULT, PP, ctypes.c_uint64, SZ, SZ, LOGGER, VP, VP)),
        ("getCollInfo", ctypes.CFUNCTYPE(
            RESULT, VP, ctypes.c_int, SZ, ctypes.c_int, FPP, ctypes.c_int, ctypes.c_int,
            ctypes.c_int, IP)),
        ("finalize", ctypes.CFUNCTYPE(RESULT, VP)),
    ]  # fmt: skip


class V4(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("init", ctypes.CFUNCTYPE(RESULT, SZ, SZ, LOGGER, PP)),
        ("getCollInfo", ctypes.CFUNCTYPE(
            RESULT, VP, ctypes.c_int, SZ, ctypes.c_int, FPP, ctypes.c_int, ctypes.c_int,
            ctypes.c_int, IP)),
        ("destroy", ctypes.CFUNCTYPE(RESULT, VP)),
    ]  # fmt: skip


class V3(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("init", ctypes.CFUNCTYPE(RESULT, SZ, SZ, LOGGER, PP)),
        ("getCollInfo", ctypes.CFUNCTYPE(
            RESULT, VP, ctypes.c_int, SZ, ctypes.c_int, FPP, ctypes.c_int, ctypes.c_int, IP)),
        ("destroy", ctypes.CFUNCTYPE(RESULT, VP)),
    ]  # fmt: skip


class V2(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("init", ctypes.CFUNCTYPE(RESULT, SZ, SZ, LOGGER, PP)),
        ("getCollInfo", ctypes.CFUNCTYPE(
            RESULT, VP, ctypes.c_int, SZ, ctypes.c_int, ctypes.c_int, ctypes.c_int, IP, IP,
            IP)),
        ("destroy", ctypes.CFUNCTYPE(RESULT, VP)),
    ]  # fmt: skip


def cost_table(values: dict[tuple[int, int], float] | None = None, default: float = -1.0):
    """A fresh float[7][3] (flat), every entry `default` unless given in `values`."""
    arr = (ctypes.c_float * (NUM_ALGO * NUM_PROTO))()
    for i in range(NUM_ALGO * NUM_PROTO):
        arr[i] = default
    for (a, p), v in (values or {}).items():
        arr[a * NUM_PROTO + p] = v
    return arr


def nccl_pick(arr) -> tuple[int, int]:
    """What NCCL's topoGetAlgoInfo takes: the smallest entry >= 0 (first on ties)."""
    best, pick = 3.6e9, (-1, -1)
    for a in range(NUM_ALGO):
        for p in range(NUM_PROTO):
            t = arr[a * NUM_PROTO + p]
            if t >= 0 and t < best:
                best, pick = t, (a, p)
    return pick


class Logs:
    """A logger callback that records (level, message) pairs."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, str]] = []
        self.cb = LOGGER(self._log)

    def _log(self, level, flags, file, line, fmt, msg):
        self.lines.append((level, (msg or b"").decode()))

    def warns(self) -> list[str]:
        return [m for lvl, m in self.lines if lvl == 2]

    def infos(self) -> list[str]:
        return [m for lvl, m in self.lines if lvl == 3]


@contextmanager
def table_env(monkeypatch, path) -> Iterator[None]:
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(path))
    yield


def symbol(lib: ctypes.CDLL, name: str, struct):
    return struct.in_dll(lib, name)


def v5_session(lib: ctypes.CDLL, nranks: int = 2, nnodes: int = 1):
    """(struct, context, logs) after a v5 init, as NCCL 2.28 does per communicator."""
    s = symbol(lib, "ncclTunerPlugin_v5", V5)
    logs = Logs()
    ctx = ctypes.c_void_p()
    rc = s.init(ctypes.byref(ctx), 0x1234, nranks, nnodes, logs.cb, None, None)
    assert rc == 0
    return s, ctx, logs


def call(s, ctx, nbytes: int, arr, coll: int = ALLREDUCE, version: int = 5) -> int:
    """getCollInfo with the cost table `arr`; returns the nChannels it left (0: NCCL's)."""
    nch = ctypes.c_int(0)
    tbl = ctypes.cast(arr, FPP)
    if version == 3:
        rc = s.getCollInfo(ctx, coll, nbytes, 1, tbl, NUM_ALGO, NUM_PROTO, ctypes.byref(nch))
    else:
        rc = s.getCollInfo(ctx, coll, nbytes, 1, tbl, NUM_ALGO, NUM_PROTO, 0, ctypes.byref(nch))
    assert rc == 0
    return nch.value
