"""The strict env-file parser: every refused construct, with its line number; valid forms."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastverify.profiles.envfile import parse_bytes, render

HEADER = b"# description: test\n\n"  # two lines, so the line under test is line 3


def errors(data: bytes) -> list[tuple[int, str]]:
    return [
        (p.line, p.message) for p in parse_bytes(data, "t.env").problems if p.severity == "error"
    ]


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (b'NCCL_ALGO="Ring"', "double quote"),
        (b"NCCL_ALGO='Ring'", "single quote"),
        (b"NCCL_DEBUG_FILE=$HOME/x", "'$'"),
        (b"NCCL_SOCKET_IFNAME=eth\\0", "backslash"),
        (b"NCCL_ALGO = Ring", "whitespace around '='"),
        (b"NCCL_ALGO =Ring", "whitespace around '='"),
        (b"NCCL_ALGO= Ring", "whitespace around '='"),
        (b"NCCL_ALGO=Ring # tuned", "whitespace in value"),
        (b"NCCL_ALGO=Ring#tuned", "'#' in value"),
        (b"export NCCL_ALGO=Ring", "'export'"),
        (b"NCCL_ALGO", "no '='"),
        (b"  NCCL_ALGO=Ring", "leading whitespace"),
        (b"NCCL_ALGO=Ring\x00", "NUL byte"),
        (b"NCCL_ALGO=R\xffing", "invalid UTF-8"),
        (b"NCCL_ALGO=Ring\r", "CRLF"),
        (b"NCCL_ALGO=", "empty value"),
        (b"; NCCL_ALGO=Ring", "';' comment"),
        (b"1NCCL=x", "invalid variable name"),
        (b"NCCL-ALGO=Ring", "invalid variable name"),
        (b"NCCL_ALGO=`Ring`", "backtick"),
        (b"NCCL_ALGO=Ring\tx", "whitespace in value"),
    ],
)
def test_refused_with_line_number(line: bytes, needle: str) -> None:
    errs = errors(HEADER + line + b"\n")
    assert errs, f"{line!r} was accepted"
    assert errs[0][0] == 3
    assert needle in errs[0][1]
    assert "(" in errs[0][1] and errs[0][1].endswith(")")  # what would be right


def test_duplicate_key_names_first_line() -> None:
    errs = errors(b"# description: d\nNCCL_ALGO=Ring\nNCCL_PROTO=LL\nNCCL_ALGO=Tree\n")
    assert errs == [(4, "duplicate NCCL_ALGO (first set on line 2; keep one)")]


def test_bom_refused_on_line_1() -> None:
    errs = errors("\ufeffNCCL_ALGO=Ring\n".encode())
    assert errs == [(1, "UTF-8 byte-order mark at the start (save the file without a BOM)")]


def test_crlf_reported_on_every_line() -> None:
    errs = errors(b"# description: d\r\nNCCL_ALGO=Ring\r\n")
    assert [ln for ln, _ in errs] == [1, 2]


def test_valid_forms_accepted() -> None:
    data = (
        b"# description: ring with LL\n"
        b"# requires: cuda-graph=off\n"
        b"# tags: pcie\n"
        b"\n"
        b"# a plain comment\n"
        b"NCCL_ALGO=Ring\n"
        b"NCCL_PROTO=^LL128;allreduce:LL\n"
        b"NCCL_DEBUG_FILE=/tmp/nccl.%h.%p\n"
        b"TORCH_NCCL_ASYNC_ERROR_HANDLING=1\n"
        b"NCCL_SOCKET_IFNAME==eth0\n"
        b"SGLANG_X=a=b,c:d\n"
    )
    parsed = parse_bytes(data, "ok.env")
    assert [p for p in parsed.problems if p.severity == "error"] == []
    assert parsed.env["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert parsed.env["SGLANG_X"] == "a=b,c:d"
    assert parsed.meta["description"] == (1, "ring with LL")
    assert parsed.meta["requires"] == (2, "cuda-graph=off")
    assert [a.line for a in parsed.assignments] == [6, 7, 8, 9, 10, 11]


def test_no_trailing_newline_is_fine() -> None:
    parsed = parse_bytes(b"# description: d\nNCCL_ALGO=Ring", "t.env")
    assert parsed.env == {"NCCL_ALGO": "Ring"} and not parsed.problems


def test_metadata_after_first_variable_warns() -> None:
    parsed = parse_bytes(b"# description: d\nNCCL_ALGO=Ring\n# requires: cuda-graph=off\n", "t")
    assert "requires" not in parsed.meta
    assert [(p.line, p.severity) for p in parsed.problems] == [(3, "warning")]


def test_misspelt_metadata_key_warns() -> None:
    parsed = parse_bytes(b"# description: d\n# extend: ring-ll\n", "t")
    assert [(p.line, p.severity) for p in parsed.problems] == [(2, "warning")]
    assert "extends" in parsed.problems[0].message


def test_render_round_trips() -> None:
    env = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    text = render(env, description="x  y", requires={"cuda-graph": "off"}, tags=("pcie",))
    parsed = parse_bytes(text.encode(), "r")
    assert parsed.env == env and not parsed.problems
    assert parsed.meta["description"][1] == "x y"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_crash_and_lines_in_range(data: bytes) -> None:
    parsed = parse_bytes(data, "fuzz")
    n = parsed.line_count
    for p in parsed.problems:
        assert 1 <= p.line <= n, (p, n)
        assert str(p).startswith(f"fuzz:{p.line}: ")


_env_alphabet = st.sampled_from([*list("NCL_AGOR=#$'\" \t\r\n\\xyz019;^:,"), "export ", "\x00"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_env_alphabet, max_size=80).map("".join))
def test_env_like_text_never_crashes(text: str) -> None:
    parsed = parse_bytes(text.encode(), "fuzz")
    for p in parsed.problems:
        assert 1 <= p.line <= parsed.line_count
    # whatever is accepted is in the portable subset: re-rendering gives the same env
    clean = render(parsed.env)
    assert parse_bytes(clean.encode(), "again").env == parsed.env
