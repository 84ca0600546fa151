"""Failure classification on realistic SGLang / NCCL / Python log excerpts."""

# ruff: noqa: E501  (log excerpts keep their real, long lines)

from __future__ import annotations

import pytest

from fastverify.daemon.failures import classify, classify_lines

CAPTURE = """\
[2025-06-13 10:30:17 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=8.12 GB
[2025-06-13 10:30:18 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 388, in __init__
    self.capture()
RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)
Exception: Capture cuda graph failed: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
[2025-06-13 10:30:18] Received sigquit from a child process. It usually means the child failed.
"""

OOM = """\
[2025-06-13 10:31:02 TP3] Load weight begin. avail mem=78.52 GB
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 3 has a total capacity of 79.11 GiB of which 1.02 GiB is free.
"""

OOM_DURING_CAPTURE = """\
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.
"""

NCCL = """\
vm:442:442 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:442:511 [0] transport/net_ib.cc:95 NCCL WARN NET/IB : No device found.
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.28.9
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
"""

PORT = """\
[2025-06-13 10:40:00] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use
OSError: [Errno 98] Address already in use
"""

MODEL = """\
OSError: /models/Kimi-K2.5 does not appear to have a file named config.json. Checkout 'https://huggingface.co//models/Kimi-K2.5/tree/None' for available files.
"""

IMPORT = """\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
ModuleNotFoundError: No module named 'sgl_kernel'
"""

ARGV = """\
launch_server.py: error: unrecognized arguments: --cuda-graph-backend-decode disabled
"""


@pytest.mark.parametrize(
    ("text", "reason", "quoted"),
    [
        (CAPTURE, "cuda_graph_capture", "Exception: Capture cuda graph failed: NCCL error"),
        (OOM, "cuda_oom", "torch.OutOfMemoryError: CUDA out of memory"),
        (OOM_DURING_CAPTURE, "cuda_oom", "CUDA out of memory"),
        (NCCL, "nccl_error", "NCCL WARN NET/IB"),
        (PORT, "port_in_use", "[Errno 98]"),
        (MODEL, "model_path_missing", "config.json"),
        (IMPORT, "import_error", "ModuleNotFoundError: No module named 'sgl_kernel'"),
        (ARGV, "argv_rejected", "unrecognized arguments"),
    ],
)
def test_classify_quotes_the_line(text: str, reason: str, quoted: str) -> None:
    f = classify(text.splitlines(), exit_code=1, log="/var/lib/fastverify/logs/x.log")
    assert f.reason == reason
    assert quoted in f.line
    assert f.log == "/var/lib/fastverify/logs/x.log"
    assert quoted in f.message and "exit code 1" in f.message


def test_unrecognised_exit_and_signal() -> None:
    assert classify(["all fine"], exit_code=3).reason == "exited(3)"
    f = classify([], exit_code=-9)
    assert f.reason == "exited(-9)" and "SIGKILL" in f.message and f.line is None


def test_timeout_without_a_matching_line() -> None:
    f = classify(["Load weight begin."], exit_code=None, timed_out=True, timeout_s=1800)
    assert f.reason == "readiness_timeout" and "1800" in f.message


def test_benign_lines_do_not_match() -> None:
    ok = [
        "[2025-06-13 10:30:17 TP0] Capture cuda graph end. Time elapsed: 2.13 s. mem usage=0.38 GB.",
        "[2025-06-13 10:30:17] The server is fired up and ready to roll!",
        "vm:442:442 [0] NCCL INFO NCCL_ALGO set by environment to Tree",
    ]
    assert classify_lines(ok) is None
