"""A profile cannot run code: the attacks on a serving daemon, through its real socket, files and
processes (a preload library that would leave a marker when loaded, files of another uid, a
value the kernel would refuse at exec), and `verify` finding what the daemon did not compose."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fastverify.daemon import verify
from tests.support.harness import DaemonHarness

OTHER_UID = 1001


def _marker_library(tmp: Path) -> tuple[Path, Path]:
    """A shared library whose constructor writes a marker file: proof that it was loaded."""
    marker = tmp / "preloaded"
    src = tmp / "evil.c"
    src.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void hit(void) {\n"
        f'  FILE *f = fopen("{marker}", "a"); if (f) {{ fputs("loaded\\n", f); fclose(f); }}\n'
        "}\n"
    )
    lib = tmp / "lib" / "evil.so"
    lib.parent.mkdir(mode=0o755)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib, marker


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the marker library")
def test_profiles_that_would_run_code_are_refused_before_anything_stops(tmp_path: Path) -> None:
    lib, marker = _marker_library(tmp_path)
    # the library does run when preloaded: the attack is real
    subprocess.run(["true"], env={"LD_PRELOAD": str(lib)}, check=True)
    assert marker.read_text() == "loaded\n"
    marker.unlink()
    with DaemonHarness(tmp_path, metrics=False) as d:
        before = d.status()["engine"]["pid"]
        attacks = {
            "preload": f"LD_PRELOAD={lib}\n",
            "pypath": f"PYTHONPATH={lib.parent}\n",
            "bashenv": "BASH_ENV=/tmp/x.sh\n",
            "path": f"PATH={lib.parent}:/usr/bin\n",
            "netplugin": f"NCCL_NET_PLUGIN={tmp_path / 'other' / 'libnccl-net.so'}\n",
            "hugevalue": "NCCL_SOCKET_IFNAME=" + "e" * 200_000 + "\n",
        }
        other = tmp_path / "other"
        other.mkdir(mode=0o755)
        plugin = other / "libnccl-net.so"
        shutil.copy(lib, plugin)
        os.chown(plugin, OTHER_UID, OTHER_UID)
        for name, body in attacks.items():
            (d.profile_dir / f"{name}.env").write_text(
                f"# description: {name}\nNCCL_ALGO=Ring\n{body}"
            )
            r = d.ctl("profile", "validate", str(d.profile_dir / f"{name}.env"))
            assert r.returncode != 0, (name, r.stdout, r.stderr)
            assert f"{name}.env:3" in r.stdout + r.stderr, (name, r.stdout, r.stderr)
            r = d.ctl("profile", "set", name, "-q")
            assert r.returncode == 2, (name, r.returncode, r.stdout, r.stderr)
        # a profile file of another uid, or one anybody may write, is not served
        for name, how in (("owned", "chown"), ("world", "chmod")):
            f = d.profile_dir / f"{name}.env"
            f.write_text("# description: fine content\nNCCL_ALGO=Ring\n")
            if how == "chown":
                os.chown(f, OTHER_UID, OTHER_UID)
            else:
                f.chmod(0o666)
            r = d.ctl("profile", "set", name, "-q")
            assert r.returncode == 2 and "refused" in r.stdout + r.stderr, (name, r.stderr)
        st = d.status()
        assert (st["state"], st["engine"]["pid"]) == ("READY", before)
        assert not marker.exists()


def test_verify_finds_a_variable_the_daemon_did_not_compose(tmp_path: Path) -> None:
    composed = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NCCL_ALGO": "Ring"}
    child = "import time, subprocess, sys; time.sleep(60)"
    clean = subprocess.Popen([sys.executable, "-c", child], env=composed)
    dirty = subprocess.Popen(
        [sys.executable, "-c", child], env={**composed, "PYTHONSTARTUP": "/tmp/x.py"}
    )
    try:
        ok = verify.check_process_env(clean.pid, {"NCCL_ALGO": "Ring"}, composed=list(composed))
        assert ok.ok, ok.message
        bad = verify.check_process_env(dirty.pid, {"NCCL_ALGO": "Ring"}, composed=list(composed))
        assert not bad.ok and bad.reason == "env_mismatch"
        assert "PYTHONSTARTUP" in bad.message and "what fastverifyd composed" in bad.message
    finally:
        for p in (clean, dirty):
            p.kill()
            p.wait()
