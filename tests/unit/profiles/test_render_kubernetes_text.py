"""`render_kubernetes._yaml_text`: any text a profile or dashboard file holds reads back
byte for byte from the rendered YAML (a literal block where YAML allows it, else a JSON
string), as the ConfigMaps' "byte for byte" promise needs."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fastverify.render_kubernetes import _yaml_text


def round_trip(text: str) -> str:
    doc = f"data:\n  key: {_yaml_text(text, 4)}\n  after: 1\n"
    loaded = yaml.safe_load(doc)
    assert loaded["data"]["after"] == 1
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


def test_plain_profiles_are_literal_blocks() -> None:
    assert _yaml_text("# description: x\nNCCL_ALGO=Ring\n", 4).startswith("|\n")
    assert _yaml_text("NCCL_ALGO=Ring", 4).startswith('"')  # no final newline
    assert _yaml_text("a  \n", 4).startswith('"')  # trailing spaces
