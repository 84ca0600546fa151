"""Command line of the sim engine: SGLang's `launch_server` flag names, plus `--sim-*`.

Accepts the flags the daemon's SGLang adapter emits (both CUDA-graph flag generations:
`--disable-cuda-graph` and `--cuda-graph-backend-decode disabled` /
`--disable-decode-cuda-graph`), and a handful of common SGLang flags that do not change
the simulation. Anything else is an argparse error (exit status 2), like SGLang.
Prefixes of long flags are accepted as argparse does (`--tp 8`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from fastverify.config import LOAD_FORMATS, TRIAL_LOAD_FORMAT
from fastverify.sglang import adaptive, allreduce
from fastverify.sglang.versions import PINNED_VERSION

SPEC_ALGOS = ("EAGLE", "EAGLE3")
FLASHINFER_BUILDS = ("pcie-ipc", "no-pcie-ipc-comm", "workspace-fail", "no-nv-internal")
# `--load-format dummy` (SGLang: random weights): the sim skips most of its simulated weight
# load and its drafter guesses at random, so the accept length sits at its floor (the
# bonus token only) unless --sim-accept-length says otherwise.
DUMMY_ACCEPT_LENGTH = 1.0


@dataclass(frozen=True)
class SimArgs:
    model_path: str
    served_model_name: str
    tp_size: int
    host: str
    port: int
    enable_metrics: bool
    mode: str  # baseline | eagle3
    speculative_algorithm: str | None
    draft_model_path: str | None
    num_steps: int
    topk: int
    num_draft_tokens: int
    cuda_graph: bool
    decode_log_interval: int
    disable_custom_all_reduce: bool
    log_level: str
    load_seconds: float
    accept_length: float | None
    seed: int
    argv: tuple[str, ...]
    fail: str | None = None
    load_format: str = "auto"
    decode_cuda_graph: bool = True  # the decode phase captures (backend full)
    prefill_cuda_graph: bool = True  # the prefill phase captures (backend breakable)
    dtype: str = "auto"
    deterministic: bool = False
    disable_flashinfer_autotune: bool = False
    flashinfer: str = "pcie-ipc"  # what the simulated FlashInfer build offers
    # --speculative-adaptive (SGLang 0.5.23): the config's tiers, None when off (or when the
    # args make SGLang disable it: `adaptive_disabled` holds its reason then)
    adaptive_config: dict | None = None
    adaptive_config_path: str | None = None
    adaptive_disabled: str | None = None
    # the steps at which --sim-accept-length holds (default: the configured steps)
    accept_steps: int | None = None
    # standard deviation of the per-request acceptance (--sim-accept-spread; 0: none)
    accept_spread: float = 0.0
    # SGLang's --export-metrics-to-file[-dir]: one JSON line per finished request
    export_metrics_dir: str | None = None
    sglang_version: str = PINNED_VERSION  # the release the sim plays (--sim-sglang-version)
    # SGLang's weight cache (0.5.17+): "client" loads the weights from the cache's daemon
    weight_cache_mode: str = "off"
    weight_cache_socket: str | None = None
    # the CacheConfig fingerprint's other inputs, and where rank r's GPU is
    quantization: str | None = None
    revision: str | None = None
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    max_total_tokens: int | None = None  # SGLang's --max-total-tokens: caps the KV pool
    mem_fraction_static: float | None = None  # its --mem-fraction-static: the pool's budget


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fastverify.sim",
        description="fastverify sim engine: an SGLang-compatible SIMULATION (no GPU). "
        "Timings come from a cost model, not from hardware.",
    )
    p.add_argument("--model-path", "--model", required=True, help="model name or path")
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-adaptive", action="store_true")
    p.add_argument("--speculative-adaptive-config", default=None)
    p.add_argument(
        "--disable-cuda-graph",
        action="store_true",
        help="older SGLang flag (deprecated in new releases)",
    )
    p.add_argument(
        "--disable-decode-cuda-graph", "--decode-disable-cuda-graph", action="store_true"
    )
    p.add_argument(
        "--cuda-graph-backend-decode",
        default=None,
        help="newer SGLang flag; 'disabled' turns decode CUDA graphs off",
    )
    p.add_argument(
        "--cuda-graph-backend-prefill",
        default=None,
        help="SGLang 0.5.23: the prefill phase captures too (breakable) unless 'disabled'",
    )
    p.add_argument("--disable-prefill-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", type=int, default=None)
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    # SGLang 0.5.23's other all-reduce and determinism flags (fastverify.sglang.allreduce)
    p.add_argument("--dtype", default="auto", choices=allreduce.DTYPES)
    p.add_argument("--enable-deterministic-inference", action="store_true")
    p.add_argument("--enable-symm-mem", action="store_true")
    p.add_argument("--enable-mscclpp", action="store_true")
    p.add_argument("--enable-torch-symm-mem", action="store_true")
    p.add_argument("--enable-nccl-nvls", action="store_true")
    p.add_argument("--disable-flashinfer-autotune", action="store_true")
    p.add_argument(
        "--sim-flashinfer",
        choices=FLASHINFER_BUILDS,
        default="pcie-ipc",
        help="the simulated FlashInfer: 'pcie-ipc' (0.7.2, has pcie_ipc_comm), "
        "'no-pcie-ipc-comm' (an older build), 'workspace-fail' (its workspace cannot be built), "
        "'no-nv-internal' (installed without csrc/nv_internal: tuning saves 0 configs)",
    )
    p.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error", "critical"]
    )
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--random-seed", type=int, default=None)
    p.add_argument("--load-format", default="auto", choices=LOAD_FORMATS)
    # SGLang's weight cache (accepted only where the played release has it)
    p.add_argument("--weight-cache-mode", default="off", choices=["off", "daemon", "client"])
    p.add_argument("--weight-cache-socket", default=None)
    p.add_argument("--weight-cache-timeout", type=int, default=1800)
    p.add_argument("--quantization", default=None)
    p.add_argument("--revision", default=None)
    p.add_argument("--base-gpu-id", type=int, default=0)
    p.add_argument("--gpu-id-step", type=int, default=1)
    p.add_argument(
        "--sim-load-seconds",
        type=float,
        default=3.0,
        help="simulated weight load + CUDA-graph capture time (default 3)",
    )
    p.add_argument(
        "--sim-accept-length",
        type=float,
        default=None,
        help="EAGLE-3 accept length incl. the bonus token (default 2.0)",
    )
    p.add_argument(
        "--sim-accept-steps",
        type=int,
        default=None,
        help="the draft steps at which --sim-accept-length holds (default: the configured "
        "steps); acceptance per draft position follows from it (a chain)",
    )
    p.add_argument(
        "--sim-accept-spread",
        type=float,
        default=0.0,
        help="standard deviation over requests of the per-position acceptance probability "
        "(default 0: every request accepts alike); the pooled accept length stays "
        "--sim-accept-length",
    )
    p.add_argument("--sim-seed", type=int, default=0, help="seed of the per-request phases")
    p.add_argument("--export-metrics-to-file", action="store_true")
    p.add_argument("--export-metrics-to-file-dir", default=None)
    p.add_argument(
        "--sim-sglang-version",
        default=PINNED_VERSION,
        help="the SGLang release the sim plays (its flags, metrics, spans and log lines "
        "from fastverify/sglang/facts; default %(default)s)",
    )
    p.add_argument(
        "--sim-fail",
        choices=["oom"],
        default=None,
        help="inject a failure for tests: 'oom' = CUDA out of memory while loading weights",
    )
    return p


def parse(argv: Sequence[str]) -> SimArgs:
    """Parse argv; exits with status 2 and an argparse message on bad flags."""
    parser = build_parser()
    ns, rest = parser.parse_known_args(list(argv))
    if ns.tp_size < 1 or ns.tp_size > 64:
        parser.error(f"--tp-size must be in 1..64, got {ns.tp_size}")
    if not 0 < ns.port < 65536:
        parser.error(f"--port must be in 1..65535, got {ns.port}")
    if ns.sim_load_seconds < 0:
        parser.error("--sim-load-seconds must be >= 0")
    if ns.decode_log_interval < 1:
        parser.error("--decode-log-interval must be >= 1")
    _check_played_flags(parser, ns.sim_sglang_version, argv)
    _check_unmodelled(parser, ns.sim_sglang_version, rest)
    algo = ns.speculative_algorithm.upper() if ns.speculative_algorithm else None
    if algo is not None and algo not in SPEC_ALGOS:
        parser.error(
            f"--speculative-algorithm {ns.speculative_algorithm}: the sim engine "
            f"simulates {', '.join(SPEC_ALGOS)} only"
        )
    if algo is not None and not ns.speculative_draft_model_path:
        parser.error(f"--speculative-algorithm {algo} needs --speculative-draft-model-path")
    if ns.weight_cache_mode != "off" and algo is not None:
        _refuse_cache_with_speculation(parser, ns.sim_sglang_version)
    adaptive_cfg, disabled = None, None
    if ns.speculative_adaptive and algo is not None:
        disabled = adaptive.unsupported_reason(algo, ns.speculative_eagle_topk)
        if disabled is None:
            adaptive_cfg = _adaptive_config(parser, ns)
    steps = ns.speculative_num_steps if ns.speculative_num_steps is not None else 3
    topk = ns.speculative_eagle_topk if ns.speculative_eagle_topk is not None else 1
    ndt = ns.speculative_num_draft_tokens
    if adaptive_cfg is not None:
        cands = adaptive.candidate_steps(adaptive_cfg)
        if ns.speculative_num_steps is None:
            steps = cands[len(cands) // 2]
        if steps not in cands:  # SGLang's _init_adaptive_speculative_params refuses it
            parser.error(
                f"--speculative-num-steps={steps} is not in the adaptive config "
                f"candidate_steps {cands}. Pass one of those values."
            )
        ndt = steps + 1
    if ndt is None:
        ndt = steps * topk + 1 if topk > 1 else steps + 1
    if adaptive_cfg is None and (steps < 1 or topk < 1 or ndt < 2):
        parser.error("speculative num-steps/eagle-topk must be >= 1 and num-draft-tokens >= 2")
    accept_steps = ns.sim_accept_steps if ns.sim_accept_steps is not None else max(1, ndt - 1)
    if accept_steps < 1:
        parser.error("--sim-accept-steps must be >= 1")
    if ns.sim_accept_length is not None and not 1.0 <= ns.sim_accept_length <= accept_steps + 1:
        parser.error(
            f"--sim-accept-length must be in 1..{accept_steps + 1} (draft tokens at "
            f"{accept_steps} steps)"
        )
    if not 0.0 <= ns.sim_accept_spread < 0.5:
        parser.error("--sim-accept-spread must be in [0, 0.5) (a standard deviation of a "
                     "probability)")  # fmt: skip
    if ns.export_metrics_to_file and not ns.export_metrics_to_file_dir:
        # SGLang's validation_hook: the directory is required with the flag
        parser.error("--export-metrics-to-file-dir is required when --export-metrics-to-file "
                     "is set")  # fmt: skip
    accept_length = ns.sim_accept_length
    if accept_length is None and ns.load_format == TRIAL_LOAD_FORMAT:
        accept_length = DUMMY_ACCEPT_LENGTH
    # As SGLang 0.5.23 on CUDA: graphs are off only when every phase is off (prefill
    # captures with the breakable backend by default).
    decode_off = (ns.cuda_graph_backend_decode or "").strip().lower() == "disabled"
    prefill_off = (ns.cuda_graph_backend_prefill or "").strip().lower() == "disabled"
    decode_off = decode_off or ns.disable_decode_cuda_graph
    prefill_off = prefill_off or ns.disable_prefill_cuda_graph
    cuda_graph = not (ns.disable_cuda_graph or (decode_off and prefill_off))
    return SimArgs(
        model_path=ns.model_path,
        served_model_name=ns.served_model_name or ns.model_path,
        tp_size=ns.tp_size,
        host=ns.host,
        port=ns.port,
        enable_metrics=ns.enable_metrics,
        mode="eagle3" if algo else "baseline",
        speculative_algorithm=algo,
        draft_model_path=ns.speculative_draft_model_path,
        num_steps=steps,
        topk=topk,
        num_draft_tokens=ndt,
        cuda_graph=cuda_graph,
        decode_cuda_graph=cuda_graph and not decode_off,
        prefill_cuda_graph=cuda_graph and not prefill_off,
        decode_log_interval=ns.decode_log_interval,
        disable_custom_all_reduce=ns.disable_custom_all_reduce,
        log_level=ns.log_level,
        load_seconds=ns.sim_load_seconds,
        accept_length=accept_length,
        seed=ns.sim_seed,
        argv=tuple(argv),
        fail=ns.sim_fail,
        load_format=ns.load_format,
        dtype=ns.dtype,
        deterministic=ns.enable_deterministic_inference,
        disable_flashinfer_autotune=ns.disable_flashinfer_autotune,
        flashinfer=ns.sim_flashinfer,
        adaptive_config=adaptive_cfg,
        adaptive_config_path=ns.speculative_adaptive_config if adaptive_cfg is not None else None,
        adaptive_disabled=disabled,
        accept_steps=accept_steps,
        accept_spread=ns.sim_accept_spread,
        export_metrics_dir=ns.export_metrics_to_file_dir if ns.export_metrics_to_file else None,
        sglang_version=ns.sim_sglang_version,
        weight_cache_mode=ns.weight_cache_mode,
        weight_cache_socket=ns.weight_cache_socket,
        quantization=ns.quantization,
        revision=ns.revision,
        base_gpu_id=ns.base_gpu_id,
        gpu_id_step=ns.gpu_id_step,
        max_total_tokens=ns.max_total_tokens,
        mem_fraction_static=ns.mem_fraction_static,
    )


def _refuse_cache_with_speculation(parser: argparse.ArgumentParser, version: str) -> None:
    """SGLang's resolution refuses the weight cache with speculative decoding (in releases
    whose facts carry the refusal): its ValueError text, as the check of the argv shows it."""
    from fastverify.sglang.facts import resolve

    wc = resolve(version).section("weight_cache") or {}
    refusal = wc.get("speculative_refusal")
    if refusal:
        parser.error(f"ValueError: {refusal['template']}")


def _adaptive_config(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> dict:
    """The adaptive config SGLang would load (its default when no file is given); a file
    SGLang's `_load_adaptive_config` refuses is an error here too."""
    if ns.speculative_adaptive_config is None:
        return adaptive.DEFAULT_ADAPTIVE_CONFIG
    try:
        return adaptive.load_config(ns.speculative_adaptive_config)
    except adaptive.AdaptiveConfigError as exc:
        parser.error(f"--speculative-adaptive-config: {exc}")


