"""Secret names and masking live in one module (fastverify.redact)."""

from __future__ import annotations

import pytest

from fastverify.redact import is_secret_name, mask_argv, mask_text, secret_values


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "--hf-token", "--api-key", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY",
     "DB_PASSWORD", "MY_SECRET", "AUTHORIZATION", "GITHUB_AUTH", "KEY", "OAUTH_CLIENT_ID"],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["--speculative-num-draft-tokens", "MAX_TOKENS", "--max-total-tokens", "KEYBOARD",
     "NCCL_ALGO", "PATH", "CUDA_VISIBLE_DEVICES", "--tp-size"],
)  # fmt: skip
def test_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_argv_and_parser_errors_are_masked() -> None:
    argv = ["python", "-m", "sglang.launch_server", "--api-key", "sk-live-123456",
            "--hf-token=hf_abcdef", "--speculative-num-draft-tokens", "4"]  # fmt: skip
    assert mask_argv(argv) == ["python", "-m", "sglang.launch_server", "--api-key", "***",
                               "--hf-token=***", "--speculative-num-draft-tokens", "4"]  # fmt: skip
    error = "launch_server: error: unrecognized arguments: --api-key sk-live-123456 --foo"
    assert mask_text(error) == "launch_server: error: unrecognized arguments: --api-key *** --foo"
    # a value quoted elsewhere in the text is masked as a known value too
    known = secret_values({"HF_TOKEN": "hf_abcdef", "PATH": "/bin"}, argv)
    assert set(known) == {"sk-live-123456", "hf_abcdef"}
    assert mask_text("got hf_abcdef and sk-live-123456 and --speculative-num-draft-tokens 4",
                     known) == "got *** and *** and --speculative-num-draft-tokens 4"  # fmt: skip
    assert mask_text("HF_TOKEN=hf_zzzzzz ok") == "HF_TOKEN=*** ok"
