"""A profile is an NCCL/SGLang/FlashInfer env file, nothing more: names, values and the files
they name, through the real loader on real files (owners and modes set with chown/chmod)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fastverify.config import validators as config_checks
from fastverify.profiles import env_policy, sitecustomize
from fastverify.profiles.model import ProfileError
from fastverify.profiles.store import ProfileStore
from tests.support.profiles import PCIE, SHIPPED

OTHER_UID = 1001
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def store_with(tmp_path: Path, body: str, name: str = "p") -> tuple[ProfileStore, Path]:
    d = tmp_path / "profiles"
    d.mkdir(mode=0o755, exist_ok=True)
    f = d / f"{name}.env"
    f.write_text("# description: t\n" + body)
    f.chmod(0o644)
    return ProfileStore([d], SHIPPED, topology=PCIE), f


def errors_of(store: ProfileStore, name: str = "p") -> list[tuple[int, str]]:
    with pytest.raises(ProfileError) as exc:
        store.load(name)
    return [(p.line, p.message) for p in exc.value.problems if p.severity == "error"]


@pytest.mark.parametrize(
    "line",
    ["LD_PRELOAD=/tmp/evil.so", "PATH=/tmp/bin", "BASH_ENV=/tmp/x.sh", "PYTHONPATH=/tmp/site",
     "PYTHONSTARTUP=/tmp/x.py", "LD_AUDIT=/tmp/a.so", "CUDA_INJECTION64_PATH=/tmp/i.so",
     "TORCH_NCCL_ASYNC_ERROR_HANDLING=1", "CUDA_DEVICE_MAX_CONNECTIONS=1", "HF_TOKEN=abc",
     "SGLANG_PLUGINS=evil", "SGLANG_EXTERNAL_MODEL_PACKAGE=evil", "SGLANG_NOT_DECLARED_X=1",
     "FLASHINFER_SOMETHING=1"],
)  # fmt: skip
def test_anything_but_nccl_sglang_flashinfer_is_refused_with_file_and_line(
    tmp_path: Path, line: str
) -> None:
    store, _ = store_with(tmp_path, "NCCL_ALGO=Ring\n" + line + "\n")
    errs = errors_of(store)
    name = line.split("=")[0]
    assert [ln for ln, _ in errs] == [3], errs
    assert name in errs[0][1]


def test_simulated_acceptance_variables_stay_accepted(tmp_path: Path) -> None:
    store, _ = store_with(
        tmp_path,
        "SGLANG_SIMULATE_ACC_LEN=3.2\nSGLANG_SIMULATE_ACC_METHOD=multinomial\n"
        "FLASHINFER_DISABLE_JIT=0\nNCCL_NET_PLUGIN=none\n",
    )
    prof = store.load("p")
    assert prof.env["SGLANG_SIMULATE_ACC_LEN"] == "3.2"
    assert prof.env["SGLANG_SIMULATE_ACC_METHOD"] == "multinomial"


def test_a_200_kb_value_and_non_ascii_are_refused_at_validation(tmp_path: Path) -> None:
    store, _ = store_with(tmp_path, "NCCL_SOCKET_IFNAME=" + "e" * 200_000 + "\n")
    errs = errors_of(store)
    assert errs[0][0] == 2 and "200000 bytes long (at most 4096" in errs[0][1]
    store, _ = store_with(tmp_path, "NCCL_SOCKET_IFNAME=eth\u00e90\n", name="q")
    errs = errors_of(store, "q")
    assert errs[0][0] == 2 and "not printable ASCII" in errs[0][1]


@needs_root
def test_plugin_must_be_root_owned_and_not_writable_by_others(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o755)
    so = lib / "libnccl-net-evil.so"
    so.write_bytes(b"\x7fELF")
    so.chmod(0o644)
    store, _ = store_with(tmp_path, f"NCCL_NET_PLUGIN={so}\nNCCL_TUNER_PLUGIN={so}\n")
    assert store.load("p").env["NCCL_NET_PLUGIN"] == str(so)  # root-owned, 0644: fine
    os.chown(so, OTHER_UID, OTHER_UID)
    store._memo = None
    errs = errors_of(store)
    assert [ln for ln, _ in errs] == [2, 3]
    assert f"owned by uid {OTHER_UID}" in errs[0][1] and "chown root" in errs[0][1]
    os.chown(so, 0, 0)
    so.chmod(0o666)
    assert "writable by others (chmod o-w" in errors_of(store)[0][1]
    so.chmod(0o644)
    lib.chmod(0o777)  # the file is fine, its directory lets anyone replace it
    assert f"{lib} is writable by others" in errors_of(store)[0][1]
    lib.chmod(0o755)
    store2, _ = store_with(tmp_path, "NCCL_PROFILER_PLUGIN=relative/lib.so\n", name="r")
    assert "neither a plugin name nor an absolute path" in errors_of(store2, "r")[0][1]


def test_the_shipped_tuner_plugin_is_accepted(tmp_path: Path, monkeypatch) -> None:
    so = tmp_path / "libnccl-tuner-fastverify.so"
    so.write_bytes(b"\x7fELF")
    monkeypatch.setenv("FASTVERIFY_TUNER_SO", str(so))
    assert env_policy.trust_problem("NCCL_TUNER_PLUGIN", str(so)) is None
    assert env_policy.trust_problem("NCCL_NET_PLUGIN", "/nonexistent/x.so") is not None


@needs_root
@pytest.mark.parametrize("attack", ["file_other_uid", "file_0666", "dir_0777", "dir_other_uid"])
def test_profile_files_follow_strict_modes(tmp_path: Path, attack: str) -> None:
    store, f = store_with(tmp_path, "NCCL_ALGO=Ring\n")
    assert store.load("p").env == {"NCCL_ALGO": "Ring"}
    store._memo = None
    if attack == "file_other_uid":
        os.chown(f, OTHER_UID, OTHER_UID)
    elif attack == "file_0666":
        f.chmod(0o666)
    elif attack == "dir_0777":
        f.parent.chmod(0o777)
    else:
        os.chown(f.parent, OTHER_UID, OTHER_UID)
    errs = errors_of(store)
    assert errs[0][0] == 0 and "refused:" in errs[0][1], errs


def test_config_env_and_passthrough_refuse_loader_variables() -> None:
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PATH", "BASH_ENV"):
        assert name in (config_checks.env_table({name: "/x"}) or "")
        assert name in (config_checks.passthrough_names([name]) or "")
    ok = {"CUDA_VISIBLE_DEVICES": "0,1", "HF_HOME": "/data/hf", "PYTHONUNBUFFERED": "1"}
    assert config_checks.env_table(ok) is None
    assert config_checks.passthrough_names(["HF_TOKEN", "CUDA_VISIBLE_DEVICES"]) is None
    assert "at most 4096" in (config_checks.env_table({"X": "a" * 200_000}) or "")


def test_import_sitecustomize_and_the_loader_share_one_rule(tmp_path: Path) -> None:
    imported = sitecustomize.import_sitecustomize(
        "import os\nos.environ['NCCL_ALGO'] = 'Ring'\nos.environ['LD_PRELOAD'] = '/x.so'\n"
        "os.environ['SGLANG_SIMULATE_ACC_LEN'] = '3'\nos.environ['PYTHONPATH'] = '/p'\n"
    )
    kept = set(imported.env)
    assert kept == {"NCCL_ALGO", "SGLANG_SIMULATE_ACC_LEN"}
    for name in ("NCCL_ALGO", "LD_PRELOAD", "SGLANG_SIMULATE_ACC_LEN", "PYTHONPATH"):
        assert (name in kept) == (env_policy.profile_name_problem(name) is None)


def test_shipped_profiles_still_load() -> None:
    store = ProfileStore([], SHIPPED, topology=PCIE)
    names = [p.stem for p in Path(SHIPPED).glob("*.env")]
    assert names
    for name in names:
        store.load(name)
