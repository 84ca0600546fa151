"""Configuration range checks: one validation (`config.validate_fields`) for the
config loader and the daemon API; every problem names the key, the file and line, what is
wrong and what would be right; and a bad file stops `fastverifyd` at start."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fastverify import config
from tests.support import host_dirs

REPO = Path(__file__).resolve().parents[3]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "fastverifyd.toml"
    p.write_text(text)
    return p


BAD = [
    ("daemon", "readiness_timeout_s", "-1"),
    ("daemon", "readiness_timeout_s", "nan"),
    ("daemon", "readiness_timeout_s", "inf"),
    ("daemon", "log_level", '"loud"'),
    ("daemon", "restart_backoff_s", "[60, 1]"),
    ("daemon", "restart_backoff_s", "[1]"),
    ("daemon", "restart_backoff_s", '[1, "x"]'),
    ("daemon", "restart_burst", "-1"),
    ("daemon", "stop_grace_s", "0"),
    ("daemon", "restart_window_s", "0"),
    ("daemon", "gpu_release_timeout_s", "-5"),
    ("daemon", "sim_load_seconds", "-0.5"),
    ("daemon", "trace_period_s", "-1"),
    ("daemon", "trace_steps", "0"),
    ("daemon", "metrics_listen", '"localhost"'),
    ("daemon", "metrics_listen", '"127.0.0.1:99999"'),
    ("daemon", "tcp_listen", '"127.0.0.1:x"'),
    ("daemon", "default_profile", '"../etc/passwd"'),
    ("daemon", "profile_dirs", "[1, 2]"),
    ("server", "port", "0"),
    ("server", "port", "70000"),
    ("server", "host", '""'),
    ("server", "sglang_flags", '"newest"'),
    ("server", "extra_args", "[1]"),
    ("server", "env_passthrough", '["HF TOKEN"]'),
    ("server", "env_passthrough", '["NCCL_ALGO"]'),
]


@pytest.mark.parametrize(("section", "key", "value"), BAD)
def test_bad_value_refused_with_key_file_and_line(
    tmp_path: Path, section: str, key: str, value: str
) -> None:
    text = f"# a comment\n[{section}]\n# another\n{key} = {value}\n"
    if section == "daemon" and key == "tcp_listen":
        text += 'token_file = "/nonexistent"\n'
    p = _write(tmp_path, text)
    with pytest.raises(config.ConfigError) as exc:
        config.load(p)
    msg = str(exc.value)
    assert f"{p}:4:" in msg, msg  # the line of the key
    assert f"{section}.{key}" in msg, msg
    assert "expected" in msg, msg  # what would be right


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        '[daemon]\nreadiness_timeout_s = -1\nlog_level = "loud"\nrestart_burst = -1\n',
    )
    with pytest.raises(config.ConfigError) as exc:
        config.load(p)
    msg = str(exc.value)
    for n, key in ((2, "readiness_timeout_s"), (3, "log_level"), (4, "restart_burst")):
        assert f"{p}:{n}: daemon.{key}" in msg, msg


def test_eagle3_table_lines(tmp_path: Path) -> None:
    p = _write(tmp_path, "[server]\ntp_size = 2\n\n[server.eagle3]\nnum_steps = 0\n")
    with pytest.raises(config.ConfigError) as exc:
        config.load(p)
    assert f"{p}:5: server.eagle3.num_steps" in str(exc.value)


def test_good_values_accepted(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "[daemon]\nreadiness_timeout_s = 0.5\nrestart_backoff_s = [0.1, 0.1]\n"
        'restart_burst = 0\nlog_level = "warning"\nmetrics_listen = "[::1]:0"\n'
        "trace_period_s = 0\n[server]\nport = 1\n",
    )
    cfg = config.load(p)
    assert cfg.restart.backoff_s == (0.1, 0.1) and cfg.restart.burst == 0
    assert cfg.exporter.metrics_listen == "[::1]:0" and cfg.server.port == 1


def test_validate_fields_is_the_shared_entry_point() -> None:
    """What the daemon API calls for request fields that mirror config keys (e.g. a switch's
    timeout_s is a readiness_timeout_s): raw JSON values in, Problems out."""
    ok = config.validate_fields({"daemon.readiness_timeout_s": 12})
    assert ok == []
    for bad in (0, -1, math.nan, math.inf, True, "10"):
        [p] = config.validate_fields({"daemon.readiness_timeout_s": bad})
        assert p.message.startswith("daemon.readiness_timeout_s: ") and "expected" in p.message
    [p] = config.validate_fields({"readiness_timeout_s": -1}, section="daemon")
    assert "daemon.readiness_timeout_s" in p.message
    [p] = config.validate_fields({"daemon.nope": 1})
    assert "unknown key" in p.message


def test_command_line_overrides_are_checked_and_named(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError) as exc:
        config.load(None, {"daemon": {"sim_load_seconds": -1.0}})
    assert "sim.load_seconds" in str(exc.value)  # the key daemon.sim_load_seconds moved to
    assert "command line" in str(exc.value)


def test_a_flags_value_is_blamed_on_the_flag_not_on_a_missing_file(tmp_path: Path) -> None:
    # no config file at all (the default path does not exist): a problem with what
    # `--nnodes 2` set names the flag, never that file
    missing = tmp_path / "etc" / "fastverifyd.toml"
    env = host_dirs.clean_env(("FASTVERIFY_",))
    env.update(FASTVERIFY_CONFIG=str(missing), PYTHONPATH=str(REPO))
    res = subprocess.run(
        [sys.executable, "-m", "fastverify.daemon.main", "--nnodes", "2", "--server-port",
         "99999", "--state-dir", str(tmp_path / "s"), "--socket", str(tmp_path / "c.sock")],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "fastverifyd --server-port: 99999 is out of range" in res.stderr, res.stderr
    assert "(it sets server.port)" in res.stderr
    assert "fastverifyd --nnodes: server.nnodes = 2 but server.dist_init_addr is empty" in (
        res.stderr
    )
    assert str(missing) not in res.stderr


def test_fastverifyd_refuses_to_start_naming_the_key(tmp_path: Path) -> None:
    p = _write(tmp_path, "[daemon]\nstop_grace_s = 0\n")
    res = subprocess.run(
        [sys.executable, "-m", "fastverify.daemon.main", "--config", str(p),
         "--state-dir", str(tmp_path / "state"), "--socket", str(tmp_path / "s.sock")],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert f"{p}:2: daemon.stop_grace_s" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "s.sock").exists()


def test_example_config_is_valid_and_the_defaults() -> None:
    cfg = config.load(REPO / "docs" / "reference" / "config.example.toml")
    assert dataclasses.replace(cfg, source="") == config.Config()


def test_a_key_is_read_where_its_name_says() -> None:
    """`restart.backoff_s` is `cfg.restart.backoff_s`: each table a dataclass, each key a
    field of it under its own name (no key declared in another table or under another name)."""
    import functools

    cfg = config.Config()
    for info in config.KEYS:
        assert functools.reduce(getattr, info.key.split("."), cfg) == info.default, info.key
    tables = {t for t in config.TABLES if t not in {k.key for k in config.KEYS}}
    for table in tables:  # [server.eagle3] is cfg.server.eagle3, with its table's help
        holder = functools.reduce(getattr, table.split("."), cfg)
        assert dataclasses.is_dataclass(holder) and type(holder).__doc__, table


def test_every_config_field_has_a_check() -> None:
    def fields(value: Any, prefix: str) -> dict[str, Any]:
        """{"server.eagle3.num_steps": 3, ...}: every field of `value`'s tables, by path."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if dataclasses.is_dataclass(item):
                out |= fields(item, f"{prefix}{f.name}.")
            else:
                out[f"{prefix}{f.name}"] = item
        return out

    cfg = config.Config()
    defaults = {k: v for k, v in fields(cfg, "").items() if k.partition(".")[0] in config.TABLES}
    declared = set(defaults)
    # every field of a table is a key (where Config holds it) with a check, or set per
    # operation
    assert declared - config.PER_OPERATION == {k.key for k in config.KEYS}
    assert set(config.FIELDS) == {k.key for k in config.KEYS}
    assert all(callable(check) for check in config.FIELDS.values())
    assert declared >= config.PER_OPERATION
    # and every default passes its own check
    defaults.pop("exporter.trace_period_s")  # None = engine default, only settable as a number
    for key in config.PER_OPERATION:
        defaults.pop(key)
    assert config.validate_fields(defaults) == []


