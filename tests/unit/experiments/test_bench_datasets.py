"""The prompt sets bench sends (fastverify.experiments.bench.datasets): every format read,
the shipped set, and a bad line named with what would be right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastverify.experiments.bench import datasets
from fastverify.experiments.bench.load import BenchConfig, Prompts, dataset_identity


def test_jsonl_lines_of_text_token_ids_conversations_and_messages(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    lines = [
        {"text": "a"},
        {"prompt": "b"},
        {"input_ids": [1, 2, 3]},
        {"conversations": [{"from": "human", "value": "c"}, {"value": "x"}]},
        {"conversation": [{"role": "user", "content": "d"}]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "e"}]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")  # fmt: skip
    ds = datasets.load(str(path))
    assert ds.format == "jsonl" and [p.get("text", p.get("input_ids")) for p in ds.prompts] == [
        "a", "b", [1, 2, 3], "c", "d", "e"]  # fmt: skip
    ident = ds.identity
    assert ident["name"] == "p.jsonl" and ident["prompts"] == 6 and not ident["synthetic"]
    assert len(ident["sha256"]) == 16


def test_sharegpt_json_is_read_as_bench_serving_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([
        {"id": "1", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt",
                                                                           "value": "yo"}]},
        {"id": "2", "conversations": [{"from": "human", "value": "bye"}]},
    ]))  # fmt: skip
    ds = datasets.load(str(path))
    assert ds.format == "sharegpt" and [p["text"] for p in ds.prompts] == ["hi", "bye"]


def test_the_shipped_set_is_the_projects_own_prompts() -> None:
    ds = datasets.load(datasets.SHIPPED)
    assert len(ds.prompts) == 48 and all(len(p["text"]) > 40 for p in ds.prompts)
    cfg = BenchConfig(dataset=datasets.SHIPPED)
    prompts = Prompts(cfg)
    n = len(ds.prompts)  # in order, cycled; the warm-up from the start as the window
    assert [prompts(i) for i in range(n + 2)] == [*ds.prompts, *ds.prompts[:2]]
    assert prompts.warmup(1) == ds.prompts[1]
    assert dataset_identity(cfg)["name"] == datasets.SHIPPED
    synthetic = dataset_identity(BenchConfig(input_len=64))
    assert synthetic == {"name": "synthetic", "format": "random-ids", "input_len": 64,
                         "synthetic": True}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"text": "ok"}\n{"nope": 1}\n', "line 2: no prompt; expected"),
        ('{"text": "ok"}\n{bad\n', "line 2: not JSON"),
        ('{"input_ids": [1, -2]}\n', "line 1: input_ids must be non-negative ints"),
        ("[1, 2]", "entry 1: expected an object"),
        ("\n\n", "no prompts"),
    ],
)
def test_a_bad_file_names_the_line_and_what_would_be_right(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(datasets.DatasetError, match=said):
        datasets.load(str(path))
    with pytest.raises(datasets.DatasetError, match="cannot read"):
        datasets.load(str(tmp_path / "missing.jsonl"))


def test_sampling_is_checked_and_sent() -> None:
    with pytest.raises(ValueError, match="--top-p"):
        BenchConfig(top_p=0.0).validate()
    with pytest.raises(ValueError, match="--temperature"):
        BenchConfig(temperature=-1).validate()
    assert BenchConfig(temperature=0.7, top_p=0.9).sampling == {"temperature": 0.7, "top_p": 0.9}
