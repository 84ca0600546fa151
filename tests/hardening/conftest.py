"""tests/hardening: faults, concurrency, bad input and security against real processes.

Default suite: a few minutes on 2 cores. FASTVERIFY_FULL=1 runs the long variants (100+
kill -9 iterations, more hypothesis examples); see tests/support/hardening.py for the knobs.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.tlscerts import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The TCP door's certificates and token files (tests/support/tlscerts.py)."""
    return make_pki(tmp_path_factory.mktemp("pki"))
