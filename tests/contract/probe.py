"""Runs inside a real-SGLang venv (scripts/sglang-venv.sh, or scripts/sglang-release-venv.sh
for an older release), never in the project's venv: reads a JSON request on stdin, answers
every question with SGLang's own code (or, where that code needs a GPU, with the installed
source text), prints one JSON object on stdout. `"only": ["argvs", "hooks", "parser"]` limits the
answer to the parts every release in the range can give (the rest reads 0.5.23's modules).

Imports nothing from fastverify: the facts fastverify holds are compared in the tests.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import io
import json
import os
import sys
import types
import warnings

warnings.filterwarnings("ignore")


def _text(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _nccl_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}


@contextlib.contextmanager
def _environ(env: dict[str, str]):
    saved = dict(os.environ)
    for k in list(os.environ):
        if k.startswith("NCCL_") or k.startswith("SGLANG_DETERMINISTIC"):
            del os.environ[k]
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _cuda_platform(on: bool):
    """SGLang's `is_cuda()` answering as on a CUDA machine (its defaults depend on it)."""
    import sglang.srt.utils as su

    real = su.is_cuda
    su.is_cuda = (lambda: True) if on else real
    try:
        yield
    finally:
        su.is_cuda = real


def argv_facts(argv: list[str], profile_env: dict[str, str]) -> dict:
    """What the release resolves from `argv` that fastverify relies on, with its own code:
    releases with `sglang.srt.arg_groups` (0.5.19+) parse, then run the CUDA-graph step and
    the parallel hook that sets NCCL_GRAPH_REGISTER; older ones resolve in
    `ServerArgs.__post_init__` (parse time) and, as far back as 0.5.1, set NCCL variables
    only in `_set_envs_and_config`, which every release runs before its schedulers start."""
    if importlib.util.find_spec("sglang.srt.arg_groups") is None:
        return _argv_facts_post_init(argv, profile_env)
    return _argv_facts_arg_groups(argv, profile_env)


def _parsed(out: dict, args) -> dict:
    out.update(parsed=True, tp_size=args.tp_size, model_path=args.model_path)
    out["speculative_num_draft_tokens"] = args.speculative_num_draft_tokens
    out["load_format"] = args.load_format
    # multi-node (one server over several pods: docs/guides/kubernetes.md)
    out["nnodes"] = args.nnodes
    out["node_rank"] = args.node_rank
    out["dist_init_addr"] = args.dist_init_addr
    out["host"], out["port"] = args.host, args.port
    return out


def _rejected(err: io.StringIO) -> dict:
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    return {"parsed": False, "error": lines[-1] if lines else ""}


def _argv_facts_arg_groups(argv: list[str], profile_env: dict[str, str]) -> dict:
    """Parse (prepare_server_args), then the CUDA-graph resolution step, the parallel hook
    (`handle_data_parallelism`: NCCL_GRAPH_REGISTER where the release sets it) and
    `_set_envs_and_config`, as on a CUDA machine."""
    from sglang.srt.arg_groups import parallel_hook
    from sglang.srt.arg_groups.cuda_graph_hook import parse_cuda_graph_config
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.server_args import prepare_server_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = prepare_server_args(argv)
    except SystemExit:
        return _rejected(err)
    out = _parsed({}, args)
    args._input_frozen = True
    set_envs = _set_envs_and_config()
    with _cuda_platform(True), _environ(profile_env):
        parse_cuda_graph_config(args)
        cfg = resolving_view(args).cuda_graph_config
        out["cuda_graph"] = {"decode": cfg.decode.backend, "prefill": cfg.prefill.backend}
        may = getattr(parallel_hook, "_graph_may_capture_collectives", None)
        out["graph_may_capture"] = None if may is None else may(args)
        try:
            parallel_hook.handle_data_parallelism(args)
        except Exception as exc:  # a combination the release refuses: the test names it
            out["hook_error"] = f"{type(exc).__name__}: {exc}"
        with contextlib.redirect_stderr(io.StringIO()):
            set_envs(args)
        out["env"] = _nccl_env()
    return out


