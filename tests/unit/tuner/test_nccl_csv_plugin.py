"""fastverify's table exported in NCCL's own tuner CSV format and loaded by NCCL's real
example plugin (plugins/tuner/example), built from NCCL's source outside the repository by
scripts/nccl-example-tuner.sh: NVIDIA/nccl v2.30.7-1 from a NCCL git repository where one
is here, else Debian's nvidia-nccl 2.29.7-1 source package (its CSV parser is the same
code). Driven through the newest tuner ABI the plugin exports (v6 for 2.30.7, v5 for
2.29.7) the way NCCL drives it: for every size the two plugins pick the same algorithm and
protocol. 2.29.7's plugin indexes the cost table as a float** (under NCCL it crashes at its
first matching row, test below), so it is handed one pointer per algorithm there.

Tables: the two derived on 2 x H200 (tests/fixtures/nccl-2.28.9-tuner/) and one with
channel counts, another collective, a rank count of 8 and a channel-only row."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fastverify.tuner import nccl_csv
from fastverify.tuner.table import check_table, parse_text
from tests.support.nccl_example_driver import COSTS
from tests.support.tuner_abi import (
    ALLGATHER,
    ALLREDUCE,
    LOGGER,
    V2,
    call,
    close,
    cost_table,
    exported,
    init,
    nccl_pick,
    symbol,
    v5_session,
)

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "nccl-2.28.9-tuner"
DRIVER = Path(__file__).resolve().parents[2] / "support" / "nccl_example_driver.py"
MIXED = """\
collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes
AllReduce,0,1000000,Tree,Simple,-1,8,1
AllReduce,0,65535,Tree,LL,-1,2,1
AllReduce,65536,1048575,Ring,Simple,4,2,1
AllReduce,1048576,1048576,default,default,8,2,1
AllReduce,1048577,8388608,Tree,Simple,16,any,1
AllGather,0,4194304,Ring,LL128,2,2,1
"""
COLL = {"AllReduce": ALLREDUCE, "AllGather": ALLGATHER}


SCRIPT = ROOT / "scripts" / "nccl-example-tuner.sh"
# what the script builds: NCCL's tag from a git repository, or Debian's pinned source package
BUILDS = {
    "2.30.7-1": ("git ", 6),
    "2.29.7-1": ("Debian source package nvidia-nccl 2.29.7-1-1 (contrib), ", 5),
}


@dataclass(frozen=True)
class ExamplePlugin:
    so: Path
    nccl: str  # NCCL's version, e.g. "2.30.7-1"
    abi: int  # the ncclTunerPlugin_vN NCCL would pick in it

    @property
    def row_pointers(self) -> bool:
        """Before 2.30 the plugin indexes the cost table as a float** (see the driver)."""
        return tuple(map(int, self.nccl.split("-")[0].split("."))) < (2, 30)


def build_example(*args: str) -> ExamplePlugin:
    """The plugin the script builds; skips only when it found no NCCL source at all."""
    proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=False)
    if proc.returncode == 3:
        pytest.skip(
            "neither a NCCL git repository nor Debian's nvidia-nccl source package could be "
            f"had: {proc.stderr.strip()}"
        )
    assert proc.returncode == 0, proc.stderr
    so = Path(proc.stdout.strip().splitlines()[-1])
    source = dict(ln.split("=", 1) for ln in (so.parent / "SOURCE").read_text().splitlines())
    assert source["dir"] == "plugins/tuner/example", source
    origin, abi = BUILDS[source["nccl"]]
    assert source["from"].startswith(origin), source
    if origin.startswith("Debian"):
        assert len(source["sha256"]) == 64, source
    return ExamplePlugin(so, source["nccl"], abi)


@pytest.fixture(scope="module")
def nccl_example() -> ExamplePlugin:
    return build_example()


def tables(tmp_path: Path) -> dict[str, Path]:
    mixed = tmp_path / "mixed.tuner.csv"
    mixed.write_text(MIXED)
    return {
        "h200-nvlink": FIX / "tuned-nvlink.tuner.csv",
        "h200-p2p-off": FIX / "tuned-p2p-off.tuner.csv",
        "mixed": mixed,
    }


def queries(rows) -> list[list[int]]:
    """Each row's edges and midpoint, the byte before and after it, per collective."""
    out = {(ALLREDUCE, 1), (ALLGATHER, 1 << 30)}
    for r in rows:
        for b in (r.min_bytes, r.max_bytes, (r.min_bytes + r.max_bytes) // 2,
                  max(r.min_bytes - 1, 0), r.max_bytes + 1):  # fmt: skip
            out.add((COLL[r.collective], b))
    return sorted([c, b] for c, b in out)


