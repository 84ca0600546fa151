"""scripts/run itself, with python3 standing in for venv and pip: what it installs and prints."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.harness import REPO, _scrubbed_env


def test_scripts_run_installs_the_plots_and_names_the_socket_it_was_given(
    tmp_path: Path,
) -> None:
    """The real scripts/run, with python3 standing in for venv/pip (no network here): it
    installs the `plot` extra, and the control command it prints reaches this daemon."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "run"
    script.write_text((REPO / "scripts" / "run").read_text())
    script.chmod(0o755)
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    fake = bin_dir / "python3"  # `python3 -m venv .venv` makes a .venv whose tools log calls
    fake.write_text(
        "#!/bin/sh\n"
        "mkdir -p .venv/bin\n"
        f"printf '#!/bin/sh\\necho python \"$@\" >> {log}\\n' > .venv/bin/python\n"
        f"printf '#!/bin/sh\\necho fastverifyd \"$@\" >> {log}\\n' > .venv/bin/fastverifyd\n"
        "chmod +x .venv/bin/python .venv/bin/fastverifyd\n"
    )
    fake.chmod(0o755)
    env = {**_scrubbed_env(), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    r = subprocess.run([str(script), "--socket", "/tmp/fv-x.sock"], capture_output=True,
                       text=True, env=env, timeout=60, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    assert "python -m pip install -q -e .[plot]" in calls, calls
    # the package's bytecode, compiled once at install (fastverifyctl's start-up)
    assert calls.index("python -m compileall -q fastverify") > calls.index(
        "python -m pip install -q -e .[plot]"
    ), calls
    assert calls[-1] == "fastverifyd --engine auto --socket /tmp/fv-x.sock", calls
    assert "control it with: .venv/bin/fastverifyctl --socket /tmp/fv-x.sock status" in r.stdout
    plain = subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=60,
                           check=False)  # fmt: skip
    assert "control it with: .venv/bin/fastverifyctl status" in plain.stdout, plain.stdout
    log.write_text("")
    only = subprocess.run([str(script), "--install-only"], capture_output=True, text=True,
                          env=env, timeout=60, check=False)  # fmt: skip
    assert only.returncode == 0, only.stderr
    assert not any(c.startswith("fastverifyd") for c in log.read_text().splitlines())
