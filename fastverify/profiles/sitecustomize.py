"""Import a legacy `sitecustomize.py` that sets NCCL variables into a profile, via `ast`.

The file is parsed, never executed. Recognised (with any alias of `os` or of
`os.environ`: `import os as _os`, `from os import environ as E`):

- `os.environ["K"] = "V"`                      (unconditional)
- `os.environ.setdefault("K", "V")`            (only when unset)
- `os.environ.update({"K": "V"})` / `update(K="V")`  (unconditional)
- `if "K" not in os.environ: <one of the above>` (only when unset)
- `for k, v in <literal list/tuple of pairs | NAME | NAME.items() | {..}.items()>:`
  with a body made of the forms above using `k`/`v` (the pattern seen in the field)
- module-level `NAME = <literal dict/list/tuple>` used as a loop source

Everything else that is not an import, a docstring, `pass` or a `del` of loop variables
is reported as untranslatable with its line number. Only `NCCL_*` and `TORCH_NCCL_*`
variables go into the profile; other variables are reported and left out.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

SEMANTIC_NOTE = (
    "Semantic change: the old sitecustomize set a variable only when it was not already "
    "set in the environment (setdefault / 'not in os.environ'), so anything exported by "
    "the shell, a unit file or docker won silently. A profile sets its variables "
    "unconditionally, and the daemon removes every inherited NCCL_* variable first: "
    "the profile is the whole truth. Remove the old sitecustomize.py after switching, "
    "or it will keep acting on every Python process, including the server."
)


@dataclass
class ImportedVar:
    name: str
    value: str
    line: int
    conditional: bool  # True: old file set it only when unset


@dataclass
class ImportResult:
    path: str
    variables: dict[str, ImportedVar] = field(default_factory=dict)
    untranslated: list[tuple[int, str]] = field(default_factory=list)  # (line, why)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # non-NCCL vars left out
    notes: list[tuple[int, str]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {k: v.value for k, v in self.variables.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "env": self.env,
            "conditional": sorted(k for k, v in self.variables.items() if v.conditional),
            "untranslated": [{"line": ln, "reason": r} for ln, r in self.untranslated],
            "skipped": [{"line": ln, "reason": r} for ln, r in self.skipped],
            "notes": [{"line": ln, "note": n} for ln, n in self.notes],
            "semantic_note": SEMANTIC_NOTE,
        }


def is_profile_var(name: str) -> bool:
    """The loader's rule (env_policy): what a profile may set, the import keeps."""
    from fastverify.profiles.env_policy import profile_name_problem

    return profile_name_problem(name) is None


