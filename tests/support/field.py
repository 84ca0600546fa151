"""Facts from the field report, written down once for every test that checks against them.

`RING_LL` is the tuning that lived in the legacy sitecustomize.py;
tests compare the shipped `ring-ll` profile, the environment the daemon delivers and the
sim's behaviour against this independent copy, never against the code under test.
"""

RING_LL = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}

# The field report's totals (8 PCIe Gen5 GPUs, a 61-layer MoE, TP 8, ring-ll, CUDA graphs,
# batch 1; docs/architecture.md, docs/guides/sim.md): what the sim's calibration must reproduce.
BASELINE_TOK_S = 82.0  # baseline decoding
DECODE_STEP_MS = 12.2  # one baseline decode step
VERIFY_MS = 30.0  # one EAGLE-3 verify pass over 4 draft tokens ("25 ms of its 30 ms")
VERIFY_ALLREDUCE_MS = 25.0  # the 122 all-reduces of that pass
ALLREDUCES_PER_VERIFY = 122  # 61 layers x 2
BREAKEVEN_ACCEPT = 2.46  # accept length at which EAGLE-3 equals the baseline
