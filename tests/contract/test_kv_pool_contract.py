"""The sim's KV pool rule (fastverify.sim.gpu_memory.pool_budget) against the real SGLang
wheel's source (the venv of scripts/sglang-venv.sh): the budget's expressions in
kv_cache_configurator.py `_profile_available_bytes` (the pre-load free memory x (1 -
mem_fraction_static) of slack, taken from the free memory after the load) and model_runner's
`account_preloaded_weights` (the preloaded weights' bytes added to the pre-load figure) are
evaluated as SGLang writes them and compared with the sim's on the same figures. A release
that changes the rule fails here."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fastverify.sim.gpu_memory import pool_budget
from tests.support.contract import sglang_package

FIGURES = [  # (pre-load free GB, free after the load GB, fraction, preloaded GB)
    (62.89, 62.89, 0.35, 0.0),  # the H100 cold start of tests/fixtures/sglang-0.5.17-h100-standby
    (38.55, 38.55, 0.585, 0.0),
    (74.12, 74.08, 0.4967, 64.21),  # the sim's cold start beside a 0.5.19+ cache
    (78.52, 14.31, 0.875, 0.0),
]


def _function(path: Path, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{path}: {len(found)} definitions of {name}"
    return found[0]


def _assigned(fn: ast.FunctionDef, target: str) -> ast.expr:
    """The first value assigned to `target` in `fn`'s own body (not nested blocks)."""
    for node in fn.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == target
        ):
            return node.value
    raise AssertionError(f"{fn.name}: no `{target} = ...` in its body")


def _eval(expr: ast.expr, names: dict[str, Any]) -> Any:
    return eval(compile(ast.Expression(expr), "<sglang>", "eval"), {}, names)


def test_the_sims_pool_budget_is_sglangs(sglang_python: Path) -> None:
    pkg = sglang_package(sglang_python)
    configurator = pkg / "srt" / "mem_cache" / "kv_cache_configurator.py"
    fn = _function(configurator, "_profile_available_bytes")
    slack, rest = _assigned(fn, "slack_gb"), _assigned(fn, "rest_memory")
    # the shape: slack from the pre-load figure and the fraction, the rest from what is free
    assert {n.id for n in ast.walk(slack) if isinstance(n, ast.Name)} >= {
        "pre_model_load_memory"}, ast.unparse(slack)  # fmt: skip
    assert "(1 - get_schedule().mem_fraction_static)" in ast.unparse(slack), ast.unparse(slack)
    add = _function(pkg / "srt" / "model_executor" / "model_runner.py",
                    "account_preloaded_weights")  # fmt: skip
    (aug,) = [n for n in ast.walk(add) if isinstance(n, ast.AugAssign)]
    assert ast.unparse(aug.target) == "self.pre_model_load_memory" and isinstance(aug.op, ast.Add)
    for before, after, fraction, preloaded in FIGURES:
        base = before + _eval(aug.value, {"preloaded_weights_bytes": preloaded * (1 << 30)})
        schedule = SimpleNamespace(mem_fraction_static=fraction)
        names = {"pre_model_load_memory": base, "get_schedule": lambda s=schedule: s,
                 "available_gpu_memory": after, "mm_reservation_gb": 0.0}  # fmt: skip
        names["slack_gb"] = _eval(slack, names)
        theirs = _eval(rest, names)
        ours = pool_budget(before=before, after=after, fraction=fraction, preloaded=preloaded)
        assert abs(theirs - ours) < 1e-9, (before, after, fraction, preloaded, theirs, ours)
