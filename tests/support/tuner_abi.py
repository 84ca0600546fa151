"""ctypes views of the tuner ABI structs (v2..v6) and a fake NCCL cost table, so tests
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
TREE, RING, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT = 0, 1, 3, 4, 5, 6
LL, LL128, SIMPLE = 0, 1, 2
ALLREDUCE, ALLGATHER = 4, 2


# the function types of NCCL's tuner_vN.h; getCollInfo gained regBuff in v4, init the
# commId (and moved the context out-parameter first) in v5
INIT_V2 = ctypes.CFUNCTYPE(RESULT, SZ, SZ, LOGGER, PP)  # nRanks, nNodes, log, &context
INIT_V5 = ctypes.CFUNCTYPE(RESULT, PP, ctypes.c_uint64, SZ, SZ, LOGGER, VP, VP)
GET_V2 = ctypes.CFUNCTYPE(  # collNetSupport, nvlsSupport, numPipeOps, &algo, &proto, &nCh
    RESULT, VP, ctypes.c_int, SZ, ctypes.c_int, ctypes.c_int, ctypes.c_int, IP, IP, IP
)
GET_V3 = ctypes.CFUNCTYPE(RESULT, VP, ctypes.c_int, SZ, ctypes.c_int, FPP, ctypes.c_int,
                          ctypes.c_int, IP)  # fmt: skip
GET_V4 = ctypes.CFUNCTYPE(RESULT, VP, ctypes.c_int, SZ, ctypes.c_int, FPP, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, IP)  # fmt: skip
CHUNK_V6 = ctypes.CFUNCTYPE(RESULT, VP, ctypes.c_int, SZ, ctypes.c_int, ctypes.c_int,
                            ctypes.c_int, ctypes.POINTER(SZ))  # fmt: skip
END = ctypes.CFUNCTYPE(RESULT, VP)  # destroy (v2-v4), finalize (v5, v6)
NAME = ("name", ctypes.c_char_p)


class V6(ctypes.Structure):
    _fields_ = [NAME, ("init", INIT_V5), ("getCollInfo", GET_V4), ("finalize", END),
                ("getChunkSize", CHUNK_V6)]  # fmt: skip


class V5(ctypes.Structure):
    _fields_ = [NAME, ("init", INIT_V5), ("getCollInfo", GET_V4), ("finalize", END)]


class V4(ctypes.Structure):
    _fields_ = [NAME, ("init", INIT_V2), ("getCollInfo", GET_V4), ("destroy", END)]


class V3(ctypes.Structure):
    _fields_ = [NAME, ("init", INIT_V2), ("getCollInfo", GET_V3), ("destroy", END)]


class V2(ctypes.Structure):
    _fields_ = [NAME, ("init", INIT_V2), ("getCollInfo", GET_V2), ("destroy", END)]


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
    return s, init(s, 5, nranks, nnodes, logs.cb), logs


VERSIONS = {6: V6, 5: V5, 4: V4, 3: V3, 2: V2}


def exported(lib: ctypes.CDLL) -> tuple[int, ctypes.Structure]:
    """The newest ncclTunerPlugin_vN the library exports, as NCCL looks for it (newest
    first), and its struct."""
    for version, struct in VERSIONS.items():
        try:
            return version, symbol(lib, f"ncclTunerPlugin_v{version}", struct)
        except ValueError:
            continue
    raise LookupError(f"{lib._name} exports no ncclTunerPlugin_v2..v6")


def init(s, version: int, nranks: int, nnodes: int, logger) -> ctypes.c_void_p:
    """The plugin's init in its ABI's signature (v5 and v6 take the commId first)."""
    ctx = ctypes.c_void_p()
    if version >= 5:
        rc = s.init(ctypes.byref(ctx), 0x1234, nranks, nnodes, logger, None, None)
    else:
        rc = s.init(nranks, nnodes, logger, ctypes.byref(ctx))
    if rc != 0:
        raise RuntimeError(f"init returned {rc}")
    return ctx


def close(s, ctx, version: int) -> None:
    (s.finalize if version >= 5 else s.destroy)(ctx)


def row_pointers(arr):
    """`arr` as a float* per algorithm: the float** that example plugins before NCCL 2.30
    index as table[algo][proto] (NCCL itself passes the flat array cast to float**)."""
    rows = (ctypes.POINTER(ctypes.c_float) * NUM_ALGO)()
    for a in range(NUM_ALGO):
        rows[a] = ctypes.cast(ctypes.byref(arr, a * NUM_PROTO * ctypes.sizeof(ctypes.c_float)),
                              ctypes.POINTER(ctypes.c_float))  # fmt: skip
    return rows


def call(s, ctx, nbytes: int, arr, coll: int = ALLREDUCE, version: int = 5,
         table=None) -> int:  # fmt: skip
    """getCollInfo with the cost table `arr`; returns the nChannels it left (0: NCCL's).
    `table`: what the plugin gets as float** (default: `arr` itself, as NCCL passes it).
    v2 has no cost table: NCCL's v2 adapter zeroes the cost of the algorithm/protocol it
    returned, as done here."""
    nch = ctypes.c_int(0)
    tbl = ctypes.cast(arr if table is None else table, FPP)
    if version == 2:
        algo, proto = ctypes.c_int(-1), ctypes.c_int(-1)
        nvls = int(
            arr[NVLS * NUM_PROTO + SIMPLE] != -1 or arr[NVLS_TREE * NUM_PROTO + SIMPLE] != -1
        )
        collnet = int(arr[COLLNET_CHAIN * NUM_PROTO + SIMPLE] != -1)
        rc = s.getCollInfo(ctx, coll, nbytes, collnet, nvls, 1, ctypes.byref(algo),
                           ctypes.byref(proto), ctypes.byref(nch))  # fmt: skip
        a, p = algo.value, proto.value
        if 0 <= a < NUM_ALGO and 0 <= p < NUM_PROTO and arr[a * NUM_PROTO + p] != -1:
            arr[a * NUM_PROTO + p] = 0.0
    elif version == 3:
        rc = s.getCollInfo(ctx, coll, nbytes, 1, tbl, NUM_ALGO, NUM_PROTO, ctypes.byref(nch))
    else:
        rc = s.getCollInfo(ctx, coll, nbytes, 1, tbl, NUM_ALGO, NUM_PROTO, 0, ctypes.byref(nch))
    assert rc == 0
    return nch.value
