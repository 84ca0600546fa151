"""The project's own ctypes binding to libnccl: SGLang's call path for all-reduce.

SGLang 0.5.23 calls NCCL through its pynccl communicator: `ncclAllReduce` through ctypes,
on the current CUDA stream, so that it is recorded inside CUDA graphs exactly as the
server's decode and verify passes run it (`srt/distributed/device_communicators/pynccl*.py`).
`torch.distributed` adds stream hops of its own on that path; the GPU experiments measure
through this binding by default so that their decode-size figures match the server's.

Standard library only (ctypes): the GPU workers load this file by path next to torch,
never the fastverify package. Nothing here needs a GPU until a communicator is made:
`NcclLibrary().version()` works on any machine that has the library file.

Which library: the one already mapped into this process (torch loads its wheel's
`nvidia/nccl/lib/libnccl.so.2` when CUDA initialises), else the first
`nvidia/nccl/lib/libnccl.so.2` on `sys.path` (torch's wheel dependency), else the dynamic
linker's `libnccl.so.2`. `FASTVERIFY_NCCL_LIBRARY` names a file explicitly.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping
from pathlib import Path

LIBRARY_ENV = "FASTVERIFY_NCCL_LIBRARY"
SONAME = "libnccl.so.2"
UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES in nccl.h

# ncclDataType_t and ncclRedOp_t values from nccl.h (stable since NCCL 2.0; bf16 since 2.10).
DTYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "uint32": 3,
    "int64": 4,
    "uint64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
}
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


class NcclError(RuntimeError):
    """An NCCL call returned an error; the text is NCCL's own (`ncclGetErrorString`)."""


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * UNIQUE_ID_BYTES)]