class _Importer:
    def __init__(self, path: str, source: str):
        self.path = path
        self.source = source
        self.result = ImportResult(path)
        self.os_names: set[str] = set()
        self.environ_names: set[str] = set()
        self.literals: dict[str, ast.expr] = {}

    # --- recognisers
    def is_environ(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.environ_names
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "environ"
            and isinstance(node.value, ast.Name)
            and node.value.id in self.os_names
        )

    def mentions_env(self, node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.expr) and self.is_environ(sub):
                return True
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "NCCL" in sub.value:
                return True
            if isinstance(sub, ast.Attribute) and sub.attr in ("putenv", "environ"):
                return True
        return False

    def _str(self, node: ast.expr | None, bindings: dict[str, str]) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in bindings:
            return bindings[node.id]
        return None

    def set_var(self, name: str, value: str, line: int, conditional: bool) -> None:
        if not is_profile_var(name):
            self.result.skipped.append(
                (
                    line,
                    f"{name} is not a profile variable; left out "
                    "(a profile holds only NCCL_*, SGLANG_* and FLASHINFER_* tuning)",
                )
            )
            return
        prev = self.result.variables.get(name)
        if prev is not None:
            if conditional:
                self.result.notes.append(
                    (line, f"{name} already set on line {prev.line}; this setdefault had no effect")
                )
                return
            self.result.notes.append(
                (line, f"{name} set again (line {prev.line} value {prev.value!r} replaced)")
            )
        self.result.variables[name] = ImportedVar(name, value, line, conditional)

    def env_effect(self, stmt: ast.stmt, bindings: dict[str, str], conditional: bool) -> bool:
        """Translate one statement that sets variables; False when it is not one we know."""
        line = stmt.lineno
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            t = stmt.targets[0]
            if isinstance(t, ast.Subscript) and self.is_environ(t.value):
                k = self._str(t.slice, bindings)
                v = self._str(stmt.value, bindings)
                if k is None or v is None:
                    return False
                self.set_var(k, v, line, conditional)
                return True
            return False
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            f = call.func
            if not (isinstance(f, ast.Attribute) and self.is_environ(f.value)):
                return False
            if f.attr == "setdefault" and len(call.args) == 2 and not call.keywords:
                k, v = self._str(call.args[0], bindings), self._str(call.args[1], bindings)
                if k is None or v is None:
                    return False
                self.set_var(k, v, line, True)
                return True
            if f.attr == "update":
                pairs: list[tuple[str, str]] = []
                for arg in call.args:
                    if not isinstance(arg, ast.Dict):
                        return False
                    for dk, dv in zip(arg.keys, arg.values, strict=True):
                        k, v = self._str(dk, bindings), self._str(dv, bindings)
                        if k is None or v is None:
                            return False
                        pairs.append((k, v))
                for kw in call.keywords:
                    v = self._str(kw.value, bindings)
                    if kw.arg is None or v is None:
                        return False
                    pairs.append((kw.arg, v))
                for k, v in pairs:
                    self.set_var(k, v, line, conditional)
                return True
            return False
        if isinstance(stmt, ast.If) and not stmt.orelse:
            key = self._not_in_environ(stmt.test, bindings)
            if key is None:
                return False
            before = set(self.result.variables)
            ok = all(self.env_effect(s, bindings, True) for s in stmt.body)
            if ok:
                added = set(self.result.variables) - before
                if added - {key}:
                    self.result.notes.append(
                        (line, f"condition tests {key} but the body sets {sorted(added - {key})}")
                    )
            return ok
        return False

    def _not_in_environ(self, test: ast.expr, bindings: dict[str, str]) -> str | None:
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.NotIn)
            and self.is_environ(test.comparators[0])
        ):
            return self._str(test.left, bindings)
        return None

    def _pairs(self, it: ast.expr) -> list[tuple[str, str]] | None:
        node = it
        items = False
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "items"
            and not node.args
        ):
            node, items = node.func.value, True
        if isinstance(node, ast.Name) and node.id in self.literals:
            node = self.literals[node.id]
        if isinstance(node, ast.Dict):
            if not items:
                return None
            out = []
            for k, v in zip(node.keys, node.values, strict=True):
                ks, vs = self._str(k, {}), self._str(v, {})
                if ks is None or vs is None:
                    return None
                out.append((ks, vs))
            return out
        if isinstance(node, ast.List | ast.Tuple) and not items:
            out = []
            for elt in node.elts:
                if not (isinstance(elt, ast.Tuple | ast.List) and len(elt.elts) == 2):
                    return None
                ks, vs = self._str(elt.elts[0], {}), self._str(elt.elts[1], {})
                if ks is None or vs is None:
                    return None
                out.append((ks, vs))
            return out
        return None

    def loop(self, stmt: ast.For) -> bool:
        t = stmt.target
        if (
            not (
                isinstance(t, ast.Tuple)
                and len(t.elts) == 2
                and all(isinstance(e, ast.Name) for e in t.elts)
            )
            or stmt.orelse
        ):
            return False
        kname, vname = (e.id for e in t.elts if isinstance(e, ast.Name))  # both, as checked
        pairs = self._pairs(stmt.iter)
        if pairs is None:
            return False
        # dry run on the first pair to know the body is translatable, then apply all
        for k, v in pairs:
            bindings = {kname: k, vname: v}
            snapshot = (dict(self.result.variables), list(self.result.notes))
            if not all(self.env_effect(s, bindings, False) for s in stmt.body):
                self.result.variables, self.result.notes = snapshot[0], snapshot[1]
                return False
        self.loop_vars.update({kname, vname})
        return True

    # --- driver
    def run(self) -> ImportResult:
        try:
            tree = ast.parse(self.source, filename=self.path)
        except SyntaxError as exc:
            self.result.untranslated.append((exc.lineno or 0, f"syntax error: {exc.msg}"))
            return self.result
        self.loop_vars: set[str] = set()
        for stmt in tree.body:
            self.statement(stmt)
        return self.result

    def statement(self, stmt: ast.stmt) -> None:
        line = stmt.lineno
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.name == "os" or a.name.startswith("os."):
                    self.os_names.add(a.asname or "os")
            return
        if isinstance(stmt, ast.ImportFrom):
            if stmt.module == "os":
                for a in stmt.names:
                    if a.name == "environ":
                        self.environ_names.add(a.asname or "environ")
            return
        if isinstance(stmt, ast.Pass):
            return
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        ):
            return  # docstring
        if isinstance(stmt, ast.Delete) and all(
            isinstance(t, ast.Name) and t.id in self.loop_vars for t in stmt.targets
        ):
            return
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Dict | ast.List | ast.Tuple)
        ):
            self.literals[stmt.targets[0].id] = stmt.value
            if self.mentions_env(stmt.value):
                return  # a literal table of NCCL settings; used (or not) by a loop below
            self.result.untranslated.append((line, "assignment with no environment effect"))
            return
        if isinstance(stmt, ast.For) and self.loop(stmt):
            return
        if self.env_effect(stmt, {}, False):
            return
        seg = ast.get_source_segment(self.source, stmt) or type(stmt).__name__
        first = seg.splitlines()[0] if seg else type(stmt).__name__
        why = (
            "sets or reads the environment in a form not translated"
            if self.mentions_env(stmt)
            else "not an environment assignment"
        )
        self.result.untranslated.append((line, f"{why}: {first[:80]}"))


def import_sitecustomize(source: str, path: str = "<sitecustomize>") -> ImportResult:
    """Translate `source` (the text of a sitecustomize.py) without executing it."""
    return _Importer(path, source).run()
