#!/usr/bin/env python3
"""Generate fastverify's per-release SGLang facts from each release's own wheel.

For every SGLang release in fastverify's range (the latest .postN of 0.5.1 .. 0.5.23), this
downloads the wheel once (`pip download --no-deps`, cached under
${XDG_CACHE_HOME:-~/.cache}/fastverify/wheels) and reads its source with `ast` (never
importing it): the argparse flags and their choices, the NCCL variables the server sets,
the SGLANG_* variables with kinds (srt/environ.py where it exists), the log-line formats
fastverify parses, the profiler span names, the sglang:* metrics with their labels, the HTTP
endpoints, SGLang's weight cache (its daemon's command line, socket and ready-file paths,
fingerprint fields, lines, the refusal of speculative decoding), and the features derived
from them. One JSON file per release goes to
fastverify/sglang/facts/. Scope: the LLM server `sglang.launch_server` runs, `sglang/srt/`
(the diffusion server under `sglang/multimodal_gen/` and the test kits are left out).

Usage:
  scripts/sglang_facts.py                # (re)write every data file
  scripts/sglang_facts.py --check        # re-extract and diff against the data files (exit 1)
  scripts/sglang_facts.py --versions 0.5.20 0.5.23 [--check]
  scripts/sglang_facts.py --print 0.5.23 # one release's facts on stdout
  scripts/sglang_facts.py --check --no-cache  # re-extract every release from scratch
  scripts/sglang_facts.py --download     # only fetch the wheels (./scripts/test does)

An extraction is a function of the wheel, this script and the Python that runs its `ast`:
each is kept beside the wheels, keyed by the three (the wheel's sha256, this file's, the
Python version), and reused until one of them changes; the data files are compared with it
every time. tests/contract/test_sglang_facts_contract.py runs `--check` on every release.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "fastverify" / "sglang" / "facts"
# the latest .postN of every release 0.5.1 .. 0.5.23 (`pip index versions sglang`, 2026-12-01)
RELEASES = (
    "0.5.1.post3", "0.5.2", "0.5.3.post3", "0.5.4.post3", "0.5.5.post3", "0.5.6.post2",
    "0.5.7", "0.5.8.post1", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12.post1",
    "0.5.13.post1", "0.5.14", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19",
    "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)  # fmt: skip
SCHEMA = 1

# log-line kinds fastverify parses -> the text that marks SGLang's format string
LOG_MARKERS: dict[str, str | tuple[str, str]] = {
    "decode": "Decode batch",
    "prefill": "Prefill batch",
    "ready": "The server is fired up and ready to roll",
    "load_progress": "Loading safetensors checkpoint shards",
    "load_weight_end": "Load weight end. ",
    "capture_progress": "Capturing batches",
    "capture_progress_tokens": "Capturing num tokens",
    "startup_timings": "Engine startup timings",
    "capture_milestone": " graph begin.",
    # every runner's begin and end lines (the decode one's "{graph_backend[...]} begin." too);
    # (text to find the files by, text of the template): their f-strings span source lines
    "capture_begin": ("backend={", " begin. backend="),
    "capture_end": ("elapsed={capture_time", " end. "),
    "capture_failed": "Capture cuda graph failed",
    "prefill_capture_failed": "Fail when using backend",
    "allreduce_pcie_ipc": "PCIe-IPC",
    "adaptive_speculation": "speculative_adaptive",
    "adaptive_step_change": "Adaptive spec params updated",
}
# endpoints fastverify calls (the rest are listed too)
METRIC_CLASSES = ("Gauge", "Counter", "Histogram", "Summary")
ENV_KINDS = {
    "get_bool_env_var": "bool",
    "get_int_env_var": "int",
    "get_float_env_var": "float",
    "getenv": "str",
    "get": "str",
}
_SGLANG_VAR = re.compile(r"^SGLANG_[A-Z0-9_]+$")
_NCCL_VAR = re.compile(r"^NCCL_[A-Z0-9_]+$")


# ----------------------------------------------------------------------------- wheels


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "fastverify" / "wheels"


def wheel_path(version: str) -> Path | None:
    found = sorted(cache_dir().glob(f"sglang-{version}-*.whl"))
    return found[0] if found else None


def download(version: str) -> Path:
    """The cached wheel of sglang==version, downloaded once (no dependencies). A lock file
    per release keeps concurrent runs (the suite's workers, sglang-release-venv.sh) from
    downloading the same wheel at once."""
    import fcntl

    have = wheel_path(version)
    if have is not None:
        return have
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / f".lock-{version}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        have = wheel_path(version)
        if have is not None:
            return have
        cmd = [
            sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
            "--python-version", "3.11", "--platform", "manylinux_2_34_x86_64",
            f"sglang=={version}", "-d", str(cache_dir()),
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    have = wheel_path(version)
    if have is None:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"sglang_facts: could not download sglang=={version}: {tail}")
    return have


# ----------------------------------------------------------------------------- source access


class Source:
    """The wheel's Python files, parsed lazily."""

    def __init__(self, wheel: Path):
        self.zip = zipfile.ZipFile(wheel)
        self.names = [n for n in self.zip.namelist() if n.endswith(".py")]
        self._text: dict[str, str] = {}
        self._tree: dict[str, ast.Module] = {}

    def text(self, name: str) -> str:
        if name not in self._text:
            self._text[name] = self.zip.read(name).decode("utf-8", "replace")
        return self._text[name]

    def tree(self, name: str) -> ast.Module:
        if name not in self._tree:
            tree = ast.parse(self.text(name), filename=name)
            for node in ast.walk(tree):
                for child in ast.iter_child_nodes(node):
                    child.parent = node  # type: ignore[attr-defined]
            self._tree[name] = tree
        return self._tree[name]

    def has(self, name: str) -> bool:
        return name in self._text or name in set(self.names)

    def grep(self, needle: str, under: str = "sglang/srt/") -> list[str]:
        """Files under `under` whose text contains `needle` (tests and debug tools left out)."""
        out = []
        for n in self.names:
            if not n.startswith(under) or "/test" in n or "/debug_utils/" in n:
                continue
            if needle in self.text(n):
                out.append(n)
        return out


def short(name: str) -> str:
    return name.removeprefix("sglang/")


def const_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def template(node: ast.AST) -> str | None:
    """A string expression as a template: literals as they are, `{expr}` for the rest."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                spec = ""
                if v.format_spec is not None:
                    spec = ":" + (template(v.format_spec) or "")
                parts.append("{" + ast.unparse(v.value) + spec + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template(node.left), template(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def enclosing(node: ast.AST, kinds: tuple[type, ...]) -> ast.AST | None:
    cur = getattr(node, "parent", None)
    while cur is not None and not isinstance(cur, kinds):
        cur = getattr(cur, "parent", None)
    return cur


def module_strings(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level NAME = [..str..] / (..str..) constants (argparse choices lists)."""
    out: dict[str, list[str]] = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, (ast.List, ast.Tuple)):
            items = [const_str(e) for e in value.elts]
            if items and all(i is not None for i in items):
                out[target.id] = [i for i in items if i is not None]
    return out