def mapped_library(maps: str = "/proc/self/maps") -> str | None:
    """The libnccl already mapped into this process (torch's), or None."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rstrip("\n").split(" ")[-1]
                if os.path.basename(path).startswith("libnccl.so"):
                    return path
    except OSError:
        return None
    return None


def wheel_library(paths: list[str] | None = None) -> str | None:
    """The first `nvidia/nccl/lib/libnccl.so.2` on `paths` (default: sys.path)."""
    for entry in paths if paths is not None else sys.path:
        candidate = Path(entry or ".") / "nvidia" / "nccl" / "lib" / SONAME
        if candidate.is_file():
            return str(candidate)
    return None


def find_library(env: Mapping[str, str] | None = None) -> str:
    """Where the library comes from, in the order the module docstring gives."""
    explicit = (os.environ if env is None else env).get(LIBRARY_ENV)
    if explicit:
        if not Path(explicit).is_file():
            raise NcclError(f"{LIBRARY_ENV}={explicit}: no such file (name libnccl.so.2's path)")
        return explicit
    return mapped_library() or wheel_library() or SONAME


class NcclLibrary:
    """The functions of libnccl that an all-reduce needs, typed for ctypes."""

    def __init__(self, path: str | None = None):
        self.path = path or find_library()
        try:
            self.lib = ctypes.CDLL(self.path)
        except OSError as exc:
            raise NcclError(
                f"cannot load NCCL from {self.path}: {exc} (install torch's CUDA build, which "
                f"brings nvidia-nccl, or set {LIBRARY_ENV})"
            ) from exc
        lib = self.lib
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        lib.ncclGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
        lib.ncclCommInitRank.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
            UniqueId,
            ctypes.c_int,
        ]
        lib.ncclAllReduce.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.ncclAllGather.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]

    def check(self, result: int, call: str) -> None:
        if result != 0:
            text = self.lib.ncclGetErrorString(result).decode("utf-8", "replace")
            raise NcclError(f"{call} failed: {text} (ncclResult_t {result})")

    def version_code(self) -> int:
        """NCCL_VERSION_CODE of the loaded library, e.g. 23007 for 2.30.7."""
        out = ctypes.c_int()
        self.check(self.lib.ncclGetVersion(ctypes.byref(out)), "ncclGetVersion")
        return out.value

    def version(self) -> str:
        """The version as NCCL prints it ("2.30.7"); codes >= 10000 are major*10000+minor*100."""
        code = self.version_code()
        if code >= 10000:
            return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
        return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"

    def unique_id(self) -> bytes:
        uid = UniqueId()
        self.check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return bytes(uid.internal)

    def communicator(self, world: int, rank: int, uid: bytes) -> Communicator:
        """A communicator of `world` ranks (every rank passes rank 0's `unique_id()`)."""
        if len(uid) != UNIQUE_ID_BYTES:
            raise NcclError(f"unique id has {len(uid)} bytes (expected {UNIQUE_ID_BYTES})")
        handle = ctypes.c_void_p()
        packed = UniqueId()
        ctypes.memmove(packed.internal, uid, UNIQUE_ID_BYTES)
        self.check(
            self.lib.ncclCommInitRank(ctypes.byref(handle), world, packed, rank),
            "ncclCommInitRank",
        )
        return Communicator(self, handle, world, rank)


class Communicator:
    """One rank's NCCL communicator: in-place or out-of-place all-reduce on a stream."""

    def __init__(self, nccl: NcclLibrary, handle: ctypes.c_void_p, world: int, rank: int):
        self.nccl = nccl
        self.handle = handle
        self.world = world
        self.rank = rank

    def all_reduce(
        self,
        send_ptr: int,
        recv_ptr: int,
        count: int,
        dtype: str,
        stream: int,
        op: str = "sum",
    ) -> None:
        """`ncclAllReduce` of `count` elements on the CUDA stream handle `stream`.

        Pointers and the stream are plain integers (`tensor.data_ptr()`,
        `torch.cuda.current_stream().cuda_stream`); inside `torch.cuda.graph` capture the
        call is recorded into the graph like any kernel launch on that stream."""
        self._collective("ncclAllReduce", send_ptr, recv_ptr, count, dtype, stream, OPS[op])

    def all_gather(self, send_ptr: int, recv_ptr: int, count: int, dtype: str, stream: int) -> None:
        """`ncclAllGather`: `count` elements from every rank, rank order, into `recv_ptr`."""
        self._collective("ncclAllGather", send_ptr, recv_ptr, count, dtype, stream)

    def _collective(
        self, fn: str, send_ptr: int, recv_ptr: int, count: int, dtype: str, stream: int, *op: int
    ) -> None:
        """NCCL's collective call shape: (send, recv, count, datatype[, op], comm, stream)."""
        if dtype not in DTYPES:
            raise NcclError(f"dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
        call = getattr(self.nccl.lib, fn)
        self.nccl.check(
            call(
                ctypes.c_void_p(send_ptr),
                ctypes.c_void_p(recv_ptr),
                count,
                DTYPES[dtype],
                *op,
                self.handle,
                ctypes.c_void_p(stream),
            ),
            fn,
        )

    def destroy(self) -> None:
        if self.handle:
            self.nccl.check(self.nccl.lib.ncclCommDestroy(self.handle), "ncclCommDestroy")
            self.handle = ctypes.c_void_p()


# Why same-GPU ranks get no NCCL communicator: NCCL refuses a communicator whose ranks share
# a device (ncclCommInitRank fails with ncclInvalidUsage, "Duplicate GPU detected" in its log).
SAME_GPU_NCCL = (
    "NCCL refuses two ranks on one GPU (ncclCommInitRank: ncclInvalidUsage, 'Duplicate GPU "
    "detected'); these ranks share a GPU, so NCCL candidates need one GPU per rank"
)


class RankGroup:
    """One rank's TP group in the GPU experiments, on the call path measured.

    `call="pynccl"`: a gloo process group only for set-up (rank 0's unique id, barriers) and
    NCCL through this binding on the current stream, as SGLang does; `call="torch"`:
    torch.distributed for everything (the gloo testing backend always runs this way).
    `nccl=False` (ranks sharing one GPU, which NCCL refuses: `SAME_GPU_NCCL`): the gloo group
    alone and no NCCL communicator; an all-reduce then goes through gloo (eager only, a CUDA
    graph cannot capture it) and `has_nccl` is False so callers keep their collectives off it."""

    def __init__(self, dist, torch, *, backend: str, call: str, rank: int, world: int,
                 device=None, nccl: bool = True):  # fmt: skip
        self.dist, self.torch = dist, torch
        self.cuda = backend == "nccl"
        self.has_nccl = self.cuda and nccl
        self.call = call if self.has_nccl else ("gloo" if self.cuda else "torch")
        kwargs = {"backend": "gloo" if self.call in ("pynccl", "gloo") else backend,
                  "rank": rank, "world_size": world}  # fmt: skip
        if self.has_nccl and self.call == "torch":
            kwargs["device_id"] = device  # eager NCCL communicator init
        dist.init_process_group(**kwargs)
        self.comm = torch_communicator(dist) if self.call == "pynccl" else None

    def all_reduce(self, tensor) -> None:
        """In-place sum over the group."""
        if self.comm is not None:
            torch_all_reduce(self.comm, tensor, self.torch)
        elif self.call == "gloo" and self.torch.cuda.is_current_stream_capturing():
            raise NcclError(f"an all-reduce inside a CUDA graph needs NCCL: {SAME_GPU_NCCL}")
        else:
            self.dist.all_reduce(tensor)

    def all_gather(self, out, tensor) -> None:
        """Every rank's `tensor` into `out` (world x its size), in rank order."""
        if self.comm is not None:
            torch_all_gather(self.comm, out, tensor, self.torch)
        elif self.cuda:
            self.dist.all_gather_into_tensor(out, tensor)
        else:
            self.dist.all_gather(list(out.chunk(self.dist.get_world_size())), tensor)

    def destroy(self) -> None:
        if self.comm is not None:
            self.comm.destroy()
        self.dist.destroy_process_group()


def torch_communicator(dist, nccl: NcclLibrary | None = None) -> Communicator:
    """SGLang's bootstrap: rank 0's unique id handed to every rank over the process group
    already set up (gloo, on the CPU), then one NCCL communicator per rank."""
    nccl = nccl or NcclLibrary()
    rank, world = dist.get_rank(), dist.get_world_size()
    uid = [nccl.unique_id() if rank == 0 else None]
    dist.broadcast_object_list(uid, src=0)
    if uid[0] is None:  # torch filled it in from rank 0 (its broadcast raises otherwise)
        raise NcclError("rank 0's NCCL unique id did not arrive")
    return nccl.communicator(world, rank, uid[0])


def _dtype(tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def torch_all_reduce(comm: Communicator, tensor, torch) -> None:
    """In-place sum of a contiguous CUDA tensor on torch's current stream (SGLang's path)."""
    stream = torch.cuda.current_stream().cuda_stream
    comm.all_reduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), _dtype(tensor), stream)


def torch_all_gather(comm: Communicator, out, tensor, torch) -> None:
    """Every rank's contiguous `tensor` into `out` (world x its size), on the current stream."""
    stream = torch.cuda.current_stream().cuda_stream
    comm.all_gather(tensor.data_ptr(), out.data_ptr(), tensor.numel(), _dtype(tensor), stream)
