"""Small things the CLI and the daemon say, each held to the truth through the real
`fastverifyctl` (and a real daemon on the sim where it needs one): `mode --json`, what
`render kubernetes --profile` says of a profile it cannot find, `profile list` without
`(line 0)`, validation before an experiment's lease, and Ctrl-C of a command that does not
handle it itself (`spec validate`): exit 130, never click's `Aborted!` with exit 1."""

from __future__ import annotations

import json
from pathlib import Path

from fastverify.client import ApiError
from tests.support.harness import (
    DaemonHarness,
    ctl_interrupted_at,
    run_ctl,
)


def test_mode_without_a_command_takes_json(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("mode", "--json")
        assert r.returncode == 0, r.stderr
        st = d.status()
        assert json.loads(r.stdout) == {"mode": st["mode"], "profile": st["profile"],
                                        "state": st["state"]}  # fmt: skip


def test_render_kubernetes_says_where_the_users_profile_is(tmp_path: Path) -> None:
    """`profile list` finds the user's profile through FASTVERIFY_CONFIG's profile_dirs;
    `render kubernetes --profile` of it names that directory as the --profile-dir to pass,
    and renders it with it."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "mine.env").write_text("# description: mine\nNCCL_ALGO=Ring\n")
    config = tmp_path / "fastverifyd.toml"
    config.write_text(f'[daemon]\nprofile_dirs = ["{mine}"]\n')
    env = {"FASTVERIFY_CONFIG": str(config), "FASTVERIFY_PROFILE_DIRS": ""}  # the config's
    listed = run_ctl("profile", "list", "--json", env=env)
    assert any(p["name"] == "mine" for p in json.loads(listed.stdout)), listed.stdout
    args = ("render", "kubernetes", "--image", "registry.example.com/fv:1", "--profile", "mine")
    refused = run_ctl(*args, "--output-dir", str(tmp_path / "a"), env=env)
    assert refused.returncode == 2, refused.stderr
    assert f"render it with --profile-dir {mine}" in refused.stderr, refused.stderr
    rendered = run_ctl(*args, "--profile-dir", str(mine), "--output-dir", str(tmp_path / "b"),
                       env=env)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    other = run_ctl(*args[:-1], "nowhere", "--output-dir", str(tmp_path / "c"), env=env)
    assert other.returncode == 2 and "pass its directory with --profile-dir" in other.stderr


def test_profile_list_never_says_line_0(tmp_path: Path) -> None:
    """A file-level problem (a link out of the directory, a file over the size cap) has no
    line: none is printed."""
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "link.env").symlink_to(tmp_path / "elsewhere.env")
    (tmp_path / "elsewhere.env").write_text("# description: elsewhere\nNCCL_ALGO=Ring\n")
    (d / "big.env").write_text("# description: big\n" + "NCCL_ALGO=Ring\n" * 80_000)
    r = run_ctl("profile", "--dir", str(d), "list")
    rows = [x for x in r.stdout.splitlines() if "\tlink\t" in x or "\tbig\t" in x]
    assert len(rows) == 2 and all("INVALID" in x for x in rows), r.stdout
    assert "(line 0)" not in r.stdout, r.stdout


def test_validation_comes_before_an_experiments_lease(tmp_path: Path) -> None:
    """While a sweep holds the lease: a misspelt profile and a path are refused as invalid
    (exit 2, 422), not as the sweep's 409; what serves already is `unchanged` (exit 0); a
    valid switch to another profile still gets the lease's 409 (exit 4)."""
    with DaemonHarness(tmp_path, metrics=False) as d:
        serving = d.status()["profile"]
        lease = d.client.post("/v1/lease", {"experiment": "sweep", "description": "a test"})
        try:
            typo = d.ctl("profile", "set", "ring-lll")
            assert typo.returncode == 2, typo.stdout + typo.stderr
            assert "ring-lll" in typo.stderr and "would cut" not in typo.stderr, typo.stderr
            try:
                d.client.post("/v1/profile", {"name": "/etc/shadow"})
            except ApiError as exc:
                assert exc.status == 422, exc.body
            else:
                raise AssertionError("a path was accepted")
            same = d.ctl("profile", "set", serving)
            assert same.returncode == 0 and "nothing changed" in same.stdout, same.stdout
            other = d.ctl("profile", "set", "ring-ll")
            assert other.returncode == 4 and "would cut" in other.stderr, other.stderr
        finally:
            d.client.post("/v1/lease/release", {"id": lease["id"]})


def test_ctrl_c_of_spec_validate_exits_130(tmp_path: Path) -> None:
    config = {"server": {"mode": "eagle3", "extra_args": ["--sim-accept-length", "3.2"]}}
    with DaemonHarness(tmp_path, config=config, metrics=False) as d:
        for args in (
            ("bench", "-n", "16", "-c", "4", "--output-len", "100", "--warmup", "0",
             "--dataset", "fastverify-docs", "--temperature", "0.7"),
            ("spec", "plan", "--max-batch", "16", "--concurrency", "1",
             "--lower-accept-length", "3.0"),
            ("mode", "set", "adaptive"),
        ):  # fmt: skip
            r = d.ctl(*args, timeout=300)
            assert r.returncode == 0, (args, r.stdout + r.stderr)
        # the event: its warm-up has begun
        rc, err = ctl_interrupted_at(["--socket", str(d.socket), "spec", "validate", "-d", "30"],
                                     "spec validate: warm-up:")  # fmt: skip
        assert rc == 130 and "spec validate: interrupted" in err, err
        assert "Aborted!" not in err and "Traceback" not in err, err
        st = d.wait_state("READY")
        assert (st["mode"], st["lease"]) == ("adaptive", None)
