"""The configuration's derived artefacts and its table layout: docs/reference/config.example.toml
and docs/reference/config.md regenerate byte-identically from the declaration, fastverifyd's flags
are the keys that declare one, and today's [daemon] keys keep loading as aliases of their new
tables."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fastverify import config
from fastverify.config import reference
from fastverify.daemon import main as daemon_main

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("rel", list(reference.documents()), ids=str)
def test_generated_documents_are_current(rel: Path) -> None:
    committed = (REPO / rel).read_text(encoding="utf-8")
    assert committed == reference.documents()[rel], (
        f"{rel} is stale: regenerate it with `{reference.COMMAND}`"
    )


def test_the_check_command_fails_on_a_stale_file_and_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    assert reference.main(["--root", str(tmp_path)]) == 0  # writes both
    assert reference.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / reference.REFERENCE).write_text("# edited by hand\n")
    res = subprocess.run(
        [sys.executable, "-m", "fastverify.config.reference", "--root", str(tmp_path), "--check"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert res.returncode == 1 and reference.COMMAND in res.stderr, res.stderr
    assert str(reference.REFERENCE) in res.stderr


def test_the_example_has_every_key_in_its_table_with_its_default() -> None:
    data = tomllib.loads(reference.example_toml())
    assert list(data) == [
        "server", "daemon", "api", "exporter", "restart", "watch", "frontdoor", "sim"
    ]  # fmt: skip
    for info in config.KEYS:
        table = data
        for part in info.table.split("."):
            table = table[part]
        if info.key == "server.env":
            assert table["env"] == {}
        elif info.default is None:  # unset means "the engine's default": shown commented
            assert info.name not in table and f"# {info.name} = " in reference.example_toml()
        else:
            assert table[info.name] == (
                list(info.default) if isinstance(info.default, tuple) else info.default
            ), info.key
    md = reference.reference_md()
    for info in config.KEYS:
        if info.key == "server.env":
            assert "## [server.env]" in md
            continue
        assert f"`{info.name}`" in md and (not info.alias or f"`{info.alias}`" in md)


def test_tables_hold_the_keys_that_read_together() -> None:
    tables = {info.key: info.table for info in config.KEYS}
    assert tables["api.tcp_listen"] == tables["api.token_file"] == "api"
    assert tables["exporter.metrics_listen"] == tables["exporter.health_listen"] == "exporter"
    assert tables["restart.backoff_s"] == tables["restart.stop_grace_s"] == "restart"
    assert (tables["watch.interval_s"], tables["sim.load_seconds"]) == ("watch", "sim")
    aliases = {info.alias: info.key for info in config.KEYS if info.alias}
    assert aliases["daemon.metrics_listen"] == "exporter.metrics_listen"
    assert aliases["daemon.restart_backoff_s"] == "restart.backoff_s"
    assert aliases["daemon.watch_interval_s"] == "watch.interval_s"
    assert aliases["daemon.sim_sglang_version"] == "sim.sglang_version"
    assert all(alias.startswith("daemon.") for alias in aliases)  # server keys did not move


def test_every_key_and_old_name_is_one_name() -> None:
    names = [k.key for k in config.KEYS] + [k.alias for k in config.KEYS if k.alias]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    flags = [k.flag for k in config.KEYS if k.flag]
    assert len(flags) == len(set(flags))


OLD = """[daemon]
metrics_listen = "127.0.0.1:9999"
restart_backoff_s = [2, 30]
watch_interval_s = 7
sim_load_seconds = 0.5
tcp_listen = "127.0.0.1:7070"
token_file = "/t"
log_level = "debug"
"""
NEW = """[daemon]
log_level = "debug"

[api]
tcp_listen = "127.0.0.1:7070"
token_file = "/t"

[exporter]
metrics_listen = "127.0.0.1:9999"

[restart]
backoff_s = [2, 30]

[watch]
interval_s = 7