def run_driver(plugin: ExamplePlugin, csv: Path, qs: list[list[int]], tmp: Path,
               nranks: int = 2, nnodes: int = 1, flat: bool = False):  # fmt: skip
    """The driver's process on `qs`; `flat`: NCCL's own flat cost table whatever the plugin."""
    qfile = tmp / "queries.json"
    qfile.write_text(json.dumps(qs))
    env = {**os.environ, "NCCL_TUNER_CONFIG_FILE": str(csv)}
    rows = ["--row-pointers"] if plugin.row_pointers and not flat else []
    return subprocess.run(
        [sys.executable, str(DRIVER), str(plugin.so), str(nranks), str(nnodes), str(qfile), *rows],
        capture_output=True, text=True, env=env, check=False, cwd=tmp,
    )  # fmt: skip


def nccl_choices(plugin: ExamplePlugin, csv: Path, qs: list[list[int]], tmp: Path, nranks: int,
                 nnodes: int):  # fmt: skip
    proc = run_driver(plugin, csv, qs, tmp, nranks, nnodes)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert {o["abi"] for o in out} == {plugin.abi}, (plugin, out[:1])
    return {(o["coll"], o["bytes"]): o for o in out}


@pytest.mark.parametrize("shape", [(2, 1), (8, 1), (4, 1)])
def test_nccl_example_plugin_picks_the_rows_fastverify_picks(
    nccl_example: ExamplePlugin,
    plugin_so: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    shape: tuple[int, int],
) -> None:
    nranks, nnodes = shape
    ours = ctypes.CDLL(str(plugin_so))
    for name, path in tables(tmp_path).items():
        check = check_table(path)
        assert check.ok, check.problems
        text, notes = nccl_csv.export(check.rows, [f"from {path.name}"])
        csv = tmp_path / f"{name}.nccl.csv"
        csv.write_text(text)
        qs = queries(check.rows)
        theirs = nccl_choices(nccl_example, csv, qs, tmp_path, nranks, nnodes)
        monkeypatch.setenv("FASTVERIFY_TUNER_TABLE", str(path))
        s, ctx, _logs = v5_session(ours, nranks, nnodes)
        for coll, nbytes in qs:
            arr = cost_table(COSTS)
            ch = call(s, ctx, nbytes, arr, coll=coll)
            mine = {"pick": list(nccl_pick(arr)), "channels": ch}
            got = theirs[(coll, nbytes)]
            where = f"{name} nranks={nranks} coll={coll} bytes={nbytes}"
            row = next(
                (r for r in check.rows
                 if COLL[r.collective] == coll and r.covers(nbytes)
                 and r.nranks in (None, nranks) and r.nnodes in (None, nnodes)),
                None,
            )  # fmt: skip
            if row is not None and row.algorithm is None:
                # left out of NCCL's file: NCCL keeps its own choice there (Ring/LL here)
                assert got["pick"] == list(nccl_pick(cost_table(COSTS))), where
                assert any("left out" in n for n in notes)
                continue
            assert got["pick"] == mine["pick"], where
            # NCCL's example plugin: one channel unless the row names a count
            assert got["channels"] == (row.channels if row and row.channels else 1), where
            assert mine["channels"] == (row.channels or 0 if row else 0), where
        s.finalize(ctx)


def test_the_driver_speaks_the_newest_abi_a_plugin_exports(plugin_so: Path) -> None:
    """fastverify's plugin exports v5..v2: the driver takes v5, as NCCL 2.28+ does; through
    v2 (no cost table: NCCL's adapter zeroes the returned pair) it refuses and leaves the
    costs as they were."""
    lib = ctypes.CDLL(str(plugin_so))
    version, s5 = exported(lib)
    assert (version, s5.name) == (5, b"fastverify")
    s2 = symbol(lib, "ncclTunerPlugin_v2", V2)
    ctx = init(s2, 2, 2, 1, LOGGER())
    arr = cost_table(COSTS)
    assert call(s2, ctx, 14336, arr, version=2) == 0
    assert list(arr) == list(cost_table(COSTS))
    close(s2, ctx, 2)


def test_the_export_is_in_nccls_column_order_and_reads_back(tmp_path: Path) -> None:
    check = parse_text(MIXED, "mixed")
    text, notes = nccl_csv.export(check.rows)
    data = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert data[1] == "allreduce,0,65535,tree,ll,-1,1,2"  # nNodes before nRanks
    assert "allreduce,1048577,8388608,tree,simple,16,1,-1" in data
    assert "allgather,0,4194304,ring,ll128,2,1,2" in data
    assert len(data) == len(check.rows) - 1  # the channel-only row left out
    assert f"# {nccl_csv.NCCL_COLUMNS}" in text.splitlines()
    assert nccl_csv.ONE_CHANNEL_NOTE in notes
    back = nccl_csv.parse(text, "back.csv")
    assert back.ok, back.problems
    strip = [(r.collective, r.min_bytes, r.max_bytes, r.algorithm, r.protocol, r.channels,
              r.nranks, r.nnodes) for r in back.rows]  # fmt: skip
    assert strip == [
        (r.collective, r.min_bytes, r.max_bytes, r.algorithm, r.protocol, r.channels,
         r.nranks, r.nnodes) for r in check.rows if r.algorithm
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("allreduce,0,100,Ring,LL,-1,1,2", "algorithm 'Ring': NCCL's example plugin compares "
         "lowercase names and reads anything else as ring (write 'ring')"),
        ("allreduce,0,100,ring,LL,-1,1,2", "reads anything else as simple (write 'll')"),
        ("AllReduce,0,100,ring,ll,-1,1,2", "collective_type 'AllReduce'"),
        ("allreduce,0,100,ring,ll,-1,1,2,4", "numPipeOps 4: fastverify's table has no"),
        ("allreduce,0,100,ring,ll,-1,1", "7 fields (NCCL's example plugin reads 8 to 10"),
        ("allreduce,0,100,ring,ll128,-1,1,2", "LL128 but the GPUs have no NVLink"),
    ],
)  # fmt: skip
def test_import_refuses_what_nccl_would_misread(line: str, message: str) -> None:
    text = f"# NCCL tuner file\n{line}\n"
    check = nccl_csv.parse(text, "tuner.conf", has_nvlink=False)
    assert not check.ok and check.rows == []
    assert any(str(p).startswith("tuner.conf:2: ") and message in str(p) for p in check.problems), [
        str(p) for p in check.problems
    ]