def test_a_per_operation_field_in_a_file_is_an_unknown_key(tmp_path: Path) -> None:
    """`server.steps_override` (a timing trial's EAGLE-3 steps) comes from the API only."""
    path = _write(tmp_path, "[server]\nsteps_override = 2\n")
    with pytest.raises(config.ConfigError, match=r":2: server.steps_override: unknown key"):
        config.load(path)


@pytest.mark.parametrize(
    ("ports", "blamed"),
    [
        ("standby_port = 30000", "server.port"),
        ("engine_port = 31000\nstandby_port = 31000", "the engine port"),
        ("standby_port = 30001", "the engine port"),  # engine_port 0 = server.port + 1
        ("standby_kv_share = 0", "(0, 1]"),
        ("standby_kv_share = 1.5", "(0, 1]"),
    ],
)
def test_a_standby_port_or_kv_share_that_cannot_work_is_refused(
    tmp_path: Path, ports: str, blamed: str
) -> None:
    p = _write(tmp_path, f'[server]\nport = 30000\n\n[frontdoor]\nmode = "standby"\n{ports}\n')
    with pytest.raises(config.ConfigError) as exc:
        config.load(p)
    msg = str(exc.value)
    assert blamed in msg and "expected" in msg, msg
    assert "frontdoor.standby_" in msg or "standby_" in msg, msg


def test_standby_ports_of_their_own_are_accepted(tmp_path: Path) -> None:
    p = _write(tmp_path, '[frontdoor]\nmode = "standby"\nstandby_port = 31002\n'
               "standby_kv_share = 0.5\n")  # fmt: skip
    cfg = config.load(p)
    assert (cfg.frontdoor.standby_port, cfg.frontdoor.standby_kv_share) == (
        31002, 0.5)  # fmt: skip
