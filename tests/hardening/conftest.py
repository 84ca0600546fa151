"""tests/hardening: faults, concurrency, bad input and security against real processes.

Default suite: a few minutes on 2 cores. FASTVERIFY_FULL=1 runs the long variants (100+
kill -9 iterations, more hypothesis examples); see tests/support/hardening.py for the knobs.
"""
