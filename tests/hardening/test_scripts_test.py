"""scripts/test itself, run for real with stand-ins for the slow tools (no network here, and
never the whole suite inside the suite): it times every phase and prints the table, also
when pytest fails (keeping pytest's exit code); a second run installs nothing into a .venv
already installed from the same pyproject.toml, and a changed pyproject.toml reinstalls."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.support.harness import REPO, _scrubbed_env

PHASES = ["Debian packages", "Python venv", "SGLang venv", "AIC venv", "k8s schemas",
          "test inputs", "lint", "typecheck", "pytest"]  # fmt: skip


def _tool(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _checkout(tmp: Path) -> tuple[Path, Path, dict[str, str]]:
    """A copy of scripts/test in a tree whose helpers, python3, ruff, shellcheck, mypy and
    pytest log their calls to calls.log; `pytest` exits with $PYTEST_EXIT."""
    root = tmp / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "test", root / "scripts" / "test")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    log = tmp / "calls.log"
    for name in ("install-system-deps.sh", "k8s-schemas.sh", "aiconfigurator-venv.sh"):
        _tool(root / "scripts" / name, f'echo "{name}" >> {log}\n')
    _tool(root / "scripts" / "sglang-venv.sh", f"echo sglang-venv.sh >> {log}\necho /sg/python\n")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    # `python3 -m venv .venv` makes a .venv whose python logs pip installs; the import check
    # passes once an install happened (the marker), as a real editable install's would
    venv_python = (
        f'case "$*" in\n'
        f'  *"-m pip install"*) echo "pip $*" >> {log}; touch .venv/installed ;;\n'
        f'  *"-m tests.support.prebuild"*) echo "prebuild" >> {log} ;;\n'
        f'  -VV) echo "Python 3.11.7 (fake)" ;;\n'
        f"  *) [ -f .venv/installed ] ;;\n"
        f"esac\n"
    )
    _tool(bin_dir / "python3", (
        "mkdir -p .venv/bin\n"
        f"cat > .venv/bin/python <<'EOF'\n#!/bin/sh\n{venv_python}EOF\n"
        "chmod +x .venv/bin/python\n"
    ))  # fmt: skip
    for name in ("ruff", "shellcheck", "mypy"):
        _tool(bin_dir / name, f'echo "{name} $*" >> {log}\n')
    _tool(bin_dir / "pytest", f'echo "pytest $*" >> {log}\nexit "${{PYTEST_EXIT:-0}}"\n')
    _tool(bin_dir / "npm", "exit 0\n")
    env = {**_scrubbed_env(), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return root, log, env


def _run(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / "scripts" / "test"), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def _table(out: str) -> dict[str, str]:
    rows = out[out.index("scripts/test: time per phase") :].splitlines()[1:]
    found = {}
    for row in rows:
        m = re.fullmatch(r"  (.+?)\s+(\d+\.\d) s( \(failed: exit \d+\))?", row)
        assert m, row
        found[m.group(1)] = m.group(3) or ""
    return found


def test_every_phase_is_timed_and_a_current_venv_is_not_reinstalled(tmp_path: Path) -> None:
    root, log, env = _checkout(tmp_path)
    first = _run(root, env, "-k", "x")
    assert first.returncode == 0, first.stdout + first.stderr
    assert list(_table(first.stdout)) == [*PHASES, "total"], first.stdout
    calls = log.read_text().splitlines()
    assert sum(c.startswith("pip ") for c in calls) == 2, calls  # pip itself, then the project
    pytest_call = "pytest -q -ra -n 6 --dist loadfile --durations=30 -k x"
    assert pytest_call in calls, calls
    assert calls.index("prebuild") < calls.index(pytest_call), calls  # inputs before tests
    mypy_calls = [i for i, c in enumerate(calls) if c.startswith("mypy ")]
    assert mypy_calls and mypy_calls[0] < calls.index(pytest_call), calls
    assert "--cache-dir" in calls[mypy_calls[0]] and str(root) not in calls[mypy_calls[0]], calls
    log.write_text("")
    second = _run(root, env)
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout
    assert not [c for c in log.read_text().splitlines() if c.startswith("pip ")]
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\nversion = '2'\n")
    third = _run(root, env)
    assert third.returncode == 0 and "pip" in log.read_text(), third.stdout


def test_a_failing_pytest_keeps_its_exit_code_and_the_table(tmp_path: Path) -> None:
    root, _log, env = _checkout(tmp_path)
    r = _run(root, {**env, "PYTEST_EXIT": "3"})
    assert r.returncode == 3, r.stdout + r.stderr
    table = _table(r.stdout)
    assert table["pytest"] == " (failed: exit 3)" and table["lint"] == "", r.stdout
