"""Multi-node server keys (server.nnodes/node_rank/dist_init_addr), the fastverifyd flags
that set them in a LeaderWorkerSet pod, and the SGLang argv they give (the real parser's
verdict: tests/contract/test_kubernetes_contract.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastverify import config as configmod
from fastverify.daemon import main as daemon_main
from fastverify.sglang.launch import LaunchArgs, LaunchArgsError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fastverifyd.toml"
    path.write_text(text)
    return path


def test_multi_node_needs_the_leaders_address(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\ntp_size = 16\nnnodes = 2\n")
    with pytest.raises(configmod.ConfigError) as err:
        configmod.load(path)
    assert f"{path}:3: server.nnodes = 2 but server.dist_init_addr is empty" in str(err.value)
    ns = daemon_main.parse_args(
        ["--config", str(path), "--node-rank", "1", "--dist-init-addr", "lead:20000"]
    )
    cfg = configmod.load(ns.config, daemon_main.overrides(ns))
    assert (cfg.server.nnodes, cfg.server.node_rank, cfg.server.dist_init_addr) == (
        2,
        1,
        "lead:20000",
    )


def test_node_rank_must_be_below_nnodes(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nnnodes = 2\ndist_init_addr = "a:1"\n')
    ns = daemon_main.parse_args(["--config", str(path), "--node-rank", "2"])
    with pytest.raises(configmod.ConfigError) as err:
        configmod.load(ns.config, daemon_main.overrides(ns))
    assert "server.node_rank = 2 with server.nnodes = 2 (expected a rank in 0..1)" in str(err.value)


def test_declarative_and_health_listen_are_checked(tmp_path: Path) -> None:
    path = write(tmp_path, '[daemon]\ndeclarative = "yes"\nhealth_listen = "nowhere"\n')
    with pytest.raises(configmod.ConfigError) as err:
        configmod.load(path)
    text = str(err.value)
    assert f"{path}:2: daemon.declarative" in text and f"{path}:3: daemon.health_listen" in text
    ns = daemon_main.parse_args(["--declarative", "--health-listen", "127.0.0.1:8081"])
    cfg = configmod.load(write(tmp_path, ""), daemon_main.overrides(ns))
    assert cfg.daemon.declarative is True and cfg.exporter.health_listen == "127.0.0.1:8081"
    assert configmod.load(write(tmp_path, "")).daemon.declarative is False  # off by default


def test_launch_args_multi_node_argv_round_trips() -> None:
    args = LaunchArgs(model_path="/m", tp_size=16, nnodes=2, node_rank=1, dist_init_addr="l:1")
    argv = args.to_argv()
    i = argv.index("--dist-init-addr")
    assert argv[i : i + 6] == ["--dist-init-addr", "l:1", "--nnodes", "2", "--node-rank", "1"]
    back = LaunchArgs.from_argv(argv)
    assert (back.nnodes, back.node_rank, back.dist_init_addr, back.extra_args) == (2, 1, "l:1", ())
    assert back.follower and not back.with_(node_rank=0).follower
    single = LaunchArgs(model_path="/m", tp_size=8).to_argv()
    assert "--nnodes" not in single and not LaunchArgs.from_argv(single).follower


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"dist_init_addr": ""}, "needs dist_init_addr"),
        ({"node_rank": 2}, "node_rank 2: expected 0..1"),
        ({"tp_size": 15}, "multiple of nnodes"),
    ],
)
def test_launch_args_refuse_an_impossible_layout(changes: dict, says: str) -> None:
    args = LaunchArgs(model_path="/m", tp_size=16, nnodes=2, dist_init_addr="l:1")
    with pytest.raises(LaunchArgsError, match=says):
        args.with_(**changes).to_argv()
