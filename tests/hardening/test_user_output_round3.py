"""Small truths a new user reads, through the real fastverifyctl (and fastverifyd):

- a misspelt command, config key or values key is answered with what was probably meant;
- `status` of an EAGLE-3 server says its draft steps are fixed (an adaptive one's time at
  each step count says whose it is);
- `history` shows a timing trial's own draft steps.

(`sglang facts 0.5.x` and the range as releases read: tests/unit/sglang/test_facts.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.harness import REPO, DaemonHarness, _scrubbed_env, run_ctl


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


def test_status_says_fixed_steps_and_history_a_trials_steps(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, config={"server": {"mode": "eagle3"}}) as d:
        text = d.ctl("status").stdout
        # EAGLE-3 runs its configured steps (SGLang's gauge reads 0 while it is idle)
        assert "draft steps: 3 (fixed: --speculative-num-steps)" in text, text
        assert "time at steps" not in text  # time at each step count: adaptive only
        body = {"name": "nccl-default", "mode": "eagle3", "load_format": "dummy",
                "eagle3_steps": 2, "wait": True}  # fmt: skip
        assert d.client.post("/v1/profile", body)["result"] == "ok"
        last = d.ctl("history").stdout.splitlines()[-1].split("\t")
        assert last[1:5] == ["switch", "nccl-default/eagle3", "dummy (trial, 2 steps)", "ok"], last
        assert "draft steps: 2 (fixed" in d.ctl("status").stdout
