"""Fixtures for the profile tests: temp user dirs and a store over the real shipped profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastverify.profiles.store import ProfileStore
from tests.support.profiles import PCIE, SHIPPED


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    d = tmp_path / "user-profiles"
    d.mkdir()
    return d


@pytest.fixture
def store(user_dir: Path) -> ProfileStore:
    return ProfileStore([user_dir], SHIPPED, topology=PCIE)
