"""The suite passes however it is started: tests that interrupt a process set its SIGINT.

A background job (`cmd &` from a script, `nohup ... &`, many CI wrappers) starts with SIGINT
ignored, and every child inherits that; Python then installs no Ctrl-C handler, so a test's
SIGINT to such a child does nothing. Each test that interrupts a process therefore sets the
child's disposition itself (`tests.support.harness.ctrl_c_reaches_it`). Here: one interrupt test run
by a nested pytest with SIGINT ignored, one under `nohup ... &` from a shell, and a scan that
every test file sending SIGINT uses the helper.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.harness import REPO, _scrubbed_env

SENDS_SIGINT = re.compile(r"(send_signal|kill|killpg)\([^)]*SIGINT")
# ways a test sets it: the helper, DaemonHarness(sigint_ignored=...) (whose daemon always
# gets an explicit disposition), or its own preexec_fn that calls signal.signal(SIGINT, ...)
STARTS_WITH_IT = re.compile(r"preexec_fn=ctrl_c_reaches_it")
SETS_SIGINT = re.compile(r"ctrl_c_reaches_it|sigint_ignored=|signal\.signal\(signal\.SIGINT")


def _env() -> dict[str, str]:
    env = {k: v for k, v in _scrubbed_env().items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def _pytest_argv(node: str, tmp: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
            "-n", "0", "--basetemp", str(tmp / "basetemp"), node]  # fmt: skip


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _passed_once(r: subprocess.CompletedProcess[str]) -> None:
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0, tail
    assert re.search(r"\b1 passed\b", r.stdout), tail  # ran, not skipped or deselected
    assert "skipped" not in r.stdout.splitlines()[-1], tail


def test_a_background_job_really_starts_with_sigint_ignored(tmp_path: Path) -> None:
    """The hazard is real here: what the nested runs below start under is what CI gives."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)"
    how = f"nohup {shlex.quote(sys.executable)} -c {shlex.quote(probe)} & wait $!"
    r = subprocess.run(["sh", "-c", how], capture_output=True, text=True, cwd=tmp_path,
                       check=False, timeout=60)  # fmt: skip
    assert r.stdout.strip() == "True", (r.stdout, r.stderr)


def test_an_interrupt_test_passes_with_sigint_ignored(tmp_path: Path) -> None:
    node = "tests/hardening/test_exit_codes.py::test_exit_code[interrupted]"
    r = subprocess.run(_pytest_argv(node, tmp_path), cwd=REPO, env=_env(), capture_output=True,
                       text=True, preexec_fn=_ignore_sigint, timeout=900, check=False)  # fmt: skip
    _passed_once(r)


def test_an_interrupt_test_passes_under_nohup_in_the_background(tmp_path: Path) -> None:
    node = ("tests/hardening/test_hardening_cli.py::"
            "test_ctrl_c_on_a_piped_switch_detaches_and_says_how_to_cancel")  # fmt: skip
    log = tmp_path / "nohup.log"
    argv = " ".join(shlex.quote(a) for a in _pytest_argv(node, tmp_path))
    # `&` in a non-interactive shell: the job starts with SIGINT (and, by nohup, SIGHUP) ignored
    script = f"nohup {argv} > {shlex.quote(str(log))} 2>&1 & wait $!"
    r = subprocess.run(["sh", "-c", script], cwd=REPO, env=_env(), capture_output=True,
                       text=True, timeout=900, check=False)  # fmt: skip
    out = log.read_text(errors="replace")
    _passed_once(subprocess.CompletedProcess(r.args, r.returncode, out, r.stderr))


def _support_text(text: str) -> str:
    """The tests.support modules a test module imports: the Popen that starts its child may
    live there (tests/support/tune.py starts `fastverifyctl tune`); one counts only where it
    passes the disposition to a Popen (STARTS_WITH_IT), not where it defines it."""
    names = re.findall(r"^from tests\.support\.(\w+) import", text, re.MULTILINE)
    return "".join((REPO / "tests" / "support" / f"{n}.py").read_text(encoding="utf-8")
                   for n in names)  # fmt: skip


def test_every_test_that_sends_sigint_sets_the_childs_disposition() -> None:
    offenders = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if SENDS_SIGINT.search(text) and not (
            SETS_SIGINT.search(text) or STARTS_WITH_IT.search(_support_text(text))
        ):
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == [], (
        f"{offenders} send SIGINT to a child without setting its disposition: pass "
        "preexec_fn=tests.support.harness.ctrl_c_reaches_it to the Popen that starts it"
    )
    # the scan itself sees the tests it is about
    assert SENDS_SIGINT.search((REPO / "tests/hardening/test_exit_codes.py").read_text())
