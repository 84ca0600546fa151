"""The `sglang` engine: `python -m sglang.launch_server` argv, checked with SGLang's own
parser and resolution in the server's interpreter.

SGLang facts (flags per generation, the NCCL variables it adds, log lines, ...) live in
`fastverify.sglang`; this adapter maps the daemon's config onto them:

- `build_argv`: `ServerConfig` + mode + profile `requires:` -> `LaunchArgs.to_argv(gen)`;
  `server.sglang_flags = "auto"` asks the server's interpreter which SGLang is installed
  (package metadata only, no import).
- `check_argv`: runs `fastverify.engines.sglang_check` in the server's interpreter:
  `prepare_server_args(argv)`, then `ServerArgs.resolve_once()`, each step reported as
  accepted, rejected or not runnable here (with the step and the reason), before any
  running server is stopped.
- `engine_env(argv, env)`: what SGLang will add to (or override in) its schedulers'
  NCCL environment (`fastverify.sglang.envrules`), for verification and status.
- Trial mode: `server.load_format` other than "auto" adds `--load-format X` ("dummy":
  random weights, real shapes and kernels).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

from fastverify.config import MODES, SPEC_MODES, ServerConfig
from fastverify.engines.base import ArgvCheck, Engine, EngineArgError, check_requires
from fastverify.sglang.envrules import EngineEnv, engine_env
from fastverify.sglang.launch import (
    DECODE_LOG_INTERVAL,
    LAUNCH_MODULE,
    LaunchArgs,
    LaunchArgsError,
    Speculative,
)
from fastverify.sglang.versions import (
    FLAG_GENERATIONS,
    NEW_FLAGS_SINCE,
    PINNED_VERSION,
    generation_for,
    parse_version,
)

__all__ = [
    "DECODE_LOG_INTERVAL",
    "FLAG_GENERATIONS",
    "NEW_FLAGS_SINCE",
    "PINNED_VERSION",
    "SGLangEngine",
    "generation_for",
    "installed_version",
    "launch_args",
    "parse_version",
    "server_args",
]

CHECK_TIMEOUT_S = 300


@functools.lru_cache(maxsize=8)
def installed_version(python: str) -> str | None:
    """The SGLang version installed for `python` (metadata only), None when absent."""
    code = (
        "import importlib.metadata as m\n"
        "try:\n print(m.version('sglang'))\n"
        "except m.PackageNotFoundError:\n pass\n"
    )
    try:
        out = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


class SGLangEngine(Engine):
    name = "sglang"
    simulated = False

    def __init__(self, python: str = "", flags: str = "auto"):
        self.python = python or sys.executable
        self.flags = flags

    def version(self) -> str:
        """The installed SGLang's version, else the pinned one."""
        return installed_version(self.python) or PINNED_VERSION

    def interpreter_problem(self) -> str | None:
        """Why the server's interpreter cannot run SGLang (missing, not executable, SGLang
        not installed for it), or None. The version falls back to the pinned one then, and
        whoever reports it must say it is assumed."""
        path = self.python if os.sep in self.python else shutil.which(self.python)
        if not path or not os.path.isfile(path):
            return f"server.python {self.python} does not exist"
        if not os.access(path, os.X_OK):
            return f"server.python {self.python} is not executable"
        if installed_version(self.python) is None:
            return f"SGLang is not installed for server.python {self.python}"
        return None

    def sglang_version(self) -> str:
        return self.version()

    def flag_generation(self, server: ServerConfig | None = None) -> str:
        flags = server.sglang_flags if server is not None else self.flags
        if flags in FLAG_GENERATIONS:
            return flags
        if flags != "auto":
            raise EngineArgError(f"server.sglang_flags = {flags!r}: expected auto, new or old")
        return generation_for(self.version())

    def module_argv(self) -> list[str]:
        return [self.python, "-m", LAUNCH_MODULE]

    def build_argv(self, server: ServerConfig, mode: str, requires: Mapping[str, str]) -> list[str]:
        if not server.model_path:
            raise EngineArgError("server.model_path is not set (the model SGLang should load)")
        return self.module_argv() + server_args(
            server, mode, requires, self.flag_generation(server), server.model_path
        )

    def follower(self, argv: list[str]) -> bool:
        """SGLang's node_rank >= 1 of a multi-node server: schedulers and a health-only
        HTTP server (sglang.srt.utils.common.launch_dummy_health_check_server)."""
        return LaunchArgs.from_argv(_strip_module(argv)).follower

    def engine_env(self, argv: list[str], env: Mapping[str, str]) -> EngineEnv:
        return engine_env(LaunchArgs.from_argv(_strip_module(argv)), env, self.version())

    def check_argv(self, argv: list[str]) -> ArgvCheck:
        from fastverify.engines.sglang_check import SOURCE

        args = _strip_module(argv)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
        try:
            out = subprocess.run(
                [self.python, "-c", SOURCE, *args],
                capture_output=True,
                text=True,
                timeout=CHECK_TIMEOUT_S,
                check=False,
                env=env,
            )
        except FileNotFoundError:
            return ArgvCheck(None, f"server interpreter {self.python} not found")
        except subprocess.TimeoutExpired:
            return ArgvCheck(None, f"SGLang's check did not answer within {CHECK_TIMEOUT_S} s")
        return verdict_from_output(out.stdout, out.stderr, out.returncode, self.python)


