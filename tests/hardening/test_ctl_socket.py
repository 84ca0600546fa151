"""How fastverifyctl finds the daemon: `--socket` on the group or subcommand, FASTVERIFY_SOCKET."""

from __future__ import annotations

import json
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


def test_profile_list_is_the_daemons_own_and_says_where_a_named_directory_differs(
    tmp_path: Path,
) -> None:
    """`--socket` alone lists what the daemon on it can switch to (its own
    $FASTVERIFY_PROFILE_DIRS or --config), a file added there or broken included at the next
    listing; directories named here (`profile --dir`) are listed here, with a note where the
    daemon reads elsewhere, so a profile `profile set` finds is not a mystery."""
    with DaemonHarness(tmp_path, metrics=False) as d:
        mine = d.profile_dir / "mine.env"
        mine.write_text("# description: mine\nNCCL_ALGO=Ring\n")
        r = run_ctl("--socket", str(d.socket), "profile", "list")
        assert r.returncode == 0 and "\tmine\tuser\tmine" in r.stdout, r.stdout
        assert "note:" not in r.stderr, r.stderr
        mine.write_text("# description: mine\nNCCL_ALGO=Rign\n")  # the daemon lists it again
        r = run_ctl("--socket", str(d.socket), "profile", "list")
        assert "\tmine\tuser\tINVALID: " in r.stdout and "Rign" in r.stdout, r.stdout
        (d.profile_dir / "ours.env").write_text("# description: ours\nNCCL_ALGO=Tree\n")
        r = run_ctl("--socket", str(d.socket), "profile", "list", "--json")
        assert [row["name"] for row in json.loads(r.stdout) if row["source"] == "user"] == [
            "mine",
            "ours",
        ]
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        r = run_ctl("--socket", str(d.socket), "profile", "--dir", str(elsewhere), "list")
        assert r.returncode == 0 and "\tmine\t" not in r.stdout, r.stdout
        assert f"note: the daemon reads user profiles from {d.profile_dir}, " in r.stderr
        hint = f"fastverifyctl --socket {d.socket} profile list (without --dir)"
        assert hint in r.stderr, r.stderr
        r = run_ctl("--socket", str(d.socket), "profile", "--dir", str(d.profile_dir), "list")
        assert r.returncode == 0 and "\tours\tuser\tours" in r.stdout, r.stdout
        assert "note:" not in r.stderr, r.stderr


def test_unreachable_message_and_help_name_what_works(tmp_path: Path) -> None:
    sock = tmp_path / "nobody.sock"
    r = run_ctl("status", "--socket", str(sock))
    assert "--socket PATH" in r.stderr and "FASTVERIFY_SOCKET" in r.stderr, r.stderr
    assert "FASTVERIFY_SOCKET" in run_ctl("--help").stdout
    assert "FASTVERIFY_SOCKET" in run_ctl("status", "--help").stdout
    doc = (REPO / "docs" / "guides" / "daemon.md").read_text()  # how fastverifyctl finds the daemon
    assert "FASTVERIFY_SOCKET" in doc
