"""Each kind of log line has one parser: NCCL's own lines `fastverify.nccl.loglines`,
SGLang's `fastverify.sglang.loglines`. No other module (the sim engine excepted: it writes
those lines, it does not read them) holds a pattern or a marker of those lines where text is
matched — a `re` call, an `in` test, `str.find`/`startswith`/..., or a name bound to such
text and used that way. Read with `ast`, so docstrings, comments and messages to people may
still say "NCCL INFO" or "Decode batch"."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fastverify"

# Text that only NCCL's own output has (NCCL 2.28.9 lines in tests/fixtures/)
MARKERS = re.compile(
    r"NCCL \(?(INFO|WARN)|set by environment to|Bytes -> Algo|TUNER/Plugin|external tuner plugin"
    r"|ncclCommInitRank|NCCL version|NCCL error|fastverify tuner: ",
    re.I,
)
# Text that only SGLang's own lines have (SGLang 0.5.17 lines in tests/fixtures/)
SGLANG_MARKERS = re.compile(
    r"fired up and ready to roll|Decode batch|Prefill batch|checkpoint shards"
    r"|Load weight (begin|end)|Capture cuda graph|Capturing (batches|num tokens)"
    r"|Engine startup timings|for prefill runner",
    re.I,
)
_RE_FUNCS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "split"}
_STR_METHODS = {
    "find", "rfind", "index", "rindex", "startswith", "endswith", "split", "rsplit",
    "partition", "rpartition", "count", "removeprefix", "removesuffix",
}  # fmt: skip


def _marker_text(node: ast.AST, markers: re.Pattern[str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if markers.search(node.value) else None
    if isinstance(node, ast.JoinedStr):
        parts = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        return parts if markers.search(parts) else None
    if isinstance(node, ast.BinOp):  # "..." "..." implicit concatenation is one Constant
        left, right = _marker_text(node.left, markers), _marker_text(node.right, markers)
        return left or right
    return None


def offences(source: str, filename: str = "<src>", markers: re.Pattern[str] = MARKERS) -> list[str]:
    """`file:line: text` for every line pattern (`markers`) used to match text in `source`."""
    tree = ast.parse(source, filename)
    # names bound to marker text (or to re.compile(marker text))
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Call) and value.args:
                value = value.args[0]
            text = _marker_text(value, markers)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if text and isinstance(t, ast.Name):
                    bound[t.id] = text

    def text_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        return _marker_text(node, markers)

    found: list[str] = []
    for node in ast.walk(tree):
        used: list[ast.AST] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if isinstance(f.value, ast.Name) and f.value.id == "re" and f.attr in _RE_FUNCS:
                used = node.args[:1]
            elif f.attr in _STR_METHODS:
                used = list(node.args)
            elif f.attr in _RE_FUNCS and text_of(f.value):  # _BOUND.search(line)
                used = [f.value]
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, ast.In | ast.NotIn) for op in node.ops
        ):
            used = [node.left]
        for u in used:
            text = text_of(u)
            if text:
                found.append(f"{filename}:{node.lineno}: {text!r}")
    return found


def test_the_check_catches_a_second_parser_and_spares_messages() -> None:
    second_parser = (
        "import re\n"
        '_LINE = re.compile(r" NCCL (INFO|WARN) (.*)$")\n'
        '_ENV = re.compile(r"NCCL_TUNER_PLUGIN set by environment to (\\S+)")\n'
        '_COMM = " NCCL INFO ncclCommInitRank"\n'
        "def f(line, text):\n"
        "    m = _LINE.search(line)\n"
        '    if " NCCL INFO " in line or _COMM in text:\n'
        '        return line.find(" NCCL WARN ")\n'
    )
    hits = offences(second_parser)
    assert [h.split(":")[1] for h in hits] == ["2", "3", "6", "7", "7", "8"], hits
    messages = (
        'def g():\n    """Reads NCCL INFO lines."""\n'
        '    raise ValueError("no NCCL INFO lines (is NCCL_DEBUG=INFO set?)")\n'
    )
    assert offences(messages) == []


def outside(home: str, markers: re.Pattern[str]) -> list[str]:
    """Offences in every module but `home`'s and the sim's (it writes the lines)."""
    checked = 0
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith((f"{home}/", "sim/")):
            continue
        checked += 1
        found += offences(path.read_text(encoding="utf-8"), f"fastverify/{rel}", markers)
    assert checked > 100
    return found


def test_no_module_outside_fastverify_nccl_parses_nccl_lines() -> None:
    found = outside("nccl", MARKERS)
    assert found == [], "NCCL's lines are parsed outside fastverify/nccl/:\n" + "\n".join(found)


def test_no_module_outside_fastverify_sglang_parses_sglang_lines() -> None:
    found = outside("sglang", SGLANG_MARKERS)
    assert found == [], "SGLang's lines are parsed outside fastverify/sglang/:\n" + "\n".join(found)


def test_the_one_parsers_hold_the_patterns() -> None:
    """The check reads the real parsers as offending: it would see a copy elsewhere."""
    nccl = (PACKAGE / "nccl" / "loglines.py").read_text(encoding="utf-8")
    assert len(offences(nccl)) >= 5
    sglang = (PACKAGE / "sglang" / "loglines.py").read_text(encoding="utf-8")
    assert len(offences(sglang, markers=SGLANG_MARKERS)) >= 5


def test_the_one_parser_reads_the_tuner_lines_of_real_nccl_output() -> None:
    """What `fastverify.tuner.loaded` now takes from `fastverify.nccl.loglines`, on NCCL
    2.28.9's own output (tests/fixtures/nccl-2.28.9-tuner/, lines the old private regexes
    of tuner/loaded.py read)."""
    from fastverify.nccl import loglines

    fix = PACKAGE.parent / "tests" / "fixtures" / "nccl-2.28.9-tuner"
    events = loglines.summarise((fix / "tuned-nvlink.rank0.nccl.log").read_text())["tuner"]
    kinds = [e["event"] for e in events]
    assert {"event": "using", "name": "fastverify", "api": 5} in events, events
    assert "loaded" in kinds and "rows" in kinds, events
    missing = loglines.summarise((fix / "no-plugin.rank0.nccl.log").read_text())["tuner"]
    assert [e["event"] for e in missing] == ["not_found"], missing
    line = "vm:1:1 [0] NCCL INFO External tuner plugin /x.so is unsupported"
    assert loglines.parse_nccl_line(line)["event"] == "unsupported"  # type: ignore[index]
    assert loglines.split_line("h:1:2 [0] NCCL WARN boom ") == ("WARN", "boom")
    assert loglines.split_line("Decode batch, #running-req: 1") is None
