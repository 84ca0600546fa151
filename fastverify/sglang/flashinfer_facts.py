"""FlashInfer 0.7.2's side of the PCIe-IPC all-reduce SGLang 0.5.23 serves with: where its JIT
libraries and tactics live, what first-start compiles cost, when cached tactics are reused,
and the autotuner's own log texts. The one home of these facts (tests/contract/ pins them to
the FlashInfer sources scripts/sglang-venv.sh unpacks; the times to the H200 fixture).

- JIT (`flashinfer/jit/env.py`, `jit/comm.py`, `jit/tllm_utils.py`): the wheel ships no
  prebuilt `pcie_ipc_comm`; the first workspace build compiles `pcie_ipc_comm.so` (nvcc, ninja)
  and the autotuner `trtllm_utils.so` (which needs the `data/csrc/nv_internal` sources) into
  `$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<arch>/cached_ops/<name>/`.
  `FLASHINFER_DISABLE_JIT` makes that build fail. Seen on one H200
  (../shared/fixtures/flashinfer-0.7.2-pcie-ipc-h200-same-gpu/ws2-results.json):
  10.6-13.0 s for `pcie_ipc_comm`, 7.0 s for `trtllm_utils`, 0.008 s at the second start.
- Tactics (`comm/pcie_ipc_tuning.py`): `$FLASHINFER_AUTOTUNE_DIR/pcie_ipc_all_reduce_ws{N}.json`;
  an entry is reused only when its key holds the same `_cache_key_head`: (tune version,
  world, topology profile, max_blocks, max_numel[, True with memop]) (`cache_covers_workspace`
  scans the keys for it). A file is therefore "reused" for a start only when it covers that
  start's workspace, not because it exists.
- Autotuner (`flashinfer/autotuner/autotuner.py`, logger `flashinfer.jit`, which SGLang's
  `configure_logger` sets to ERROR, so a server shows none of these): `[Autotuner]: Skipped N
  unsupported tactic(s) for OP ...`, `[Autotuner]: Saved N configs to PATH (A new, B from
  previous config)`, `[Autotuner]: Loaded N configs from PATH`. Without `nv_internal` every
  tactic is skipped (49 at 2 ranks) and 0 configs are saved: every start re-tunes (49.6 s).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FLASHINFER_VERSION = "0.7.2"
WORKSPACE_BASE_VAR = "FLASHINFER_WORKSPACE_BASE"
AUTOTUNE_DIR_VAR = "FLASHINFER_AUTOTUNE_DIR"
DISABLE_JIT_VAR = "FLASHINFER_DISABLE_JIT"
PCIE_IPC_LIB = "pcie_ipc_comm"
TRTLLM_UTILS_LIB = "trtllm_utils"
NV_INTERNAL_DIR = "data/csrc/nv_internal"  # inside the installed flashinfer package
# first-start compile seconds on one H200 (ws2-results.json: jit_get_pcie_ipc_comm_module,
# jit_trtllm_utils; the second start rebuilt nothing)
COMPILE_S = {PCIE_IPC_LIB: (10.6, 13.0), TRTLLM_UTILS_LIB: (7.0, 7.0)}
RETUNE_S = 49.6  # every start without nv_internal (ws2-results.json's no-nv_internal runs)
TUNE_S_2RANKS = 25.0  # tune() at 2 ranks, first start (ws2-results.json)

# comm/pcie_ipc_tuning.py
CUSTOM_OP = "flashinfer::pcie_ipc_all_reduce"
TUNE_VERSION = 3  # PCIE_IPC_TUNE_VERSION
MEMOP_TUNE_VERSION = 4  # _PCIE_IPC_MEMOP_TUNE_VERSION

# autotuner/autotuner.py
SKIPPED_RE = re.compile(r"\[Autotuner\]: Skipped (\d+) unsupported tactic\(s\) for (\S+)")
SAVED_RE = re.compile(
    r"\[Autotuner\]: Saved (\d+) configs to (\S+) \((\d+) new, (\d+) from previous config\)"
)
LOADED_RE = re.compile(r"\[Autotuner\]: Loaded (\d+) configs from (\S+)")


def first_start_note() -> str:
    """What a first PCIe-IPC start pays, for progress lines and docs."""
    lo, hi = COMPILE_S[PCIE_IPC_LIB]
    tl, _ = COMPILE_S[TRTLLM_UTILS_LIB]
    return (
        f"FlashInfer compiles {PCIE_IPC_LIB} (about {lo:g}-{hi:g} s with nvcc) and "
        f"{TRTLLM_UTILS_LIB} ({tl:g} s) at the first start, then measures its tactics "
        f"({TUNE_S_2RANKS:g} s at 2 ranks on one H200)"
    )


# `import sglang` points FlashInfer's base at SGLang's cache dir unless it is set already
# (sglang/srt/environ.py `third_party_cache_defaults`, `redirect_third_party_caches`:
# setdefault; tests/contract/test_allreduce_contract.py runs it)
SGLANG_CACHE_DIR_VAR = "SGLANG_CACHE_DIR"
SGLANG_CACHE_DIR_DEFAULT = "~/.cache/sglang"


def workspace_base(env: Mapping[str, str]) -> str:
    """FlashInfer's `FLASHINFER_WORKSPACE_BASE` inside an SGLang server whose environment is
    `env`: the variable when set, else SGLang's cache dir (`~` is `env`'s HOME). FlashInfer
    appends `.cache/flashinfer/<version>/<arch>`, so by default its JIT output and tactics
    land in `~/.cache/sglang/.cache/flashinfer/<version>/<arch>/`."""
    if env.get(WORKSPACE_BASE_VAR):
        return env[WORKSPACE_BASE_VAR]
    base = env.get(SGLANG_CACHE_DIR_VAR) or SGLANG_CACHE_DIR_DEFAULT
    if base == "~" or base.startswith("~/"):
        return (env.get("HOME") or str(Path.home())) + base[1:]
    return base


def workspace_dir(env: Mapping[str, str], version: str, arch: str) -> Path:
    """`FLASHINFER_WORKSPACE_DIR` (jit/env.py): base/.cache/flashinfer/<version>/<arch>."""
    return Path(workspace_base(env)) / ".cache" / "flashinfer" / version / arch


def jit_libraries(env: Mapping[str, str], name: str = PCIE_IPC_LIB) -> list[Path]:
    """The JIT-built `name.so` files under the environment's FlashInfer workspace, every
    version and arch (the daemon does not know the engine's GPU arch before it runs)."""
    root = Path(workspace_base(env)) / ".cache" / "flashinfer"
    try:
        return sorted(root.glob(f"*/*/cached_ops/{name}/{name}.so"))
    except OSError:
        return []


# ------------------------------------------------------------------ tactics cache
@dataclass(frozen=True)
class CacheHead:
    """`_cache_key_head` of one cached entry."""

    version: int
    world: int
    profile: str
    max_blocks: int
    max_numel: int
    memop: bool

    def needle(self) -> str:
        """What `cache_covers_workspace` looks for in a key: the head's repr, open-ended."""
        head: tuple[Any, ...] = (
            self.version, self.world, self.profile, self.max_blocks, self.max_numel
        )  # fmt: skip
        if self.memop:
            head = (*head, True)
        return repr(head)[:-1] + ", "


_HEAD_RE = re.compile(r"\((\d+), (\d+), '([^']*)', (\d+), (\d+)(, True)?, ")


def cache_keys(path: Path) -> list[str] | None:
    """The entry keys of a FlashInfer autotune cache file (None: unreadable / not JSON)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return [k for k in data if isinstance(k, str) and k.startswith("(")]


def pcie_ipc_heads(keys: Iterable[str]) -> list[CacheHead]:
    """The distinct workspace heads the PCIe-IPC entries of a cache were tuned for."""
    out: list[CacheHead] = []
    prefix = f"('{CUSTOM_OP}'"
    for key in keys:
        if not key.startswith(prefix):
            continue
        m = _HEAD_RE.search(key)
        if m is None:
            continue
        v, w, prof, blocks, numel, memop = m.groups()
        head = CacheHead(int(v), int(w), prof, int(blocks), int(numel), memop is not None)
        if head not in out:
            out.append(head)
    return out


def covers(
    keys: Iterable[str],
    *,
    world: int,
    max_numel: int,
    profile: str | None = None,
    max_blocks: int | None = None,
    memop: bool | None = None,
) -> bool:
    """`cache_covers_workspace`: some PCIe-IPC entry holds this workspace's head. Fields
    given as None are not known to the caller (FlashInfer's topology probe picks the
    profile, max_blocks and memop at run time) and match any value."""
    for h in pcie_ipc_heads(keys):
        if h.version != (MEMOP_TUNE_VERSION if h.memop else TUNE_VERSION):
            continue
        if h.world != world or h.max_numel != max_numel:
            continue
        if profile is not None and h.profile != profile:
            continue
        if max_blocks is not None and h.max_blocks != max_blocks:
            continue
        if memop is not None and h.memop != memop:
            continue
        return True
    return False


def cache_report(path: Path, *, world: int, max_numel: int | None) -> dict[str, Any]:
    """What a tactics file holds for this start: `{"path", "exists", "configs", "heads",
    "covers", "empty"}`; `covers` None when `max_numel` is not known yet."""
    keys = cache_keys(path) if path.is_file() else None
    heads = pcie_ipc_heads(keys or [])
    rep: dict[str, Any] = {
        "path": str(path),
        "exists": path.is_file(),
        "configs": len(keys) if keys is not None else None,
        "heads": [h.__dict__ for h in heads],
        "covers": None,
        "empty": keys is not None and not heads,
    }
    if keys is not None and max_numel is not None:
        rep["covers"] = covers(keys, world=world, max_numel=max_numel)
    return rep


# ------------------------------------------------------------------ autotuner lines
def parse_autotuner_line(line: str) -> dict[str, Any] | None:
    """`{"event": "skipped"|"saved"|"loaded", ...}` for FlashInfer's autotuner lines."""
    m = SKIPPED_RE.search(line)
    if m:
        return {"event": "skipped", "tactics": int(m.group(1)), "op": m.group(2)}
    m = SAVED_RE.search(line)
    if m:
        n, path, new, prev = m.groups()
        return {"event": "saved", "configs": int(n), "path": path, "new": int(new),
                "previous": int(prev)}  # fmt: skip
    m = LOADED_RE.search(line)
    if m:
        return {"event": "loaded", "configs": int(m.group(1)), "path": m.group(2)}
    return None


NO_NV_INTERNAL = (
    "FlashInfer's autotuner skipped every tactic and saved 0 configs: this FlashInfer install "
    f"lacks its {NV_INTERNAL_DIR} sources, so {TRTLLM_UTILS_LIB} cannot be built; the "
    f"kernels keep the seed policy and every start re-tunes (~{RETUNE_S:g} s). Install the "
    "full flashinfer-python wheel (or a JIT cache that holds trtllm_utils)"
)
