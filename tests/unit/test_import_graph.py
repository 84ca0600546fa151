"""The import graph of every fastverify module, read with `ast` (module-level imports and
the lazy ones inside functions alike, `if TYPE_CHECKING:` included: a lazy import hides a
dependency, it does not remove it). No cycle between modules, none between subpackages
(`fastverify.X` as the node; top-level modules are nodes of their own), and the layer rules
of docs/architecture.md that can be read from imports."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fastverify"

# (importer subpackage, imported subpackage): never
FORBIDDEN = {
    # the experiments reach the daemon only through its API (fastverify.client)
    ("fastverify.experiments", "fastverify.daemon"),
    # the engines and the sim follow SGLang, never the plan's code that they check: a
    # stand-in that imports what it tests agrees with its bugs
    ("fastverify.engines", "fastverify.speculation"),
    ("fastverify.sim", "fastverify.speculation"),
    # the sim is a program of its own (an SGLang stand-in): nothing that supervises or
    # measures it imports its code, and it never imports the daemon or the experiments
    ("fastverify.daemon", "fastverify.sim"),
    ("fastverify.experiments", "fastverify.sim"),
    ("fastverify.sim", "fastverify.daemon"),
    ("fastverify.sim", "fastverify.experiments"),
}

Edge = tuple[str, str, str]  # (importer, imported, "path:line")


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _known(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module `name` runs: itself, or the nearest package above it that exists."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> list[Edge]:
    """Every fastverify module that `name` (at `path`) imports, anywhere in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    rel = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE.parent) else path
    out: list[Edge] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import sub` imports the submodule; `from mod import name` the module
            targets = [
                f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names
            ]
        for target in targets:
            if target != "fastverify" and not target.startswith("fastverify."):
                continue
            known = _known(target, modules)
            if known is not None and known != name:
                out.append((name, known, f"{rel}:{node.lineno}"))
    return out


def module_edges(modules: Mapping[str, Path] | None = None) -> list[Edge]:
    modules = modules if modules is not None else module_files()
    return [e for name, path in modules.items() for e in imports_of(name, path, modules)]


def subpackage(module: str) -> str:
    """`fastverify.X` for anything under fastverify/X/ (or the top-level module X)."""
    return ".".join(module.split(".")[:2])


def subpackage_edges(edges: Iterable[Edge]) -> list[Edge]:
    return [
        (subpackage(a), subpackage(b), where)
        for a, b, where in edges
        if subpackage(a) != subpackage(b)
    ]


def find_cycle(edges: Iterable[Edge]) -> list[Edge] | None:
    """One cycle of the directed graph as its edges in order, or None."""
    graph: dict[str, list[Edge]] = {}
    for e in edges:
        graph.setdefault(e[0], []).append(e)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[Edge] = []

    def visit(node: str) -> list[Edge] | None:
        state[node] = 1
        for edge in graph.get(node, ()):
            nxt = edge[1]
            if state.get(nxt) == 1:
                start = next((i for i, e in enumerate(path) if e[0] == nxt), len(path))
                return [*path[start:], edge]
            if nxt not in state:
                path.append(edge)
                found = visit(nxt)
                if found:
                    return found
                path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def describe(cycle: list[Edge]) -> str:
    chain = " -> ".join([cycle[0][0], *(b for _a, b, _w in cycle)])
    lines = "\n".join(f"  {a} imports {b} at {where}" for a, b, where in cycle)
    return f"import cycle: {chain}\n{lines}"


# ----------------------------------------------------------------- the checker itself


def test_the_checker_finds_a_lazy_import_cycle_and_names_the_lines(tmp_path: Path) -> None:
    pkg = tmp_path / "fastverify"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "b" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from fastverify.b import y\n")
    (pkg / "b" / "y.py").write_text("def f():\n    from ..a.x import g\n    return g\n")
    (pkg / "b" / "z.py").write_text("import fastverify.a\n")
    mods = module_files(pkg)
    edges = [e for name, path in mods.items() for e in imports_of(name, path, mods)]
    assert ("fastverify.b.y", "fastverify.a.x") in {(a, b) for a, b, _ in edges}
    cycle = find_cycle(edges)
    assert cycle is not None
    text = describe(cycle)
    assert "fastverify.a.x -> fastverify.b.y -> fastverify.a.x" in text, text
    assert "y.py:2" in text and "x.py:1" in text, text
    sub = find_cycle(subpackage_edges(edges))
    assert sub is not None and {e[0] for e in sub} == {"fastverify.a", "fastverify.b"}
    assert find_cycle([("p", "q", ""), ("q", "r", ""), ("p", "r", "")]) is None


# ----------------------------------------------------------------- the tree


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    found = module_edges()
    assert len(found) > 200, "the graph reader found too few imports to be reading the tree"
    return found


def test_no_import_cycle_between_modules(edges: list[Edge]) -> None:
    cycle = find_cycle(edges)
    assert cycle is None, describe(cycle or [])


def test_no_import_cycle_between_subpackages(edges: list[Edge]) -> None:
    cycle = find_cycle(subpackage_edges(edges))
    assert cycle is None, describe(cycle or [])


# subpackage -> what it never imports: the CLI talks to the daemon through its API only;
# the experiments get engine capabilities through the daemon's API too; the trace analyser
# and deployment rendering are leaves below everything that runs (never the daemon)
NEVER = {
    "fastverify.cli": {"fastverify.daemon"},
    "fastverify.ctl": {"fastverify.daemon"},
    "fastverify.experiments": {"fastverify.engines", "fastverify.sim"},
    "fastverify.traces": {
        "fastverify.daemon", "fastverify.cli", "fastverify.experiments", "fastverify.exporters",
        "fastverify.engines", "fastverify.sim", "fastverify.deploy",
    },
    "fastverify.deploy": {
        "fastverify.daemon", "fastverify.cli", "fastverify.experiments", "fastverify.exporters",
        "fastverify.sim",
    },
}  # fmt: skip


def never_imported(edges: Iterable[Edge]) -> list[Edge]:
    return [e for e in subpackage_edges(edges) if e[1] in NEVER.get(e[0], ())]


def test_subpackages_never_import_what_is_above_them(edges: list[Edge]) -> None:
    broken = never_imported(edges)
    assert broken == [], "\n".join(f"{a} imports {b} at {w}" for a, b, w in broken)


def test_the_rules_see_a_lazy_cli_import_of_the_daemon(tmp_path: Path) -> None:
    pkg = tmp_path / "fastverify"
    for sub in ("cli", "daemon", "traces"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "daemon" / "api.py").write_text("X = 1\n")
    (pkg / "cli" / "status.py").write_text("def f():\n    from ..daemon import api\n")
    (pkg / "traces" / "a.py").write_text("import fastverify.daemon.api\n")
    mods = module_files(pkg)
    found = never_imported(e for name, path in mods.items() for e in imports_of(name, path, mods))
    assert sorted((a, b) for a, b, _ in found) == [
        ("fastverify.cli", "fastverify.daemon"), ("fastverify.traces", "fastverify.daemon"),
    ]  # fmt: skip


def test_profiles_and_tuner_run_one_way(edges: list[Edge]) -> None:
    """The profile layer uses the tuner (a profile names a table); never the other way."""
    back = [
        e for e in subpackage_edges(edges) if e[:2] == ("fastverify.tuner", "fastverify.profiles")
    ]
    assert back == [], back


def test_layer_rules(edges: list[Edge]) -> None:
    broken = [e for e in subpackage_edges(edges) if e[:2] in FORBIDDEN]
    assert broken == [], "\n".join(f"{a} imports {b} at {w}" for a, b, w in broken)


def test_the_layer_rule_sees_a_lazy_engine_import_of_speculation(tmp_path: Path) -> None:
    pkg = tmp_path / "fastverify"
    for sub in ("engines", "speculation"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "speculation" / "plan.py").write_text("X = 1\n")
    (pkg / "engines" / "sim.py").write_text("def f():\n    from ..speculation import plan\n")
    mods = module_files(pkg)
    edges = [e for name, path in mods.items() for e in imports_of(name, path, mods)]
    broken = [e for e in subpackage_edges(edges) if e[:2] in FORBIDDEN]
    assert [(a, b) for a, b, _ in broken] == [("fastverify.engines", "fastverify.speculation")]


# ----------------------------------------------------------------- the scripts around it

ROOT = PACKAGE.parent


def unresolved_project_imports(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    """`path:line module` for each import of `fastverify.*` or `tests.*` (lazy ones too)
    whose module is not a file or package under `root`: the benchmarks and scripts import
    the test harness lazily, so a moved module breaks them only when someone runs them."""

    def exists(module: str) -> bool:
        base = root.joinpath(*module.split("."))
        return base.with_suffix(".py").is_file() or base.is_dir()  # namespace packages too

    out = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for mod in names:
                if mod.split(".")[0] in ("fastverify", "tests") and not exists(mod):
                    out.append(f"{path.relative_to(root)}:{node.lineno} {mod}")
    return out


def test_the_resolver_names_a_moved_module(tmp_path: Path) -> None:
    (tmp_path / "tests" / "support").mkdir(parents=True)
    (tmp_path / "tests" / "support" / "harness.py").write_text("")
    script = tmp_path / "bench.py"
    script.write_text(
        "def f():\n    from tests.harness import X\n    from tests.support.harness import Y\n"
    )
    assert unresolved_project_imports([script], tmp_path) == ["bench.py:2 tests.harness"]


def test_benchmarks_scripts_and_tests_import_only_modules_that_exist() -> None:
    files = [
        p
        for top in ("benchmarks", "scripts", "tests")
        for p in sorted((ROOT / top).rglob("*.py"))
        if "fixtures" not in p.relative_to(ROOT).parts
    ]
    assert len(files) > 100
    assert unresolved_project_imports(files) == []
