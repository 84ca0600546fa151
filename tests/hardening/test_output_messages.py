"""Help and error messages name what exists: options, did-you-mean, missing files and profiles."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.harness import REPO, DaemonHarness, _scrubbed_env, run_ctl


def test_messages_name_the_options_that_exist(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=6.0, metrics=False) as d:
        same = d.ctl("profile", "set", "nccl-default")
        assert same.returncode == 0, same.stdout + same.stderr
        assert "--restart" in same.stdout and "ask with restart" not in same.stdout, same.stdout
        assert d.ctl("profile", "set", "ring-ll", "--no-wait").returncode == 0
        busy = d.ctl("profile", "set", "ring-simple")
        assert busy.returncode == 4, busy.stdout + busy.stderr
        assert "--queue" in busy.stderr and "ask to queue" not in busy.stderr, busy.stderr
        d.wait_state("READY", timeout=60)


def test_profile_validate_of_a_missing_env_file_says_it_does_not_exist(tmp_path: Path) -> None:
    r = run_ctl("profile", "validate", "nosuch.env")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "nosuch.env does not exist" in r.stderr, r.stderr
    assert "without '.env'" not in r.stderr, r.stderr
    # the hint stays where it is true: a shipped profile's name with .env and no such file
    named = run_ctl("profile", "validate", "ring-ll.env")
    assert named.returncode == 2 and "without '.env'" in named.stderr, named.stderr


def test_every_fastverifyd_option_has_help() -> None:
    from fastverify.daemon.main import build_parser

    r = subprocess.run(
        [sys.executable, "-m", "fastverify.daemon.main", "--help"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    actions = [a for a in build_parser()._actions if a.option_strings]
    assert len(actions) >= 10
    assert [a.option_strings for a in actions if not a.help] == []
    # every flag is in the help the user sees, followed by text
    for a in actions:
        flag = a.option_strings[-1]
        assert re.search(rf"^\s+(-\w, )?{re.escape(flag)}\b.*", r.stdout, re.M), flag
    assert r.stdout.count("\n  --") >= len(actions) - 2  # one entry per flag (-h, --version)


def test_a_misspelt_command_config_key_or_values_key_gets_did_you_mean(tmp_path: Path) -> None:
    r = run_ctl("stauts")
    assert r.returncode == 2 and "No such command 'stauts' (did you mean status" in r.stderr
    r = run_ctl("profile", "sett", "ring-ll")
    assert r.returncode == 2 and "(did you mean set?)" in r.stderr, r.stderr
    values = tmp_path / "values.yaml"
    values.write_text("tolerattions: []\n")
    r = run_ctl("render", "kubernetes", "--output-dir", str(tmp_path / "k"), "--image",
                "registry.example.com/fv:1", "--values", str(values))  # fmt: skip
    assert r.returncode == 2 and "tolerattions (did you mean tolerations?)" in r.stderr, r.stderr
    config = tmp_path / "fastverifyd.toml"
    config.write_text("[daemon]\nwatch_intervall_s = 3\n[servr]\nport = 1\n")
    r = subprocess.run(
        [sys.executable, "-m", "fastverify.daemon.main", "--config", str(config)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**_scrubbed_env(), "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert f"{config}:2: daemon.watch_intervall_s: unknown key 'watch_intervall_s' (did you " \
           "mean watch_interval_s? known: " in r.stderr, r.stderr  # fmt: skip
    assert "unknown key 'servr' (did you mean server? known tables:" in r.stderr


def test_small_things_a_user_reads(tmp_path: Path) -> None:
    # the top-level help names every target of render
    top = run_ctl("--help")
    line = next(x for x in top.stdout.splitlines() if x.strip().startswith("render"))
    assert "Kubernetes" in line and "compose" in line, line
    # a missing profile is named, without a line number of a file that does not exist
    miss = run_ctl("profile", "show", "nosuch")
    assert miss.returncode == 2
    assert miss.stderr.startswith("nosuch: no profile named 'nosuch'"), miss.stderr
    assert ":0:" not in miss.stderr
    # trace analyze --span X says "per X by backend", never "per verify"
    from tests.fixtures import tracegen

    doc, _ = tracegen.build_rank(0, verify_us=[30_000.0] * 2, ar_per_verify=122,
                                 ar_dur_us=12.0, family="pcie_ipc", naming="0.5.23")  # fmt: skip
    doc = json.loads(json.dumps(doc).replace("step[VERIFY", "step[DECODE"))
    tracegen.write(tmp_path / "c-TP-0.trace.json.gz", doc)
    tr = run_ctl("trace", "analyze", "--span", "DECODE", str(tmp_path))
    assert tr.returncode == 0, tr.stderr
    assert "rank 0: per DECODE by backend: FlashInfer PCIe-IPC 122.0" in tr.stdout, tr.stdout
    assert "verify" not in tr.stdout, tr.stdout
