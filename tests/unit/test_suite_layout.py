"""The suite's own layout: what tests share lives in tests/support/ (or a conftest's
fixtures); a test module never imports another test module, nor names from a conftest."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

# Importer -> the test module or conftest it still imports (none now: every helper the
# suite shares lives in tests/support/); an entry is a debt with its reason beside it.
PENDING: dict[str, set[str]] = {}


def imported(source: str, package: str) -> set[str]:
    """Every module `source` (a file of `package`) imports, relative imports made absolute."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                out.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                out.add(node.module)
    return out


def imported_tests_and_conftests(modules: set[str]) -> set[str]:
    return {m for m in modules if m.rpartition(".")[2].startswith("test_")
            or m.rpartition(".")[2] == "conftest"}  # fmt: skip


def test_no_test_module_imports_another_or_a_conftest() -> None:
    broken = {}
    for path in sorted(TESTS.rglob("*.py")):
        if "fixtures" in path.parts:
            continue  # scripts and data run by the tests, not test code
        rel = str(path.relative_to(REPO))
        package = ".".join(path.relative_to(REPO).parent.parts)
        bad = imported_tests_and_conftests(imported(path.read_text(encoding="utf-8"), package))
        bad -= PENDING.get(rel, set())
        if bad:
            broken[rel] = sorted(bad)
    assert broken == {}, f"move what these share into tests/support/: {broken}"


def test_the_checker_sees_relative_bare_and_lazy_imports() -> None:
    source = (
        "from .conftest import run\n"
        "from test_sim_support import SimProcess\n"
        "def f():\n    from tests.unit.x.test_y import z\n"
        "from tests.support.harness import DaemonHarness\n"
    )
    found = imported_tests_and_conftests(imported(source, "tests.deployment"))
    assert found == {"tests.deployment.conftest", "test_sim_support", "tests.unit.x.test_y"}
