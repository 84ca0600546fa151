"""`deploy/kubernetes/yaml_out.py`: any text a profile or dashboard file holds reads back
byte for byte from the rendered YAML (a literal block where YAML allows it, else PyYAML's
double-quoted string), as the ConfigMaps' "byte for byte" promise needs."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fastverify.deploy.kubernetes.yaml_out import comment, dump


def rendered(text: str) -> str:
    """The line holding `key`'s value as the manifests write it."""
    out = dump([{"data": {"key": text, "after": 1}}])
    return out.splitlines()[1].removeprefix("  key: ")


def round_trip(text: str) -> str:
    loaded = yaml.safe_load(dump([{"data": {"key": text, "after": 1}, "list": [text]}]))
    assert loaded["data"]["after"] == 1
    assert loaded["list"] == [text]
    return loaded["data"]["key"]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_any_text_reads_back_exactly(text: str) -> None:
    assert round_trip(text) == text


ENV_LINE = r"[A-Z_]{1,8}=[A-Za-z0-9^,:]{0,10}|# [a-z :]{0,20}|"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.from_regex(ENV_LINE, fullmatch=True)))
def test_env_files_read_back_exactly(lines: list[str]) -> None:
    text = "".join(line + "\n" for line in lines)
    assert round_trip(text) == text


def test_line_breaks_a_reader_would_fold_are_quoted() -> None:
    for text in ("a\x85b\n", "\u2028\n", "x\u2029"):
        assert round_trip(text) == text
        assert rendered(text).startswith('"')


def test_plain_profiles_are_literal_blocks() -> None:
    assert rendered("# description: x\nNCCL_ALGO=Ring\n") == "|"
    assert round_trip("NCCL_ALGO=Ring") == "NCCL_ALGO=Ring"  # no final newline
    assert not rendered("NCCL_ALGO=Ring").startswith("|")
    assert rendered("a  \n").startswith('"')  # trailing spaces


def test_a_header_is_comment_lines() -> None:
    text = dump([{"a": 1}, {"b": 2}], ["first", "", "last"])
    assert text.startswith("# first\n#\n# last\na: 1\n---\nb: 2\n")
    assert list(yaml.safe_load_all(text)) == [{"a": 1}, {"b": 2}]
    assert comment(["x"]) == "# x\n"
