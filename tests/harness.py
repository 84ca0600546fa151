"""Moved to tests/support/harness.py; kept for the modules still importing it here."""

from tests.support.harness import REPO, DaemonHarness, ctrl_c_reaches_it, run_ctl

__all__ = ["REPO", "DaemonHarness", "ctrl_c_reaches_it", "run_ctl"]
