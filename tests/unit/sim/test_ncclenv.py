"""NCCL environment interpretation: ALGO/PROTO grammar, numeric parsing, P2P transport."""

from __future__ import annotations

import pytest

from fastverify.sim import ncclenv


@pytest.mark.parametrize(
    ("algo", "allowed", "tree_only"),
    [
        ("Tree", {"tree"}, True),
        ("tree", {"tree"}, True),
        ("TREE,ring", {"ring", "tree"}, False),
        ("^Tree", {"ring"}, False),
        ("^ring", {"tree"}, True),
        ("ring;allreduce:tree", {"tree"}, True),
        ("tree;allreduce:ring", {"ring"}, False),
        ("allgather:ring", {"ring", "tree"}, False),
        ("^nvls,collnetdirect", {"ring", "tree"}, False),
    ],
)
def test_algo_grammar(algo: str, allowed: set[str], tree_only: bool) -> None:
    s = ncclenv.resolve({"NCCL_ALGO": algo})
    assert s.algos == allowed and s.tree_only is tree_only and not s.errors


def test_unknown_tokens_are_init_errors() -> None:
    s = ncclenv.resolve({"NCCL_ALGO": "Treee", "NCCL_PROTO": "LL,Fast"})
    assert any("NCCL_ALGO" in e and "treee" in e for e in s.errors)
    assert any("NCCL_PROTO" in e and "fast" in e for e in s.errors)
    assert ncclenv.resolve({"NCCL_ALGO": "NVLS"}).errors  # nothing usable for AllReduce


def test_proto_defaults_exclude_ll128_unless_asked() -> None:
    assert ncclenv.resolve({}).protos == {"ll", "simple"}
    assert ncclenv.resolve({"NCCL_PROTO": "LL128"}).protos == {"ll128"}
    assert ncclenv.resolve({"NCCL_PROTO": "^LL"}).protos == {"ll128", "simple"}


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("16", 16),
        ("0x10", 16),
        ("010", 8),
        ("12abc", 12),
        ("abc", 0),
        (" 7", 7),
        ("-3", -3),
        ("", 0),
    ],
)
def test_numeric_parsing_like_strtoll(raw: str, value: int) -> None:
    assert ncclenv.nccl_int(raw) == value


def test_numeric_fallbacks() -> None:
    s = ncclenv.resolve({"NCCL_MAX_NCHANNELS": "abc", "NCCL_NTHREADS": "100", "NCCL_BUFFSIZE": "0"})
    assert s.max_nchannels == ncclenv.DEFAULT_NCHANNELS
    assert s.nthreads == ncclenv.DEFAULT_NTHREADS  # not a multiple of 32
    assert s.buffsize == ncclenv.DEFAULT_BUFFSIZE
    assert ncclenv.resolve({"NCCL_MAX_NRINGS": "4"}).max_nchannels == 4  # old name


@pytest.mark.parametrize(
    ("env", "p2p"),
    [
        ({}, False),
        ({"NCCL_P2P_LEVEL": "SYS"}, True),
        ({"NCCL_P2P_LEVEL": "4"}, True),
        ({"NCCL_P2P_LEVEL": "PHB"}, False),
        ({"NCCL_P2P_LEVEL": "sys"}, False),  # case-sensitive: unknown words are ignored
        ({"NCCL_P2P_LEVEL": "SYS", "NCCL_P2P_DISABLE": "1"}, False),
    ],
)
def test_p2p_transport(env: dict[str, str], p2p: bool) -> None:
    assert ncclenv.resolve(env).p2p is p2p


@pytest.mark.parametrize(
    ("env", "transport"),
    [
        ({"NCCL_P2P_LEVEL": "SYS"}, "p2p"),
        ({}, "shm"),
        ({"NCCL_SHM_DISABLE": "1"}, "net"),
        ({"NCCL_P2P_LEVEL": "SYS", "NCCL_SHM_DISABLE": "1"}, "p2p"),
    ],
)
def test_transport(env: dict[str, str], transport: str) -> None:
    assert ncclenv.resolve(env).transport == transport
