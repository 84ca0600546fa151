"""`fastverifyctl bench --use-sglang-bench`: SGLang's own `python -m sglang.bench_serving`
in place of fastverify's closed loop (when sglang is installed), its JSONL result line
mapped onto the same result fields."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastverify.experiments.bench.records import BenchConfig, BenchError, BenchResult


def sglang_bench_available(python: str | None = None) -> bool:
    """Whether `sglang.bench_serving` can be imported (in this interpreter, or `python`)."""
    if python is None or python == sys.executable:
        return importlib.util.find_spec("sglang") is not None
    probe = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util,sys; sys.exit(importlib.util.find_spec('sglang') is None)",
        ],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def sglang_bench_argv(cfg: BenchConfig, output_file: str, python: str | None = None) -> list[str]:
    """The `python -m sglang.bench_serving` command for `cfg` (fixed lengths, closed loop)."""
    if cfg.requests is None:
        raise ValueError(
            "--use-sglang-bench needs --requests (sglang.bench_serving has no duration)"
        )
    if cfg.dataset:
        from fastverify.experiments.bench.datasets import SHIPPED, load

        ds = load(cfg.dataset)
        if cfg.dataset == SHIPPED or ds.format != "sharegpt":
            raise ValueError(
                "--use-sglang-bench reads a ShareGPT JSON file (--dataset-name sharegpt); "
                f"{cfg.dataset} is {ds.format}: drop --use-sglang-bench to send it"
            )
        data = ["--dataset-name", "sharegpt", "--dataset-path", cfg.dataset,
                "--sharegpt-output-len", str(cfg.output_len)]  # fmt: skip
    else:
        data = ["--dataset-name", "random", "--random-input-len", str(cfg.input_len),
                "--random-output-len", str(cfg.output_len),
                "--random-range-ratio", "1.0"]  # fmt: skip
    return [
        python or sys.executable,
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--base-url",
        cfg.url.rstrip("/"),
        *data,
        "--num-prompts",
        str(cfg.requests),
        "--max-concurrency",
        str(cfg.concurrency),
        "--request-rate",
        "inf",
        "--seed",
        str(cfg.seed),
        "--warmup-requests",
        str(cfg.warmup),
        "--temperature",
        str(cfg.temperature),
        "--top-p",
        str(cfg.top_p),
        "--output-file",
        output_file,
        "--disable-tqdm",
    ]


def result_from_sglang_jsonl(line: dict[str, Any], cfg: BenchConfig) -> BenchResult:
    """Map one `sglang.bench_serving` JSONL record onto a BenchResult.

    Keys used (python/sglang/bench_serving.py): duration, completed, total_output_tokens,
    output_throughput, request_throughput, mean/median/p99_ttft_ms, mean/median/p95/p99_itl_ms,
    mean_tpot_ms, accept_length. bench_serving reports no p90; p95 is not substituted.
    """

    def f(key: str) -> float | None:
        value = line.get(key)
        return float(value) if isinstance(value, int | float) else None

    tpot = f("mean_tpot_ms")
    num_prompts = int(line.get("completed") or 0)
    requested = cfg.requests or num_prompts
    return BenchResult(
        source="sglang.bench_serving",
        url=cfg.url,
        config=asdict(cfg),
        duration_s=f("duration") or 0.0,
        completed=num_prompts,
        failed=max(0, requested - num_prompts),
        output_tokens=int(line.get("total_output_tokens") or 0),
        output_tokens_per_second=f("output_throughput") or 0.0,
        request_rate=f("request_throughput") or 0.0,
        per_request_tokens_per_second=(1000.0 / tpot) if tpot else None,
        ttft_ms={
            "mean": f("mean_ttft_ms"),
            "p50": f("median_ttft_ms"),
            "p90": None,
            "p99": f("p99_ttft_ms"),
        },
        itl_ms={
            "mean": f("mean_itl_ms"),
            "p50": f("median_itl_ms"),
            "p90": None,
            "p99": f("p99_itl_ms"),
        },
        accept_length=f("accept_length"),
    )


def run_sglang_bench(cfg: BenchConfig, python: str | None = None) -> BenchResult:
    """Run `sglang.bench_serving` and read the JSONL line it appends to its output file."""
    cfg.validate()
    if not sglang_bench_available(python):
        raise BenchError(
            "--use-sglang-bench: sglang is not installed in "
            f"{python or sys.executable} (install sglang, or drop --use-sglang-bench)"
        )
    with tempfile.TemporaryDirectory(prefix="fastverify-bench-") as tmp:
        out = Path(tmp) / "bench.jsonl"
        argv = sglang_bench_argv(cfg, str(out), python)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise BenchError(f"sglang.bench_serving exited {proc.returncode}: " + " | ".join(tail))
        lines = [ln for ln in out.read_text().splitlines() if ln.strip()] if out.exists() else []
        if not lines:
            raise BenchError("sglang.bench_serving wrote no result line to its --output-file")
        with contextlib.suppress(ValueError):
            return result_from_sglang_jsonl(json.loads(lines[-1]), cfg)
        raise BenchError("sglang.bench_serving's result line is not JSON")