def _argv_facts_post_init(argv: list[str], profile_env: dict[str, str]) -> dict:
    """Before 0.5.19: `prepare_server_args` is parse_args + `ServerArgs(**parsed)`, whose
    `__post_init__` resolves at once and needs an accelerator and the model's config. The
    parser runs for real; `_set_envs_and_config` gets a ServerArgs holding the parsed values
    (`hooks_facts` checks that `__post_init__` writes none of the fields it reads for NCCL)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            raw = parser.parse_args(argv)
    except SystemExit:
        return _rejected(err)

    class Unresolved(ServerArgs):  # the release's own fields and from_cli_args, unresolved
        def __post_init__(self) -> None:
            """Nothing: the fields stay as the parser gave them (the release resolves them
            here)."""

    args = Unresolved.from_cli_args(raw)
    out = _parsed({}, args)
    if hasattr(args, "cuda_graph_backend_decode"):  # 0.5.14 .. 0.5.18: per phase, as parsed
        out["cuda_graph"] = {ph: getattr(args, f"cuda_graph_backend_{ph}", None)
                             for ph in ("decode", "prefill")}  # fmt: skip
    else:  # the old generation: decode graphs only, one switch
        out["cuda_graph"] = {"decode": "disabled" if args.disable_cuda_graph else "enabled"}
    out["graph_may_capture"] = None
    set_envs = _set_envs_and_config()
    with _environ(profile_env):
        with contextlib.redirect_stderr(io.StringIO()):
            set_envs(args)
        out["env"] = _nccl_env()
    return out


class _Placeholder(types.ModuleType):
    """Stands for a module `entrypoints/engine.py` imports for its process machinery (the
    scheduler, tokenizer manager, ...) where that import cannot run here; any use of it by
    the code under test is reported (`placeholder_globals`) and fails the test."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a placeholder (tests/contract/probe.py)")


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def find_spec(self, name, path, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _Placeholder(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module) -> None:
        """Nothing to run: the placeholder module is the whole stand-in."""


ENGINE_IMPORT: dict = {}


def _set_envs_and_config():
    """The release's own `_set_envs_and_config` from its own, unmodified
    `entrypoints/engine.py`. Where that module's import fails here (0.5.1.post3 pins torch
    2.8; its kernels probe `torch._C._cpu._is_amx_tile_supported`, which the shared venv's
    newer torch no longer has, and it needs the CUDA-only sgl_kernel), it is imported again
    with placeholders for exactly the `sglang.srt.managers.*` modules it imports at top level
    (process machinery); the function's every global must then be a real object."""
    if ENGINE_IMPORT:
        return ENGINE_IMPORT["fn"]
    info = {"real_import_error": None, "placeholders": [], "placeholder_globals": []}
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            from sglang.srt.entrypoints.engine import _set_envs_and_config as fn
    except Exception as exc:
        info["real_import_error"] = f"{type(exc).__name__}: {exc}"
        spec = importlib.util.find_spec("sglang.srt.entrypoints.engine")
        tree = ast.parse(_text(spec.origin))
        names = sorted({n.module for n in tree.body if isinstance(n, ast.ImportFrom)
                        and (n.module or "").startswith("sglang.srt.managers.")})  # fmt: skip
        for name in [m for m in sys.modules if m == spec.name or m.startswith(spec.name + ".")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _PlaceholderFinder(names))
        info["placeholders"] = names
        with contextlib.redirect_stderr(io.StringIO()):
            from sglang.srt.entrypoints.engine import _set_envs_and_config as fn

    def names_of(code) -> set[str]:
        out = set(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                out |= names_of(const)
        return out

    info["placeholder_globals"] = sorted(
        n for n in names_of(fn.__code__) if isinstance(fn.__globals__.get(n), _Placeholder)
    )
    info["file"] = inspect.getsourcefile(fn)
    ENGINE_IMPORT.update(info, fn=fn)
    return fn


def hooks_facts() -> dict:
    """Which of the hooks fastverify relies on the release has, read from its own modules."""
    import sglang
    from sglang.srt.server_args import ServerArgs

    root = os.path.dirname(sglang.__file__)
    # the files of the release that name what a hook sets or reads
    markers = ("NCCL_GRAPH_REGISTER", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE")
    files_with: dict = {m: [] for m in markers}
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                text = _text(path)
                for marker in markers:
                    if marker in text:
                        files_with[marker].append(os.path.relpath(path, root))
    out = {
        "arg_groups": importlib.util.find_spec("sglang.srt.arg_groups") is not None,
        "resolve_once": hasattr(ServerArgs, "resolve_once"),
        "files_with": {m: sorted(v) for m, v in files_with.items()},
    }
    _set_envs_and_config()
    out["engine_import"] = {k: v for k, v in ENGINE_IMPORT.items() if k != "fn"}
    # the fields `_set_envs_and_config` reads in its NCCL statements, and those
    # ServerArgs' own methods assign (resolution): the parse-time value is the one it reads
    # where the two do not meet
    fn_src = inspect.getsource(ENGINE_IMPORT["fn"])
    fn_tree = ast.parse(fn_src)
    reads = set()
    for stmt in fn_tree.body[0].body:
        if "NCCL_" in (ast.get_source_segment(fn_src, stmt) or ""):
            reads |= _attrs_of(stmt, "server_args", ast.Load)
    sa_tree = ast.parse(_text(inspect.getsourcefile(ServerArgs)))
    out["nccl_reads"] = sorted(reads)
    out["resolution_writes"] = sorted(_attrs_of(sa_tree, "self", ast.Store) & reads)
    return out


def _attrs_of(tree, owner: str, ctx: type) -> set[str]:
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ctx) and isinstance(n.value, ast.Name)
            and n.value.id == owner}  # fmt: skip


def parser_facts() -> dict:
    """Every long flag of the release's parser with its choices, and the step-span names its
    builder gives (None where it has none: before 0.5.14's profile_utils)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags = {}
    for action in parser._actions:
        for opt in action.option_strings:
            if opt.startswith("--") and opt != "--help":
                flags[opt] = None if action.choices is None else [str(c) for c in action.choices]
    out = {"flags": flags, "spans": None}
    try:
        from sglang.srt.utils.profile_utils import build_step_span_name
    except ImportError:
        return out
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    def batch(mode):
        return types.SimpleNamespace(forward_mode=mode, batch_size=4, extend_num_tokens=7)

    out["spans"] = {
        "verify": build_step_span_name(batch(ForwardMode.TARGET_VERIFY), False),
        "draft": build_step_span_name(batch(ForwardMode.DECODE), False, is_draft_worker=True),
        "decode": build_step_span_name(batch(ForwardMode.DECODE), False),
        "extend": build_step_span_name(batch(ForwardMode.EXTEND), False),
    }
    return out


def span_names() -> dict:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.utils.profile_utils import build_step_span_name

    def batch(mode, bs, toks=None):
        return types.SimpleNamespace(forward_mode=mode, batch_size=bs, extend_num_tokens=toks)

    F = ForwardMode
    cases = {
        "verify": build_step_span_name(batch(F.TARGET_VERIFY, 4), False),
        "draft_decode": build_step_span_name(batch(F.DECODE, 4), False, is_draft_worker=True),
        "draft_borrowing_verify": build_step_span_name(
            batch(F.TARGET_VERIFY, 4), False, is_draft_worker=True
        ),
        "draft_extend": build_step_span_name(
            batch(F.DRAFT_EXTEND_V2, 4), False, is_draft_worker=True
        ),
        "decode": build_step_span_name(batch(F.DECODE, 32), False),
        "extend": build_step_span_name(batch(F.EXTEND, 1, 17), False),
        "mode_name_target_verify": F.TARGET_VERIFY.name,
    }
    return cases


def metric_facts() -> dict:
    from prometheus_client import REGISTRY
    from sglang.srt.observability import metrics_collector as mc
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(["--model-path", "/nonexistent", "--enable-metrics"])
    sched_labels = {"model_name": "m", "engine_type": "unified", "tp_rank": 0, "pp_rank": 0,
                    "moe_ep_rank": 0}  # fmt: skip
    errors = []
    # Every metric object registers itself when built; the scheduler collector's tail needs
    # a published runtime config (a running server), so what precedes it is what we read.
    for build in (
        lambda: mc.SchedulerMetricsCollector(sched_labels, args),
        lambda: mc.TokenizerMetricsCollector(args, {"model_name": "m", "engine_type": "unified"}),
    ):
        try:
            build()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    series = {}
    for collector in list(REGISTRY._collector_to_names):
        name = getattr(collector, "_name", None)
        if name and name.startswith("sglang:"):
            full = name + ("_total" if collector._type == "counter" else "")
            series[full] = {"type": collector._type, "labels": list(collector._labelnames)}
    src = inspect.getsource(mc)
    return {
        "itl": _itl_facts(),
        "errors": errors,
        "series": series,
        "scheduler_label_source": _dict_keys_in(src, '"moe_ep_rank": parallel.moe_ep_rank'),
        "tokenizer_labels_source": inspect.getsource(_find(mc, "tokenizer_metric_labels"))
        if _find(mc, "tokenizer_metric_labels")
        else "",
        "dp_rank_added": 'labels["dp_rank"] = parallel.dp_rank' in src,
        # counters declared in the collectors' source (some are built after the part that
        # needs a running server, so the registry alone does not hold them)
        "counters_in_source": sorted(
            set(__import__("re").findall(r'Counter\(\s*name="(sglang:\w+)"', src))
        ),
        "cuda_graph_modes": sorted(
            set(__import__("re").findall(r'"((?:decode|prefill)_(?:cuda_graph|none))"', src))
        ),
    }


def _itl_facts() -> dict:
    """One EAGLE-style step through the real `observe_inter_token_latency` (3 tokens 0.03 s
    after the last ones) into a histogram of SGLang's name (a collector needs a running
    server's config to be built); the exposition text it gives, as reduce() reads it."""
    import types

    from prometheus_client import CollectorRegistry, Histogram, generate_latest
    from sglang.srt.observability import metrics_collector as mc

    reg = CollectorRegistry()
    his = Histogram("sglang:inter_token_latency_seconds", "ITL", ["model_name"], registry=reg,
                    buckets=(0.005, 0.01, 0.02, 0.05, 0.1))  # fmt: skip
    holder = types.SimpleNamespace(histogram_inter_token_latency=his, _histogram_cls=None)
    try:
        mc.TokenizerMetricsCollector.observe_inter_token_latency(
            holder, {"model_name": "m"}, 0.03, 3
        )
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"text": generate_latest(reg).decode()}


