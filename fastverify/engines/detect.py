"""`--engine auto`: pick `sglang` when SGLang is importable by the server's interpreter and
a GPU is present, else `sim`; always with a human-readable reason for the first log line
and `status`.

No import of SGLang or torch happens here: SGLang is looked up with
`importlib.util.find_spec` in the server's interpreter, the GPU with `/dev/nvidia0` or
`nvidia-smi -L`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def sglang_importable(python: str | None = None) -> bool:
    python = python or sys.executable
    if python == sys.executable:
        import importlib.util

        return importlib.util.find_spec("sglang") is not None
    try:
        out = subprocess.run(
            [
                python,
                "-c",
                "import importlib.util,sys; sys.exit(importlib.util.find_spec('sglang') is None)",
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def gpu_present() -> tuple[bool, str]:
    if os.path.exists("/dev/nvidia0"):
        return True, "/dev/nvidia0 exists"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "-L"], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return False, "nvidia-smi -L did not answer"
        if out.returncode == 0 and "GPU" in out.stdout:
            return True, out.stdout.strip().splitlines()[0]
        return False, "nvidia-smi -L lists no GPU"
    return False, "no /dev/nvidia0 and no nvidia-smi"


def choose_engine(requested: str, python: str | None = None) -> tuple[str, str]:
    """(engine name, reason) for `requested` in auto|sglang|sim."""
    if requested == "sim":
        return "sim", "--engine sim requested"
    if requested == "sglang":
        return "sglang", "--engine sglang requested"
    if requested != "auto":
        raise ValueError(f"engine {requested!r}: expected auto, sglang or sim")
    has_sglang = sglang_importable(python)
    gpu, gpu_why = gpu_present()
    if has_sglang and gpu:
        return "sglang", f"auto: SGLang is importable and a GPU is present ({gpu_why})"
    missing = []
    if not has_sglang:
        missing.append(f"SGLang is not importable by {python or sys.executable}")
    if not gpu:
        missing.append(f"no GPU ({gpu_why})")
    return "sim", "auto: " + " and ".join(missing) + "; using the simulated engine"