# ----------------------------------------------------------------------------- flags


def choices_of(node: ast.AST | None, consts: dict[str, list[str]]) -> list[str] | None:
    if node is None:
        return None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return [str(i) for i in items] if len(items) == len(node.elts) else None
    if isinstance(node, ast.Name) and node.id in consts:
        return list(consts[node.id])
    if isinstance(node, ast.Attribute) and node.attr in consts:
        return list(consts[node.attr])
    return None


def literal_values(node: ast.AST) -> list[str] | None:
    """`Literal["a", "b"]` (possibly inside Optional[...]) -> ["a", "b"]."""
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Subscript)
            and isinstance(sub.value, ast.Name)
            and sub.value.id == "Literal"
        ):
            elts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            vals = [e.value for e in elts if isinstance(e, ast.Constant)]
            return [str(v) for v in vals]
    return None


def flags(src: Source) -> dict[str, list[str] | None]:
    """Every long flag of `sglang.launch_server` -> its choices (None when free)."""
    consts: dict[str, list[str]] = {}
    files = ["sglang/srt/server_args.py"]
    files += sorted(n for n in src.names if n.startswith("sglang/srt/arg_groups/fields/"))
    for extra in ("sglang/srt/arg_groups/choices.py",):
        if src.has(extra):
            consts.update(module_strings(src.tree(extra)))
    for f in files:
        consts.update(module_strings(src.tree(f)))
    out: dict[str, list[str] | None] = {}
    for f in files:
        tree = src.tree(f)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                names = [const_str(a) for a in node.args]
                kw = {k.arg: k.value for k in node.keywords}
                ch = choices_of(kw.get("choices"), consts)
                action = kw.get("action")
                for name in names:
                    if name and name.startswith("--"):
                        out[name] = ch
                        if (
                            isinstance(action, ast.Attribute)
                            and action.attr == "BooleanOptionalAction"
                        ):
                            out["--no-" + name[2:]] = None
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                flag_from_field(node, consts, out)
    return dict(sorted(out.items()))


def flag_from_field(node: ast.AnnAssign, consts: dict, out: dict) -> None:
    """`name: A[T, "help" | Arg(...)] = default` in a config class -> its CLI flag(s)."""
    ann = node.annotation
    if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name)):
        return
    if ann.value.id not in ("A", "Annotated") or not isinstance(ann.slice, ast.Tuple):
        return
    if not isinstance(enclosing(node, (ast.ClassDef, ast.FunctionDef)), ast.ClassDef):
        return
    typ, *meta = ann.slice.elts
    arg = None
    for m in meta:
        if const_str(m) is not None:
            arg = {}
        elif isinstance(m, ast.Call) and getattr(m.func, "id", None) == "Arg":
            arg = {k.arg: k.value for k in m.keywords}
    if arg is None:
        return
    no_cli = arg.get("no_cli")
    if isinstance(no_cli, ast.Constant) and no_cli.value is True:
        return
    cli = const_str(arg.get("cli_name")) or "--" + node.target.id.replace("_", "-")
    names = [cli]
    aliases = arg.get("aliases")
    if isinstance(aliases, (ast.List, ast.Tuple)):
        names += [a for a in (const_str(e) for e in aliases.elts) if a]
    ch = choices_of(arg.get("choices"), consts)
    if ch is None and "action" not in arg:
        ch = literal_values(typ)
    action = arg.get("action")
    negate = isinstance(action, ast.Attribute) and action.attr == "BooleanOptionalAction"
    for name in names:
        if name.startswith("--"):
            out[name] = ch
            if negate:
                out["--no-" + name[2:]] = None


