"""Runs inside the real-SGLang venv: SGLang 0.5.23's own logger configuration per TP rank
(`srt/utils/common.py` `configure_logger(server_args, prefix=" TP{rank}")`, as each scheduler
process calls it) at each `--log-level` asked on argv, then PCIe-IPC's own log calls
(`device_communicators/pcie_ipc_ar.py`: the INFO `enabled` line through its module logger,
the WARNING of `_warn_deterministic_wins`). Prints one JSON object: level -> the stderr text.
Also the same with a `SGLANG_LOGGING_CONFIG_PATH` dictConfig of the user's (no TP prefix).
Imports nothing from fastverify."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import warnings

warnings.filterwarnings("ignore")
ENABLED = "FlashInfer PCIe-IPC all-reduce enabled (world=%d, workspace sized on first reduction)"


def run(level: str, rank: int) -> str:
    from sglang.srt.distributed.device_communicators import pcie_ipc_ar
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils.common import configure_logger

    sa = prepare_server_args(["--model-path", "m", "--log-level", level])
    buf = io.StringIO()
    configure_logger(sa, prefix=f" TP{rank}")
    root = logging.getLogger()
    for h in root.handlers:  # basicConfig's stream handler: capture what it writes
        if isinstance(h, logging.StreamHandler):
            h.setStream(buf)
    pcie_ipc_ar.logger.info(ENABLED, 4)  # the call PcieIpcCommunicator.__init__ makes
    pcie_ipc_ar._warn_deterministic_wins.cache_clear()
    pcie_ipc_ar._warn_deterministic_wins()
    return buf.getvalue()


def main() -> int:
    rank = int(sys.argv[1])
    out = {level: run(level, rank) for level in sys.argv[2:]}
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fv-logcfg-{os.getpid()}.json")
    with open(path, "w") as f:  # a user's config: level INFO, no TP prefix in the format
        json.dump({"version": 1, "formatters": {"plain": {"format": "%(levelname)s %(message)s"}},
                   "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "plain",
                                      "stream": "ext://sys.stderr"}},
                   "root": {"level": "INFO", "handlers": ["h"]}}, f)  # fmt: skip
    os.environ["SGLANG_LOGGING_CONFIG_PATH"] = path
    try:
        out["logging_config"] = run("info", rank)
    finally:
        os.unlink(path)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
