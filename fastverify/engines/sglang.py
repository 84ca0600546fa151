"""The `sglang` engine: `python -m sglang.launch_server` argv for SGLang 0.5.x, checked with
SGLang's own parser.

Pinned version: the image ships SGLang 0.5.23 (PINNED_VERSION). Flag generations:

- "new" (0.5.21 and later, the pinned one): CUDA graphs off with
  `--cuda-graph-backend-decode disabled` (the old flag is a deprecated alias there).
- "old" (0.5.20 and earlier): `--disable-cuda-graph`.

Both generations: `--load-format X` (only when `server.load_format` is not "auto"; "dummy"
is the trial mode), `--disable-custom-all-reduce`, `--enable-metrics`,
`--decode-log-interval`, and the EAGLE-3 flags `--speculative-algorithm EAGLE3
--speculative-draft-model-path P --speculative-num-steps S --speculative-eagle-topk K
--speculative-num-draft-tokens T`. `server.sglang_flags = "auto"` asks the server's
interpreter which SGLang is installed (package metadata only, no import).

`check_argv` runs `sglang.srt.server_args.prepare_server_args(argv)` in a subprocess of
the server's interpreter (argparse, no GPU needed), before any running server is stopped.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Mapping

from fastverify.config import ServerConfig
from fastverify.engines.base import ArgvCheck, Engine, EngineArgError, check_requires

PINNED_VERSION = "0.5.23"
NEW_FLAGS_SINCE = (0, 5, 21)
FLAG_GENERATIONS = ("new", "old")
DECODE_LOG_INTERVAL = 40

CHECK_SNIPPET = (
    "import sys\n"
    "from sglang.srt.server_args import prepare_server_args\n"
    "args = prepare_server_args(sys.argv[1:])\n"
    "print('ok: model_path=%s tp_size=%s' % (args.model_path, args.tp_size))\n"
)


def parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.strip().split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def generation_for(version: str) -> str:
    """'new' or 'old' flag generation for an SGLang version string."""
    v = parse_version(version)
    return "new" if v and v >= NEW_FLAGS_SINCE else "old"


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
    # SGLang's _set_envs_and_config() sets these in the server before spawning schedulers:
    # NCCL_CUMEM_ENABLE (from --enable-symm-mem) and NCCL_NVLS_ENABLE (--enable-nccl-nvls).
    engine_owned_nccl = frozenset({"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"})

    def __init__(self, python: str = "", flags: str = "auto"):
        self.python = python or sys.executable
        self.flags = flags

    def flag_generation(self, server: ServerConfig | None = None) -> str:
        flags = server.sglang_flags if server is not None else self.flags
        if flags in FLAG_GENERATIONS:
            return flags
        if flags != "auto":
            raise EngineArgError(f"server.sglang_flags = {flags!r}: expected auto, new or old")
        version = installed_version(self.python)
        return generation_for(version) if version else generation_for(PINNED_VERSION)

    def module_argv(self) -> list[str]:
        return [self.python, "-m", "sglang.launch_server"]

    def build_argv(self, server: ServerConfig, mode: str, requires: Mapping[str, str]) -> list[str]:
        if not server.model_path:
            raise EngineArgError("server.model_path is not set (the model SGLang should load)")
        return self.module_argv() + server_args(
            server, mode, requires, self.flag_generation(server), server.model_path
        )

    def check_argv(self, argv: list[str]) -> ArgvCheck:
        args = _strip_module(argv)
        try:
            out = subprocess.run(
                [self.python, "-c", CHECK_SNIPPET, *args],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
        except FileNotFoundError:
            return ArgvCheck(None, f"server interpreter {self.python} not found")
        except subprocess.TimeoutExpired:
            return ArgvCheck(None, "SGLang's parser did not answer within 300 s")
        text = (out.stdout + out.stderr).strip()
        if out.returncode == 0:
            return ArgvCheck(True, f"accepted by SGLang's parser ({text.splitlines()[-1]})")
        if "No module named 'sglang'" in text or "No module named sglang" in text:
            return ArgvCheck(None, f"SGLang is not installed for {self.python}; argv not checked")
        lines = [ln for ln in text.splitlines() if ln.strip()]
        error = next(
            (ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else ""
        )
        return ArgvCheck(False, f"rejected by SGLang's parser: {error}")


def _strip_module(argv: list[str]) -> list[str]:
    """The arguments after `-m <module>` (what SGLang's parser sees)."""
    if "-m" in argv:
        i = argv.index("-m")
        return argv[i + 2 :]
    return argv[1:]


def server_args(
    server: ServerConfig,
    mode: str,
    requires: Mapping[str, str],
    generation: str,
    model_path: str,
    draft_model_path: str | None = None,
) -> list[str]:
    """SGLang's argv (without interpreter/module) for a mode and a profile's `requires`."""
    if mode not in ("baseline", "eagle3"):
        raise EngineArgError(f"mode {mode!r}: expected baseline or eagle3")
    if generation not in FLAG_GENERATIONS:
        raise EngineArgError(f"flag generation {generation!r}: expected new or old")
    check_requires(requires)
    argv = [
        "--model-path", model_path,
        "--tp-size", str(server.tp_size),
        "--host", server.host,
        "--port", str(server.port),
        "--enable-metrics",
        "--decode-log-interval", str(DECODE_LOG_INTERVAL),
    ]  # fmt: skip
    if mode == "eagle3":
        draft = draft_model_path if draft_model_path is not None else server.draft_model_path
        if not draft:
            raise EngineArgError("mode eagle3 needs server.draft_model_path (the EAGLE-3 drafter)")
        e = server.eagle3
        argv += [
            "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", draft,
            "--speculative-num-steps", str(e.num_steps),
            "--speculative-eagle-topk", str(e.topk),
            "--speculative-num-draft-tokens", str(e.num_draft_tokens),
        ]  # fmt: skip
    if requires.get("cuda-graph") == "off":
        if generation == "new":
            argv += ["--cuda-graph-backend-decode", "disabled"]
        else:
            argv += ["--disable-cuda-graph"]
    if requires.get("custom-all-reduce") == "off":
        argv += ["--disable-custom-all-reduce"]
    if server.load_format != "auto":  # trial mode: --load-format dummy (random weights)
        argv += ["--load-format", server.load_format]
    argv += list(server.extra_args)
    return argv


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