# ----------------------------------------------------------------------------- metrics


def metric_files(src: Source) -> list[str]:
    """Every srt/ module that names an `sglang:` series (the collectors, and the few series
    declared beside their code: HTTP requests, CPU seconds, function timers, ...)."""
    return src.grep('"sglang:')


def label_dicts(src: Source) -> dict[str, list[str]]:
    """The base label names of the scheduler's and the tokenizer's collectors: the keys of
    the `{"model_name": ...}` dict literals SGLang builds for them (srt/)."""
    sched: list[str] = []
    tok: list[str] = []
    for f in src.grep('"model_name"'):
        for node in ast.walk(src.tree(f)):
            if not isinstance(node, ast.Dict):
                continue
            keys = [const_str(k) for k in node.keys]
            if "model_name" not in keys or not all(keys):
                continue
            keys = [k for k in keys if k]
            if "tp_rank" in keys:
                if len(keys) > len(sched):
                    sched = keys
            elif ("tokenizer" in f or "metrics_collector" in f) and len(keys) > len(tok):
                tok = keys
    return {"scheduler": sched, "tokenizer": tok}


def metrics(src: Source) -> dict[str, list[str]]:
    """Every `sglang:*` series -> its label names (the collector's base labels + its own)."""
    bases = label_dicts(src)
    out: dict[str, list[str]] = {}
    for f in metric_files(src):
        for node in ast.walk(src.tree(f)):
            if not isinstance(node, ast.Call):
                continue
            fname = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
            if not any(c in fname for c in METRIC_CLASSES) or "Family" in fname:
                continue
            kw = {k.arg: k.value for k in node.keywords}
            name = const_str(kw.get("name")) or (const_str(node.args[0]) if node.args else None)
            if not name or not name.startswith("sglang:"):
                continue
            cls = enclosing(node, (ast.ClassDef,))
            cname = cls.name if isinstance(cls, ast.ClassDef) else ""
            base = (
                bases["scheduler"]
                if "Scheduler" in cname
                else bases["tokenizer"]
                if "Tokenizer" in cname
                else []
            )
            labels = list(base) if _uses_base(kw.get("labelnames")) else []
            labels += _own_labels(kw.get("labelnames"))
            if name in out:  # declared twice (e.g. per mode): keep the union, in order
                labels = out[name] + [x for x in labels if x not in out[name]]
            out[name] = labels
    return dict(sorted(out.items()))


def _uses_base(node: ast.AST | None) -> bool:
    return node is not None and any(
        isinstance(n, ast.Attribute) and n.attr == "keys" for n in ast.walk(node)
    )


def _own_labels(node: ast.AST | None) -> list[str]:
    if node is None:
        return []
    out = []
    for n in ast.walk(node):
        if isinstance(n, (ast.List, ast.Tuple, ast.Set)):
            out += [s for s in (const_str(e) for e in n.elts) if s]
    return out


# ----------------------------------------------------------------------------- spans


def spans(src: Source) -> dict[str, object]:
    """Profiler step spans: the f-string templates and the stage names they take."""
    templates: set[str] = set()
    stages: set[str] = set()
    verify_stage = None
    uses_mode_names = False
    for f in src.grep("step["):
        if "/layers/" in f:
            continue
        tree = src.tree(f)
        for node in ast.walk(tree):
            if not isinstance(node, ast.JoinedStr):
                continue
            t = template(node)
            if not t or not t.startswith("step["):
                continue
            if not t.endswith("]"):
                t += "]"
            templates.add(t)
            fn = enclosing(node, (ast.FunctionDef,))
            if fn is None:
                continue
            m = re.match(r"step\[([A-Z_]+) ", t)
            if m:
                stages.add(m.group(1))
            src_fn = ast.unparse(fn)
            if "mode.name" in src_fn:
                uses_mode_names = True
            for sub in ast.walk(fn):
                if (
                    isinstance(sub, ast.Assign)
                    and len(sub.targets) == 1
                    and isinstance(sub.targets[0], ast.Name)
                    and sub.targets[0].id == "stage"
                    and const_str(sub.value)
                ):
                    value = const_str(sub.value)
                    stages.add(value)
                    test = getattr(getattr(sub, "parent", None), "test", None)
                    if test is not None and "TARGET_VERIFY" in ast.unparse(test):
                        verify_stage = value
    # the coarse stage ranges the speculative workers open (spec_utils.spec_stage_span)
    stage_spans: set[str] = set()
    for f in src.grep("spec_stage_span("):
        for node in ast.walk(src.tree(f)):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func).endswith("spec_stage_span")
                and node.args
                and const_str(node.args[0])
            ):
                stage_spans.add(const_str(node.args[0]))
    if uses_mode_names:
        stages |= set(forward_modes(src))
    if stages and verify_stage is None and "TARGET_VERIFY" in stages:
        verify_stage = "TARGET_VERIFY"
    return {
        "templates": sorted(templates),
        "stages": sorted(stages),
        "verify_stage": verify_stage,
        "draft_stage": "DRAFT" if "DRAFT" in stages else None,
        "stage_spans": sorted(stage_spans),
    }