[sim]
load_seconds = 0.5
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_old_and_new_names_load_the_same_config(tmp_path: Path) -> None:
    old = config.load(_write(tmp_path, "old.toml", OLD))
    new = config.load(_write(tmp_path, "new.toml", NEW))
    assert dataclasses.replace(old, source="") == dataclasses.replace(new, source="")
    assert new.exporter.metrics_listen == "127.0.0.1:9999" and new.restart.backoff_s == (
        2.0,
        30.0,
    )
    assert (new.watch.interval_s, new.sim.load_seconds) == (7.0, 0.5)
    assert new.notes == ()
    assert len(old.notes) == 6
    assert (
        f"{tmp_path / 'old.toml'}:2: daemon.metrics_listen is now [exporter] metrics_listen"
        in (old.notes[0])
    )


def test_both_names_of_one_key_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "c.toml", '[daemon]\nmetrics_listen = ""\n\n[exporter]\nmetrics_listen = ""\n'
    )
    with pytest.raises(config.ConfigError) as exc:
        config.load(path)
    msg = str(exc.value)
    assert f"{path}:2: daemon.metrics_listen: set twice" in msg, msg
    assert "exporter.metrics_listen (line 5)" in msg and "expected one" in msg, msg


def test_an_old_name_and_a_flag_is_no_conflict_the_flag_wins(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.toml", '[daemon]\nmetrics_listen = "127.0.0.1:1"\n')
    ns = daemon_main.parse_args(["--config", str(path), "--metrics-listen", "127.0.0.1:2"])
    cfg = config.load(ns.config, daemon_main.overrides(ns), daemon_main.FLAGS)
    assert cfg.exporter.metrics_listen == "127.0.0.1:2"
    assert "exporter.metrics_listen" in cfg.given


def test_overrides_by_table_or_by_attribute_give_the_same_config() -> None:
    by_table = config.load(None, {"restart": {"burst": 2}, "exporter": {"metrics_listen": ""}})
    by_attr = config.load(None, {"daemon": {"restart_burst": 2, "metrics_listen": ""}})
    assert by_table == by_attr
    assert (by_table.restart.burst, by_table.exporter.metrics_listen) == (2, "")


def test_a_bad_value_under_a_new_table_names_file_line_and_key(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.toml", "[restart]\nburst = -1\n\n[watch]\nintervall_s = 3\n")
    with pytest.raises(config.ConfigError) as exc:
        config.load(path)
    msg = str(exc.value)
    assert f"{path}:2: restart.burst: -1 is out of range (expected an integer >= 0)" in msg
    assert f"{path}:5: watch.intervall_s: unknown key 'intervall_s' (did you mean interval_s?" in (
        msg
    )


def test_a_key_in_the_wrong_table_points_at_its_table(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.toml", "[daemon]\ninterval_s = 3\n")
    with pytest.raises(config.ConfigError, match=r"did you mean watch.interval_s\?"):
        config.load(path)


def test_fastverifyd_flags_are_the_keys_that_declare_one() -> None:
    parser = daemon_main.build_parser()
    options = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for info in config.KEYS:
        if info.flag:
            action = options.pop(info.flag)
            assert f"[{info.table}] {info.name}" in action.help, action.help
    assert set(options) == {"-h", "--config", "--version"}
    assert {i.key: i.flag for i in config.KEYS if i.flag} == daemon_main.FLAGS
    ns = daemon_main.parse_args(["--engine", "sim", "--server-port", "31000", "--declarative"])
    given = daemon_main.overrides(ns)
    assert given["daemon"]["engine"] == "sim" and given["server"]["port"] == 31000
    assert given["daemon"]["declarative"] is True and given["daemon"]["log_level"] is None
    with pytest.raises(SystemExit):
        daemon_main.parse_args(["--engine", "gpu"])  # choices come from the key's check


def test_dumps_writes_a_file_that_loads_back_to_the_same_config(tmp_path: Path) -> None:
    from fastverify.config.dump import dumps

    cfg = config.load(_write(tmp_path, "old.toml", OLD + '[server.env]\nSGLANG_X = "1"\n'))
    text = dumps(cfg, ["a header"])
    assert text.startswith("# a header\n\n[server]\n")
    again = config.load(_write(tmp_path, "again.toml", text))
    assert dataclasses.replace(again, source="") == dataclasses.replace(cfg, source="")
    assert again.notes == ()
