"""A real fastverifyd reads a file that names keys by their old [daemon] names: it serves
with them, logs one note per old name, and a SIGHUP with a key given by both names is
refused naming both, the running configuration kept."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.support.harness import DaemonHarness, to_toml


def test_old_names_serve_are_noted_and_both_names_are_refused(tmp_path: Path) -> None:
    d = DaemonHarness(tmp_path, metrics=False, start=False)
    server = {"port": d.config["server"]["port"], "tp_size": 2}
    old = {"server": server, "daemon": {"profile_dirs": [str(d.profile_dir)],
           "restart_backoff_s": [0.1, 0.5], "stop_grace_s": 5, "readiness_timeout_s": 30,
           "gpu_release_timeout_s": 2, "watch_interval_s": 0}}  # fmt: skip
    d.config_path.write_text(to_toml(old), encoding="utf-8")
    try:
        d.start()
        log = d.log_text()
        for name, new in (
            ("daemon.restart_backoff_s", "[restart] backoff_s"),
            ("daemon.watch_interval_s", "[watch] interval_s"),
        ):
            assert f"{name} is now {new} (the old name still works)" in log, log
        st = d.status()
        assert st["state"] == "READY" and st["config"]["error"] is None
        pid = d.engine_pid()
        d.config_path.write_text(to_toml(old) + "\n[restart]\nstop_grace_s = 7\n")
        os.kill(d.pid, signal.SIGHUP)
        st = d.wait_for(
            lambda: (s := d.status())["config"]["error"] and s, 15, "the reload refused"
        )
        why = st["config"]["error"]
        assert "keeping the previous configuration" in why, why
        assert "daemon.stop_grace_s: set twice" in why and "restart.stop_grace_s" in why, why
        assert st["state"] == "READY" and d.engine_pid() == pid
    finally:
        d.close()