def _find(mod, name):
    obj = getattr(mod, name, None)
    if obj is not None:
        return obj
    import sglang.srt.observability.utils as u  # where 0.5.23 keeps helpers

    return getattr(u, name, None)


def _dict_keys_in(src: str, marker: str) -> list[str]:
    """Keys of the dict literal that contains `marker` in `src`."""
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and marker in (ast.get_source_segment(src, node) or ""):
            return [k.value for k in node.keys if isinstance(k, ast.Constant)]
    return []


def fstring_skeletons(path: str, marker: str, func: str | None = None) -> list[list[str]]:
    """The constant pieces of every f-string (or implicit concatenation of them) in `path`
    (inside function `func` when given) whose text contains `marker`; `{}` marks a value."""
    src = _text(path)
    tree = ast.parse(src)
    scope = tree
    if func:
        scope = next(
            n for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func
        )  # fmt: skip
    out = []
    for node in ast.walk(scope):
        if isinstance(node, ast.JoinedStr):
            pieces = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    pieces.append(v.value)
                else:
                    pieces.append("{}")
            text = "".join(pieces)
            if marker in text:
                out.append(pieces)
    return out


def log_facts() -> dict:
    import sglang

    root = os.path.dirname(sglang.__file__)
    p = lambda rel: os.path.join(root, rel)  # noqa: E731
    from sglang.srt.managers.scheduler_components.pool_stats_observer import PoolStats
    from sglang.srt.model_executor.runner_backend_utils import (
        PREFILL_CUDA_GRAPH_CAPTURE_FAILED_MSG,
    )

    plain = PoolStats(full_num_used=148, full_token_usage=0.0, full_available_size=1,
                      full_evictable_size=0, full_capacity=100)  # fmt: skip
    swa = PoolStats(full_num_used=148, full_token_usage=0.01, full_available_size=1,
                    full_evictable_size=0, is_hybrid_swa=True, full_capacity=100,
                    swa_capacity=50, swa_num_used=20, swa_token_usage=0.4,
                    swa_available_size=1, swa_evictable_size=0)  # fmt: skip
    reporter = p("srt/managers/scheduler_components/metrics_reporter.py")
    setup = p("srt/model_executor/model_runner_components/cuda_graph_setup.py")
    return {
        "decode_parts_plain": plain.get_decode_usage_msg_parts(),
        "decode_parts_swa": swa.get_decode_usage_msg_parts(),
        "prefill_parts_plain": plain.get_prefill_usage_msg_parts(),
        "decode_skeletons": fstring_skeletons(reporter, "", "report_decode_stats"),
        "prefill_skeletons": fstring_skeletons(reporter, "", "report_prefill_stats"),
        "capture_skeletons": fstring_skeletons(setup, "Capture "),
        "capture_failed_skeletons": fstring_skeletons(
            p("srt/model_executor/runner/decode_cuda_graph_runner.py"), "Capture cuda graph"
        ),
        "prefill_failed": PREFILL_CUDA_GRAPH_CAPTURE_FAILED_MSG.format(
            backend="breakable", suggestions=""
        ),
        "ready_in_source": "The server is fired up and ready to roll!"
        in _text(p("srt/entrypoints/http_server.py")),
        "graph_label_default": '"cuda graph"' in _text(reporter),
        "module_warning_source": _text(p("launch_server.py")),
    }


