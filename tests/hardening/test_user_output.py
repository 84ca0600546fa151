"""What a user sees must be true: real `fastverifyctl` against a real daemon on the
sim engine. A failed (or cancelled) switch's excerpt comes from the engine that failed, `-q`
prints the result alone, piped output says each thing once, trials are labelled where people
look, `--socket` works where the error message says to pass it, messages name real options."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import REPO, DaemonHarness, _scrubbed_env, run_ctl

TIMESTAMP = re.compile(r"^\[\s*\d+\.\d+s\] ")


def excerpt_of(stderr: str) -> tuple[str, list[str]]:
    """(header, lines) of the `last engine log lines (...)` block."""
    _before, found, rest = stderr.partition("last engine log lines (")
    assert found, f"no excerpt in:\n{stderr}"
    header, _, body = rest.partition("\n")
    lines = []
    for line in body.splitlines():
        if not line.startswith("  | "):
            break
        lines.append(line[4:])
    return header, lines


def log_lines(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()


def last_switch(d: DaemonHarness, profile: str) -> dict:
    """The newest history record of a switch to `profile` (waits for it: READY is published
    before the record is appended)."""

    def find() -> dict | None:
        recs = [r for r in d.client.get("/v1/history") if r.get("profile") == profile]
        return recs[-1] if recs and recs[-1].get("kind") == "switch" else None

    return d.wait_for(find, 15, f"the history record of the switch to {profile}")


# ------------------------------------------------------------------ item 1: the right log


def test_failed_switch_excerpt_is_the_failed_engines_own_log(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        assert d.ctl("profile", "set", "ring-ll", "-q").returncode == 0
        r = d.ctl("profile", "set", "tree-ll")
        assert r.returncode == 1, r.stdout + r.stderr
        header, lines = excerpt_of(r.stderr)
        rec = last_switch(d, "tree-ll")
        assert rec["result"] == "rolled_back" and rec["log"], rec
        assert header.startswith(f"tree-ll/baseline, {rec['log']}"), header
        failed = log_lines(rec["log"])
        assert lines and all(line in failed for line in lines), (lines, failed[-15:])
        assert lines == [ln for ln in failed if ln.strip()][-len(lines) :]  # its last lines
        assert any("Capture cuda graph failed" in ln for ln in lines), lines
        # nothing of the rollback server's start-up (its own, different log file)
        rollback_log = d.status()["engine"]["log"]
        assert rollback_log != rec["log"]
        text = "\n".join(lines)
        for startup in ("Uvicorn running", "fired up and ready to roll", "Started server"):
            assert startup not in text, text

        q = d.ctl("profile", "set", "tree-ll", "-q")
        assert q.returncode == 1 and q.stdout == "", q.stdout
        assert "last engine log lines" not in q.stderr and "  | " not in q.stderr, q.stderr
        assert q.stderr.splitlines()[0].startswith("rolled_back: tree-ll/baseline failed:")
        assert all(ln.startswith(("rolled_back:", "  log line:")) for ln in q.stderr.splitlines())


def test_cancelled_switch_excerpt_is_the_cancelled_engines_log(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, sim_load_seconds=6.0, metrics=False) as d:
        before = d.status()["engine"]["log"]
        switch = subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket),
             "profile", "set", "ring-simple"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**_scrubbed_env(), "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        try:
            st = d.wait_for(
                lambda: (
                    (s := d.status())["state"] == "STARTING"
                    and s["engine"]["log"] not in (None, before)
                    and "Load weight begin" in Path(s["engine"]["log"]).read_text()
                    and s
                ),
                30,
                "the ring-simple engine to be loading weights",
            )
            loading_log = st["engine"]["log"]
            c = d.ctl("cancel")
            assert c.returncode == 0, c.stdout + c.stderr
            out, err = switch.communicate(timeout=120)
        finally:
            if switch.poll() is None:
                switch.kill()
        assert switch.returncode == 7, out + err  # EXIT_CANCELLED
        header, lines = excerpt_of(err)
        assert header.startswith(f"ring-simple/baseline, {loading_log}"), header
        cancelled = log_lines(loading_log)
        assert lines and all(line in cancelled for line in lines), (lines, cancelled[-15:])
        assert not any("fired up and ready to roll" in ln for ln in lines), lines
        assert d.status()["engine"]["log"] != loading_log  # the previous profile is back


# ------------------------------------------------------------------ item 6: said once


def test_piped_profile_set_says_each_thing_once(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("profile", "set", "ring-ll")
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout.splitlines()
        assert sum("hold exactly NCCL_ALGO=Ring" in ln for ln in out) == 1, r.stdout
        assert sum("engine pid" in ln or "engine started" in ln for ln in out) == 1, r.stdout
        assert sum("is serving" in ln for ln in out) == 1, r.stdout
        assert out[-1].startswith("ok: ring-ll/baseline is serving"), r.stdout
        bodies = [TIMESTAMP.sub("", ln).removeprefix("  * ") for ln in out]
        assert len(bodies) == len(set(bodies)), r.stdout
        # a rollback says "serving again" in its state line and the result, not a third time
        t = d.ctl("profile", "set", "tree-ll")
        assert t.returncode == 1
        assert "rolled back: ring-ll/baseline is serving" not in t.stdout, t.stdout


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


def test_sweep_progress_is_one_count_that_reaches_its_total(tmp_path: Path) -> None:
    cfg = {"daemon": {"default_profile": "ring-ll"}}
    with DaemonHarness(tmp_path, sim_load_seconds=0.2, metrics=False, config=cfg) as d:
        r = d.ctl(
            "sweep", "ring-ll", "tree-ll", "ring-simple", "--repeats", "2", "--duration", "0.5",
            "--output-len", "16", "--warmup", "0", "--then-eagle3", "2", "--no-plot",
            "--output", str(tmp_path / "sw"), timeout=600,
        )  # fmt: skip
        assert r.returncode == 1, r.stdout + r.stderr  # tree-ll fails (CUDA-graph capture)
        labels = [
            m.group(1, 2)
            for ln in r.stderr.splitlines()
            if (m := re.match(r"^\[(\d+)/(\d+)(?: \w+)?\] ", ln))
        ]
        assert labels, r.stderr
        assert all(int(a) <= int(b) for a, b in labels), labels
        done = [int(a) for a, _ in labels]
        assert done == sorted(done), r.stderr  # never goes back
        # 3 profiles + 2 EAGLE-3, 2 repeats each = 10 planned; tree-ll's 2 are dropped
        assert labels[0] == ("0", "10"), labels
        assert labels[-1] == ("8", "8"), labels
        assert not re.search(r"^sweep: \d+/\d+ measurements", r.stderr, re.M), r.stderr
        failed_line = [ln for ln in r.stderr.splitlines() if "tree-ll/baseline: FAILED" in ln]
        assert len(failed_line) == 1 and failed_line[0].count("cuda_graph_capture") == 1, r.stderr
        failures = [ln for ln in r.stdout.splitlines() if "tree-ll/baseline failed" in ln]
        assert failures and all(ln.count("failed") == 1 for ln in failures), r.stdout
        assert all(ln.count("cuda_graph_capture") == 1 for ln in failures), r.stdout


# ------------------------------------------------------------------ item 3: trials labelled


def test_a_trial_is_labelled_in_profile_set_status_and_history(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl("profile", "set", "ring-ll", "--trial")
        assert r.returncode == 0, r.stdout + r.stderr
        ok = [ln for ln in r.stdout.splitlines() if ln.startswith("ok: ")]
        assert ok == [ok[0]] and "dummy weights" in ok[0] and "trial" in ok[0], r.stdout
        st = d.ctl("status")
        assert st.returncode == 0
        weights = [ln for ln in st.stdout.splitlines() if ln.startswith("weights:")]
        assert weights and "dummy" in weights[0] and "profile set ring-ll" in weights[0], st.stdout
        last_switch(d, "ring-ll")
        h = d.ctl("history")
        head, *rows = h.stdout.splitlines()
        doc = (REPO / "docs" / "guides" / "tour.md").read_text(encoding="utf-8")
        tour = doc[doc.index("$ fastverifyctl history\n") :].splitlines()[1]
        assert head == tour, (head, tour)  # the tour (docs/guides/tour.md) shows the same columns
        col = head.split("\t").index("weights")
        by_profile = {row.split("\t")[2]: row.split("\t")[col] for row in rows}
        assert by_profile["ring-ll/baseline"] == "dummy (trial)", h.stdout
        assert by_profile["nccl-default/baseline"] == "real", h.stdout
        # back to real weights: the label goes away
        assert d.ctl("profile", "set", "ring-ll", "-q").returncode == 0
        assert "weights:" not in d.ctl("status").stdout


def test_bench_on_dummy_weights_says_the_daemon_is_left_on_them(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = d.ctl(
            "bench", "--load-format", "dummy", "-c", "1", "-n", "1", "--output-len", "8",
            "--warmup", "0", timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        assert "left serving nccl-default/baseline on dummy weights" in r.stderr, r.stderr
        assert "`fastverifyctl profile set nccl-default`" in r.stderr, r.stderr
        assert d.status()["trial"] is True


# ------------------------------------------------------------------ item 5: --socket


@pytest.mark.parametrize(
    "args",
    [
        ("status",), ("history",), ("cancel",), ("logs",), ("restart",), ("mode", "get"),
        ("mode", "set", "eagle3"), ("server", "check"), ("profile", "set", "ring-ll"),
        ("profile", "current"), ("trace", "capture"),
    ],
)  # fmt: skip
def test_socket_is_accepted_on_the_subcommand(tmp_path: Path, args: tuple[str, ...]) -> None:
    sock = tmp_path / "nobody.sock"
    after = run_ctl(*args, "--socket", str(sock))
    before = run_ctl("--socket", str(sock), *args)
    assert "No such option" not in after.stderr, after.stderr
    assert after.returncode == before.returncode == 3, after.stderr + before.stderr
    assert str(sock) in after.stderr and str(sock) in before.stderr


def test_socket_of_the_subcommand_reaches_the_daemon(tmp_path: Path) -> None:
    with DaemonHarness(tmp_path, metrics=False) as d:
        r = run_ctl("status", "--socket", str(d.socket), "--json")
        assert r.returncode == 0, r.stderr
        assert '"state": "READY"' in r.stdout
        # it wins over the group's option and over FASTVERIFY_SOCKET
        wrong = str(tmp_path / "wrong.sock")
        r = run_ctl("--socket", wrong, "history", "--socket", str(d.socket),
                    env={"FASTVERIFY_SOCKET": wrong})  # fmt: skip
        assert r.returncode == 0, r.stderr
        r = run_ctl("profile", "list", "--socket", str(d.socket))
        assert r.returncode == 0 and "*\tnccl-default" in r.stdout, r.stdout
        env = run_ctl("status", env={"FASTVERIFY_SOCKET": str(d.socket)})
        assert env.returncode == 0 and "READY" in env.stdout, env.stderr


def test_unreachable_message_and_help_name_what_works(tmp_path: Path) -> None:
    sock = tmp_path / "nobody.sock"
    r = run_ctl("status", "--socket", str(sock))
    assert "--socket PATH" in r.stderr and "FASTVERIFY_SOCKET" in r.stderr, r.stderr
    assert "FASTVERIFY_SOCKET" in run_ctl("--help").stdout
    assert "FASTVERIFY_SOCKET" in run_ctl("status", "--help").stdout
    doc = (REPO / "docs" / "guides" / "daemon.md").read_text()  # how fastverifyctl finds the daemon
    assert "FASTVERIFY_SOCKET" in doc
