"""The sim reads NCCL_ALGO/NCCL_PROTO with the profiles' strict grammar (NCCL's parseList):
what `profile validate` refuses, the sim's NCCL refuses too, and per-collective sections
select the all-reduce entry."""

from __future__ import annotations

import pytest

from fastverify.profiles import nccl_vars, validate
from fastverify.sim import ncclenv


@pytest.mark.parametrize("value", ["ring;tree", "ring,^tree", "ring;", "ring,,tree"])
def test_malformed_lists_fail_like_the_validator(value: str) -> None:
    with pytest.raises(validate.ListSpecError):
        validate.parse_list_spec(value, nccl_vars.ALGORITHMS)
    s = ncclenv.resolve({"NCCL_ALGO": value})
    assert s.errors and value in s.errors[0]


def test_sections_select_the_allreduce_entry() -> None:
    assert ncclenv.resolve({"NCCL_ALGO": "ring;allreduce:tree"}).algos == {"tree"}
    assert ncclenv.resolve({"NCCL_ALGO": "tree;allgather:ring"}).algos == {"tree"}
    assert ncclenv.resolve({"NCCL_ALGO": "allgather:tree"}).algos == {"ring", "tree"}
    assert ncclenv.resolve({"NCCL_PROTO": "^LL128,Simple"}).protos == {"ll"}
    assert not ncclenv.resolve({"NCCL_PROTO": "LL"}).errors
