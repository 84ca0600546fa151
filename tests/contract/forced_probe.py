"""Runs inside the real-SGLang venv (torch): SGLang's own sampler of a forced accept length,
`_sample_simulated_acc_len` (`sample_simulated_acc_len` since 0.5.2x) of
`srt/speculative/spec_utils.py`, its source read from a release's wheel (stdin: `{source,
name, cases: [[length, method, max_len, n]]}`) and executed as it is: the module itself does
not import over another release's dependencies. Prints one JSON object: per case, the share
of each accept length over n draws (seeded). Imports nothing from fastverify."""

from __future__ import annotations

import json
import sys
import warnings

warnings.filterwarnings("ignore")


def main() -> int:
    import torch

    request = json.load(sys.stdin)
    space: dict = {"torch": torch}
    exec(compile(request["source"], "spec_utils.py", "exec"), space)
    sample = space[request["name"]]
    out = []
    for length, method, max_len, n in request["cases"]:
        torch.manual_seed(1234)
        counts: dict[str, int] = {}
        for _ in range(n):
            k = str(sample(length, method, max_len))
            counts[k] = counts.get(k, 0) + 1
        out.append({k: v / n for k, v in sorted(counts.items())})
    try:
        sample(2.0, "exact", 4)
        bad = None
    except ValueError as exc:
        bad = str(exc)
    print(json.dumps({"shares": out, "bad_method": bad}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