def forward_modes(src: Source) -> list[str]:
    name = "sglang/srt/model_executor/forward_batch_info.py"
    if not src.has(name):
        return []
    for node in ast.walk(src.tree(name)):
        if isinstance(node, ast.ClassDef) and node.name == "ForwardMode":
            return [
                t.id
                for s in node.body
                if isinstance(s, ast.Assign)
                for t in s.targets
                if isinstance(t, ast.Name) and t.id.isupper()
            ]
    return []


# ----------------------------------------------------------------------------- endpoints


def endpoints(src: Source) -> dict[str, list[str]]:
    """HTTP routes of the server (entrypoints/) -> methods."""
    out: dict[str, set[str]] = {}
    for f in src.grep("@app.", "sglang/srt/entrypoints/"):
        if "/openai/" in f and "http_server" not in f:
            continue
        for node in ast.walk(src.tree(f)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for dec in node.decorator_list:
                if not (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute)):
                    continue
                if getattr(dec.func.value, "id", None) != "app":
                    continue
                path = const_str(dec.args[0]) if dec.args else None
                if not path or not path.startswith("/"):
                    continue
                kind = dec.func.attr
                if kind == "api_route":
                    kw = {k.arg: k.value for k in dec.keywords}
                    methods = choices_of(kw.get("methods"), {}) or ["GET"]
                elif kind in ("get", "post", "put", "delete", "patch"):
                    methods = [kind.upper()]
                else:
                    continue
                out.setdefault(path, set()).update(m.upper() for m in methods)
    return {p: sorted(m) for p, m in sorted(out.items())}


