"""The `fastverifyctl profile ...` and `doctor` commands: CliRunner, plus one real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastverify.ctl import cli
from tests.support.profiles import DATA, SHIPPED, write


@pytest.fixture
def run(tmp_path: Path, user_dir: Path):
    env = {
        "FASTVERIFY_SOCKET": str(tmp_path / "no-daemon.sock"),
        "FASTVERIFY_CONFIG": str(tmp_path / "no-config.toml"),
        "HOME": str(tmp_path / "home"),
    }
    (tmp_path / "home").mkdir()

    def invoke(*args: str):
        base = ["profile", "--dir", str(user_dir), "--shipped-dir", str(SHIPPED)]
        argv = [*base, *args] if args and args[0] != "doctor" else list(args)
        res = CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)
        return res

    return invoke


def test_list_json(run) -> None:
    res = run("list", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    by_name = {r["name"]: r for r in rows}
    assert {"nccl-default", "ring-ll", "tree-ll-eager"} <= set(by_name)
    assert all(r["description"] and r["source"] == "shipped" for r in rows)
    assert by_name["ring-ll"]["active"] is None  # no daemon answered: not known
    assert by_name["tree-ll-eager"]["requires"] == {"cuda-graph": "off"}


def test_list_marks_user_override_and_invalid(run, user_dir: Path) -> None:
    write(user_dir / "ring-ll.env", "# description: mine\nNCCL_ALGO=Ring\n")
    write(user_dir / "broken.env", "# description: b\nNCCL_NTHREADS=500\n")
    rows = {r["name"]: r for r in json.loads(run("list", "--json").stdout)}
    assert rows["ring-ll"]["source"] == "user" and rows["ring-ll"]["overrides_shipped"] is True
    assert rows["broken"]["valid"] is False
    text = run("list").stdout
    assert "user (overrides shipped)" in text
    assert "INVALID" in text and "(line 2)" in text


def test_show_and_effective(run, tmp_path: Path) -> None:
    res = run("show", "ring-ll-8ch", "--json")
    data = json.loads(res.stdout)
    assert data["env"]["NCCL_MAX_NCHANNELS"] == "8" and data["extends"] == "ring-ll"
    home = tmp_path / "home"
    write(home / ".nccl.conf", "NCCL_IB_DISABLE=1\nNCCL_ALGO=Tree\n")
    etc = write(tmp_path / "etc-nccl.conf", "NCCL_SOCKET_IFNAME=eth0\n")
    args = ("show", "ring-ll-8ch", "--effective", "--home", str(home), "--etc-conf", str(etc))
    eff = {v["name"]: v["source"] for v in json.loads(run(*args, "--json").stdout)["effective"]}
    assert eff["NCCL_MAX_NCHANNELS"] == "profile"
    assert eff["NCCL_ALGO"] == "extends:ring-ll"
    assert eff["NCCL_IB_DISABLE"] == "~/.nccl.conf"
    assert eff["NCCL_SOCKET_IFNAME"] == "/etc/nccl.conf"
    text = run(*args).stdout
    assert f"~/.nccl.conf ({home / '.nccl.conf'}:1)" in text


def test_show_unknown_is_usage_error(run) -> None:
    res = run("show", "ring-l")
    assert res.exit_code == 2 and "did you mean ring-ll" in res.stderr
    assert run("show", "../etc/passwd").exit_code == 2


def test_validate_exit_codes_and_lines(run, tmp_path: Path) -> None:
    good = write(tmp_path / "good.env", "# description: g\nNCCL_ALGO=Ring\n")
    bad = write(tmp_path / "bad.env", "# description: b\nNCCL_ALGO=Ring\nNCCL_PROTOS=LL\n")
    assert run("validate", str(good), "ring-ll").exit_code == 0
    res = run("validate", str(good), str(bad))
    assert res.exit_code == 1
    assert f"{bad}:3: unknown NCCL variable NCCL_PROTOS (did you mean NCCL_PROTO?)" in res.stderr
    assert f"{good}: ok" in res.stdout
    out = json.loads(run("validate", str(bad), "--json").stdout)
    assert out[0]["valid"] is False and out[0]["problems"][0]["line"] == 3
    assert run("validate").exit_code == 2
    assert run("validate", "--all", "--topology", "pcie").exit_code == 0


def test_validate_ll128_force_and_topology(run, tmp_path: Path) -> None:
    f = write(tmp_path / "ll128.env", "# description: x\nNCCL_PROTO=LL128\n")
    assert run("validate", str(f), "--topology", "pcie").exit_code == 1
    assert run("validate", str(f), "--topology", "pcie", "--force").exit_code == 0
    assert run("validate", str(f), "--topology", "nvlink").exit_code == 0
    res = run("validate", str(f), "--topology", "unknown")
    assert res.exit_code == 0 and "warning" in res.stderr
    assert run("validate", str(f), "--topology", "unknown", "--strict").exit_code == 1


def test_diff(run) -> None:
    res = run("diff", "ring-ll", "ring-simple", "--json")
    assert res.exit_code == 1
    assert json.loads(res.stdout)["changes"] == [
        {"kind": "env", "name": "NCCL_PROTO", "a": "LL", "b": "Simple", "change": "changed"}
    ]
    res = run("diff", "tree-ll", "tree-ll-eager")
    assert res.exit_code == 1 and "+# requires: cuda-graph=off" in res.stdout
    assert run("diff", "ring-ll", "ring-ll").exit_code == 0


def test_new_writes_validated_file_and_never_overwrites(run, user_dir: Path) -> None:
    res = run("new", "ring-ll-4ch", "--from", "ring-ll", "--set", "NCCL_MAX_NCHANNELS=4",
              "--unset", "NCCL_NTHREADS")  # fmt: skip
    assert res.exit_code == 0, res.output
    path = user_dir / "ring-ll-4ch.env"
    text = path.read_text()
    assert "NCCL_MAX_NCHANNELS=4\n" in text and "NCCL_NTHREADS=" not in text
    assert text.startswith("# description: ring-ll with NCCL_MAX_NCHANNELS=4, -NCCL_NTHREADS\n")
    shown = json.loads(run("show", "ring-ll-4ch", "--json").stdout)
    assert shown["source"] == "user" and shown["env"]["NCCL_ALGO"] == "Ring"
    again = run("new", "ring-ll-4ch", "--from", "ring-ll", "--set", "NCCL_MAX_NCHANNELS=2")
    assert again.exit_code == 2 and "--force" in again.stderr
    assert path.read_text() == text
    forced = run(
        "new", "ring-ll-4ch", "--from", "ring-ll", "--set", "NCCL_MAX_NCHANNELS=2", "--force"
    )
    assert forced.exit_code == 0 and "NCCL_MAX_NCHANNELS=2\n" in path.read_text()
    assert [p.name for p in user_dir.iterdir()] == ["ring-ll-4ch.env"]  # no temp files left


def test_new_refuses_invalid_and_bad_names(run, user_dir: Path) -> None:
    res = run("new", "x", "--from", "ring-ll", "--set", "NCCL_ALGO=Rings")
    assert res.exit_code == 1 and "unknown token 'Rings'" in res.stderr
    assert not (user_dir / "x.env").exists()
    assert run("new", "../x", "--set", "NCCL_ALGO=Ring").exit_code == 2
    assert run("new", "x", "--set", "NCCL_ALGO").exit_code == 2
    assert run("new", "x", "--from", "ring-ll", "--unset", "NCCL_DEBUG").exit_code == 2
    res = run("new", "ll128", "--set", "NCCL_PROTO=LL128", "--topology", "pcie")
    assert res.exit_code == 2  # --topology is not an option of new


def test_import_sitecustomize(run, tmp_path: Path, user_dir: Path) -> None:
    src = write(
        tmp_path / "sitecustomize.py",
        (DATA / "sitecustomize-field.py.txt").read_text() + "print(1)\n",
    )
    res = run("import-sitecustomize", str(src), "--name", "legacy", "--output", "-")
    assert res.exit_code == 0, res.output
    assert "NCCL_ALGO=Tree\n" in res.stdout and "NCCL_NTHREADS=512\n" in res.stdout
    # the profile's text as written, not a hint: no --socket of this shell's daemon in it
    assert f"{src} by fastverifyctl profile import-sitecustomize\n" in res.stdout, res.stdout
    assert "Semantic change" in res.stderr
    assert f"{src}:7: not translated" in res.stderr
    res = run("import-sitecustomize", str(src), "--name", "legacy")
    assert res.exit_code == 0 and (user_dir / "legacy.env").is_file()
    assert run("validate", "legacy").exit_code == 0
    assert run("import-sitecustomize", str(src), "--name", "legacy").exit_code == 2  # exists
    res = run("import-sitecustomize", str(src), "--name", "l2", "--output", "-", "--json")
    report = json.loads(res.stdout)
    assert report["env"]["NCCL_ALGO"] == "Tree" and report["written"] is None
    assert report["untranslated"] == [
        {"line": 7, "reason": "not an environment assignment: print(1)"}
    ]
    assert "NCCL_PROTO=LL\n" in report["profile"]
    empty = write(tmp_path / "empty.py", "import os\n")
    assert run("import-sitecustomize", str(empty), "--name", "e", "--output", "-").exit_code == 1


def test_doctor_json(run, tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    write(etc / "nccl.conf", "NCCL_ALGO=Tree\n")
    res = run("doctor", "--json", "--etc", str(etc), "--systemd-dir", str(tmp_path),
              "--site-dir", str(tmp_path), "--no-topology")  # fmt: skip
    data = json.loads(res.stdout)
    assert res.exit_code == 1 and data["status"] == "warning"
    assert any(f["where"] == f"{etc / 'nccl.conf'}:1" for f in data["findings"])


def _ctl() -> list[str]:
    # the console script of this interpreter (not a pyenv/asdf shim in front of it)
    local = Path(sys.executable).parent / "fastverifyctl"
    exe = str(local) if local.is_file() else shutil.which("fastverifyctl")
    return [exe] if exe else [sys.executable, "-m", "fastverify.ctl"]


def test_real_subprocess_validate_exit_codes(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.env", "# description: b\nexport NCCL_ALGO=Ring\n")
    env = {**os.environ, "FASTVERIFY_PROFILE_DIRS": str(tmp_path / "none")}
    ok = subprocess.run([*_ctl(), "profile", "validate", "ring-ll", str(SHIPPED / "tree-ll.env")],
                        capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    res = subprocess.run([*_ctl(), "profile", "validate", str(bad)],
                         capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert res.returncode == 1
    assert res.stderr.startswith(f"{bad}:2: 'export' prefix")
    usage = subprocess.run([*_ctl(), "profile", "validate"],
                           capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert usage.returncode == 2


def test_show_effective_names_what_sglang_adds(run, tmp_path: Path) -> None:
    """--effective applies SGLang 0.5.23's own NCCL rules (checked against the real package
    by tests/contract, the real parallel hook included) for the TP size asked."""
    etc = str(tmp_path / "no-etc.conf")

    def rules(name: str, tp: int) -> dict:
        res = run("show", name, "--effective", "--etc-conf", etc, "--tp-size", str(tp), "--json")
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)["engine_env"]

    tp2 = rules("ring-ll", 2)
    assert tp2["added"]["NCCL_GRAPH_REGISTER"] == "0" and tp2["tp_size"] == 2
    assert any(
        x.startswith("SGLang 0.5.23 will add NCCL_GRAPH_REGISTER=0 (TP") for x in tp2["lines"]
    )
    assert "NCCL_GRAPH_REGISTER" not in rules("ring-ll", 1)["added"]  # one rank: no collectives
    assert "NCCL_GRAPH_REGISTER" not in rules("tree-ll-eager", 2)["added"]  # nothing captures
    text = run("show", "ring-ll", "--effective", "--etc-conf", etc, "--tp-size", "2").stdout
    assert "SGLang 0.5.23 will add NCCL_GRAPH_REGISTER=0 (TP/EP/DP > 1" in text
