"""The engine's base environment: no Hugging Face variable is inherited unless the
configuration names it in `env_passthrough` (the daemon adds those as `extra`)."""

from __future__ import annotations

from fastverify.profiles.effective import clean_base, effective_env
from fastverify.profiles.model import Profile

DAEMON_ENV = {
    "PATH": "/usr/bin",
    "HOME": "/root",
    "LC_ALL": "C.UTF-8",
    "HF_ENDPOINT": "http://mirror.invalid",
    "HF_TOKEN": "hf_secret",
    "HF_HOME": "/cache/hf",
    "HUGGING_FACE_HUB_TOKEN": "hf_old_secret",
    "TRANSFORMERS_CACHE": "/cache/tf",
    "NCCL_ALGO": "Tree",
}


def test_no_hf_variable_is_inherited_by_default() -> None:
    base = clean_base(DAEMON_ENV)
    assert base == {"PATH": "/usr/bin", "HOME": "/root", "LC_ALL": "C.UTF-8"}


def test_only_named_variables_are_added() -> None:
    prof = Profile(name="p", path=None, source="user", env={"NCCL_ALGO": "Ring"})  # type: ignore[arg-type]
    extra = {"HF_TOKEN": DAEMON_ENV["HF_TOKEN"]}  # what env_passthrough = ["HF_TOKEN"] hands on
    env = effective_env(prof, DAEMON_ENV, extra)
    assert env["HF_TOKEN"] == "hf_secret" and env["NCCL_ALGO"] == "Ring"
    assert not {"HF_ENDPOINT", "HF_HOME", "HUGGING_FACE_HUB_TOKEN"} & set(env)
