"""The clean environment and the values NCCL takes from its config files, with sources."""

from __future__ import annotations

from pathlib import Path

from fastverify.profiles.effective import (
    conf_file_values,
    effective_env,
    effective_view,
    is_nccl_tuning_var,
)
from fastverify.profiles.store import ProfileStore
from tests.support.profiles import write

BASE = {
    "PATH": "/usr/bin",
    "HOME": "/home/op",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "NCCL_ALGO": "Tree",
    "NCCL_DEBUG": "TRACE",
    "NCCL_CONF_FILE": "/somewhere/nccl.conf",
    "NCCL_VERSION": "2.28.3-1",
    "PYTHONPATH": "/legacy",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t",
}


def test_inherited_nccl_removed_and_profile_applied(store: ProfileStore) -> None:
    env = effective_env(store.load("ring-ll"), base_env=BASE)
    assert env["NCCL_ALGO"] == "Ring"
    assert "NCCL_DEBUG" not in env and "NCCL_CONF_FILE" not in env
    assert env["PATH"] == "/usr/bin" and env["LC_ALL"] == "C.UTF-8"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "PYTHONPATH" not in env and "AWS_SECRET_ACCESS_KEY" not in env


def test_nccl_default_has_no_nccl_at_all(store: ProfileStore) -> None:
    env = effective_env(store.load("nccl-default"), base_env=BASE)
    assert [k for k in env if k.startswith("NCCL_")] == []


def test_extra_wins(store: ProfileStore) -> None:
    env = effective_env(
        store.load("ring-ll"), BASE, extra={"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring"}
    )
    assert env["NCCL_DEBUG"] == "INFO"


def test_is_nccl_tuning_var() -> None:
    assert is_nccl_tuning_var("NCCL_ALGO") and is_nccl_tuning_var("NCCL_CONF_FILE")
    assert not is_nccl_tuning_var("NCCL_VERSION")
    assert not is_nccl_tuning_var("TORCH_NCCL_ASYNC_ERROR_HANDLING")


def test_conf_precedence_home_then_etc(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    write(home / ".nccl.conf", "NCCL_PROTO=Simple\n#NCCL_ALGO=Tree\nNCCL_NTHREADS=256\nnoequals\n")
    etc = write(tmp_path / "nccl.conf", "NCCL_NTHREADS=128\nNCCL_DEBUG=WARN\r\nNCCL_PROTO=LL128\n")
    env = {"HOME": str(home), "NCCL_NTHREADS": "512"}
    got = {(v.name, v.value, v.source, v.line) for v in conf_file_values(env, etc)}
    assert got == {
        ("NCCL_PROTO", "Simple", "~/.nccl.conf", 1),
        ("NCCL_DEBUG", "WARN", "/etc/nccl.conf", 2),
    }


def test_conf_file_env_replaces_home_conf(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    write(home / ".nccl.conf", "NCCL_PROTO=Simple\n")
    custom = write(tmp_path / "custom.conf", "NCCL_ALGO=Tree\nNCCL_ALGO=Ring\n")
    env = {"HOME": str(home), "NCCL_CONF_FILE": str(custom)}
    got = [(v.name, v.value, v.source) for v in conf_file_values(env, tmp_path / "absent")]
    assert got == [("NCCL_ALGO", "Tree", "NCCL_CONF_FILE")]  # first line wins within a file


def test_effective_view_marks_sources(store: ProfileStore, tmp_path: Path, user_dir: Path) -> None:
    write(user_dir / "mine.env", "# description: m\n# extends: ring-ll\nNCCL_NTHREADS=256\n")
    home = tmp_path / "h"
    home.mkdir()
    write(home / ".nccl.conf", "NCCL_ALGO=Tree\nNCCL_IB_DISABLE=1\n")
    etc = write(tmp_path / "etc-nccl.conf", "NCCL_SOCKET_IFNAME=eth0\nNCCL_IB_DISABLE=0\n")
    view = effective_view(store.load("mine"), base_env={**BASE, "HOME": str(home)}, etc_conf=etc)
    got = {v.name: (v.value, v.source) for v in view}
    assert got == {
        "NCCL_PROTO": ("LL", "extends:ring-ll"),
        "NCCL_ALGO": ("Ring", "extends:ring-ll"),  # the profile wins over ~/.nccl.conf
        "NCCL_P2P_LEVEL": ("SYS", "extends:ring-ll"),
        "NCCL_MAX_NCHANNELS": ("16", "extends:ring-ll"),
        "NCCL_BUFFSIZE": ("16777216", "extends:ring-ll"),
        "NCCL_NTHREADS": ("256", "profile"),
        "NCCL_IB_DISABLE": ("1", "~/.nccl.conf"),
        "NCCL_SOCKET_IFNAME": ("eth0", "/etc/nccl.conf"),
    }
    by_name = {v.name: v for v in view}
    assert by_name["NCCL_NTHREADS"].line == 3
    assert (
        by_name["NCCL_SOCKET_IFNAME"].path == str(etc) and by_name["NCCL_SOCKET_IFNAME"].line == 1
    )