def source_facts() -> dict:
    import sglang

    root = os.path.dirname(sglang.__file__)

    def read(rel: str) -> str:
        return _text(os.path.join(root, rel))

    from sglang.srt.arg_groups.choices import LOAD_FORMAT_CHOICES
    from sglang.srt.environ import envs

    return {
        "load_format_choices": list(LOAD_FORMAT_CHOICES),
        "attention_hook": read("srt/arg_groups/attention_hook.py"),
        "moe_hook": read("srt/arg_groups/moe_hook.py"),
        "engine": read("srt/entrypoints/engine.py"),
        "http_server": read("srt/entrypoints/http_server.py"),
        "deterministic_nchannels": str(envs.SGLANG_DETERMINISTIC_NCCL_NCHANNELS.get()),
        "scheduler_start_method": read("srt/entrypoints/engine.py").count('get_context("spawn")')
        + read("srt/entrypoints/engine.py").count('set_start_method("spawn"'),
    }


def main() -> None:
    req = json.load(sys.stdin)
    import importlib.metadata as md

    every = ("argvs", "hooks", "parser", "spans", "metrics", "logs", "source")
    only = set(req.get("only") or every)
    out = {"version": md.version("sglang"), "argvs": []}
    for item in req["argvs"]:
        out["argvs"].append(argv_facts(item["argv"], item.get("env", {})))
    parts = {"hooks": hooks_facts, "parser": parser_facts, "spans": span_names,
             "metrics": metric_facts,
             "logs": log_facts, "source": source_facts}  # fmt: skip
    for name, fn in parts.items():
        if name in only:
            out[name] = fn()
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
