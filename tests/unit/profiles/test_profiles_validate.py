"""NCCL grammar checks: names, ALGO/PROTO lists, levels, numbers, LL128 + topology, requires."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastverify.profiles.envfile import parse_bytes
from fastverify.profiles.validate import ll128_forced, parse_list_spec, validate
from tests.support.profiles import NVLINK, PCIE, SHIPPED, UNKNOWN


def check(body: str, topology=PCIE, force: bool = False) -> list[tuple[int, str, str]]:
    data = ("# description: t\n" + body + "\n").encode()
    probs = validate(parse_bytes(data, "t.env"), topology=topology, force=force)
    return [(p.line, p.severity, p.message) for p in probs]


def errs(body: str, **kw) -> list[tuple[int, str]]:
    return [(ln, m) for ln, s, m in check(body, **kw) if s == "error"]


VALID = [
    "NCCL_ALGO=Ring",
    "NCCL_ALGO=ring",
    "NCCL_ALGO=TREE",
    "NCCL_ALGO=Ring,Tree",
    "NCCL_ALGO=^NVLS,CollNetDirect",
    "NCCL_ALGO=ring;allreduce:tree,ring",
    "NCCL_ALGO=allreduce:tree",
    "NCCL_ALGO=ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring",
    "NCCL_ALGO=NVLSTree,PAT,CollNetChain",
    "NCCL_PROTO=LL",
    "NCCL_PROTO=simple",
    "NCCL_PROTO=LL,Simple;AllReduce:^LL,LL128",
    "NCCL_PROTO=^LL128",
    "NCCL_P2P_LEVEL=SYS",
    "NCCL_P2P_LEVEL=NVL",
    "NCCL_P2P_LEVEL=LOC",
    "NCCL_NET_GDR_LEVEL=PHB",
    "NCCL_NTHREADS=64",
    "NCCL_NTHREADS=512",
    "NCCL_NTHREADS=96",
    "NCCL_MAX_NCHANNELS=1",
    "NCCL_MAX_NCHANNELS=64",
    "NCCL_MIN_CTAS=4",
    "NCCL_MAX_CTAS=32",
    "NCCL_BUFFSIZE=16777216",
    "NCCL_SHM_DISABLE=1",
    "NCCL_P2P_DISABLE=0",
    "NCCL_NVLS_ENABLE=2",
    "NCCL_CUMEM_ENABLE=0",
    "NCCL_GRAPH_MIXING_SUPPORT=0",
    "NCCL_DEBUG=INFO",
    "NCCL_DEBUG=warn",
    "NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING",
    "NCCL_DEBUG_SUBSYS=^COLL",
    "NCCL_LAUNCH_MODE=GROUP",
    "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1",
    "NCCL_SOCKET_IFNAME=^docker,lo",
    "NCCL_INSPECTOR_ENABLE=1",
    "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=0",
    "SGLANG_ENABLE_TORCH_COMPILE=0",
    "NCCL_NET_PLUGIN=ib",
    "NCCL_TUNER_PLUGIN=none",
]


@pytest.mark.parametrize("line", VALID)
def test_valid_values_accepted(line: str) -> None:
    assert errs(line) == []


INVALID = [
    ("NCCL_ALGOS=Ring", "did you mean NCCL_ALGO"),
    ("NCCL_PROTOCOL=LL", "unknown NCCL variable NCCL_PROTOCOL"),
    ("NCCL_VERSION=2.28.3-1", "image metadata"),
    ("NCCL_ALGO=Rings", "unknown token 'Rings' (valid: Tree, Ring, CollNetDirect"),
    ("NCCL_ALGO=Ring;tree", "needs one (e.g. allreduce:tree)"),
    ("NCCL_ALGO=ring;allreduce:tree;allreduce:ring", "AllReduce given twice"),
    ("NCCL_ALGO=ring;allreduc:tree", "unknown collective 'allreduc'"),
    ("NCCL_ALGO=Tree,^Ring", "accepts '^' only at the start"),
    ("NCCL_ALGO=^", "'^' with nothing after it"),
    ("NCCL_ALGO=Ring,,Tree", "empty item"),
    ("NCCL_ALGO=Ring;", "empty entry"),
    ("NCCL_ALGO=allreduce:", "empty list after 'allreduce:'"),
    ("NCCL_ALGO=allreduce:tree:ring", "more than one ':'"),
    ("NCCL_PROTO=LL256", "unknown token 'LL256' (valid: LL, LL128, Simple"),
    ("NCCL_P2P_LEVEL=sys", "case-sensitive"),
    ("NCCL_P2P_LEVEL=NVLINK", "not a level"),
    ("NCCL_NTHREADS=500", "multiple of 32 in 64..512"),
    ("NCCL_NTHREADS=32", "multiple of 32 in 64..512"),
    ("NCCL_NTHREADS=1024", "multiple of 32 in 64..512"),
    ("NCCL_MAX_NCHANNELS=0", "1..64"),
    ("NCCL_MAX_NCHANNELS=65", "1..64"),
    ("NCCL_MIN_CTAS=128", "1..64"),
    ("NCCL_MAX_NCHANNELS=sixteen", "silently read 0"),
    ("NCCL_BUFFSIZE=16M", "NCCL would read 16 and drop the rest"),
    ("NCCL_BUFFSIZE=0x1000000", "write 16777216"),
    ("NCCL_BUFFSIZE=010", "octal 8"),
    ("NCCL_BUFFSIZE=0", "not a positive size"),
    ("NCCL_SHM_DISABLE=2", "expected 0 or 1"),
    ("NCCL_SHM_DISABLE=yes", "not a plain integer"),
    ("NCCL_CUMEM_ENABLE=true", "not a plain integer"),
    ("NCCL_NVLS_ENABLE=3", "expected one of 0, 1, 2"),
    ("NCCL_DEBUG=VERBOSE", "expected one of VERSION, WARN, INFO"),
    ("NCCL_DEBUG_SUBSYS=INIT,TUNNING", "unknown subsystem 'TUNNING'"),
    ("NCCL_LAUNCH_MODE=SERIAL", "PARALLEL, GROUP"),
    ("NCCL_LL_THRESHOLD=0", "no longer read by NCCL (use NCCL_PROTO)"),
    ("NCCL_WORK_FIFO_DEPTH=65536", "use NCCL_WORK_FIFO_BYTES"),
    ("nccl_algo=Ring", "names are case-sensitive"),
]


@pytest.mark.parametrize(("line", "needle"), INVALID)
def test_invalid_values_refused_on_their_line(line: str, needle: str) -> None:
    found = errs("NCCL_P2P_DISABLE=0\n" + line)
    assert len(found) == 1, found
    assert found[0][0] == 3  # header line 1, P2P_DISABLE line 2
    assert needle in found[0][1]


def test_legacy_numeric_level_warns_with_word() -> None:
    out = check("NCCL_P2P_LEVEL=4")
    assert out == [(2, "warning", "NCCL_P2P_LEVEL: legacy numeric level 4 means SYS (write SYS)")]


def test_deprecated_name_warns() -> None:
    out = check("NCCL_MAX_NRINGS=8")
    assert [(s, "NCCL_MAX_NCHANNELS" in m) for _, s, m in out] == [("warning", True)]


def test_per_collective_syntax_warns_about_version() -> None:
    out = check("NCCL_ALGO=ring;allreduce:tree")
    assert [s for _, s, _ in out] == ["warning"] and "2.24" in out[0][2]


def test_min_above_max_channels() -> None:
    assert errs("NCCL_MIN_NCHANNELS=32\nNCCL_MAX_NCHANNELS=16") == [
        (2, "NCCL_MIN_NCHANNELS=32 is above NCCL_MAX_NCHANNELS=16 (make MIN <= MAX)")
    ]


@pytest.mark.parametrize(
    ("value", "forced"),
    [
        ("LL128", True),
        ("ll128", True),
        ("LL,LL128", True),
        ("^LL", True),  # an exclusion list enables every other protocol explicitly
        ("^Simple", True),
        ("LL", False),
        ("Simple", False),
        ("^LL128", False),
        ("^LL,LL128", False),  # excludes both
        ("LL;allreduce:LL128", True),
        ("LL;allreduce:^LL128", False),
        ("LL,Simple;AllReduce:^LL", True),  # the allreduce entry enables LL128 explicitly
    ],
)
def test_ll128_forced(value: str, forced: bool) -> None:
    assert ll128_forced(value) is forced


def test_ll128_without_nvlink_is_an_error() -> None:
    out = errs("NCCL_PROTO=LL128", topology=PCIE)
    assert len(out) == 1 and out[0][0] == 2
    assert "no NVLink" in out[0][1] and "--force" in out[0][1]


def test_ll128_without_nvlink_forced_is_a_warning() -> None:
    out = check("NCCL_PROTO=LL128", topology=PCIE, force=True)
    assert [s for _, s, _ in out] == ["warning"]


def test_ll128_topology_unknown_warns() -> None:
    out = check("NCCL_PROTO=LL,LL128", topology=UNKNOWN)
    assert [(ln, s) for ln, s, _ in out] == [(2, "warning")]
    assert "unknown" in out[0][2]


def test_ll128_with_nvlink_is_fine() -> None:
    assert check("NCCL_PROTO=LL128", topology=NVLINK) == []


def test_topology_callable_only_called_when_needed() -> None:
    calls = []

    def topo():
        calls.append(1)
        return PCIE

    validate(parse_bytes(b"# description: d\nNCCL_PROTO=LL\n", "t"), topology=topo)
    assert calls == []
    validate(parse_bytes(b"# description: d\nNCCL_PROTO=LL128\n", "t"), topology=topo)
    assert calls == [1]


@pytest.mark.parametrize(
    ("requires", "needle"),
    [
        ("cuda-graph=maybe", "expected cuda-graph=on|off"),
        ("cuda-graphs=off", "unknown key 'cuda-graphs' (known: cuda-graph, custom-all-reduce)"),
        ("cuda-graph", "is not key=value"),
        ("cuda-graph=off, cuda-graph=on", "given twice"),
    ],
)
def test_requires_refused(requires: str, needle: str) -> None:
    data = f"# description: d\n# requires: {requires}\nNCCL_ALGO=Ring\n".encode()
    probs = [p for p in validate(parse_bytes(data, "t"), topology=PCIE) if p.severity == "error"]
    assert len(probs) == 1 and probs[0].line == 2 and needle in probs[0].message


def test_requires_accepted() -> None:
    data = b"# description: d\n# requires: cuda-graph=off, custom-all-reduce=on\n"
    assert validate(parse_bytes(data, "t"), topology=PCIE) == []


def test_missing_description_warns() -> None:
    out = validate(parse_bytes(b"NCCL_ALGO=Ring\n", "t"), topology=PCIE)
    assert [(p.line, p.severity) for p in out] == [(1, "warning")]


def test_list_spec_result() -> None:
    spec = parse_list_spec("ring;allreduce:^ring", ("Tree", "Ring"))
    assert spec["Broadcast"] == {"Tree": 0, "Ring": 1}
    assert spec["AllReduce"] == {"Tree": 1, "Ring": 0}


def test_validation_of_one_file_is_well_under_50ms() -> None:
    data = (SHIPPED / "ring-ll.env").read_bytes()
    validate(parse_bytes(data, "warm"), topology=PCIE)
    n = 200
    start = time.perf_counter()
    for _ in range(n):
        validate(parse_bytes(data, "ring-ll.env"), topology=PCIE)
    per_file_ms = (time.perf_counter() - start) / n * 1000
    assert per_file_ms < 50, per_file_ms


TUNING_NAMES = [  # the variables the shipped profiles and NCCL tuning guides set
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_P2P_LEVEL",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_SHM_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_IB_TIMEOUT",
    "NCCL_SOCKET_IFNAME",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NRINGS",
    "NCCL_MAX_NRINGS",
    "NCCL_MIN_CTAS",
    "NCCL_MAX_CTAS",
    "NCCL_BUFFSIZE",
    "NCCL_NTHREADS",
    "NCCL_LL_BUFFSIZE",
    "NCCL_LL128_BUFFSIZE",
    "NCCL_NVLS_ENABLE",
    "NCCL_CUMEM_ENABLE",
    "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_TUNER_PLUGIN",
    "NCCL_TUNER_CONFIG_FILE",
    "NCCL_PROFILER_PLUGIN",
    "NCCL_INSPECTOR_ENABLE",
    "NCCL_INSPECTOR_DUMP_DIR",
    "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS",
    "NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES",
    "NCCL_CONF_FILE",
    "NCCL_LAUNCH_MODE",
    "NCCL_CROSS_NIC",
    "NCCL_NET",
    "NCCL_RUNTIME_CONNECT",
    "NCCL_NVB_DISABLE",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_CHECK_POINTERS",
    "NCCL_MAX_P2P_NCHANNELS",
    "NCCL_WORK_FIFO_DEPTH",
    "NCCL_SET_THREAD_NAME",
    "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_COMM_BLOCKING",
    "NCCL_P2P_DISABLE",
]


def test_table_knows_every_variable_the_shipped_profiles_name() -> None:
    from fastverify.profiles import nccl_vars

    assert [n for n in TUNING_NAMES if n not in nccl_vars.KNOWN] == []
    for v in nccl_vars.KNOWN.values():
        assert v.since and v.since[0] == "2", v


_spec_alphabet = st.sampled_from(
    [
        "ring",
        "Tree",
        "LL",
        "ll128",
        "Simple",
        "nvls",
        "allreduce",
        "AllGather",
        "^",
        ",",
        ";",
        ":",
        "x",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL", "NCCL_NTHREADS", "NCCL_DEBUG"]),
    st.lists(_spec_alphabet, min_size=1, max_size=12).map("".join),
)
def test_random_values_never_crash_and_point_at_their_line(name: str, value: str) -> None:
    data = f"# description: fuzz\n{name}={value}\n".encode()
    for p in validate(parse_bytes(data, "fuzz.env"), topology=UNKNOWN):
        assert p.line == 2, p


def test_p2p_level_nvl_on_pcie_warns() -> None:
    out = check("NCCL_P2P_LEVEL=NVL", topology=PCIE)
    assert [(ln, sev) for ln, sev, _ in out] == [(2, "warning")]
    assert "peer-to-peer off" in out[0][2]
    assert check("NCCL_P2P_LEVEL=NVL", topology=NVLINK) == []
    assert check("NCCL_P2P_LEVEL=SYS", topology=PCIE) == []


def test_nvls_on_pcie_warns() -> None:
    out = check("NCCL_ALGO=NVLS,Ring", topology=PCIE)
    assert [(ln, sev) for ln, sev, _ in out] == [(2, "warning")] and "NVSwitch" in out[0][2]
    assert check("NCCL_ALGO=^NVLS", topology=PCIE) == []
    assert [sev for _, sev, _ in check("NCCL_ALGO=ring;allreduce:^tree", topology=PCIE)] == [
        "warning"  # only the 2.24+ syntax note: excluding Tree does not ask for NVLS
    ]
    assert check("NCCL_ALGO=NVLS", topology=NVLINK) == []
