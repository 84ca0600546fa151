"""Facts from the field report, written down once for every test that checks against them.

`RING_LL` is the tuning that lived in the legacy sitecustomize.py (issue 2 spells it out);
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
