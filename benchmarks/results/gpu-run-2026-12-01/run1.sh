#!/bin/bash
# GPU call 1: same-GPU NCCL check, rehearse grid (TP8 shard, TP2 shard cross-check),
# preflight + rehearse pcie-ipc with 2 ranks sharing the H200. Everything under $OUT.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ROOT=$(pwd); G=$ROOT/.gpu
NV="--env NCCL_NVLS_ENABLE=0 --env TORCH_SYMM_MEM_DISABLE_MULTICAST=1 --env NVSHMEM_DISABLE_NVLS=1"
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
step env; nvidia-smi -L; nvidia-smi --query-gpu=memory.used,memory.total,clocks.sm --format=csv
cd $G && source prep.sh; cd $ROOT
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $G/.whl/*.whl || echo ORJSON_FAILED
export PYTHONPATH=/tmp/site:$G/src
RANKENV="--env PYTHONPATH=/tmp/site ${FLASHINFER_EXTRA_LDFLAGS:+--env FLASHINFER_EXTRA_LDFLAGS=$FLASHINFER_EXTRA_LDFLAGS}"
python3 -c "import torch,fastverify;print(torch.__version__, torch.cuda.nccl.version(), fastverify.__file__)"
CTL="python3 -m fastverify.ctl"; cd $G/src  # cwd first on sys.path: this fastverify
W=$G/src/fastverify/experiments/preflight/worker.py
step "NCCL with 2 ranks on one GPU: done in call 1 (Duplicate GPU detected)"
if false; then
for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 NCCL_DEBUG=WARN \
  timeout 90 python3 $W --tokens 1 --iters 2 --graph-ops 0 --out $OUT/nccl-same-gpu.r$r.json > /tmp/nsg.$r.log 2>&1 & done; wait
for r in 0 1; do echo "-- rank $r"; grep -v '^\s*$' /tmp/nsg.$r.log | tail -8; done > $OUT/nccl-same-gpu.txt; cat $OUT/nccl-same-gpu.txt
fi
step "grid: Kimi-K2.5 shard of TP 8"
timeout 240 $CTL rehearse --model-config $G/src/examples/model-configs/kimi-k2.5.json --shard-of-tp 8 \
  --batch-sizes 1,2,4,8,16,32,64 --tokens 1,2,3,4,5,6,7,8 --steps 20 $NV \
  -o $OUT/rehearse-grid-kimi-k2.5-shard-of-tp8-h200.json
step "grid: Kimi-K2.5 shard of TP 2 (cross-check against rehearse-2gpu.json)"
timeout 90 $CTL rehearse --model-config $G/src/examples/model-configs/kimi-k2.5.json --shard-of-tp 2 \
  --batch-sizes 1 --tokens 1,4 --steps 30 $NV -o $OUT/rehearse-grid-kimi-k2.5-shard-of-tp2-h200.json
step "preflight pcie-ipc + nccl-default, 2 ranks sharing the GPU"
mkdir -p /tmp/pfl /tmp/rhl
timeout 200 $CTL preflight pcie-ipc nccl-default --nproc 2 --share-gpu --timeout 180 $NV $RANKENV \
  --logs /tmp/pfl -o $OUT/preflight-pcie-ipc-same-gpu-ranks-not-pcie-h200.json
step "rehearse pcie-ipc + nccl-default, 2 ranks sharing the GPU"
timeout 200 $CTL rehearse --model-config $G/src/examples/model-configs/kimi-k2.5.json \
  --draft-config $G/src/examples/model-configs/kimi-k2.5-eagle3.json --nproc 2 --share-gpu --steps 10 \
  --accept-length 2.0 --timeout 180 $NV $RANKENV --logs /tmp/rhl \
  -o $OUT/rehearse-pcie-ipc-same-gpu-ranks-not-pcie-h200.json pcie-ipc nccl-default
step done
ls -la ~/.cache/flashinfer/*/*/ ~/.cache/flashinfer/*/*/autotune 2>&1 | head -20
tar czf $OUT/logs.tgz -C /tmp pfl rhl nsg.0.log nsg.1.log 2>/dev/null; ls -la $OUT