def test_the_example_plugin_before_nccl_2_30_crashes_on_its_first_matching_row(
    tmp_path: Path,
) -> None:
    """Why the export says "build the plugin of 2.30 or newer": the plugin.c of 2.28.9
    (ext-tuner/example) and of 2.29.7 (plugins/tuner/example) indexes NCCL's flat cost
    table as a float** (2.30 fixed it). 2.28.9 from a NCCL git repository, else 2.29.7 from
    Debian's source package."""
    proc = subprocess.run([str(SCRIPT), "--ref", "v2.28.9-1"], capture_output=True, text=True,
                          check=False)  # fmt: skip
    if proc.returncode == 3:
        plugin = build_example("--from-debian")
        assert plugin.nccl == "2.29.7-1"
    else:
        assert proc.returncode == 0, proc.stderr
        plugin = ExamplePlugin(Path(proc.stdout.strip().splitlines()[-1]), "2.28.9-1", 5)
    csv = tmp_path / "t.csv"
    csv.write_text("allreduce,0,100000,tree,simple,-1,1,2\n")
    got = run_driver(plugin, csv, [[ALLREDUCE, 500000], [ALLREDUCE, 5000]], tmp_path, flat=True)
    assert got.returncode == -11, (got.returncode, got.stderr)  # SIGSEGV at the matching row
    assert json.loads(got.stdout.splitlines()[0])["bytes"] == 500000  # the row-less call ran
    assert len(got.stdout.splitlines()) == 1


def test_profile_import_of_nccl_csv_writes_a_tuner_profile_and_refuses_bad_lines(
    tmp_path: Path, plugin_so: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NCCL's own sample file (plugins/tuner/example/nccl_tuner.conf's AllReduce rules, in
    its column order) becomes NAME.tuner.csv + NAME.env; a misspelled line changes nothing."""
    from click.testing import CliRunner

    from fastverify.ctl import cli
    from fastverify.profiles.store import ProfileStore

    monkeypatch.setenv("FASTVERIFY_TUNER_SO", str(plugin_so))
    users = tmp_path / "profiles"
    conf = tmp_path / "nccl_tuner.conf"
    conf.write_text(
        "# Format: collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,"
        "nRanks,numPipeOps,regBuff\n"
        "allreduce,0,65536,tree,simple,2,1,-1,-1,-1\n"
        "allreduce,65537,1048576,ring,simple,4,4,32,-1,-1\n"
        "reduce,0,4294967295,tree,simple,-1,-1,-1\n"
    )
    args = ["profile", "--dir", str(users), "import", str(conf), "--name", "from-nccl", "--json"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["rows"] == 3
    loaded = ProfileStore([users], ROOT / "profiles").load("from-nccl")
    assert loaded.env["FASTVERIFY_TUNER_TABLE"] == "from-nccl.tuner.csv"
    table = check_table(users / "from-nccl.tuner.csv")
    assert [(r.collective, r.choice, r.nranks, r.nnodes) for r in table.rows] == [
        ("AllReduce", "TREE/SIMPLE/2ch", None, 1),
        ("AllReduce", "RING/SIMPLE/4ch", 32, 4),  # nNodes 4, nRanks 32 in NCCL's order
        ("Reduce", "TREE/SIMPLE", None, None),
    ]
    bad = tmp_path / "bad.conf"
    bad.write_text("allreduce,0,65536,Tree,simple,2,1,-1\n")
    r = CliRunner().invoke(cli, [*args[:3], "import", str(bad), "--name", "bad-one"])
    assert r.exit_code == 1
    assert "bad.conf:1: algorithm 'Tree'" in r.output and "nothing was written" in r.output
    assert not list(users.glob("bad-one*"))
    r = CliRunner().invoke(cli, args)  # exists: refused without --force, untouched
    assert r.exit_code == 2 and "exists" in r.output
