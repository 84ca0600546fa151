import os as _os

for _k, _v in [
    ("NCCL_PROTO", "LL"),
    ("NCCL_ALGO", "Tree"),
    ("NCCL_P2P_LEVEL", "SYS"),
    ("NCCL_MAX_NCHANNELS", "16"),
    ("NCCL_BUFFSIZE", "16777216"),
    ("NCCL_NTHREADS", "512"),
]:
    if _k not in _os.environ:
        _os.environ[_k] = _v
del _k, _v