def profile_options(src: Source) -> list[str]:
    """The fields of the request type the `/start_profile` handler takes (`ProfileReqInput`
    in older releases, `ProfileReq` in newer ones, managers/io_struct.py)."""
    cls_name = None
    for f in src.grep('"/start_profile"', "sglang/srt/entrypoints/"):
        for node in ast.walk(src.tree(f)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(d, ast.Call) and d.args and const_str(d.args[0]) == "/start_profile"
                for d in node.decorator_list
            ):
                for a in node.args.args:
                    if a.annotation is not None:
                        m = re.search(r"\b(Profile\w*)\b", ast.unparse(a.annotation))
                        if m:
                            cls_name = m.group(1)
    name = "sglang/srt/managers/io_struct.py"
    if cls_name is None or not src.has(name):
        return []
    for node in ast.walk(src.tree(name)):
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            return [
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
    return []


# ----------------------------------------------------------------------------- env


def nccl_added(src: Source) -> dict[str, list[str]]:
    """NCCL_* variables the server writes into its own environment -> where (file:line)."""
    out: dict[str, set[str]] = {}
    for f in src.grep("NCCL_"):
        for node in ast.walk(src.tree(f)):
            name, how = None, None
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and _is_environ(t.value):
                        name = const_str(t.slice)
                        how = "set-if-unset" if _guarded_unset(node, name) else "set"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "setdefault" and _is_environ(node.func.value):
                    name, how = (const_str(node.args[0]) if node.args else None), "setdefault"
                elif node.func.attr == "update" and _is_environ(node.func.value):
                    for arg in node.args:
                        if isinstance(arg, ast.Dict):
                            for k in arg.keys:
                                key = const_str(k)
                                if key and _NCCL_VAR.match(key):
                                    out.setdefault(key, set()).add(f"{short(f)}:{node.lineno}")
            if name and _NCCL_VAR.match(name):
                out.setdefault(name, set()).add(f"{short(f)}:{node.lineno} {how}")
    return {k: sorted(v) for k, v in sorted(out.items())}


GRAPH_REGISTER_TRIGGERS = {
    "_graph_may_capture_collectives": "any_capture",
    "enable_tp_lm_head_all_to_all": "tp_lm_head_all_to_all",
    "_graph_pool_is_pausable": "pausable_graph_pool",
}


def graph_register_triggers(src: Source) -> list[str]:
    """When argument resolution sets NCCL_GRAPH_REGISTER=0 (arg_groups/parallel_hook.py):
    the tests of the `if ...: _disable_nccl_graph_buffer_registration(...)` guards, by name
    (`any_capture`: TP/EP/DP > 1 and a graph phase captures, 0.5.23; `tp_lm_head_all_to_all`,
    `pausable_graph_pool`: the narrower guards of 0.5.20 .. 0.5.22)."""
    name = "sglang/srt/arg_groups/parallel_hook.py"
    if not src.has(name):
        return []
    out: list[str] = []
    for node in ast.walk(src.tree(name)):
        if not isinstance(node, ast.If):
            continue
        calls = [
            c
            for c in node.body
            if isinstance(c, ast.Expr)
            and isinstance(c.value, ast.Call)
            and getattr(c.value.func, "id", "") == "_disable_nccl_graph_buffer_registration"
        ]
        if not calls:
            continue
        test = ast.unparse(node.test)
        for needle, trigger in GRAPH_REGISTER_TRIGGERS.items():
            if needle in test and trigger not in out:
                out.append(trigger)
        if not any(n in test for n in GRAPH_REGISTER_TRIGGERS):
            out.append(f"other: {test}")
    return sorted(out)


def _guarded_unset(node: ast.AST, name: str | None) -> bool:
    """Is this assignment inside `if "NAME" not in os.environ ...:` (a profile's value wins
    unless the rest of the condition holds)?"""
    cur = getattr(node, "parent", None)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.Module)):
        if (
            isinstance(cur, ast.If)
            and name
            and f"'{name}' not in os.environ" in ast.unparse(cur.test)
        ):
            return True
        cur = getattr(cur, "parent", None)
    return False


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def sglang_vars(src: Source) -> dict[str, str]:
    """SGLANG_* variables -> kind: `Envs` in srt/environ.py where it exists, else the names
    read through get_bool_env_var / get_int_env_var / os.getenv in srt/."""
    name = "sglang/srt/environ.py"
    out: dict[str, str] = {}
    if src.has(name):
        for node in ast.walk(src.tree(name)):
            if isinstance(node, ast.ClassDef) and node.name == "Envs":
                for s in node.body:
                    value = s.value if isinstance(s, (ast.Assign, ast.AnnAssign)) else None
                    target = (
                        s.targets[0] if isinstance(s, ast.Assign) else getattr(s, "target", None)
                    )
                    if (
                        isinstance(target, ast.Name)
                        and isinstance(value, ast.Call)
                        and _SGLANG_VAR.match(target.id)
                    ):
                        kind = getattr(value.func, "id", "") or getattr(value.func, "attr", "")
                        out[target.id] = kind.removeprefix("Env").lower() or "str"
        return dict(sorted(out.items()))
    for f in src.grep("SGLANG_"):
        for node in ast.walk(src.tree(f)):
            if isinstance(node, ast.Call) and node.args:
                var = const_str(node.args[0])
                fname = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
                if var and _SGLANG_VAR.match(var) and fname in ENV_KINDS:
                    out.setdefault(var, ENV_KINDS[fname])
    return dict(sorted(out.items()))


_SIMULATE = re.compile(r"^(SGLANG_)?SIMULATE_ACC_[A-Z_]+$")
# the variables of SGLang's forced acceptance are keyed by the end of their names, lower-cased
# (SIMULATE_ACC_METHOD -> "method", SIMULATE_ACC_TOKEN_MODE -> "token_mode"), the length's
# as "length"
_SIMULATE_ROLES = {"LEN": "length"}


def _simulate_vars(src: Source) -> dict[str, dict[str, object]]:
    """SIMULATE_ACC_* variables -> {kind, default}: `Envs` fields in srt/environ.py, else the
    module-level `os.environ.get("NAME", default)` that reads them."""
    out: dict[str, dict[str, object]] = {}
    name = "sglang/srt/environ.py"
    if src.has(name):
        for node in ast.walk(src.tree(name)):
            if isinstance(node, ast.ClassDef) and node.name == "Envs":
                for s in node.body:
                    if not isinstance(s, (ast.Assign, ast.AnnAssign)):
                        continue
                    target = s.targets[0] if isinstance(s, ast.Assign) else s.target
                    value = s.value
                    if (isinstance(target, ast.Name) and _SIMULATE.match(target.id)
                            and isinstance(value, ast.Call)):  # fmt: skip
                        kind = getattr(value.func, "id", "") or getattr(value.func, "attr", "")
                        default = ast.literal_eval(value.args[0]) if value.args else None
                        out[target.id] = {"kind": kind.removeprefix("Env").lower() or "str",
                                          "default": default}  # fmt: skip
        return out
    for f in src.grep("SIMULATE_ACC"):
        for node in ast.walk(src.tree(f)):
            if isinstance(node, ast.Call) and node.args:
                var = const_str(node.args[0])
                fname = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
                if var and _SIMULATE.match(var) and fname in ENV_KINDS:
                    default = const_str(node.args[1]) if len(node.args) > 1 else None
                    out.setdefault(var, {"kind": ENV_KINDS[fname], "default": default})
    return out


