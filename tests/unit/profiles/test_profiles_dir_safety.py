"""Profile directories are untrusted input to a root daemon: links that leave the
directory and non-regular files are refused, and no problem quotes more of a file than the
offending token."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastverify.ctl import cli
from fastverify.profiles import envfile
from fastverify.profiles.model import ProfileError
from fastverify.profiles.store import ProfileStore
from tests.support.profiles import PCIE, SHIPPED, write

SECRET = "s3cr3t-hash-9f8e7d"
SHADOW_LIKE = f"root:$6${SECRET}$abcdef:19000:0:99999:7:::\nalice:{SECRET}:1:2\n"


def _all_text(problems) -> str:
    return "\n".join(str(p) for p in problems)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside every profile directory, standing in for a root-only file."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    return write(d / "shadow", SHADOW_LIKE)


def test_link_leaving_the_profile_dir_is_refused_without_quoting_it(
    store: ProfileStore, user_dir: Path, outside: Path
) -> None:
    (user_dir / "leak.env").symlink_to(outside)
    with pytest.raises(ProfileError) as exc:
        store.load("leak")
    text = _all_text(exc.value.problems)
    assert "leak.env" in text and "symbolic link" in text and "outside" in text
    assert SECRET not in text and "root" not in text.replace(str(user_dir), "")
    # listing shows it as invalid, with the same refusal and nothing of the target
    rows = {e.name: (p, probs) for e, p, probs in store.list_entries()}
    prof, probs = rows["leak"]
    assert prof is None and probs and SECRET not in _all_text(probs)


def test_link_with_dotdot_leaving_the_dir_is_refused(
    store: ProfileStore, user_dir: Path, outside: Path
) -> None:
    (user_dir / "sneaky.env").symlink_to(Path("..") / "elsewhere" / "shadow")
    with pytest.raises(ProfileError) as exc:
        store.load("sneaky")
    assert "outside" in str(exc.value) and SECRET not in str(exc.value)


def test_extends_through_a_link_leaving_the_dir_is_refused(
    store: ProfileStore, user_dir: Path, tmp_path: Path
) -> None:
    other = tmp_path / "elsewhere2"
    other.mkdir()
    write(other / "base.env", "# description: b\nNCCL_ALGO=Ring\n")
    (user_dir / "base.env").symlink_to(other / "base.env")
    write(user_dir / "child.env", "# description: c\n# extends: base\n")
    with pytest.raises(ProfileError) as exc:
        store.load("child")
    assert "symbolic link" in str(exc.value)


def test_link_inside_the_profile_dir_is_fine(store: ProfileStore, user_dir: Path) -> None:
    write(user_dir / "real.env", "# description: r\nNCCL_ALGO=Ring\n")
    (user_dir / "alias.env").symlink_to("real.env")
    prof = store.load("alias")
    assert prof.env == {"NCCL_ALGO": "Ring"} and prof.path == user_dir / "alias.env"


def test_fifo_is_refused_not_read(store: ProfileStore, user_dir: Path) -> None:
    os.mkfifo(user_dir / "pipe.env")  # opening it for reading would block forever
    with pytest.raises(ProfileError) as exc:
        store.load("pipe")
    assert "not a regular file" in str(exc.value)
    rows = {e.name: probs for e, _, probs in store.list_entries()}
    assert "not a regular file" in _all_text(rows["pipe"])


def test_fifo_by_path_is_refused(store: ProfileStore, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "p.env")
    with pytest.raises(ProfileError) as exc:
        store.load(str(tmp_path / "p.env"))
    assert "not a regular file" in str(exc.value)


@pytest.mark.parametrize(
    "line",
    [
        f"root:$6${SECRET}:19000",  # no '='
        f"API_KEY = {SECRET}",  # whitespace around '='
        f"API_KEY ={SECRET}",
        f"bad-name={SECRET}",  # invalid variable name
        f" API_KEY={SECRET}",  # leading whitespace
        f"export API_KEY={SECRET}",
        f"API_KEY={SECRET} # note",
        f"API_KEY='{SECRET}'",
    ],
)
def test_problems_never_quote_more_than_the_offending_token(line: str) -> None:
    parsed = envfile.parse_bytes(f"# description: d\n{line}\n".encode(), "f.env")
    assert parsed.problems, line
    for p in parsed.problems:
        assert p.line == 2 and SECRET not in p.message, str(p)


def test_invalid_name_is_quoted_as_the_token_only() -> None:
    parsed = envfile.parse_bytes(f"bad-name={SECRET}\n".encode(), "f.env")
    [p] = parsed.problems
    assert "'bad-name'" in p.message and SECRET not in p.message


def test_extends_cycle_reported_at_the_extends_line(store: ProfileStore, user_dir: Path) -> None:
    write(user_dir / "a.env", "# description: a\n# extends: b\n")
    write(user_dir / "b.env", "# description: b\n\n# extends: a\n")
    with pytest.raises(ProfileError) as exc:
        store.load("a")
    cycle = [p for p in exc.value.problems if "extends cycle" in p.message]
    assert cycle and all(p.line > 0 for p in cycle)
    assert (Path(cycle[0].path).name, cycle[0].line) == ("b.env", 3)


# --- `profile new` shadowing a shipped profile that others extend


@pytest.fixture
def run(tmp_path: Path, user_dir: Path):
    env = {
        "FASTVERIFY_SOCKET": str(tmp_path / "no-daemon.sock"),
        "FASTVERIFY_CONFIG": str(tmp_path / "no-config.toml"),
        "HOME": str(tmp_path),
    }

    def invoke(*args: str):
        argv = ["profile", "--dir", str(user_dir), "--shipped-dir", str(SHIPPED), *args]
        return CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)

    return invoke


def test_new_shadowing_an_extended_shipped_profile_warns(run, user_dir: Path) -> None:
    res = run("new", "ring-ll", "--set", "NCCL_ALGO=Ring")
    assert res.exit_code == 0, res.output
    assert (user_dir / "ring-ll.env").exists()
    # which shipped profiles extend ring-ll, read from the files themselves
    extenders = sorted(
        p.stem for p in SHIPPED.glob("*.env") if "# extends: ring-ll\n" in p.read_text()
    )
    assert extenders, "the shipped set should have profiles extending ring-ll"
    assert "shadows the shipped profile ring-ll" in res.stderr
    for name in extenders:
        assert name in res.stderr


def test_new_with_a_fresh_name_does_not_warn(run) -> None:
    res = run("new", "my-ll", "--set", "NCCL_ALGO=Ring")
    assert res.exit_code == 0 and "shadows" not in res.stderr


def test_list_json_of_a_leaking_link_has_no_target_content(
    run, user_dir: Path, outside: Path
) -> None:
    (user_dir / "leak.env").symlink_to(outside)
    res = run("list", "--json")
    assert res.exit_code == 0
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert rows["leak"]["valid"] is False
    assert SECRET not in res.stdout and SECRET not in res.stderr


def test_store_over_real_profile_dir_symlink_still_works(tmp_path: Path) -> None:
    """A profile directory that is itself a link (e.g. /etc/fastverify/profiles -> /srv/...)
    is fine: only links leaving the resolved directory are refused."""
    real = tmp_path / "real-dir"
    real.mkdir()
    write(real / "x.env", "# description: x\nNCCL_ALGO=Ring\n")
    (tmp_path / "linked").symlink_to(real)
    store = ProfileStore([tmp_path / "linked"], SHIPPED, topology=PCIE)
    assert store.load("x").env == {"NCCL_ALGO": "Ring"}
