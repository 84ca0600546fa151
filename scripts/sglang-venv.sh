#!/usr/bin/env bash
# The real SGLang for the contract suite (tests/contract/): a cached virtualenv with
# sglang==$SGLANG_VERSION (no dependencies resolved by pip), its torch and only the modules
# the imports the suite uses really need. Idempotent: a complete venv (stamp file matches
# this script's package list) is reused as it is; anything else is rebuilt from scratch.
#
# Usage: scripts/sglang-venv.sh [--print-python]
#   prints the venv's python on stdout (last line); progress goes to stderr.
# Cache: ${XDG_CACHE_HOME:-$HOME/.cache}/fastverify/sglang-$SGLANG_VERSION/
# The project's own .venv never gets sglang (engine auto-detection would change).
set -euo pipefail

SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
TORCH_VERSION="${TORCH_VERSION:-2.14.1}"
# The FlashInfer that sglang 0.5.23 pins: its PCIe-IPC all-reduce sources (kernel names,
# autotune cache path) are read by tests/contract/test_allreduce_contract.py. Unpacked,
# not installed, so SGLang's imports in the venv stay as they are.
FLASHINFER_VERSION="${FLASHINFER_VERSION:-0.7.2}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/fastverify"
VENV="$CACHE_ROOT/sglang-$SGLANG_VERSION"

# SGLang's own pins where it has them (its METADATA), the rest unpinned. Found by importing,
# with --no-deps, every module the contract suite and `server check` use and adding what
# failed. torch is SGLang's pinned CUDA build: with the CPU wheel, torchvision (imported by
# sglang.srt.configs, under every hook, the collector and profile_utils) cannot load its
# extension (it links libtorch_cuda.so). A CUDA torch imports and runs on a machine without
# a GPU.
DEPS=(
    "torch==$TORCH_VERSION"
    torchvision
    numpy
    triton
    packaging
    pillow
    starlette
    msgspec
    pydantic
    pyzmq
    tqdm
    IPython
    aiohttp
    "apache-tvm-ffi==0.1.11"
    "sentencepiece==0.2.1"
    "compressed-tensors==0.18.0"
    "transformers==5.19.0"
    gguf
    "openai==2.8.0"
    partial_json_parser
    uvloop
    uvicorn
    fastapi
    setproctitle
    einops
    jsonschema
    "xgrammar==0.2.7"
    "soundfile==0.13.1"
    python-multipart
    prometheus-client
    psutil
    requests
    orjson
    pybase64
    dill
)
# Every module the contract suite, tests/sglang_launcher.py and `server check` import.
IMPORTS="import sglang.srt.server_args, sglang.srt.arg_groups.pipeline, \
sglang.srt.entrypoints.engine, sglang.srt.utils.profile_utils, \
sglang.srt.observability.metrics_collector, sglang.launch_server, \
sglang.srt.model_executor.model_runner_components.cuda_graph_setup"

stamp_text() {
    printf 'sglang==%s\n' "$SGLANG_VERSION"
    printf 'flashinfer-python==%s (sources unpacked to share/)\n' "$FLASHINFER_VERSION"
    printf '%s\n' "${DEPS[@]}" "$IMPORTS"
}

log() { printf 'sglang-venv: %s\n' "$*" >&2; }

# FlashInfer's sources the contract suite reads (unpacked, never installed): the PCIe-IPC
# modules and kernels, its JIT paths and builds (jit/env.py, comm.py, tllm_utils.py) and the
# autotuner (its log lines). FI_MARKER names the newest file asked for: a venv unpacked by an
# older version of this script gets the missing ones added without a rebuild.
FI_DIR="$VENV/share/flashinfer-python-$FLASHINFER_VERSION"
FI_MARKER="$FI_DIR/flashinfer/autotuner/autotuner.py"
unpack_flashinfer() {
    log "unpacking flashinfer-python==$FLASHINFER_VERSION's PCIe-IPC sources into $FI_DIR"
    rm -rf "$FI_DIR.new" "$VENV/share/wheels"
    "$VENV/bin/python" -m pip download -q --no-deps "flashinfer-python==$FLASHINFER_VERSION" \
        -d "$VENV/share/wheels" 2>&1 | { grep -v 'is ignored: it is neither' || true; } >&2
    "$VENV/bin/python" - "$VENV/share/wheels" "$FI_DIR.new" <<'PY'
import pathlib, re, sys, zipfile
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
keep = re.compile(
    r"flashinfer/(comm/pcie_ipc_[^/]*\.py|comm/__init__\.py|jit/env\.py|jit/comm\.py"
    r"|jit/tllm_utils\.py|autotuner/autotuner\.py"
    r"|data/include/flashinfer/comm/pcie_ipc_[^/]*)$"
    r"|flashinfer_python-[^/]*\.dist-info/METADATA$"
)
(whl,) = wheels.glob("flashinfer_python-*.whl")
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if keep.search(n)]
    z.extractall(out, names)
print(f"{len(names)} files from {whl.name}", file=sys.stderr)
PY
    rm -rf "$FI_DIR" "$VENV/share/wheels"
    mv "$FI_DIR.new" "$FI_DIR"  # swapped whole: a reader never sees half of it
}

STAMP="$VENV/.fastverify-stamp"
if [[ -f "$STAMP" && -x "$VENV/bin/python" ]] && [[ "$(cat "$STAMP")" == "$(stamp_text)" ]]; then
    log "reusing $VENV (sglang $SGLANG_VERSION)"
    [[ -f "$FI_MARKER" ]] || unpack_flashinfer
    printf '%s\n' "$VENV/bin/python"
    exit 0
fi

# pip, quiet, without the find-links notices of this machine's pip configuration
pip_q() {
    "$VENV/bin/python" -m pip install -q "$@" 2>&1 | { grep -v 'is ignored: it is neither' || true; } >&2
}

log "building $VENV (sglang $SGLANG_VERSION, torch $TORCH_VERSION); takes a few minutes once"
mkdir -p "$CACHE_ROOT"
rm -f "$STAMP"
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
log "installing dependencies: ${DEPS[*]}"
pip_q "${DEPS[@]}"
log "installing sglang==$SGLANG_VERSION without its dependency tree"
pip_q --no-deps "sglang==$SGLANG_VERSION"
"$VENV/bin/python" -W ignore -c "$IMPORTS" >&2
unpack_flashinfer
stamp_text > "$STAMP"
log "ready: $VENV"
printf '%s\n' "$VENV/bin/python"
