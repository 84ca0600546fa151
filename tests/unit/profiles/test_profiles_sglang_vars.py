"""SGLang variables in profiles: names SGLang 0.5.23 declares (a near miss is a typo),
values by its own parsers, refused with `file:line: what is wrong (what would be right)`.
The names and kinds are the pinned release's facts file (checked here, variable by
variable); the facts and the boolean grammar are pinned to the installed SGLang by
tests/contract/test_allreduce_contract.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify.profiles.envfile import parse_bytes
from fastverify.profiles.store import ProfileStore
from fastverify.profiles.validate import validate
from tests.support.profiles import PCIE, SHIPPED

REPO = Path(__file__).resolve().parents[3]


def problems(body: str) -> list[tuple[int, str, str]]:
    parsed = parse_bytes(("# description: t\n" + body).encode(), "p.env")
    return [(p.line, p.severity, p.message) for p in validate(parsed, topology=PCIE)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCES=1",
         "unknown SGLang variable SGLANG_ENABLE_PCIE_IPC_ALLREDUCES "
         "(did you mean SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?)"),
        ("SGLANG_PCIE_IPC_MAXNUMEL=4096", "did you mean SGLANG_PCIE_IPC_MAX_NUMEL?"),
        ("sglang_enable_pcie_ipc_allreduce=1", "names are case-sensitive; SGLang reads "
         "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"),
        ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=on", "'on' is not a boolean SGLang reads (write "
         "1/0, true/false, yes/no or y/n"),
        ("SGLANG_PCIE_IPC_MAX_NUMEL=-1", "expected 0 (size the workspace from the decode "
         "width) or a positive element count"),
        ("SGLANG_PCIE_IPC_MAX_NUMEL=1M", "'1M' is not an integer"),
        ("SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB=0", "expected a positive size in KiB"),
    ],
)  # fmt: skip
def test_refused(line: str, message: str) -> None:
    found = problems(line + "\n")
    assert [(ln, sev) for ln, sev, _ in found] == [(2, "error")], found
    assert message in found[0][2]


@pytest.mark.parametrize(
    "line",
    ["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=True",
     "SGLANG_PCIE_IPC_MAX_NUMEL=0", "SGLANG_PCIE_IPC_MAX_NUMEL=917504",
     "SGLANG_USE_1STAGE_ALLREDUCE=0", "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2=false"],
)  # fmt: skip
def test_accepted(line: str) -> None:
    assert problems(line + "\n") == []


def test_undeclared_name_is_an_error_and_flag_owned_variable_a_warning() -> None:
    found = problems("SGLANG_MY_OWN_THING=1\nSGLANG_ENABLE_DETERMINISTIC_INFERENCE=1\n")
    assert [(ln, sev) for ln, sev, _ in found] == [(2, "error"), (3, "warning")]
    assert "declares no variable SGLANG_MY_OWN_THING" in found[0][2]
    assert "--enable-deterministic-inference" in found[1][2]


def test_shipped_pcie_ipc_profile() -> None:
    prof = ProfileStore([], SHIPPED, topology=PCIE).load("pcie-ipc")
    assert prof.env == {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}
    assert prof.requires == {"custom-all-reduce": "off"}


def test_cli_refuses_a_typo_with_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "typo.env"
    f.write_text("# description: t\nNCCL_ALGO=Ring\nSGLANG_ENABLE_PCIE_IPC_ALLREDUCES=1\n")
    out = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "profile", "validate", str(f)],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 1
    assert (
        f"{f}:3: unknown SGLang variable SGLANG_ENABLE_PCIE_IPC_ALLREDUCES "
        "(did you mean SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?)"
    ) in out.stdout + out.stderr


def test_show_effective_names_the_backend_and_its_bound() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", "profile", "show", "pcie-ipc", "--effective",
         "--tp-size", "8", "--hidden-size", "7168", "--decode-max-bs", "32",
         "--draft-tokens", "4", "--json"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    ar = json.loads(out.stdout)["allreduce"]
    assert (ar["serving"], ar["max_bytes"]) == ("pcie_ipc", 32 * 4 * 7168 * 2)
    assert ar["description"] == (
        "all-reduces up to 1.8 MiB (decode and verify: decode max_bs 32 x 4 draft tokens): "
        "FlashInfer PCIe-IPC; above: NCCL"
    )


# A value each kind takes, one it refuses (None: every value is taken), as SGLang's parsers
# read them (EnvBool, EnvInt, EnvFloat; str, tuple and json values are passed as they are).
KIND_VALUES = {
    "bool": ("yes", "maybe"),
    "int": ("7", "7.5"),
    "float": ("7.5", "seven"),
    "str": ("anything", None),
    "tuple": ("a,b", None),
    "json": ('{"a": 1}', None),
}


def test_every_declared_variable_is_checked_by_the_kind_its_facts_give() -> None:
    """The validator's kinds are the pinned release's facts file, read here directly: a
    variable whose facts say int is refused a non-integer, and so on for all of them."""
    from fastverify.profiles import sglang_vars
    from fastverify.sglang.versions import PINNED_VERSION

    facts = REPO / "fastverify" / "sglang" / "facts" / f"{PINNED_VERSION}.json"
    declared = json.loads(facts.read_text())["env"]["sglang_vars"]
    assert len(declared) > 700
    wrong = []
    for name, kind in sorted(declared.items()):
        assert sglang_vars.check_name(name) is None, name
        good, bad = KIND_VALUES[kind.removesuffix("withalias")]
        taken = sglang_vars.check_value(name, good)
        if taken is not None and taken[0] == "error":
            wrong.append((name, kind, good, taken[1]))
        if bad is not None:
            refused = sglang_vars.check_value(name, bad)
            if refused is None or refused[0] != "error":
                wrong.append((name, kind, bad, refused))
    assert wrong == []