def _check_unmodelled(parser: argparse.ArgumentParser, version: str, rest: Sequence[str]) -> None:
    """Flags the sim does not model (`--skip-tokenizer-init`, `--attention-backend triton`,
    ...) are accepted as the played release's parser accepts them: a long flag that release
    has (its facts, read from its wheel), with a value from its choices where it has
    choices; anything else is argparse's "unrecognized arguments" error."""
    from fastverify.sglang.facts import resolve

    facts = resolve(version)
    i = 0
    while i < len(rest):
        tok = rest[i]
        flag, eq, value = tok.partition("=")
        if not flag.startswith("--") or not facts.has_flag(flag):
            parser.error(f"unrecognized arguments: {' '.join(rest[i:])}")
        if not eq and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value, i = rest[i + 1], i + 1
        choices = facts.flags.get(flag)
        if choices and value and value not in choices:
            parser.error(
                f"argument {flag}: invalid choice: {value!r} (choose from "
                f"{', '.join(repr(c) for c in choices)})"
            )
        i += 1


def _check_played_flags(parser: argparse.ArgumentParser, version: str, argv: Sequence[str]) -> None:
    """Refuse, as that release's parser would, a long flag the played SGLang does not have
    (its facts), and a release below the range."""
    from fastverify.sglang.facts import VersionTooOld, resolve

    try:
        facts = resolve(version)
    except VersionTooOld as exc:
        parser.error(f"--sim-sglang-version: {exc}")
    for tok in argv:
        flag = tok.partition("=")[0]
        if flag.startswith("--") and not flag.startswith("--sim-") and not facts.has_flag(flag):
            if any(f.startswith(flag) for f in facts.flags):
                continue  # an argparse prefix of a real flag (`--tp`)
            parser.error(f"unrecognized arguments: {flag} (SGLang {version} has no such flag)")
