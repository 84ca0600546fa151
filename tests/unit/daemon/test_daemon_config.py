"""Config: the documented example is the defaults, and the daemon-specific checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastverify import config
from fastverify.daemon.main import overrides, parse_args

REPO = Path(__file__).resolve().parents[3]


def test_example_config_documents_the_defaults() -> None:
    cfg = config.load(REPO / "docs" / "reference" / "config.example.toml")
    defaults = config.Config()
    assert cfg.server == defaults.server
    assert cfg.daemon == defaults.daemon


def test_engine_env_refuses_nccl_and_non_strings(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[server.env]\nNCCL_ALGO = "Tree"\n')
    with pytest.raises(config.ConfigError, match="NCCL settings belong in profiles"):
        config.load(p)
    p.write_text("[server.env]\nX = 1\n")
    with pytest.raises(config.ConfigError, match="table of string values"):
        config.load(p)


def test_flags_override_the_file(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[daemon]\nengine = "sglang"\nsim_load_seconds = 9.0\n')
    ns = parse_args(["--config", str(p), "--engine", "sim", "--sim-load-seconds", "0.5"])
    cfg = config.load(ns.config, overrides(ns))
    assert (cfg.daemon.engine, cfg.sim.load_seconds) == ("sim", 0.5)
