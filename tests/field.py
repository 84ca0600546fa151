"""Moved to tests/support/field.py; kept for the modules still importing it here."""

from tests.support.field import (
    ALLREDUCES_PER_VERIFY,
    BASELINE_TOK_S,
    BREAKEVEN_ACCEPT,
    DECODE_STEP_MS,
    RING_LL,
    VERIFY_ALLREDUCE_MS,
    VERIFY_MS,
)

__all__ = [
    "ALLREDUCES_PER_VERIFY",
    "BASELINE_TOK_S",
    "BREAKEVEN_ACCEPT",
    "DECODE_STEP_MS",
    "RING_LL",
    "VERIFY_ALLREDUCE_MS",
    "VERIFY_MS",
]
