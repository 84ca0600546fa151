#!/bin/bash
# The GPU machine's entry point for benchmarks/gpu/real_sglang.py (a real SGLang 0.5.17, TP 1,
# managed by fastverifyd). Run from the checkout root, with the SGLang pack carried as .sglpack/
# (benchmarks/gpu/sglang_pack/build_pack.sh .sglpack) and fastverify's own wheels the image
# lacks (orjson, bcrypt) as .whl/ (benchmarks/gpu/README.md):
#
#   bash benchmarks/gpu/real_sglang.sh tiny [real_sglang.py options]
#   bash benchmarks/gpu/real_sglang.sh realistic [options]   # writes a random-valued
#                                                            # Llama-8B-shaped checkpoint first
#   bash benchmarks/gpu/real_sglang.sh host                  # the host's PCIe/NUMA facts only
#   bash benchmarks/gpu/real_sglang.sh spec8b [options]      # the decision tools on an
#       8B-shaped model with an EAGLE-3 head, dummy weights (benchmarks/gpu/spec_sglang.py);
#       files under .gpucarry/ (an earlier call's spec costs journal) are copied into the
#       work dir first
#   FRONTDOOR_MODE=hold bash benchmarks/gpu/real_sglang.sh frontdoor [options]
#       switches under closed-loop load through fastverifyd's front door (hold, standby or
#       off) on the 8B-shaped model (benchmarks/gpu/frontdoor_sglang.py): dummy weights, or
#       with FRONTDOOR_WEIGHTS=checkpoint (standby's default: the weight cache serves no
#       dummy weights) the realistic shape's random checkpoint with the weight cache on; its
#       files are named frontdoor-MODE-WEIGHTS (calls on a warm machine keep theirs apart)
#   bash benchmarks/gpu/real_sglang.sh tune8b [options]      # `fastverifyctl tune` on the
#       realistic shape's random checkpoint with the weight cache on, the 8B EAGLE-3 head on
#       dummy weights and SGLang's forced accept length (benchmarks/gpu/tune_sglang.py),
#       Ctrl-C'd before the call's end and resumed by the next call: an earlier call's
#       tune-state.tar.gz under .gpucarry/ is copied into the work dir first (a warm
#       machine's own, newer, is kept), and this call's lands in $OUT
#
# CALL_S=570 gives the steps what is left of a call of that many seconds once the pack, the
# wheels and the checkpoint are in place (it sets --budget-s).
#
# Unpacks the pack into $SGLENV (default /tmp/sglenv, outside the checkout: the checkout's
# ignored files did not survive between calls, and with its JIT caches there every call's
# first engine took 60 s over its first prefill graph, where the call's later engines took
# 0.4 s; /tmp is kept while the machine stays warm), writes the server's interpreter wrapper
# (SGLang on its PYTHONPATH), records the host's PCIe/IOMMU/NUMA facts, then runs the steps. Everything lands in $OUT (at most 8 files): results-SHAPE.json,
# raw-SHAPE.tar.xz (logs, /metrics, traces, ...), host.tar.gz, run-SHAPE.log.
set -u
SHAPE=${1:-tiny}
shift || true
TAG=$SHAPE
if [ "$SHAPE" = frontdoor ]; then
  export FRONTDOOR_MODE=${FRONTDOOR_MODE:-hold}
  if [ "$FRONTDOOR_MODE" = standby ]; then
    FRONTDOOR_WEIGHTS=${FRONTDOOR_WEIGHTS:-checkpoint}
  fi
  FRONTDOOR_WEIGHTS=${FRONTDOOR_WEIGHTS:-dummy}
  TAG=frontdoor-$FRONTDOOR_MODE-$FRONTDOOR_WEIGHTS
fi
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 2
OUTD=${OUT:-/tmp/real-sglang-out}
mkdir -p "$OUTD"
PY=${PY:-/opt/torch/.venv/bin/python3}
PK=$REPO/.sglpack
SGLENV=${SGLENV:-/tmp/sglenv}
SITE=$SGLENV/site
WORK=${WORK:-/tmp/real-sglang-$TAG}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1