def _compared_values(src: Source, suffix: str) -> list[str]:
    """The string values SGLang's source compares a variable (or the parameter it is passed
    as: `simulate_acc_method`) with: `== "x"`, `!= "x"`, `in ("x", "y")`."""
    found: set[str] = set()
    for f in src.grep("SIMULATE_ACC"):
        for node in ast.walk(src.tree(f)):
            if not isinstance(node, ast.Compare) or len(node.ops) != 1:
                continue
            left = node.left
            named = getattr(left, "id", None) or getattr(left, "attr", None) or ""
            if not named.lower().endswith(suffix.lower()):
                continue
            right = node.comparators[0]
            if isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                found.update(v for v in map(const_str, right.elts) if v)
            elif const_str(right):
                found.add(const_str(right))  # type: ignore[arg-type]
    return sorted(found)


def simulate_acceptance(src: Source) -> dict[str, object] | None:
    """SGLang's forced acceptance (a benchmark knob: every verify pass accepts the length it
    is told): its variables by role (length, method, token_mode) with kind and default, and
    the values its source accepts for the method and the token mode."""
    found = _simulate_vars(src)
    roles: dict[str, object] = {}
    for var, spec in sorted(found.items()):
        rest = var.split("SIMULATE_ACC_", 1)[1]
        roles[_SIMULATE_ROLES.get(rest, rest.lower())] = {"name": var, **spec}
    if "length" not in roles:
        return None
    methods = _compared_values(src, "acc_method")
    modes = _compared_values(src, "acc_token_mode")
    if "token_mode" in roles:
        default = roles["token_mode"]["default"]  # type: ignore[index]
        modes = sorted({*modes, *([default] if default else [])})
    return {"vars": roles, "methods": methods, "token_modes": modes or None}


# ----------------------------------------------------------------------------- log formats


def log_formats(src: Source) -> dict[str, list[dict[str, object]]]:
    """For each log-line kind fastverify parses: SGLang's format strings (templates, with
    `{expr}` for interpolations), the pieces a message is built from, and where."""
    out: dict[str, list[dict[str, object]]] = {}
    for kind, spec in LOG_MARKERS.items():
        needle, marker = spec if isinstance(spec, tuple) else (spec, spec)
        found: list[dict[str, object]] = []
        for f in src.grep(needle):
            if "/multimodal_gen/" in f:
                continue
            for node in ast.walk(src.tree(f)):
                if not isinstance(node, (ast.Constant, ast.JoinedStr)):
                    continue
                if isinstance(getattr(node, "parent", None), ast.JoinedStr):
                    continue
                t = template(node)
                if not t or marker not in t:
                    continue
                if isinstance(getattr(node, "parent", None), ast.Expr):
                    continue  # a docstring
                found.append({"at": f"{short(f)}:{node.lineno}", "pieces": _pieces(node, t)})
        if found:
            out[kind] = sorted(found, key=lambda r: str(r["at"]))
    return out