def verdict_from_output(stdout: str, stderr: str, returncode: int, python: str) -> ArgvCheck:
    """The ArgvCheck for the JSON the check program printed (see sglang_check)."""
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        result = json.loads(last)
    except json.JSONDecodeError:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return ArgvCheck(None, f"the check program failed in {python} (exit {returncode}): {tail}")
    steps = result.get("steps") or []
    version = result.get("version")
    first = steps[0] if steps else {"step": "import", "ok": None, "message": "no step ran"}
    if first["step"] == "import":
        msg = str(first["message"])
        if "No module named 'sglang'" in msg or "No module named sglang" in msg:
            msg = f"SGLang is not installed for {python}; argv not checked"
        return ArgvCheck(None, msg, steps=tuple(steps), version=version)
    ok: bool | None = True
    for s in steps:
        if s["ok"] is False:
            ok = False
            break
    parts = [f"{s['step']}: {_word(s['ok'])}: {s['message']}" for s in steps]
    prefix = f"SGLang {version}: " if version else ""
    return ArgvCheck(
        ok,
        prefix + "; ".join(parts),
        steps=tuple(steps),
        version=version,
        env_added=dict(result.get("env_added") or {}),
        cuda_graph=result.get("cuda_graph"),
    )


def _word(ok: bool | None) -> str:
    return {True: "ok", False: "rejected", None: "not run"}[ok]


def _strip_module(argv: list[str]) -> list[str]:
    """The arguments after `-m <module>` (what SGLang's parser sees)."""
    if "-m" in argv:
        i = argv.index("-m")
        return argv[i + 2 :]
    return argv[1:]


def launch_args(
    server: ServerConfig,
    mode: str,
    requires: Mapping[str, str],
    model_path: str,
    draft_model_path: str | None = None,
) -> LaunchArgs:
    """The LaunchArgs for a daemon config, a mode and a profile's `requires:`."""
    if mode not in MODES:
        raise EngineArgError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    check_requires(requires)
    spec = None
    extra: tuple[str, ...] = ()
    if mode in SPEC_MODES:
        draft = draft_model_path if draft_model_path is not None else server.draft_model_path
        if not draft:
            raise EngineArgError(f"mode {mode} needs server.draft_model_path (the EAGLE-3 drafter)")
        e = server.eagle3
        spec = Speculative(draft, e.num_steps, e.topk, e.num_draft_tokens)
        if server.steps_override is not None and mode == "eagle3":
            # a timing trial at k steps, shaped as SGLang's adaptive worker runs k steps
            k = server.steps_override
            spec = Speculative(draft, k, 1, k + 1)
    if mode == "adaptive":
        spec, extra = _adaptive(server, spec)
    return LaunchArgs(
        model_path=model_path,
        tp_size=server.tp_size,
        host=server.host,
        port=server.port,
        speculative=spec,
        cuda_graph=requires.get("cuda-graph") != "off",
        custom_all_reduce=requires.get("custom-all-reduce") != "off",
        # trial mode: --load-format dummy (random weights); "auto" is SGLang's default
        load_format=server.load_format if server.load_format != "auto" else None,
        nnodes=server.nnodes,
        node_rank=server.node_rank,
        dist_init_addr=server.dist_init_addr,
        extra_args=(*extra, *server.extra_args),
    )


def _adaptive(server: ServerConfig, spec: Speculative | None) -> tuple[Speculative, tuple]:
    """Mode adaptive: EAGLE-3 at topk 1 with SGLang's --speculative-adaptive and the plan's
    config (`server.adaptive_config`), launched at the plan's largest step count (SGLang
    refuses a launch step outside the candidates and sets num_draft_tokens = steps + 1)."""
    from fastverify.sglang import adaptive

    assert spec is not None
    if not server.adaptive_config:
        raise EngineArgError(
            "mode adaptive needs an adaptive config (server.adaptive_config); the daemon uses "
            "the plan `fastverifyctl spec plan` writes into its state dir"
        )
    try:
        cfg = adaptive.load_config(server.adaptive_config)
    except adaptive.AdaptiveConfigError as exc:
        msg = f"mode adaptive: {exc} (write one with fastverifyctl spec plan)"
        raise EngineArgError(msg) from None
    steps = max(adaptive.candidate_steps(cfg))
    if steps < 1 and server.steps_override != 0:  # 0: the steps-0 timing trial of spec costs
        raise EngineArgError(
            f"mode adaptive: {server.adaptive_config} drafts at no batch size (every tier's "
            "candidates are [0]): serve mode baseline, which is what it would run"
        )
    spec = Speculative(spec.draft_model_path, steps, 1, steps + 1, spec.algorithm)
    return spec, (adaptive.FLAG_ADAPTIVE, adaptive.FLAG_ADAPTIVE_CONFIG, server.adaptive_config)


def server_args(
    server: ServerConfig,
    mode: str,
    requires: Mapping[str, str],
    generation: str,
    model_path: str,
    draft_model_path: str | None = None,
) -> list[str]:
    """SGLang's argv (without interpreter/module) for a mode and a profile's `requires`."""
    if generation not in FLAG_GENERATIONS:
        raise EngineArgError(f"flag generation {generation!r}: expected new or old")
    args = launch_args(server, mode, requires, model_path, draft_model_path)
    try:
        return args.to_argv(generation)
    except LaunchArgsError as exc:
        raise EngineArgError(str(exc)) from None


def load_format_of(argv: list[str]) -> str:
    """The `--load-format` an argv launches with ("auto" when absent): how a running or
    adopted engine is labelled (weights "dummy" vs "real") from what it was started with."""
    value = "auto"
    for i, arg in enumerate(argv):
        if arg == "--load-format" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--load-format="):
            value = arg.split("=", 1)[1]
    return value