host_facts() {
  local d=/tmp/host-facts
  rm -rf "$d" && mkdir -p "$d"
  {
    command -v lspci >/dev/null && lspci -vvv 2>&1 || echo "no lspci"
  } >"$d/lspci-vvv.txt"
  { command -v lspci >/dev/null && lspci -tv 2>&1 || echo "no lspci"; } >"$d/lspci-tv.txt"
  nvidia-smi topo -m >"$d/nvidia-smi-topo-m.txt" 2>&1
  nvidia-smi topo -p2p r >"$d/nvidia-smi-topo-p2p-r.txt" 2>&1
  nvidia-smi topo -p2p w >"$d/nvidia-smi-topo-p2p-w.txt" 2>&1
  nvidia-smi -q >"$d/nvidia-smi-q.txt" 2>&1
  cat /proc/cmdline >"$d/proc-cmdline.txt" 2>&1
  uname -a >"$d/uname.txt" 2>&1
  { ls -l /sys/kernel/iommu_groups/ 2>&1; for g in /sys/kernel/iommu_groups/*/devices; do
      echo "$g: $(find "$g" -mindepth 1 -printf "%f ")"; done; } >"$d/iommu-groups.txt" 2>&1
  { for dev in /sys/bus/pci/devices/*; do
      [ "$(cat "$dev/class" 2>/dev/null)" = "0x030200" ] || [ "$(cat "$dev/class" 2>/dev/null)" = "0x030000" ] || continue
      echo "$dev numa_node=$(cat "$dev/numa_node" 2>/dev/null) link=$(cat "$dev/current_link_speed" 2>/dev/null) x$(cat "$dev/current_link_width" 2>/dev/null) max=$(cat "$dev/max_link_speed" 2>/dev/null) x$(cat "$dev/max_link_width" 2>/dev/null)"
      readlink -f "$dev"; done; } >"$d/gpu-sysfs.txt" 2>&1
  { ls /sys/devices/system/node/ 2>&1; cat /sys/devices/system/node/node*/cpulist 2>&1; } >"$d/numa.txt"
  "$PY" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())" >"$d/torch.txt" 2>&1
  tar -C /tmp -czf "$OUTD/host.tar.gz" host-facts
}

unpack() {
  # the unpacked site is reused while it is this pack's (another pack's is replaced)
  local sum
  sum=$(sha256sum "$PK/sglang-0.5.17-site.tar.xz" | cut -d' ' -f1)
  if [ "$(cat "$SITE/.ok" 2>/dev/null)" = "$sum" ]; then echo "reusing $SITE"; return 0; fi
  rm -rf "$SITE" && mkdir -p "$(dirname "$SITE")"
  "$PY" -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
    "$PK/sglang-0.5.17-site.tar.xz" "$(dirname "$SITE")" && echo "$sum" >"$SITE/.ok"
}