def _pieces(node: ast.AST, first: str) -> list[str]:
    """The marker string and what the same function appends to the same variable."""
    parent = getattr(node, "parent", None)
    if not (
        isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        return [first]
    var = parent.targets[0].id
    fn = enclosing(parent, (ast.FunctionDef, ast.AsyncFunctionDef))
    if fn is None:
        return [first]
    pieces = [first]
    for sub in ast.walk(fn):
        if (
            isinstance(sub, ast.AugAssign)
            and isinstance(sub.target, ast.Name)
            and sub.target.id == var
            and sub.lineno > parent.lineno
        ):
            t = template(sub.value)
            if t is not None:
                pieces.append((sub.lineno, t))  # type: ignore[arg-type]
    head, rest = pieces[0], sorted(pieces[1:])
    return [head, *(t for _, t in rest)]  # type: ignore[misc]


# ----------------------------------------------------------------------------- weight cache

WC_DIR = "sglang/srt/weight_cache/"
WC_MODULE = "sglang.srt.weight_cache.daemon"
# the lines of the engine's IPC loader (srt/weight_cache/ipc_loader.py) -> a marker
WC_LOADER_LINES = {
    "fetched": "[IpcModelLoader] Fetched ",
    "loaded": "[IpcModelLoader] Loaded model via IPC",
    "fallback": "falling back to disk load",
    "socket_missing": "[IpcModelLoader] Daemon socket not found",
    "refused": "refused the connection",
    "mismatch": "[IpcModelLoader] Daemon config mismatch",
    "daemon_died": "died while this engine holds its weights",
    "mapped": "[IpcModelLoader] Zero-copy: mapped",
}
# the cache daemon's own lines (daemon.py, protocol.py)
WC_DAEMON_LINES = {
    "loading": "Loading model from disk",
    "loaded": "Model loaded from disk in",
    "listening": "Listening on ",
    "mismatch": "Config mismatch: ",
    "all_ready": "weight cache daemons on node",
    "already_running": "is already running",
    "unsupported_quant": "is not verified for CUDA IPC",
    "exited": "exited prematurely",
}
WC_SPEC_REFUSAL = "is not supported together with speculative"


def _strings_with(src: Source, name: str, marker: str) -> list[dict[str, object]]:
    """Every string expression of file `name` holding `marker`: its template, where, and
    whether it is raised (an exception's message) or logged."""
    out: list[dict[str, object]] = []
    for node in ast.walk(src.tree(name)):
        if not isinstance(node, (ast.Constant, ast.JoinedStr)):
            continue
        if isinstance(getattr(node, "parent", None), ast.JoinedStr):
            continue
        t = template(node)
        if not t or marker not in t or isinstance(getattr(node, "parent", None), ast.Expr):
            continue
        how = "raise" if enclosing(node, (ast.Raise,)) is not None else "log"
        out.append({"template": t, "at": f"{short(name)}:{node.lineno}", "how": how})
    return sorted(out, key=lambda r: str(r["at"]))


def _lines(src: Source, files: list[str], markers: dict[str, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for kind, marker in markers.items():
        found = [r for f in files if src.has(f) for r in _strings_with(src, f, marker)]
        if found:
            out[kind] = found
    return out


def _daemon_flags(src: Source) -> list[str]:
    """The long flags the cache daemon's own argparse declares (daemon.py)."""
    out: set[str] = set()
    for node in ast.walk(src.tree(WC_DIR + "daemon.py")):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            out.update(a for a in (const_str(x) for x in node.args) if a and a.startswith("--"))
    return sorted(out)


def _wc_paths(src: Source) -> dict[str, object]:
    """Where the socket and ready files go: the template and what keys it (a module constant
    in protocol.py, or an `envs.SGLANG_*_TEMPLATE` variable with its default in environ.py)."""
    proto = src.tree(WC_DIR + "protocol.py")
    consts = {
        t.id: const_str(n.value)
        for n in proto.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and const_str(n.value)
    }
    env_defaults: dict[str, str] = {}
    if src.has("sglang/srt/environ.py"):
        for node in ast.walk(src.tree("sglang/srt/environ.py")):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                for t in node.targets:
                    if isinstance(t, ast.Name) and "WEIGHT_CACHE" in t.id and node.value.args:
                        value = const_str(node.value.args[0])
                        if value:
                            env_defaults[t.id] = value
    out: dict[str, object] = {}
    for kind in ("socket", "ready"):
        fn = next(
            (
                n
                for n in ast.walk(proto)
                if isinstance(n, ast.FunctionDef) and n.name == f"get_{kind}_path"
            ),
            None,
        )
        if fn is None:
            continue
        text = ast.unparse(fn)
        env = next((v for v in env_defaults if v in text), None)
        const = next((c for c in consts if c in text and "TEMPLATE" in c), None)
        tmpl = env_defaults[env] if env else consts.get(const or "")
        out[kind] = {"template": tmpl, "env": env}
    key = re.findall(r"\{(\w+)\}", str((out.get("socket") or {}).get("template") or ""))
    out["key"] = key[0] if key else None
    return out


def _ready_lines(src: Source) -> list[str]:
    """What the daemon writes into its ready file, line by line (serve())."""
    out = []
    for node in ast.walk(src.tree(WC_DIR + "daemon.py")):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "write"
            and node.args
            and enclosing(node, (ast.FunctionDef,)) is not None
            and enclosing(node, (ast.FunctionDef,)).name == "serve"  # type: ignore[union-attr]
        ):
            t = template(node.args[0])
            if t:
                out.append(t)
    return out


def _class_fields(src: Source, name: str, cls: str) -> list[str]:
    for node in ast.walk(src.tree(name)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
    return []


def _quant_allowlist(src: Source) -> list[str] | None:
    for node in ast.walk(src.tree(WC_DIR + "protocol.py")):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "IPC_QUANT_ALLOWLIST" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return sorted(s for s in (const_str(k) for k in node.value.keys) if s is not None)
    return None


def weight_cache(src: Source, fl: dict[str, list[str] | None]) -> dict[str, object] | None:
    """SGLang's weight cache (srt/weight_cache/, from 0.5.17): the server's flags, the cache
    daemon's command line (its own flags; from 0.5.19 it also takes the server's flags:
    `prepare_server_args` of what its own parser leaves), where its socket and ready file
    go, what the ready file holds, the CacheConfig fingerprint, the refusal of speculative
    decoding, the loader's and the daemon's lines, and whether the server counts the cached
    weights in its memory budget (`account_preloaded_weights`)."""
    daemon = WC_DIR + "daemon.py"
    if not src.has(daemon):
        return None
    refusal = None
    for f in src.grep(WC_SPEC_REFUSAL):
        if f.startswith(WC_DIR):
            continue
        found = _strings_with(src, f, WC_SPEC_REFUSAL)
        if found:
            refusal = found[0]
            break
    runner = "sglang/srt/model_executor/model_runner.py"
    return {
        "module": WC_MODULE,
        "server_flags": {k: v for k, v in fl.items() if k.startswith("--weight-cache-")},
        "daemon_flags": _daemon_flags(src),
        "daemon_takes_server_args": "prepare_server_args" in src.text(daemon),
        "paths": _wc_paths(src),
        "ready_file": _ready_lines(src),
        "cache_config": _class_fields(src, WC_DIR + "protocol.py", "CacheConfig"),
        "quant_allowlist": _quant_allowlist(src),
        "speculative_refusal": refusal,
        "loader_lines": _lines(src, [WC_DIR + "ipc_loader.py"], WC_LOADER_LINES),
        "daemon_lines": _lines(src, [daemon, WC_DIR + "protocol.py"], WC_DAEMON_LINES),
        "dies_with_parent": "kill_itself_when_parent_died" in src.text(daemon),
        "accounts_cached_weights": src.has(runner)
        and "account_preloaded_weights" in src.text(runner),
    }


# ----------------------------------------------------------------------------- facts


def extract(version: str) -> dict[str, object]:
    wheel = download(version)
    src = Source(wheel)
    fl = flags(src)
    env_vars = sglang_vars(src)
    sp = spans(src)
    eps = endpoints(src)
    facts: dict[str, object] = {
        "schema": SCHEMA,
        "version": version,
        "wheel": {"file": wheel.name, "sha256": _sha256(wheel)},
        "flags": fl,
        "metrics": metrics(src),
        "spans": sp,
        "endpoints": eps,
        "log_formats": log_formats(src),
        "env": {
            "nccl_added": nccl_added(src),
            "sglang_vars": env_vars,
            "simulate_acceptance": simulate_acceptance(src),
        },
        "profile_options": profile_options(src),
        "weight_cache": weight_cache(src, fl),
    }
    wc = facts["weight_cache"]
    facts["features"] = {
        "flag_generation": "new" if "--cuda-graph-backend-decode" in fl else "old",
        "pcie_ipc_allreduce": "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in env_vars,
        "adaptive_speculation": "--speculative-adaptive" in fl,
        "custom_all_reduce": "--disable-custom-all-reduce" in fl,
        "step_spans": bool(sp["templates"]),
        "verify_span_stage": sp["verify_stage"],
        "server_info_endpoint": "/server_info" if "/server_info" in eps else "/get_server_info",
        "start_profile_num_steps": "num_steps" in facts["profile_options"],  # type: ignore[operator]
        "start_profile_start_step": "start_step" in facts["profile_options"],  # type: ignore[operator]
        "environ_module": src.has("sglang/srt/environ.py"),
        "graph_register_triggers": graph_register_triggers(src),
        "weight_cache": wc is not None,
        "weight_cache_speculative": wc is not None and not wc["speculative_refusal"],  # type: ignore[index]
    }
    return facts


def extraction_path(version: str) -> Path:
    """Where the extraction of `version`'s wheel by this script (and this Python) is kept."""
    key = hashlib.sha256()
    key.update(_sha256(download(version)).encode())
    key.update(Path(__file__).read_bytes())
    key.update(sys.version.split()[0].encode())
    return cache_dir() / "extracted" / f"{version}-{key.hexdigest()[:20]}.json"


def extract_kept(version: str) -> dict[str, object]:
    """`extract(version)`, reused from its kept copy while wheel, script and Python agree."""
    path = extraction_path(version)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    facts = extract(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(dump(facts))
    tmp.replace(path)
    return facts


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dump(facts: dict[str, object]) -> str:
    return json.dumps(facts, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", nargs="+", default=list(RELEASES))
    ap.add_argument("--check", action="store_true", help="diff against the data files")
    ap.add_argument(
        "--download", action="store_true", help="only fetch the wheels into the cache, then exit"
    )
    ap.add_argument("--print", dest="show", metavar="VERSION")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument(
        "--no-cache",
        action="store_true",
        help="re-extract every release (never reuse a kept extraction)",
    )
    args = ap.parse_args(argv)
    if args.show:
        sys.stdout.write(dump(extract(args.show)))
        return 0
    versions = args.versions
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:  # downloads
        list(pool.map(download, versions))
    if args.download:
        print(f"wheels of {len(versions)} releases in {cache_dir()}", file=sys.stderr)
        return 0
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:  # ast: CPU-bound
        work = extract if args.no_cache else extract_kept
        results = dict(zip(versions, pool.map(work, versions), strict=True))
    failed = []
    for v in versions:
        text = dump(results[v])
        path = args.out / f"{v}.json"
        if args.check:
            old = path.read_text() if path.exists() else ""
            if old != text:
                failed.append(v)
                print(f"DIFFERS: {path} (re-run scripts/sglang_facts.py {v})", file=sys.stderr)
                print(_diff(old, text, path), file=sys.stderr)
            else:
                print(f"same: {v}", file=sys.stderr)
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(text)
            tmp.replace(path)
            print(f"wrote {path}", file=sys.stderr)
    return 1 if failed else 0


def _diff(old: str, new: str, path: Path) -> str:
    import difflib

    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), str(path), "from the wheel", lineterm="", n=1
    )
    return "\n".join(list(lines)[:60])


if __name__ == "__main__":
    raise SystemExit(main())
