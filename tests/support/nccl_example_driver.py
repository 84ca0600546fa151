"""Drive a tuner plugin's init/getCollInfo/finalize the way NCCL does, in a process of
its own, and print what it chose for each query as JSON lines.

    python nccl_example_driver.py PLUGIN.so NRANKS NNODES QUERIES.json [--row-pointers]

The ABI is the newest ncclTunerPlugin_vN (v6..v2) the plugin exports, as NCCL picks it;
each line says which ("abi"). --row-pointers hands the plugin the cost table as one float*
per algorithm instead of NCCL's flat float[algo][proto] cast to float**: what the example
plugin before NCCL 2.30 indexes (under NCCL itself it reads the costs as pointers and
crashes), so its CSV reading and row matching can still be checked.

QUERIES: [[collective, nbytes], ...]. Each call gets a fresh NCCL-like cost table
(`COSTS`); the output per query is {"bytes", "coll", "pick": [algo, proto], "channels"}: the
entry NCCL's topoGetAlgoInfo would take after the call (the smallest entry >= 0) and the
nChannels the plugin left (0: NCCL's own). The logger is NULL: NCCL's example plugin logs
with printf-style varargs that a Python callback cannot read, and it checks for NULL.
The table file comes from the environment (NCCL_TUNER_CONFIG_FILE for NCCL's plugin,
FASTVERIFY_TUNER_TABLE for fastverify's), as under NCCL.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.tuner_abi import (
    LL,
    LL128,
    LOGGER,
    RING,
    SIMPLE,
    TREE,
    call,
    close,
    cost_table,
    exported,
    init,
    nccl_pick,
    row_pointers,
)

# NCCL-like costs: Ring/LL cheapest unless a row says otherwise; every entry available
COSTS = {(TREE, LL): 9.0, (TREE, LL128): 11.0, (TREE, SIMPLE): 12.0, (RING, LL): 5.0,
         (RING, LL128): 8.0, (RING, SIMPLE): 7.0}  # fmt: skip


def main() -> None:
    so, nranks, nnodes, queries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rows = "--row-pointers" in sys.argv[5:]
    version, s = exported(ctypes.CDLL(so))
    try:
        ctx = init(s, version, nranks, nnodes, LOGGER())
    except RuntimeError as e:
        sys.exit(str(e))
    for coll, nbytes in json.loads(Path(queries).read_text()):
        arr = cost_table(COSTS)
        table = row_pointers(arr) if rows else None
        channels = call(s, ctx, nbytes, arr, coll=coll, version=version, table=table)
        print(json.dumps({"coll": coll, "bytes": nbytes, "pick": nccl_pick(arr),
                          "channels": channels, "abi": version}), flush=True)  # fmt: skip
    close(s, ctx, version)


if __name__ == "__main__":
    main()
