"""How fastverifyctl finds the daemon: `--socket` on the group or subcommand, FASTVERIFY_SOCKET."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.harness import REPO, DaemonHarness, run_ctl


@pytest.mark.parametrize(
    "args",
    [
        ("status",), ("history",), ("cancel",), ("logs",), ("restart",), ("mode", "get"),
        ("mode", "set", "eagle3"), ("server", "check"), ("profile", "set", "ring-ll"),
        ("profile", "current"), ("trace", "capture"),
    ],
)  # fmt: skip
def test_socket_is_accepted_on_the_subcommand(tmp_path: Path, args: tuple[str, ...]) -> None:
    sock = tmp_path / "nobody.sock"
    after = run_ctl(*args, "--socket", str(sock))
    before = run_ctl("--socket", str(sock), *args)
    assert "No such option" not in after.stderr, after.stderr
    assert after.returncode == before.returncode == 3, after.stderr + before.stderr
    assert str(sock) in after.stderr and str(sock) in before.stderr


def test_socket_of_the_subcommand_reaches_the_daemon(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = run_ctl("status", "--socket", str(d.socket), "--json")
        assert r.returncode == 0, r.stderr
        assert '"state": "READY"' in r.stdout
        # it wins over the group's option and over FASTVERIFY_SOCKET
        wrong = str(tmp_path / "wrong.sock")
        r = run_ctl("--socket", wrong, "history", "--socket", str(d.socket),
                    env={"FASTVERIFY_SOCKET": wrong})  # fmt: skip
        assert r.returncode == 0, r.stderr
        r = run_ctl("profile", "list", "--socket", str(d.socket))
        assert r.returncode == 0 and "*\tnccl-default" in r.stdout, r.stdout
        env = run_ctl("status", env={"FASTVERIFY_SOCKET": str(d.socket)})
        assert env.returncode == 0 and "READY" in env.stdout, env.stderr


def test_profile_list_says_where_the_daemon_on_the_socket_reads_profiles(tmp_path: Path) -> None:
    """`--socket` alone reaches the daemon, not its profile directories (its own
    $FASTVERIFY_PROFILE_DIRS or --config): `profile list` says where they are and how to list
    them, so a profile `profile set` finds is not a mystery."""
    with DaemonHarness(tmp_path, metrics=False) as d:
        (d.profile_dir / "mine.env").write_text("# description: mine\nNCCL_ALGO=Ring\n")
        r = run_ctl("--socket", str(d.socket), "profile", "list")
        assert r.returncode == 0 and "\tmine\t" not in r.stdout, r.stdout
        hint = f"FASTVERIFY_PROFILE_DIRS={d.profile_dir} fastverifyctl --socket {d.socket}"
        assert f"note: the daemon reads user profiles from {d.profile_dir}, " in r.stderr
        assert f"{hint} profile list" in r.stderr, r.stderr
        env = {"FASTVERIFY_PROFILE_DIRS": str(d.profile_dir)}
        r = run_ctl("--socket", str(d.socket), "profile", "list", env=env)
        assert r.returncode == 0 and "\tmine\tuser\tmine" in r.stdout, r.stdout
        assert "note:" not in r.stderr, r.stderr


def test_unreachable_message_and_help_name_what_works(tmp_path: Path) -> None:
    sock = tmp_path / "nobody.sock"
    r = run_ctl("status", "--socket", str(sock))
    assert "--socket PATH" in r.stderr and "FASTVERIFY_SOCKET" in r.stderr, r.stderr
    assert "FASTVERIFY_SOCKET" in run_ctl("--help").stdout
    assert "FASTVERIFY_SOCKET" in run_ctl("status", "--help").stdout
    doc = (REPO / "docs" / "guides" / "daemon.md").read_text()  # how fastverifyctl finds the daemon
    assert "FASTVERIFY_SOCKET" in doc
