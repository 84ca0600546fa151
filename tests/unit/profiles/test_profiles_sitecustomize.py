"""Legacy sitecustomize import: recognised forms, aliases, untranslatable lines; never executed."""

from __future__ import annotations

from pathlib import Path

from fastverify.profiles.envfile import parse_bytes, render
from fastverify.profiles.sitecustomize import import_sitecustomize
from fastverify.profiles.validate import validate
from tests.support.profiles import DATA, PCIE

FIELD = (DATA / "sitecustomize-field.py.txt").read_text()  # the pattern seen in the field


def test_field_pattern() -> None:
    r = import_sitecustomize(FIELD, "sitecustomize.py")
    assert r.env == {
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Tree",
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    }
    assert all(v.conditional for v in r.variables.values())
    assert r.untranslated == [] and r.skipped == []
    # the written profile passes the validator
    text = render(r.env, description="imported")
    assert validate(parse_bytes(text.encode(), "p.env"), topology=PCIE) == []


def test_other_forms_and_aliases() -> None:
    src = """\
'''legacy tuning'''
import os
import os as o2
from os import environ
from os import environ as E
os.environ["NCCL_DEBUG"] = "WARN"
o2.environ.setdefault("NCCL_IB_DISABLE", "1")
environ.update({"NCCL_SHM_DISABLE": "0"}, NCCL_CUMEM_ENABLE="0")
if "NCCL_ALGO" not in E:
    E["NCCL_ALGO"] = "Ring"
SETTINGS = {"NCCL_MIN_NCHANNELS": "4"}
for k, v in SETTINGS.items():
    os.environ.setdefault(k, v)
for k, v in (("NCCL_LAUNCH_MODE", "GROUP"),):
    os.environ[k] = v
"""
    r = import_sitecustomize(src)
    assert r.env == {
        "NCCL_DEBUG": "WARN",
        "NCCL_IB_DISABLE": "1",
        "NCCL_SHM_DISABLE": "0",
        "NCCL_CUMEM_ENABLE": "0",
        "NCCL_ALGO": "Ring",
        "NCCL_MIN_NCHANNELS": "4",
        "NCCL_LAUNCH_MODE": "GROUP",
    }
    cond = {k for k, v in r.variables.items() if v.conditional}
    assert cond == {"NCCL_IB_DISABLE", "NCCL_ALGO", "NCCL_MIN_NCHANNELS"}
    assert r.untranslated == []


def test_untranslatable_statements_listed_with_lines() -> None:
    src = """\
import os
os.environ["NCCL_ALGO"] = "Ring"
os.environ["NCCL_NTHREADS"] = str(256)
os.putenv("NCCL_PROTO", "LL")
print("tuned")
x = compute()
os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
os.environ.setdefault("NCCL_ALGO", "Tree")
"""
    r = import_sitecustomize(src)
    assert r.env == {"NCCL_ALGO": "Ring"}
    assert [ln for ln, _ in r.untranslated] == [3, 4, 5, 6]
    assert "environment" in r.untranslated[0][1]
    assert [ln for ln, _ in r.skipped] == [7]
    assert [ln for ln, _ in r.notes] == [8]  # setdefault after an assignment has no effect


def test_never_executes(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    src = f"open({str(marker)!r}, 'w').write('x')\nimport os\nos.environ['NCCL_ALGO'] = 'Ring'\n"
    r = import_sitecustomize(src)
    assert not marker.exists()
    assert r.env == {"NCCL_ALGO": "Ring"} and [ln for ln, _ in r.untranslated] == [1]


def test_syntax_error_reported() -> None:
    r = import_sitecustomize("import os\nos.environ[\n", "bad.py")
    assert r.env == {} and r.untranslated and r.untranslated[0][1].startswith("syntax error")
