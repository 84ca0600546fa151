"""Profile lookup: shipped profiles, user overrides, extends, cycles, names, paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastverify.profiles.model import ProfileError
from fastverify.profiles.store import ProfileStore
from tests.support.field import RING_LL
from tests.support.profiles import PCIE, SHIPPED, write


def test_the_shipped_profiles_and_their_settings(store: ProfileStore) -> None:
    names = {p.name for p in store.list()}
    assert {
        "nccl-default",
        "ring-ll",
        "tree-ll",
        "tree-ll-eager",
        "ring-ll-8ch",
        "ring-simple",
    } <= names
    assert store.load("nccl-default").env == {}
    assert store.load("ring-ll").env == RING_LL
    assert store.load("tree-ll").env == {**RING_LL, "NCCL_ALGO": "Tree"}
    eager = store.load("tree-ll-eager")
    assert eager.env == {**RING_LL, "NCCL_ALGO": "Tree"}
    assert eager.requires == {"cuda-graph": "off"}
    assert store.load("ring-ll-8ch").env == {**RING_LL, "NCCL_MAX_NCHANNELS": "8"}
    assert store.load("ring-simple").env == {**RING_LL, "NCCL_PROTO": "Simple"}


def test_every_shipped_profile_is_valid_with_a_description() -> None:
    files = sorted(SHIPPED.glob("*.env"))
    assert files
    store = ProfileStore([], SHIPPED, topology=PCIE)
    for f in files:
        prof = store.load(f.stem)
        assert prof.description, f
        assert prof.warnings == (), (f, prof.warnings)
        assert prof.source == "shipped"


def test_user_profile_overrides_shipped(store: ProfileStore, user_dir: Path) -> None:
    write(user_dir / "ring-ll.env", "# description: mine\nNCCL_ALGO=Ring\n")
    prof = store.load("ring-ll")
    assert prof.source == "user" and prof.env == {"NCCL_ALGO": "Ring"}
    assert prof.shadows == SHIPPED / "ring-ll.env"
    entry = {e.name: e for e in store.entries()}["ring-ll"]
    assert entry.source == "user" and entry.shadows == SHIPPED / "ring-ll.env"
    # profiles that extend ring-ll now get the user's version
    assert store.load("ring-ll-8ch").env == {"NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": "8"}


def test_user_dirs_searched_in_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    write(a / "x.env", "# description: a\nNCCL_ALGO=Ring\n")
    write(b / "x.env", "# description: b\nNCCL_ALGO=Tree\n")
    assert ProfileStore([a, b], SHIPPED, topology=PCIE).load("x").description == "a"
    assert ProfileStore([b, a], SHIPPED, topology=PCIE).load("x").description == "b"


def test_extends_same_name_refines_the_shipped_one(store: ProfileStore, user_dir: Path) -> None:
    write(user_dir / "ring-ll.env", "# description: mine\n# extends: ring-ll\nNCCL_NTHREADS=256\n")
    prof = store.load("ring-ll")
    assert prof.env == {**RING_LL, "NCCL_NTHREADS": "256"}
    assert prof.env_sources["NCCL_NTHREADS"] == "ring-ll" and prof.own_env == {
        "NCCL_NTHREADS": "256"
    }


def test_extends_cycle_detected(store: ProfileStore, user_dir: Path) -> None:
    write(user_dir / "a.env", "# description: a\n# extends: b\n")
    write(user_dir / "b.env", "# description: b\n# extends: c\n")
    write(user_dir / "c.env", "# description: c\n# extends: a\n")
    with pytest.raises(ProfileError) as exc:
        store.load("a")
    assert "extends cycle: a.env -> b.env -> c.env -> a.env" in str(exc.value)


def test_extends_self_cycle(store: ProfileStore, user_dir: Path) -> None:
    write(user_dir / "solo.env", "# description: s\n# extends: solo\n")
    with pytest.raises(ProfileError) as exc:
        store.load("solo")
    assert "no profile named 'solo'" in str(exc.value)  # nothing further down the path


def test_extends_missing_base(store: ProfileStore, user_dir: Path) -> None:
    write(user_dir / "x.env", "# description: x\n# extends: nope\nNCCL_ALGO=Ring\n")
    with pytest.raises(ProfileError) as exc:
        store.load("x")
    [p] = exc.value.errors
    assert p.line == 2 and "no profile named 'nope'" in p.message


def test_invalid_base_reported_with_its_own_file(store: ProfileStore, user_dir: Path) -> None:
    write(user_dir / "base.env", "# description: b\nNCCL_ALGOS=Ring\n")
    write(user_dir / "child.env", "# description: c\n# extends: base\n")
    with pytest.raises(ProfileError) as exc:
        store.load("child")
    where = [(Path(p.path).name, p.line) for p in exc.value.errors]
    assert ("child.env", 2) in where and ("base.env", 2) in where


def test_ll128_inherited_from_base_is_checked_at_extends_line(
    store: ProfileStore, user_dir: Path
) -> None:
    write(user_dir / "base.env", "# description: b\nNCCL_PROTO=LL128\n")
    write(user_dir / "child.env", "# description: c\n# extends: base\nNCCL_ALGO=Ring\n")
    with pytest.raises(ProfileError) as exc:
        store.load("child")
    assert any(Path(p.path).name == "base.env" and p.line == 2 for p in exc.value.errors)
    assert store.load("child", force=True).env["NCCL_PROTO"] == "LL128"


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("../x", "is a path"),
        ("/etc/passwd", "absolute path"),
        ("", "empty profile name"),
        ("a" * 65, "at most 64"),
        ("x;rm -rf", "shell metacharacters"),
        ("x$(id)", "shell metacharacters"),
        ("-x", "not a profile name"),
        ("..", "is a path"),
    ],
)
def test_bad_names_refused(store: ProfileStore, name: str, needle: str) -> None:
    with pytest.raises(ProfileError) as exc:
        store.load(name)
    assert needle in str(exc.value)


def test_unknown_name_suggests(store: ProfileStore) -> None:
    with pytest.raises(ProfileError) as exc:
        store.load("ring-l")
    assert "did you mean ring-ll" in str(exc.value)


def test_load_by_path(store: ProfileStore, tmp_path: Path) -> None:
    f = write(tmp_path / "adhoc.env", "# description: a\nNCCL_PROTO=Simple\n")
    prof = store.load(str(f))
    assert prof.name == "adhoc" and prof.source == "file" and prof.env == {"NCCL_PROTO": "Simple"}
    with pytest.raises(ProfileError) as exc:
        store.load(str(tmp_path / "missing.env"))
    assert "no such profile file" in str(exc.value)


def test_path_profile_extends_shipped(store: ProfileStore, tmp_path: Path) -> None:
    f = write(tmp_path / "mine.env", "# description: m\n# extends: ring-ll\nNCCL_ALGO=Tree\n")
    assert store.load(str(f)).env == {**RING_LL, "NCCL_ALGO": "Tree"}


def test_list_entries_reports_invalid_files(store: ProfileStore, user_dir: Path) -> None:
    write(user_dir / "broken.env", "# description: b\nNCCL_ALGO=Rign\n")
    write(user_dir / "not a name.env", "# description: b\n")  # ignored: not a valid name
    rows = {e.name: (p, probs) for e, p, probs in store.list_entries()}
    assert rows["broken"][0] is None
    assert rows["broken"][1][0].line == 2
    assert "not a name" not in rows
    assert "broken" not in {p.name for p in store.list()}


def test_path_profile_extending_its_own_name_refines_the_stored_one(
    store: ProfileStore, tmp_path: Path
) -> None:
    f = write(tmp_path / "ring-ll.env", "# description: m\n# extends: ring-ll\nNCCL_NTHREADS=256\n")
    assert store.load(str(f)).env == {**RING_LL, "NCCL_NTHREADS": "256"}