host_facts
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
[ "$SHAPE" = host ] && exit 0
unpack || { echo "pack extract failed"; exit 3; }
# fastverify's own dependencies the image lacks (orjson, bcrypt), beside the repo
FVDEPS=/tmp/fvdeps
if [ -d .whl ] && [ ! -f "$FVDEPS/.ok" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$FVDEPS" .whl/*.whl \
    && touch "$FVDEPS/.ok"
fi
export PYTHONPATH="$REPO:$FVDEPS"
if [ -z "${CUDA_HOME:-}" ]; then
  NV=$(command -v nvcc || true)
  for d in /usr/local/cuda /usr/local/cuda-13.0 ${NV:+$(dirname "$(dirname "$NV")")}; do
    [ -e "$d/lib64/libcudart.so" ] && export CUDA_HOME=$d && break
  done
fi
# The server's interpreter: SGLang's pack first on its path, offline, JIT caches kept warm.
WRAP=$SGLENV/sglang-python
cat >"$WRAP" <<EOF
#!/bin/sh
export PYTHONPATH="$SITE" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TVM_FFI_CACHE_DIR="$SGLENV/tvmffi" TRITON_CACHE_DIR="$SGLENV/triton"
export CUDA_HOME="${CUDA_HOME:-}" PATH="$(dirname "$PY"):\$PATH"
exec "$PY" "\$@"
EOF
chmod +x "$WRAP"
# the imports the drafter's graph capture and argument resolution need (seconds, printed;
# the spec8b calls, whose every second counts, have seen them succeed)
[ "$SHAPE" = spec8b ] || [ "$SHAPE" = frontdoor ] || [ "$SHAPE" = tune8b ] || timeout 120 "$WRAP" - <<'PYEOF' 2>&1 | tail -5
for m in ("deep_gemm.utils.layout", "sglang.srt.layers.attention.dsa_backend",
          "sglang.srt.layers.attention.deepseek_v4_backend",
          "sglang.srt.layers.attention.flashmla_backend"):
    try:
        __import__(m)
        print("import ok:", m)
    except Exception as e:
        print("import FAILED:", m, type(e).__name__, str(e)[:300])
PYEOF

MODEL=$REPO/benchmarks/gpu/sglang_pack/tiny-llama
DRAFT=$REPO/benchmarks/gpu/sglang_pack/tiny-eagle3
EXTRA=(--load-format dummy)
if [ "$SHAPE" = realistic ] || [ "$TAG" = "frontdoor-${FRONTDOOR_MODE:-}-checkpoint" ]; then
  # the realistic shape's random checkpoint (written once per machine: ~20 s)
  MODEL=/tmp/llama8b-random
  DRAFT=""
  EXTRA=(--load-format safetensors --shape realistic)
  [ -f "$MODEL/.ok" ] || "$PY" benchmarks/gpu/write_checkpoint.py "$MODEL" || exit 4
  sync
  echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped (a cold disk load)"
fi
SCRIPT=benchmarks/gpu/real_sglang.py
if [ "$SHAPE" = spec8b ]; then
  MODEL=$REPO/benchmarks/gpu/sglang_pack/llama8b-shape
  DRAFT=$REPO/benchmarks/gpu/sglang_pack/llama8b-eagle3
  EXTRA=(--load-format dummy)
  SCRIPT=benchmarks/gpu/spec_sglang.py
  mkdir -p "$WORK"
  for f in "$REPO"/.gpucarry/*; do
    [ -f "$f" ] && [ ! -s "$WORK/$(basename "$f")" ] && cp "$f" "$WORK/" && echo "carried in: $f"
  done
fi
if [ "$SHAPE" = tune8b ]; then
  # the realistic shape's random checkpoint (written once per machine: ~20 s; the page cache
  # is kept: the cache's load of it is part of every call's start, not what is measured)
  MODEL=/tmp/llama8b-random
  [ -f "$MODEL/.ok" ] || "$PY" benchmarks/gpu/write_checkpoint.py "$MODEL" || exit 4
  DRAFT=$REPO/benchmarks/gpu/sglang_pack/llama8b-eagle3
  EXTRA=(--load-format auto)
  SCRIPT=benchmarks/gpu/tune_sglang.py
  rm -rf "$WORK/raw" "$WORK/results.json"
  mkdir -p "$WORK"
  CARRIED=$REPO/.gpucarry/tune-state.tar.gz
  if [ -f "$CARRIED" ] && [ ! -s "$WORK/tune-state.tar.gz" ]; then
    cp "$CARRIED" "$WORK/" && echo "carried in: $CARRIED"
  fi
fi
if [ "$SHAPE" = frontdoor ]; then
  # the model's tokenizer is written at run time (frontdoor_sglang.py)
  if [ "$FRONTDOOR_WEIGHTS" = checkpoint ]; then
    EXTRA=(--load-format safetensors --mode "$FRONTDOOR_MODE")
  else
    MODEL=$REPO/benchmarks/gpu/sglang_pack/llama8b-shape
    EXTRA=(--load-format dummy --mode "$FRONTDOOR_MODE")
  fi
  DRAFT=""
  SCRIPT=benchmarks/gpu/frontdoor_sglang.py
  rm -rf "$WORK/raw" "$WORK/results.json"
fi
BUDGET=()
HARD=()
if [ -n "${CALL_S:-}" ]; then
  # the steps plan for the budget; a step that overruns it is stopped (SIGTERM: the script
  # records it, stops the daemon and saves) in time for the copy below to land in $OUT
  BUDGET=(--budget-s "$((CALL_S - SECONDS - 20))")
  HARD=(timeout "$((CALL_S - SECONDS - 10))")
fi
"${HARD[@]}" "$PY" "$SCRIPT" --engine sglang --python "$WRAP" --model "$MODEL" \
  ${DRAFT:+--draft "$DRAFT"} --work "$WORK" --label "SGLang 0.5.17, TP 1, one $GPU, $SHAPE" \
  "${EXTRA[@]}" "$@" "${BUDGET[@]}" 2>&1 | tee "$OUTD/run-$TAG.log"
RC=${PIPESTATUS[0]}
cp "$WORK/results.json" "$OUTD/results-$TAG.json" 2>/dev/null
cp "$WORK"/*.journal.jsonl "$OUTD/" 2>/dev/null
cp "$WORK"/tune-state.tar.gz "$OUTD/" 2>/dev/null
tar -C "$WORK" -cf - raw | xz -T8 -6 >"$OUTD/raw-$TAG.tar.xz"
ls -la "$OUTD"
exit "$RC"
