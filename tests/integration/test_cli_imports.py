"""`fastverifyctl profile list` and `fastverifyctl status` against a running daemon (sim
engine) import none of the heavy modules: their start-up is held to 1.3x `import click` in
benchmarks/bench_cli.py (a figure, not an assert); what this test holds is that nothing on
those paths pulls in torch, sglang, rich, httpx, jinja2, prometheus_client, ... (the modules
that would cost tens of milliseconds each), nor the daemon's or the exporter's internals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import host_dirs
from tests.support.harness import DaemonHarness

HEAVY = (
    "torch", "sglang", "numpy", "rich", "httpx", "jinja2", "prometheus_client", "psutil",
    "yaml", "tomllib", "urllib.request", "http.client", "http.server", "asyncio", "email",
    "dataclasses", "pathlib", "difflib", "subprocess", "fastverify.daemon",
    "fastverify.exporters", "fastverify.engines", "fastverify.experiments", "fastverify.tuner",
)  # fmt: skip

# Runs the console script's entry point, then reports what was imported (even on exit).
PROBE = """
import atexit, json, sys
atexit.register(lambda: print("MODULES=" + json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv = ["fastverifyctl", *sys.argv[1:]]
from fastverify.ctl import main
main()
"""


def imported(args: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    env = host_dirs.clean_env(("FASTVERIFY_",))
    r = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                       env=env, timeout=60)  # fmt: skip
    line = next(x for x in r.stderr.splitlines() if x.startswith("MODULES="))
    return r, set(json.loads(line.removeprefix("MODULES=")))


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory):
    with DaemonHarness(tmp_path_factory.mktemp("cli-imports"), metrics=False) as d:
        yield d


@pytest.mark.parametrize(
    "args", [["status"], ["profile", "list"], ["profile", "list", "--json"], ["verify", "--json"]]
)
def test_cli_start_up_paths_import_nothing_heavy(daemon: DaemonHarness, args: list[str]) -> None:
    r, modules = imported(["--socket", str(daemon.socket), *args])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fastverify.client" in modules  # it did ask the daemon
    if args[0] == "profile":  # the daemon's listing: no profile is read or validated here
        assert "ring-ll" in r.stdout and "fastverify.profiles.store" not in modules
    assert heavy_in(modules) == []


def test_the_probe_sees_a_heavy_import(daemon: DaemonHarness) -> None:
    """The check can fail: a command that does import heavy modules is seen doing so."""
    r, modules = imported(["--socket", str(daemon.socket), "doctor", "--json"])
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert "subprocess" in heavy_in(modules), heavy_in(modules)


@pytest.mark.parametrize("args", [["--version"], ["profile", "--dir", "{tmp}", "list"]])
def test_commands_that_ask_no_daemon_import_neither_client_nor_api_models(
    tmp_path, args: list[str]
) -> None:
    """`--version`, and `profile list` where no daemon socket exists, import neither the
    control API's endpoints (fastverify.api_models) nor its client. (`--version` reads
    fastverify's own `__version__`, never importlib.metadata.)"""
    args = [a.format(tmp=tmp_path) for a in args]
    r, modules = imported(["--socket", str(tmp_path / "no-daemon.sock"), *args])
    assert r.returncode == 0, r.stdout + r.stderr
    assert {"fastverify.api_models", "fastverify.client"} & modules == set()
    assert "importlib.metadata" not in modules
    if args[0] == "profile":
        assert "ring-ll" in r.stdout and heavy_in(modules) == []
