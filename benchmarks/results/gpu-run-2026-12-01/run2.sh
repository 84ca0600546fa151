#!/bin/bash
# GPU call 2: FlashInfer tune-cache reuse as cache_reused now means it (cold then warm start of
# the same 2-row workspace), and a second run of the Kimi-K2.5 TP 8 shard grid (spread).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ROOT=$(pwd); G=$ROOT/.gpu
NV="--env NCCL_NVLS_ENABLE=0 --env TORCH_SYMM_MEM_DISABLE_MULTICAST=1 --env NVSHMEM_DISABLE_NVLS=1"
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
step env; nvidia-smi -L
cd $G && source prep.sh; cd $ROOT
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $G/.whl/*.whl || echo ORJSON_FAILED
export PYTHONPATH=/tmp/site:$G/src FASTVERIFY_PROFILE_DIRS=$G/userprof
RANKENV="--env PYTHONPATH=/tmp/site ${FLASHINFER_EXTRA_LDFLAGS:+--env FLASHINFER_EXTRA_LDFLAGS=$FLASHINFER_EXTRA_LDFLAGS}"
CTL="python3 -m fastverify.ctl"; cd $G/src  # cwd first on sys.path: this fastverify
for run in cold warm; do
  step "preflight pcie-ipc-2rows ($run start), 2 ranks sharing the GPU"
  timeout 150 $CTL preflight pcie-ipc-2rows --nproc 2 --share-gpu --tokens 1,2 --iters 20 \
    --graph-ops 5 --timeout 140 $NV $RANKENV --logs /tmp/pf-$run \
    -o $OUT/preflight-pcie-ipc-2rows-$run-same-gpu-ranks-not-pcie-h200.json
  python3 -c "import json;d=json.load(open('$OUT/preflight-pcie-ipc-2rows-$run-same-gpu-ranks-not-pcie-h200.json'));[print(r.get('allreduce')) for p in d['profiles'] for r in p['ranks']]"
  grep -h "Loaded\|Saved\|Autotuning process\|Building JIT" /tmp/pf-$run/*.stdout | cut -c1-200
done
step "grid run 2: Kimi-K2.5 shard of TP 8"
timeout 240 $CTL rehearse --model-config $G/src/examples/model-configs/kimi-k2.5.json --shard-of-tp 8 \
  --batch-sizes 1,2,4,8,16,32,64 --tokens 1,2,3,4,5,6,7,8 --steps 20 $NV \
  -o $OUT/rehearse-grid-kimi-k2.5-shard-of-tp8-h200-run2.json
step done
tar czf $OUT/logs2.tgz -C /tmp pf-cold pf-warm 2>/dev/null; ls -la $OUT
