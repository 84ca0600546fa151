"""Whether, and with how many ranks, a GPU experiment (preflight, rehearse) can run here:
torch in the ranks' interpreter, the GPUs visible, one rank per GPU or several sharing one
(`--share-gpu`, FlashInfer PCIe-IPC candidates only), and the errors that say why not."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

from fastverify.experiments.common import allreduce as allreduce_candidate


class PreflightError(RuntimeError):
    """Preflight cannot run at all (no torch, no GPU, unknown profile)."""


class NoGpu(PreflightError):
    """The nccl backend was asked for on a host where no GPU is visible (a usage error:
    exit 2 for preflight and rehearse alike)."""


BACKENDS = ("nccl", "gloo")  # gloo: CPU ranks, the same steps without NCCL (tests)


def backend_problem(backend: str) -> str | None:
    """Why `backend` is not a rank backend (None: it is one)."""
    if backend in BACKENDS:
        return None
    return f"unknown backend {backend!r} (nccl, or gloo for tests)"


def no_gpu_problem(backend: str, world: int | None) -> str | None:
    """Why `backend` cannot run `world` ranks here (None: it can, as far as we can tell)."""
    if backend != "nccl":
        return None if world is None or world >= 1 else "--nproc must be at least 1"
    if visible_gpus() >= 1:
        return None
    return (
        "no GPU visible (nvidia-smi -L lists none and CUDA_VISIBLE_DEVICES names none): the "
        "nccl backend needs one GPU per rank. On a host without GPUs pass --backend gloo "
        "(CPU ranks: the same steps, no NCCL and no CUDA graphs); on a GPU host whose "
        "nvidia-smi cannot list them, set CUDA_VISIBLE_DEVICES"
    )


class TooFewGpus(NoGpu):
    """More ranks than GPUs without --share-gpu (a usage error, exit 2, as NoGpu)."""


class TorchMissing(PreflightError):
    """The workers' interpreter has no torch."""


def torch_available(python: str = "") -> bool:
    """Whether `python` (default: this interpreter) can import torch, without importing it.
    A given interpreter is asked by running it: every virtualenv's python resolves to the
    same base interpreter, and only running it tells which site-packages it sees."""
    if not python:
        return importlib.util.find_spec("torch") is not None
    code = "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"
    try:
        run = subprocess.run([python, "-c", code], capture_output=True, check=False)
    except OSError:  # not an interpreter that runs here: it has no torch to give the ranks
        return False
    return run.returncode == 0


SAME_GPU_LABEL = "same-GPU ranks, not a PCIe measurement"
SAME_GPU_NOTE = (
    "ranks share GPUs (--share-gpu): their kernels time-slice one GPU, so every all-reduce "
    "waits for the other contexts' time slices; the code path, kernels, tuning, cache and "
    "sums are real, the timings are not a PCIe (or any interconnect) measurement"
)


def rank_count(
    tool: str, backend: str, nproc: int | None, python: str = "", share_gpu: bool = False
) -> int:
    """How many ranks `tool` (preflight, rehearse) starts here, after the checks both share:
    torch in the ranks' interpreter, a GPU for the nccl backend, one rank per GPU (several
    per GPU with `share_gpu`)."""
    if not torch_available(python):
        raise TorchMissing(
            f"{tool} needs PyTorch in {python or sys.executable}: "
            "pip install 'fastverify[preflight]' (or torch>=2.3 with CUDA for your driver)"
        )
    problem = no_gpu_problem(backend, nproc)
    if problem:
        raise NoGpu(problem)
    if backend != "nccl":
        return nproc or 2
    gpus = visible_gpus()
    world = nproc or gpus
    if 0 < gpus < world and not share_gpu:
        raise TooFewGpus(
            f"--nproc {world} but only {gpus} GPU(s) are visible (one rank per GPU); "
            "--share-gpu runs several ranks per GPU, for FlashInfer PCIe-IPC candidates only "
            "(NCCL refuses two ranks on one GPU), and its timings are not a PCIe measurement"
        )
    return world


def shared_gpus(backend: str, world: int) -> int:
    """The GPUs `world` ranks share (0 < n < world), else 0 (one GPU per rank, or gloo)."""
    if backend != "nccl":
        return 0
    gpus = visible_gpus()
    return gpus if 0 < gpus < world else 0


def same_gpu_plan(
    cand: allreduce_candidate.Candidate, shared: int
) -> allreduce_candidate.Candidate:
    """With ranks sharing GPUs (`shared` > 0) an NCCL candidate cannot run: skipped, saying
    why (NCCL's own refusal); a PCIe-IPC candidate runs without an NCCL communicator."""
    if not shared or cand.skip is not None or cand.backend != allreduce_candidate.allreduce.NCCL:
        return cand
    from fastverify.nccl.pynccl import SAME_GPU_NCCL

    return allreduce_candidate.Candidate(cand.backend, skip=SAME_GPU_NCCL)


def visible_gpus() -> int:
    """GPUs a worker would see: CUDA_VISIBLE_DEVICES when set, else `nvidia-smi -L`."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return len([d for d in cvd.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
