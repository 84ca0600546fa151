"""NCCL's own tuner table: the CSV that NCCL's example tuner plugin
(`plugins/tuner/example/plugin.c`; `ext-tuner/example` before 2.29) reads from
`NCCL_TUNER_CONFIG_FILE`, written from fastverify's table and read back into it.

NCCL's columns, from its plugin.c (`CONFIG_FIELD_*`):

    collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps,regBuff]

fastverify's own table orders nranks before nnodes. How NCCL's parser reads a line, and
what follows for the export:
- names are compared with `strcmp` against lowercase spellings (`allreduce`, `ring`,
  `nvls_tree`, `ll128`, ...); anything else silently becomes AllReduce, ring or simple.
  The export writes NCCL's spellings; the import refuses any other spelling (file:line),
  since NCCL would read `LL` as simple.
- there is no header and no `default` algorithm: a line `collective_type,...` would be read
  as an AllReduce row, so the column names go in a `#` comment; a fastverify row that only
  sets a channel count (algorithm `default`) cannot be written and is left out, said in
  the notes.
- `getCollInfo` sets `*nChannels = 1` before it looks at any row and keeps it unless the
  matching row names a count: under NCCL's example plugin every collective it is asked
  about runs on at most one channel, including sizes without a row and rows with `-1`.
  fastverify's plugin leaves NCCL's channel count there. The export says this in its notes
  and in the file.
- rows are tried in file order, the first match wins (as in fastverify's plugin);
  numPipeOps and regBuff (`-1` = any) have no counterpart in fastverify's table: the export
  writes eight fields, the import accepts only `-1` there.
- the example plugin before NCCL 2.30 (2.28's `ext-tuner/example`, 2.29's
  `plugins/tuner/example`) indexes the cost table as `collCostTable[algorithm][protocol]` on
  a `float**`, which reads a pointer from the flat table; 2.30 casts it to
  `float (*)[NCCL_NUM_PROTOCOLS]`. Build the plugin of 2.30 or newer. Its CSV parser is
  the same in 2.29 and 2.30.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from fastverify.problems import Problem
from fastverify.tuner import table as tbl

NCCL_COLUMNS = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"
OPTIONAL_COLUMNS = ("numPipeOps", "regBuff")
# NCCL's spellings (plugin.c parseCollType / parseAlgorithm / parseProtocol)
COLLECTIVE = {c: c.lower() for c in tbl.COLLECTIVES}
ALGORITHM = {
    "Tree": "tree",
    "Ring": "ring",
    "CollnetDirect": "collnet_direct",
    "CollnetChain": "collnet_chain",
    "NVLS": "nvls",
    "NVLSTree": "nvls_tree",
    "PAT": "pat",
}
PROTOCOL = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}
ONE_CHANNEL_NOTE = (
    "NCCL's example plugin sets nChannels=1 for every collective it is asked about unless "
    "the matching row names a count (plugin.c: `*nChannels = 1` before the row search): "
    "sizes without a row, and rows with channels -1, run on one channel under it "
    "(fastverify's plugin keeps NCCL's own count there)"
)


def export(rows: Sequence[tbl.TableRow], comments: Iterable[str] = ()) -> tuple[str, list[str]]:
    """NCCL's CSV text of `rows` and notes on what could not be carried over."""
    notes: list[str] = []
    lines = [f"# {c}".rstrip() for c in comments]
    lines.append(f"# {NCCL_COLUMNS}")
    lines.append(f"# {ONE_CHANNEL_NOTE}")
    for r in rows:
        if r.algorithm is None or r.protocol is None:
            notes.append(
                f"line {r.line}: {r.collective} {r.min_bytes}-{r.max_bytes} sets only a channel "
                f"count ({r.channels}); NCCL's example plugin has no 'default' algorithm, so "
                "the row is left out"
            )
            continue

        def opt(v: int | None) -> str:
            return "-1" if v is None else str(v)

        lines.append(
            ",".join(
                [
                    COLLECTIVE[r.collective],
                    str(r.min_bytes),
                    str(r.max_bytes),
                    ALGORITHM[r.algorithm],
                    PROTOCOL[r.protocol],
                    opt(r.channels),
                    opt(r.nnodes),
                    opt(r.nranks),
                ]
            )
        )
    if rows:
        notes.append(ONE_CHANNEL_NOTE)
    return "\n".join(lines) + "\n", notes


def _inverse(mapping: dict[str, str]) -> dict[str, str]:
    return {v: k for k, v in mapping.items()}


def to_fastverify_text(text: str, path: str) -> tuple[str, list[Problem]]:
    """NCCL's CSV -> fastverify's table text with the same line numbers (so the table's own
    checks report `path:line` of the NCCL file), and the problems only NCCL's format has."""
    colls, algos, protos = _inverse(COLLECTIVE), _inverse(ALGORITHM), _inverse(PROTOCOL)
    out: list[str] = []
    problems: list[Problem] = []

    def bad(line: int, msg: str) -> None:
        problems.append(Problem(path, line, msg))
        out.append("# (refused)")

    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            out.append("")
            continue
        f = [x.strip() for x in line.split(",")]
        if not 8 <= len(f) <= 10:
            columns = f"{NCCL_COLUMNS}[,{','.join(OPTIONAL_COLUMNS)}]"
            bad(number, f"{len(f)} fields (NCCL's example plugin reads 8 to 10: {columns})")
            continue
        spelled = (
            (f[0], colls, "collective_type", "allreduce"),
            (f[3], algos, "algorithm", "ring"),
            (f[4], protos, "protocol", "simple"),
        )
        wrong = next((w for w in spelled if w[0] not in w[1]), None)
        if wrong is not None:
            value, names, column, fallback = wrong
            hint = next((n for n in names if n.lower() == value.lower()), None)
            bad(
                number,
                f"{column} {value!r}: NCCL's example plugin compares lowercase names and reads "
                f"anything else as {fallback}"
                + (f" (write {hint!r})" if hint else f" (one of {', '.join(names)})"),
            )
            continue
        extra = [(OPTIONAL_COLUMNS[i], v) for i, v in enumerate(f[8:]) if v != "-1"]
        if extra:
            name, value = extra[0]
            bad(number, f"{name} {value}: fastverify's table has no {name} column (only -1, "
                        "any, can be imported)")  # fmt: skip
            continue
        # fastverify's order: ..., channels, nranks, nnodes
        fields = [colls[f[0]], f[1], f[2], algos[f[3]], protos[f[4]], f[5], f[7], f[6]]
        out.append(",".join(fields))
    return "\n".join(out), problems


def parse(
    text: str,
    path: str = "<nccl csv>",
    has_nvlink: bool | Callable[[], bool | None] | None = None,
    force: bool = False,
) -> tbl.TableCheck:
    """Check NCCL's CSV as fastverify's table (every problem as `path:line: message`)."""
    converted, problems = to_fastverify_text(text, path)
    check = tbl.parse_text(converted, path, has_nvlink, force)
    problems = sorted(problems + check.problems, key=lambda p: p.line)
    ok = not any(p.severity == "error" for p in problems)
    return tbl.TableCheck(path, check.rows if ok else [], problems)
