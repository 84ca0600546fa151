"""The ctypes binding (fastverify/nccl/pynccl.py) against the real libnccl and nccl.h.

The contract venv's torch brings NVIDIA's NCCL wheel (nvidia-nccl-cu13): its header gives the
enum values and the unique-id size that the binding hard-codes, and its library answers
ncclGetVersion and ncclGetUniqueId without a GPU. A new NCCL that renumbers a type, or a
torch that stops shipping the library where the binding looks, fails here.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from fastverify.nccl import pynccl

REPO = Path(__file__).resolve().parents[2]


def _venv_site(sglang_python: Path) -> Path:
    out = subprocess.run(
        [str(sglang_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(out.stdout.strip())


@pytest.fixture(scope="module")
def nccl_wheel(sglang_python: Path) -> Path:
    root = _venv_site(sglang_python) / "nvidia" / "nccl"
    if not (root / "lib" / pynccl.SONAME).is_file():
        pytest.fail(f"{root}/lib/{pynccl.SONAME} is missing: torch's NCCL wheel moved")
    return root


def _enum(header: str, name: str) -> int:
    m = re.search(rf"\b{name}\s*=\s*(\d+)", header)
    assert m, f"{name} not found in nccl.h"
    return int(m.group(1))


def test_enum_values_and_id_size_match_the_real_header(nccl_wheel: Path) -> None:
    header = (nccl_wheel / "include" / "nccl.h").read_text()
    names = {"bfloat16": "ncclBfloat16", "float16": "ncclFloat16", "float32": "ncclFloat32",
             "float64": "ncclFloat64", "int8": "ncclInt8", "uint8": "ncclUint8",
             "int32": "ncclInt32", "uint32": "ncclUint32", "int64": "ncclInt64",
             "uint64": "ncclUint64"}  # fmt: skip
    assert {k: _enum(header, v) for k, v in names.items()} == pynccl.DTYPES
    ops = {"sum": "ncclSum", "prod": "ncclProd", "max": "ncclMax", "min": "ncclMin",
           "avg": "ncclAvg"}  # fmt: skip
    assert {k: _enum(header, v) for k, v in ops.items()} == pynccl.OPS
    size = re.search(r"#define NCCL_UNIQUE_ID_BYTES (\d+)", header)
    assert size and int(size.group(1)) == pynccl.UNIQUE_ID_BYTES


def test_binding_finds_and_calls_the_library_torch_ships(
    sglang_python: Path, nccl_wheel: Path
) -> None:
    """In torch's own interpreter: the binding finds the wheel's library on sys.path, and its
    ncclGetVersion equals the version of the installed nvidia-nccl distribution."""
    code = (
        "import json, sys, importlib.metadata as m; sys.path.insert(0, sys.argv[1]);"
        "from fastverify.nccl import pynccl; n = pynccl.NcclLibrary();"
        "dist = [d for d in m.distributions()"
        " if (d.metadata['Name'] or '').startswith('nvidia-nccl')];"
        "print(json.dumps({'path': n.path, 'version': n.version(), 'uid': len(n.unique_id()),"
        " 'dist': dist[0].version if dist else None}))"
    )
    out = subprocess.run(
        [str(sglang_python), "-c", code, str(REPO)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(got["path"]).resolve() == (nccl_wheel / "lib" / pynccl.SONAME).resolve()
    assert got["dist"] is not None and got["version"] == got["dist"]
    assert got["uid"] == pynccl.UNIQUE_ID_BYTES
