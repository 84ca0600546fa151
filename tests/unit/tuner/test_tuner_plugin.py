"""The real plugin (.so built by scripts/build-tuner.sh) called through its ABI structs
the way NCCL calls it: table parsing at init, the choice in getCollInfo, refusals."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from fastverify.tuner.plugin import Plugin
from fastverify.tuner.table import parse_text
from tests.support.tuner_abi import (
    ALLGATHER,
    LL,
    LL128,
    RING,
    SIMPLE,
    TREE,
    V2,
    V3,
    V4,
    V5,
    Logs,
    call,
    cost_table,
    nccl_pick,
    symbol,
    v5_session,
)

TABLE = """\
# derived on a test host
collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes
AllReduce,0,65535,Ring,LL,-1,2,1
AllReduce,65536,1048575,Tree,Simple,4,2,1
AllReduce,1048576,1048576,default,default,8,2,1
AllReduce,0,1000000,Ring,Simple,-1,8,1
"""
# NCCL-like costs: Ring/LL cheapest for everything unless a row says otherwise.
COSTS = {(TREE, LL): 9.0, (TREE, SIMPLE): 12.0, (RING, LL): 5.0, (RING, LL128): -1.0,
         (RING, SIMPLE): 7.0}  # fmt: skip


@pytest.fixture()
def lib(plugin_so: Path) -> ctypes.CDLL:
    return ctypes.CDLL(str(plugin_so))


@pytest.fixture()
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    p = tmp_path / "t.tuner.csv"
    p.write_text(TABLE)
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(p))
    return p


def test_exports_every_abi_version_named_fastverify(lib: ctypes.CDLL) -> None:
    for version, struct in ((5, V5), (4, V4), (3, V3), (2, V2)):
        s = symbol(lib, f"ncclTunerPlugin_v{version}", struct)
        assert s.name == b"fastverify"
    assert ctypes.c_char_p.in_dll(lib, "ncclTunerPlugin_v1").value == b"fastverify"


def test_v5_rows_select_by_size_and_leave_the_rest(lib: ctypes.CDLL, table: Path) -> None:
    s, ctx, logs = v5_session(lib, nranks=2)
    assert not logs.warns(), logs.lines
    assert any("3 of 4 rows" in m and "ABI v5" in m for m in logs.infos()), logs.lines
    # in the first row: Ring/LL is NCCL's pick already; stays
    arr = cost_table({**COSTS, (RING, LL): 20.0})
    assert call(s, ctx, 14336, arr) == 0
    assert nccl_pick(arr) == (RING, LL)
    # second row: Tree/Simple with 4 channels although Ring/LL is cheaper for NCCL
    arr = cost_table(COSTS)
    assert call(s, ctx, 917504, arr) == 4
    assert nccl_pick(arr) == (TREE, SIMPLE)
    # channels-only row: NCCL's algorithm, 8 channels
    arr = cost_table(COSTS)
    assert call(s, ctx, 1048576, arr) == 8
    assert nccl_pick(arr) == (RING, LL)
    # above every row: untouched
    arr = cost_table(COSTS)
    before = list(arr)
    assert call(s, ctx, 1048577, arr) == 0
    assert list(arr) == before
    # another collective: untouched
    arr = cost_table(COSTS)
    call(s, ctx, 14336, arr, coll=ALLGATHER)
    assert list(arr) == before
    assert s.finalize(ctx) == 0


def test_other_rank_count_uses_its_own_rows_only(lib: ctypes.CDLL, table: Path) -> None:
    s, ctx, logs = v5_session(lib, nranks=8)
    arr = cost_table(COSTS)
    call(s, ctx, 917504, arr)
    assert nccl_pick(arr) == (RING, SIMPLE)  # the nranks=8 row
    s.finalize(ctx)
    s, ctx, logs = v5_session(lib, nranks=4)
    assert any("none for nranks=4" in m for m in logs.infos()), logs.lines
    arr = cost_table(COSTS)
    before = list(arr)
    call(s, ctx, 14336, arr)
    assert list(arr) == before
    s.finalize(ctx)


def test_unavailable_choice_keeps_nccls(lib: ctypes.CDLL, tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "ll128.csv"
    p.write_text("AllReduce,0,100,Ring,LL128,-1,2,1\n")
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(p))
    plugin = Plugin(lib._name)
    plugin.reset_stats()
    s, ctx, _ = v5_session(lib)
    arr = cost_table(COSTS)  # Ring/LL128 is -1 (NCCL_ALGO_PROTO_IGNORE)
    call(s, ctx, 64, arr)
    assert arr[RING * 3 + LL128] == -1.0
    assert nccl_pick(arr) == (RING, LL)
    st = plugin.stats()
    assert (st.unavailable, st.applied, st.last_applied) == (1, 0, 0)
    assert st.default_choice == "RING/LL"
    s.finalize(ctx)


@pytest.mark.parametrize("version,struct", [(4, V4), (3, V3)])
def test_v4_and_v3_apply_the_same_rows(lib, table, version, struct) -> None:
    s = symbol(lib, f"ncclTunerPlugin_v{version}", struct)
    logs = Logs()
    ctx = ctypes.c_void_p()
    assert s.init(2, 1, logs.cb, ctypes.byref(ctx)) == 0
    assert any(f"ABI v{version}" in m for m in logs.infos())
    arr = cost_table(COSTS)
    assert call(s, ctx, 100000, arr, version=version) == 4
    assert nccl_pick(arr) == (TREE, SIMPLE)
    assert s.destroy(ctx) == 0


def test_numalgo_beyond_this_ncclx_is_left_alone(lib, tmp_path, monkeypatch) -> None:
    """NCCL 2.22 passes numAlgo=6 (no PAT): a PAT row must not write past the table."""
    p = tmp_path / "pat.csv"
    p.write_text("AllGather,0,100,PAT,Simple,-1,2,1\n")
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(p))
    plugin = Plugin(lib._name)
    plugin.reset_stats()
    s = symbol(lib, "ncclTunerPlugin_v3", V3)
    logs = Logs()
    ctx = ctypes.c_void_p()
    s.init(2, 1, logs.cb, ctypes.byref(ctx))
    arr = cost_table(COSTS)
    before = list(arr)
    nch = ctypes.c_int(0)
    tbl = ctypes.cast(arr, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)))
    assert s.getCollInfo(ctx, ALLGATHER, 64, 1, tbl, 6, 3, ctypes.byref(nch)) == 0
    assert list(arr) == before
    assert plugin.stats().abi_mismatch == 1
    s.destroy(ctx)
    assert any("tuner ABI mismatch" in m for m in logs.warns()), logs.lines


def test_v2_and_v1_refuse_with_a_warning_and_change_nothing(lib, table) -> None:
    s = symbol(lib, "ncclTunerPlugin_v2", V2)
    logs = Logs()
    ctx = ctypes.c_void_p()
    assert s.init(2, 1, logs.cb, ctypes.byref(ctx)) == 0
    (warn,) = logs.warns()
    assert "ABI v2" in warn and "needs ABI v3 or newer" in warn and "NCCL" in warn
    algo, proto, nch = ctypes.c_int(-1), ctypes.c_int(-1), ctypes.c_int(0)
    rc = s.getCollInfo(ctx, 4, 14336, 0, 0, 1, ctypes.byref(algo), ctypes.byref(proto),
                       ctypes.byref(nch))  # fmt: skip
    assert rc == 0 and (algo.value, proto.value, nch.value) == (-1, -1, 0)


BAD_TABLES = [
    ("AllReduce,0,100,Ring,LL,-1,2\n", 1, "7 fields"),
    ("AllReduce,0,100,Rings,LL,-1,2,1\n", 1, "unknown algorithm"),
    ("AllReduce,0,100,Ring,LL256,-1,2,1\n", 1, "unknown protocol"),
    ("AllReduce,0,100,Ring,default,-1,2,1\n", 1, "both"),
    ("AllReduce,100,0,Ring,LL,-1,2,1\n", 1, "above"),
    ("AllReduce,0,100,Ring,LL,65,2,1\n", 1, "channels"),
    ("AllReduce,0,100,default,default,-1,2,1\n", 1, "changes nothing"),
    ("AllReduce,-5,100,Ring,LL,-1,2,1\n", 1, "min_bytes"),
    ("AllToAll,0,100,Ring,LL,-1,2,1\n", 1, "unknown collective"),
    ("AllReduce,0,100,Ring,LL,-1,2,1\nAllReduce,100,200,Ring,Simple,-1,2,1\n", 2, "overlaps"),
    ("# c\nAllReduce,200,300,Ring,LL,-1,2,1\nAllReduce,0,100,Ring,Simple,-1,2,1\n", 3, "sorted"),
    ("AllReduce,0,100,Ring,LL,-1,any,1\nAllReduce,50,200,Ring,Simple,-1,2,1\n", 2, "overlaps"),
    ("AllReduce,0,100,Ring,LL,-1,0,1\n", 1, "nranks"),
]


@pytest.mark.parametrize("text,line,needle", BAD_TABLES)
def test_bad_tables_refused_whole_by_plugin_and_validator(
    lib, tmp_path, monkeypatch, text, line, needle
) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(p))
    s, ctx, logs = v5_session(lib)
    (warn,) = logs.warns()
    assert f"{p}:{line}: " in warn and needle in warn and "table ignored" in warn, warn
    assert lib.fastverify_tuner_context_rows(ctx) == 0
    check = parse_text(text, str(p))
    assert not check.ok and check.rows == []
    assert any(e.line == line and needle in e.message for e in check.errors), check.problems
    s.finalize(ctx)


GOOD_TABLES = [
    (TABLE, 3),
    ("collective , min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes\n"
     " allreduce , 0 , 10 , ring , simple , default , 2 , 1 \n", 1),
    ("AllReduce,0,100,Ring,LL,-1,any,any\nAllGather,0,100,Ring,LL,-1,any,any\n", 2),
    ("AllReduce,0,100,Ring,LL,-1,4,1\nAllReduce,0,100,Ring,Simple,-1,2,1\n", 1),
]  # fmt: skip


@pytest.mark.parametrize("text,rows", GOOD_TABLES)
def test_good_tables_agree(lib, tmp_path, monkeypatch, text, rows) -> None:
    p = tmp_path / "good.csv"
    p.write_text(text)
    monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(p))
    s, ctx, logs = v5_session(lib, nranks=2, nnodes=1)
    assert not logs.warns(), logs.lines
    assert lib.fastverify_tuner_context_rows(ctx) == rows
    check = parse_text(text, str(p))
    assert check.ok, check.problems
    assert sum(1 for r in check.rows if r.nranks in (None, 2) and r.nnodes in (None, 1)) == rows
    s.finalize(ctx)


def test_missing_table_variable_warns_and_keeps_ncclx(lib, monkeypatch) -> None:
    monkeypatch.delenv("FASTVERIFY_TUNER_TABLE", raising=False)
    s, ctx, logs = v5_session(lib)
    assert any("FASTVERIFY_TUNER_TABLE is not set" in w for w in logs.warns())
    arr = cost_table(COSTS)
    before = list(arr)
    call(s, ctx, 100, arr)
    assert list(arr) == before
    s.finalize(ctx)


def test_force_overrides_rows_until_turned_off(lib, table) -> None:
    plugin = Plugin(lib._name)
    s, ctx, _ = v5_session(lib)
    try:
        plugin.force("Tree", "LL", 2)
        plugin.reset_stats()
        arr = cost_table(COSTS)
        assert call(s, ctx, 14336, arr) == 2
        assert nccl_pick(arr) == (TREE, LL)
        st = plugin.stats()
        assert (st.applied, st.last_algo, st.last_proto, st.last_channels) == (1, TREE, LL, 2)
        assert st.default_choice == "RING/LL" and st.last_bytes == 14336
        with pytest.raises(ValueError):
            plugin.force("Ring", None, None)
        with pytest.raises(ValueError):
            plugin.force(None, None, 65)
    finally:
        plugin.force(None, None, None)
    arr = cost_table(COSTS)
    call(s, ctx, 917504, arr)
    assert nccl_pick(arr) == (TREE, SIMPLE)  # the table again
    s.finalize(ctx)
