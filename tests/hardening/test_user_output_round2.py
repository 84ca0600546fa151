"""Issue 34, what a user sees must be true (round two): the newest commands as a new user
runs them from the README, through the real `fastverifyctl` against a real daemon on the
sim. Each test asserts what the user reads: tune's plots or the note saying they were
skipped, the TP 16 render of pcie-ipc refused, the resume circle broken, ..."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness import REPO, DaemonHarness, _scrubbed_env

TUNE = ["--accept-length", "2.0", "--profiles", "nccl-default,ring-ll,pcie-ipc",
        "--repeats", "2", "--duration", "1", "--output-len", "48", "--input-len", "64"]  # fmt: skip


def run_ctl(*args: str, env: dict[str, str] | None = None, timeout: float = 120):
    """The real fastverifyctl without a daemon (render, profile show)."""
    full = _scrubbed_env()
    full["PYTHONPATH"] = str(REPO)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", *args],
        capture_output=True, text=True, timeout=timeout, env=full, cwd=REPO,
    )  # fmt: skip


def without_matplotlib(tmp: Path) -> dict[str, str]:
    """An environment whose `import matplotlib` fails as on an install without the extra."""
    shadow = tmp / "no-matplotlib"
    (shadow / "matplotlib").mkdir(parents=True, exist_ok=True)
    (shadow / "matplotlib" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n"
    )
    return {"PYTHONPATH": f"{shadow}:{REPO}"}


# ------------------------------------------------------------------ a tuned daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tour")
    with DaemonHarness(tmp, tp_size=8, sim_load_seconds=1.0,
                       config={"daemon": {"trace_period_s": 0}}) as d:  # fmt: skip
        yield d


@pytest.fixture(scope="module")
def tuned(daemon: DaemonHarness) -> dict[str, Any]:
    out = daemon.tmp / "tune-out"
    proc = daemon.ctl("tune", *TUNE, "-o", str(out), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return {"proc": proc, "out": out}


# ------------------------------------------------------------------ item 1: plots


def test_tune_draws_its_plots_and_links_them(tuned: dict[str, Any]) -> None:
    out, proc = tuned["out"], tuned["proc"]
    report = (out / "report.md").read_text()
    for png in ("funnel.png", "trial.png", "decision.png"):
        assert (out / png).stat().st_size > 1000, png
        assert f"]({png})" in report, png
    assert "plots: decision.png, funnel.png, trial.png" in proc.stdout, proc.stdout
    assert "plots skipped" not in proc.stdout + report


# ------------------------------------------------------------------ item 5: the circle


def test_a_finished_tune_dir_says_new_dir_or_force_and_resume_says_the_same(
    daemon: DaemonHarness, tuned: dict[str, Any]
) -> None:
    out = tuned["out"]
    again = daemon.ctl("tune", *TUNE, "-o", str(out))
    assert again.returncode == 2, again.stderr
    assert "already holds a finished tune" in again.stderr, again.stderr
    assert "-o NEWDIR" in again.stderr and "--force" in again.stderr
    assert "--resume" not in again.stderr  # not the circle's first half
    resume = daemon.ctl("tune", "--resume", "-o", str(out))
    assert resume.returncode == 2, resume.stderr
    assert "nothing to resume: the last tune of this host finished" in resume.stderr
    assert f"-o {out} --force" in resume.stderr and "-o NEWDIR" in resume.stderr
    # nothing was touched by either refusal
    assert json.loads((out / "decision.json").read_text())["decision"]["applied"] is True


def test_force_replaces_the_tune_and_without_matplotlib_says_plots_were_skipped(
    daemon: DaemonHarness, tuned: dict[str, Any], tmp_path: Path
) -> None:
    out = tuned["out"]
    proc = daemon.ctl("tune", *TUNE, "-o", str(out), "--force", timeout=900,
                      env=without_matplotlib(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    # the output and the report say the plots were skipped, and how to get them
    note = "plots skipped: matplotlib is not installed"
    assert note in proc.stdout and "fastverify[plot]" in proc.stdout, proc.stdout
    report = (out / "report.md").read_text()
    assert note in report and "fastverify[plot]" in report
    assert ".png" not in report
    # --force replaced the first tune's files: no stale PNG beside a report without them
    assert not list(out.glob("*.png")), list(out.glob("*.png"))
    doc = json.loads((out / "decision.json").read_text())
    assert doc["plots"]["files"] == {} and doc["plots"]["skipped"].startswith(note)


# ------------------------------------------------------------------ item 3: TP 16 render


def test_render_pcie_ipc_over_two_nodes_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "k8s"
    r = run_ctl("render", "kubernetes", "--profile", "pcie-ipc", "--nodes", "2",
                "--output-dir", str(out))  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert not out.exists()
    assert "SGLang TP 16" not in r.stdout
    err = r.stderr
    assert "at SGLang TP 16 (2 nodes x 8 GPUs) every all-reduce would be NCCL" in err, err
    assert "2/4/8 ranks only" in err and "--force" in err
    # the same fact `profile show --effective` gives at that world size
    show = run_ctl("profile", "show", "pcie-ipc", "--effective", "--tp-size", "16")
    assert "all all-reduces: NCCL" in show.stdout and "2/4/8 ranks only" in show.stdout
    # two nodes of 4 GPUs: world size 8, but IPC does not cross nodes
    r4 = run_ctl("render", "kubernetes", "--profile", "pcie-ipc", "--nodes", "2",
                 "--gpus-per-node", "4", "--output-dir", str(out))  # fmt: skip
    assert r4.returncode == 2 and "one node only" in r4.stderr, r4.stderr
    assert not out.exists()
    # --force renders it, with the note naming what will serve
    f = run_ctl("render", "kubernetes", "--profile", "pcie-ipc", "--nodes", "2", "--force",
                "--output-dir", str(out))  # fmt: skip
    assert f.returncode == 0, f.stderr
    assert re.search(r"note: .*every all-reduce would be NCCL", f.stderr), f.stderr
    # one node of 8: PCIe-IPC serves, no note
    ok = run_ctl("render", "kubernetes", "--profile", "pcie-ipc", "--output-dir",
                 str(tmp_path / "one"))  # fmt: skip
    assert ok.returncode == 0 and "note:" not in ok.stderr, ok.stderr


# ------------------------------------------------------------------ scripts/run


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
