"""`python -m fastverify.sim`: the sim engine, started with SGLang's argv."""

from __future__ import annotations

import sys

from fastverify.sim.engine import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
