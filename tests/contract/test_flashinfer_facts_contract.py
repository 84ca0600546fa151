"""`fastverify.sglang.flashinfer_facts` against FlashInfer 0.7.2's own
sources (unpacked beside the contract venv by scripts/sglang-venv.sh) and the H200 fixture.

- Reuse: FlashInfer's own `_cache_key_head` and `cache_covers_workspace` scan, run
  from its source on keys of its format, give what `flashinfer_facts.covers` gives for the
  same and for every field changed (world, profile, max_blocks, max_numel, memop).
- JIT: the library names and where they are built; `trtllm_utils` needs nv_internal.
- The autotuner's lines: the texts fastverify recognises are the f-strings FlashInfer
  logs, through the `flashinfer.jit` logger that SGLang's configure_logger silences.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from fastverify.sglang import flashinfer_facts as ff

FIXTURE = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "fixtures"
    / "flashinfer-0.7.2-pcie-ipc-h200-same-gpu"
    / "ws2-results.json"
)


@pytest.fixture(scope="module")
def fi(sglang_python: Path) -> Path:
    root = sglang_python.parent.parent / "share" / f"flashinfer-python-{ff.FLASHINFER_VERSION}"
    src = root / "flashinfer"
    if not (src / "autotuner" / "autotuner.py").is_file():
        pytest.fail(f"{src}/autotuner is missing: run scripts/sglang-venv.sh (it unpacks it)")
    return src


def _functions(path: Path, names: set[str], consts: set[str]) -> dict[str, Any]:
    """The named top-level functions and constants of a FlashInfer module, run as written."""
    tree = ast.parse(path.read_text())
    keep = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name in names)
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in consts for t in n.targets))
    ]
    ns: dict[str, Any] = {"Tuple": tuple}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), ns)
    return ns


def test_cache_reuse_is_flashinfers_own_rule(fi: Path) -> None:
    ns = _functions(
        fi / "comm" / "pcie_ipc_tuning.py",
        {"_cache_key_head"},
        {"PCIE_IPC_CUSTOM_OP", "PCIE_IPC_TUNE_VERSION", "_PCIE_IPC_MEMOP_TUNE_VERSION"},
    )
    assert ns["PCIE_IPC_CUSTOM_OP"] == ff.CUSTOM_OP
    assert (ns["PCIE_IPC_TUNE_VERSION"], ns["_PCIE_IPC_MEMOP_TUNE_VERSION"]) == (
        ff.TUNE_VERSION,
        ff.MEMOP_TUNE_VERSION,
    )
    src = (fi / "comm" / "pcie_ipc_tuning.py").read_text()
    scan = src[src.index("def cache_covers_workspace") :]
    assert "prefix = f\"('{PCIE_IPC_CUSTOM_OP}'\"" in scan
    assert 'needle = repr(head)[:-1] + ", "' in scan

    def flashinfer_covers(keys: list[str], *head: Any) -> bool:  # FlashInfer's own scan
        needle = repr(ns["_cache_key_head"](*head))[:-1] + ", "
        return any(k.startswith(f"('{ff.CUSTOM_OP}'") and needle in k for k in keys)

    tuned = (2, "rootcplx-noswitch", 128, 28672, False)
    head = repr(ns["_cache_key_head"](*tuned))[:-1]
    keys = [f"('{ff.CUSTOM_OP}', 'PcieIpcRunner', ((4, 7168),), {head}, 'torch.bfloat16'))"]
    variants = [tuned, (4, *tuned[1:]), (2, "pcieswitch-pairs", 128, 28672, False),
                (2, "rootcplx-noswitch", 64, 28672, False),
                (2, "rootcplx-noswitch", 128, 57344, False),
                (2, "rootcplx-noswitch", 128, 28672, True)]  # fmt: skip
    for w, prof, blocks, numel, memop in variants:
        want = flashinfer_covers(keys, w, prof, blocks, numel, memop)
        got = ff.covers(keys, world=w, max_numel=numel, profile=prof, max_blocks=blocks,
                        memop=memop)  # fmt: skip
        assert got == want, (w, prof, blocks, numel, memop)
    assert [h.needle() for h in ff.pcie_ipc_heads(keys)] == [head + ", "]
    # a cache file of other entries only (or none: the no-nv_internal file) covers nothing
    assert not ff.covers([], world=2, max_numel=28672)


def test_jit_libraries_and_nv_internal(fi: Path) -> None:
    comm = (fi / "jit" / "comm.py").read_text()
    spec = comm[comm.index("def gen_pcie_ipc_comm_module") :]
    assert f'"{ff.PCIE_IPC_LIB}",' in spec[: spec.index("\n\n\n")]
    tll = (fi / "jit" / "tllm_utils.py").read_text()
    assert f'"{ff.TRTLLM_UTILS_LIB}",' in tll and '"nv_internal' in tll
    env = (fi / "jit" / "env.py").read_text()
    assert 'FLASHINFER_CSRC_DIR: pathlib.Path = _package_root / "data" / "csrc"' in env
    assert ff.NV_INTERNAL_DIR == "data/csrc/nv_internal"
    assert 'FLASHINFER_JIT_DIR: pathlib.Path = FLASHINFER_WORKSPACE_DIR / "cached_ops"' in env
    assert 'os.getenv("FLASHINFER_WORKSPACE_BASE"' in env
    assert 'FLASHINFER_BASE_DIR / ".cache" / "flashinfer"' in env
    # jit_libraries finds what FlashInfer builds: <base>/.cache/flashinfer/<ver>/<arch>/...
    res = json.loads(FIXTURE.read_text()) if FIXTURE.is_file() else None
    if res is not None:
        steps = {s["name"]: s for s in res["phases"]["ws2_cold"]["ranks"]["0"]["steps"]}
        so = steps["jit_get_pcie_ipc_comm_module"]["so"]["path"]
        assert re.search(rf"/\.cache/flashinfer/[^/]+/[^/]+/cached_ops/{ff.PCIE_IPC_LIB}/"
                         rf"{ff.PCIE_IPC_LIB}\.so$", so)  # fmt: skip
        lo, hi = ff.COMPILE_S[ff.PCIE_IPC_LIB]
        assert lo - 0.05 <= steps["jit_get_pcie_ipc_comm_module"]["s"] <= hi  # 10.588 s
        assert steps["jit_trtllm_utils"]["s"] == pytest.approx(ff.COMPILE_S["trtllm_utils"][0],
                                                                abs=0.05)  # fmt: skip
        assert steps["tune"]["s"] == pytest.approx(ff.TUNE_S_2RANKS, abs=0.05)


def test_autotuner_lines_are_flashinfers(fi: Path) -> None:
    src = (fi / "autotuner" / "autotuner.py").read_text()
    assert "from flashinfer.jit.core import logger" in src  # silenced by SGLang's logger setup
    skipped = 'f"[Autotuner]: Skipped {skipped_count} unsupported tactic(s) for {custom_op} "'
    assert skipped in src
    assert 'f"[Autotuner]: Saved {len(configs)} configs to {path} "' in src
    assert 'f"({num_new} new, {num_previous} from previous config)"' in src
    assert 'f"configs from {path}"' in src and 'f"[Autotuner]: Loaded {' in src
    # the lines as FlashInfer formats them parse as fastverify expects
    op = ff.CUSTOM_OP
    s = f"[Autotuner]: Skipped 49 unsupported tactic(s) for {op} (enable debug logs to see details)"
    assert ff.parse_autotuner_line(s) == {"event": "skipped", "tactics": 49, "op": op}
    saved = "[Autotuner]: Saved 0 configs to /c/ws2.json (0 new, 0 from previous config)"
    assert ff.parse_autotuner_line(saved)["configs"] == 0
    loaded = ff.parse_autotuner_line("[Autotuner]: Loaded 3 configs from /c/x.json")
    assert loaded == {"event": "loaded", "configs": 3, "path": "/c/x.json"}
