"""The whole loop against a real SGLang server, driven only through `fastverifyctl`.

    python benchmarks/gpu/real_sglang.py --engine sglang --python SERVER_PY \\
        --model DIR [--draft DIR] --work DIR [--steps a,b,...] [--budget-s 540]
    python benchmarks/gpu/real_sglang.py --engine sim --work DIR     # the same steps on the sim

Starts one `fastverifyd` (a temporary state dir and socket) with `--engine sglang` and
`server.python` = SERVER_PY (a wrapper that puts SGLang on its path), then runs the steps
below in order, each recorded ok / failed / not run with its evidence, into
`WORK/results.json` (rewritten after every step, so a run cut short keeps what it did) and
the raw outputs (server logs, /metrics, /model_info, /server_info, meta_info, traces,
history) under `WORK/raw/`. `benchmarks/gpu/real_sglang.sh` is the GPU machine's entry point
(it unpacks the SGLang pack and writes the wrapper).

Each step is a function of the `Run`; `--steps` picks some, `--budget-s` ends the run in
time (a step that needs more than is left is recorded `not run`).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.harness import DaemonHarness, to_toml  # noqa: E402

# SGLang flags for a tiny dummy model on one GPU (the pack's smoke test found them):
# no tokenizer files, triton attention (the pack's kernel wheel has no FlashAttention-3),
# pytorch sampling, no grammar backend, a small memory share.
TINY_SGLANG_ARGS = [
    "--skip-tokenizer-init", "--attention-backend", "triton", "--sampling-backend", "pytorch",
    "--grammar-backend", "none", "--mm-feature-transport", "cpu",
    "--mem-fraction-static", "0.2", "--max-total-tokens", "65536",
    "--max-running-requests", "16", "--cuda-graph-max-bs-decode", "8",
]  # fmt: skip
REALISTIC_SGLANG_ARGS = [
    "--skip-tokenizer-init", "--attention-backend", "triton", "--sampling-backend", "pytorch",
    "--grammar-backend", "none", "--mm-feature-transport", "cpu",
    "--mem-fraction-static", "0.6", "--max-running-requests", "32",
    "--cuda-graph-max-bs-decode", "32",
]  # fmt: skip
# A draft whose target_hidden_size disagrees with the target: the target loads, then the
# drafter's first forward (its CUDA-graph capture) fails, after the load.
BROKEN_DRAFT_PATCH = {"target_hidden_size": 512}
# An SGLang flag value its own parser refuses (argparse choices).
PARSER_REFUSED_ARGS = ["--attention-backend", "no-such-backend"]
# SGLang's resolution refuses the weight cache together with speculative decoding.
RESOLVE_REFUSED_ARGS = ["--weight-cache-mode", "client"]
ADAPTIVE_CONFIG = {
    "1": {"candidate_steps": [1, 3]},
    "4": {"candidate_steps": [0, 1]},
    "warmup_batches": 2,
    "update_interval": 2,
}


# SGLang 0.5.17's ready-file path of a weight-cache rank (srt/weight_cache/protocol.py)
WEIGHT_CACHE_READY = "/tmp/sglang_weight_cache_rank{global_rank}.ready"


class StepFailed(Exception):
    def __init__(self, reason: str, **evidence: Any):
        super().__init__(reason)
        self.reason = reason
        self.evidence = evidence


def check(cond: Any, reason: str, **evidence: Any) -> None:
    if not cond:
        raise StepFailed(reason, **evidence)


class Run:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work = Path(args.work).resolve()
        self.raw = self.work / "raw"
        self.raw.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.results: dict[str, Any] = {
            "label": args.label,
            "engine": args.engine,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": _host(),
            "steps": [],
        }
        self.d: DaemonHarness | None = None
        self.base_config: dict[str, Any] = {}
        self.timeout = args.start_timeout
        self.last_result: dict[str, Any] | None = None  # the last switch's --json result

    # ------------------------------------------------------------------ bookkeeping
    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.t0)

    def save(self) -> None:
        self.results["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        path = self.work / "results.json"
        path.write_text(json.dumps(self.results, indent=1, default=str) + "\n")

    def step(self, name: str, fn: Callable[[], dict[str, Any]], need_s: float) -> None:
        rec: dict[str, Any] = {"step": name}
        if self.args.steps and name not in self.args.steps:
            return
        if self.left() < need_s:
            rec.update(status="not run", reason=f"{self.left():.0f} s left, needs ~{need_s:.0f}")
        else:
            t = time.monotonic()
            print(f"== {name} ({self.left():.0f} s left)", flush=True)
            try:
                rec.update(status="ok", evidence=fn())
            except StepFailed as exc:
                rec.update(status="failed", reason=exc.reason, evidence=exc.evidence)
            except Exception as exc:  # a bug of this script or of fastverify: recorded
                rec.update(
                    status="failed",
                    reason=f"{type(exc).__name__}: {exc}"[:3000],
                    traceback=traceback.format_exc()[-4000:],
                )
            rec["wall_s"] = round(time.monotonic() - t, 1)
            print(f"   {rec['status']} in {rec['wall_s']} s {rec.get('reason', '')}", flush=True)
        self.results["steps"].append(rec)
        self.save()

    def dump(self, name: str, data: Any) -> str:
        path = self.raw / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        elif isinstance(data, str):
            path.write_text(data)
        else:
            path.write_text(json.dumps(data, indent=1, default=str) + "\n")
        return name

    # ------------------------------------------------------------------ daemon access
    @property
    def daemon(self) -> DaemonHarness:
        assert self.d is not None, "the daemon did not start"
        return self.d

    def ctl(self, *args: str, timeout: float | None = None) -> tuple[int, Any, str]:
        """fastverifyctl ARGS --json: (exit code, parsed stdout or text, stderr)."""
        p = self.daemon.ctl(*args, timeout=timeout or self.timeout)
        out: Any = p.stdout
        with contextlib.suppress(ValueError):
            out = json.loads(p.stdout)
        return p.returncode, out, p.stderr

    def background_bench(self, concurrency: int, seconds: int) -> subprocess.Popen:
        """`fastverifyctl bench` running while another command samples the server."""
        d = self.daemon
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        return subprocess.Popen(
            [sys.executable, "-m", "fastverify.ctl", "--socket", str(d.socket), "bench",
             "-c", str(concurrency), "-d", str(seconds), "--input-len", "32",
             "--output-len", "512"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip

    def our_engines(self) -> dict[str, list[int]]:
        """Live processes of the engines this run's daemon started (their engine id, which
        every engine log's name ends with), by engine id."""
        import psutil

        logs = (self.work / "daemon" / "state" / "logs").glob("*.log")
        started = {p.stem.rsplit("-", 1)[-1] for p in logs}
        groups: dict[str, list[int]] = {}
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                eid = p.environ().get("FASTVERIFY_ENGINE_ID", "")
                if eid[:6] in started and p.status() != psutil.STATUS_ZOMBIE:
                    groups.setdefault(eid, []).append(p.pid)
        return groups

    def serving_requests(self) -> bool:
        _code, text = _get_text(self.daemon.server_url + "/metrics")
        for ln in text.splitlines():
            if ln.startswith("sglang:num_running_reqs") and float(ln.rsplit(" ", 1)[-1]) > 0:
                return True
        return False

    def status(self) -> dict[str, Any]:
        rc, st, err = self.ctl("status", "--json", timeout=30)
        check(rc == 0 and isinstance(st, dict), f"status exit {rc}: {err[-500:]}")
        return st

    def history(self, n: int = 1) -> list[dict[str, Any]]:
        rc, h, err = self.ctl("history", "--json", "-n", str(n), timeout=30)
        check(rc == 0, f"history exit {rc}: {err[-500:]}")
        return h if isinstance(h, list) else h.get("records", [])

    def server_get(self, path: str, timeout: float = 60) -> tuple[int, Any]:
        url = self.daemon.server_url + path
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                body = r.read()
                code = r.status
        except urllib.error.HTTPError as exc:
            body, code = exc.read(), exc.code
        try:
            return code, json.loads(body)
        except ValueError:
            return code, body.decode(errors="replace")

    def server_post(self, path: str, body: Any, timeout: float = 120) -> tuple[int, Any]:
        req = urllib.request.Request(
            self.daemon.server_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def engine_log(self, st: dict[str, Any] | None = None) -> str:
        st = st or self.status()
        path = (st.get("engine") or {}).get("log")
        return Path(path).read_text(errors="replace") if path and Path(path).exists() else ""

    def keep_engine_log(self, name: str, st: dict[str, Any] | None = None) -> str:
        return self.dump(name, self.engine_log(st))

    def reconfigure(self, **server: Any) -> None:
        """Rewrite the daemon's config (server keys over the base) and SIGHUP it."""
        cfg = json.loads(json.dumps(self.base_config))
        cfg["server"].update(server)
        self.daemon.config_path.write_text(to_toml(cfg), encoding="utf-8")
        before = self.daemon.log_text().count("SIGHUP: configuration reloaded")
        os.kill(self.daemon.pid, signal.SIGHUP)
        self.daemon.wait_for(
            lambda: (
                self.daemon.log_text().count("SIGHUP: configuration reloaded") > before
                or "reload refused" in self.daemon.log_text()
            ),
            60,
            "the daemon to reload its configuration",
        )

    # ------------------------------------------------------------------ the steps
    def config(self) -> dict[str, Any]:
        a = self.args
        server: dict[str, Any] = {"tp_size": 1, "extra_args": list(a.sglang_args)}
        if a.engine == "sglang":
            server.update(python=a.python, model_path=a.model)
        else:
            server.update(model_path=a.model or "sim/tiny-llama")
        if a.draft:
            server["draft_model_path"] = a.draft
        if a.load_format:
            server["load_format"] = a.load_format
        server["eagle3"] = {"num_steps": 3, "topk": 1, "num_draft_tokens": 4}
        daemon = {
            "readiness_timeout_s": a.start_timeout,
            "default_profile": "nccl-default",
            "stop_grace_s": 15,
            "gpu_release_timeout_s": 60,
            "trace_period_s": 0,
            "watch_interval_s": 5,
            "watch_timeout_s": 10,
            "watch_failures": 2,
            "restart_backoff_s": [1, 10],
        }
        if a.engine == "sim":
            daemon["sim_sglang_version"] = a.sim_sglang_version
        return {"server": server, "daemon": daemon}

    def opening(self) -> dict[str, Any]:
        """Server keys the call's first start serves and no later start does (every later
        one reconfigures from `config()`): none here; a script whose first step wants its
        own engine names them, so that the start serves it (a restart of the 8B shape costs
        ~60 s of a 10-minute call)."""
        return {}

    def s_start(self) -> dict[str, Any]:
        plain = self.config()
        opening = self.opening()
        self.base_config = json.loads(json.dumps(plain))
        self.base_config["server"].update(opening)
        tmp = self.work / "daemon"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.d = DaemonHarness(
            tmp,
            engine=self.args.engine,
            tp_size=1,
            config=self.base_config,
            start=False,
            sim_load_seconds=self.args.sim_load_seconds,
        )
        self.base_config = self.d.config
        for key in opening:  # later starts: the plain config's (a key it lacks is dropped)
            if key in plain["server"]:
                self.base_config["server"][key] = plain["server"][key]
            else:
                self.base_config["server"].pop(key, None)
        t = time.monotonic()
        self.d.start(wait_ready=False, timeout=60)
        # the first FAILED ends the step: the daemon's retries of a server that cannot import
        # or load would spend the call's time on the same error
        st = self.d.wait_state(["READY", "FAILED"], self.timeout)
        wall = time.monotonic() - t
        check(st["state"] == "READY", f"the first start failed: {st.get('last_failure')}",
              log_tail=self.d.log_text()[-3000:])  # fmt: skip
        eng = st["engine"]
        code_mi, model_info = self.server_get("/model_info")
        if code_mi == 404:
            code_mi, model_info = self.server_get("/get_model_info")
        code_hg, _health = self.server_get("/health_generate")
        code_si, server_info = self.server_get("/server_info")
        if code_si == 404:
            code_si, server_info = self.server_get("/get_server_info")
        self.dump("model_info.json", model_info)
        self.dump("server_info.json", server_info)
        self.dump("status-first-start.json", st)
        first_log = self.engine_log(st)
        self.dump("server-info-first-start.log", first_log)
        check(st["state"] == "READY", f"state {st['state']}", status=st)
        check(code_mi == 200 and code_hg == 200, f"/model_info {code_mi}, health {code_hg}")
        return {
            "daemon_start_to_ready_s": round(wall, 1),
            "engine_start_seconds": eng.get("start_seconds"),
            "ready_by": eng.get("ready_by"),
            "engine": {k: eng.get(k) for k in ("name", "simulated", "weights", "pid")},
            "sglang_version": (eng.get("engine_env") or {}).get("version"),
            "model_info_keys": sorted(model_info) if isinstance(model_info, dict) else None,
            "health_generate": code_hg,
            "load_lines": _load_lines(first_log),
            "history": self.history(1),
        }

    def s_env(self) -> dict[str, Any]:
        import psutil

        st = self.status()
        pid = st["engine"]["pid"]
        rc, prof, err = self.ctl("profile", "show", st["profile"], "--json", timeout=60)
        check(rc == 0, f"profile show exit {rc}: {err[-300:]}")
        want = {
            k: v
            for k, v in (prof.get("env") or prof.get("effective") or {}).items()
            if k.startswith("NCCL_")
        }
        added = (st["engine"].get("engine_env") or {}).get("added") or {}
        procs = []
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            try:
                env = p.environ()
                nccl = {k: v for k, v in env.items() if k.startswith("NCCL_")}
                procs.append(
                    {
                        "pid": p.pid,
                        "name": p.name(),
                        "cmdline": " ".join(p.cmdline())[:200],
                        "nccl": nccl,
                        "profile_vars_match": all(nccl.get(k) == v for k, v in want.items()),
                        "engine_id": env.get("FASTVERIFY_ENGINE_ID"),
                    }
                )
            except psutil.Error as exc:
                procs.append({"pid": p.pid, "error": str(exc)})
        verify = ((self.last_result or {}).get("verify") or {}).get("env") or {}
        checked = [(c.get("pid"), c.get("name"), c.get("ok")) for c in verify.get("processes", [])]
        ev = {
            "profile_nccl": want,
            "engine_added": added,
            "processes_from_proc": procs,
            "daemon_verified": checked,
            "verify_message": verify.get("message"),
        }
        check(verify.get("ok") is True, "the daemon's verification is not ok", **ev)
        check(len(procs) >= 3, f"{len(procs)} processes (server, scheduler, detokenizer?)", **ev)
        missing = {p["pid"] for p in procs if "pid" in p} - {c[0] for c in checked}
        check(not missing, f"processes the daemon did not check: {sorted(missing)}", **ev)
        check(all(p.get("profile_vars_match") for p in procs), "a process lacks the profile", **ev)
        return ev

    def s_bench(self) -> dict[str, Any]:
        rc, out, err = self.ctl(
            "bench", "-c", "4", "-d", "15", "--input-len", "128", "--output-len", "128",
            "--json", timeout=300,
        )  # fmt: skip
        self.dump("bench-baseline.json", out)
        check(rc == 0 and isinstance(out, dict), f"bench exit {rc}: {err[-800:]}")
        return _bench_summary(out)

    def s_metrics(self) -> dict[str, Any]:
        code, text = _get_text(self.daemon.server_url + "/metrics")
        self.dump("sglang-metrics.txt", text)
        ecode, etext = _get_text(self.daemon.metrics_url)
        self.dump("exporter-metrics.txt", etext)
        sglang_names = sorted({ln.split("{")[0].split(" ")[0] for ln in text.splitlines()
                               if ln.startswith("sglang:")})  # fmt: skip
        fv = {ln.split(" ")[0]: ln.rsplit(" ", 1)[-1] for ln in etext.splitlines()
              if ln.startswith(("fastverify_generation_tokens_per_second", "fastverify_up",
                                "fastverify_engine_start_seconds"))}  # fmt: skip
        ev = {"sglang_series": sglang_names, "exporter_values": fv}
        check(code == 200 and sglang_names, f"engine /metrics {code}", **ev)
        check(ecode == 200 and fv, f"exporter /metrics {ecode}", **ev)
        return ev

    def s_trace(self, span: str = "DECODE", tag: str = "baseline") -> dict[str, Any]:
        load = self.background_bench(concurrency=2, seconds=60)
        self.daemon.wait_for(self.serving_requests, 120, "the background bench's requests")
        try:
            rc, out, err = self.ctl("trace", "capture", "--steps", "5", "--json", timeout=300)
        finally:
            load.terminate()
            load.wait(30)
        self.dump(f"trace-capture-{tag}.json", out)
        baseline_ok = isinstance(out, dict) and out.get("reason") == "baseline_mode"
        check((rc == 0 or baseline_ok) and isinstance(out, dict),
              f"trace capture exit {rc}: {err[-800:]}", capture=_trim(out))  # fmt: skip
        windows = sorted((self.daemon.state_dir / "traces").glob("window-*"))
        trace_dir = windows[-1] if windows else None
        ev: dict[str, Any] = {"capture": _trim(out)}
        files = sorted(Path(trace_dir).glob("*.trace.json.gz")) if trace_dir else []
        if files:
            shutil.copy(files[0], self.raw / f"trace-{tag}-TP-0.trace.json.gz")
            ev["span_names"] = _span_names(files[0])
            rc2, an, err2 = self.ctl("trace", "analyze", str(trace_dir), "--span", span, "--json")
            self.dump(f"trace-analyze-{tag}.json", an)
            ev["analyze"] = _trim(an)
            check(rc2 == 0, f"trace analyze exit {rc2}: {err2[-500:]}", **ev)
        check(files, f"no trace files under {trace_dir}", **ev)
        return ev

    def s_switch(self) -> dict[str, Any]:
        before = self.status()["engine"]["pid"]
        t = time.monotonic()
        rc, out, _err = self.ctl("profile", "set", "ring-ll", "--json")
        wall = time.monotonic() - t
        st = self.status()
        log = self.engine_log(st)
        self.dump("server-ring-ll.log", log)
        self.last_result = out if isinstance(out, dict) else None
        ev = {"exit": rc, "wall_s": round(wall, 1), "result": _trim(out), "state": st["state"],
              "profile": st["profile"], "pid_changed": st["engine"]["pid"] != before,
              "load_lines": _load_lines(log)}  # fmt: skip
        check(rc == 0 and st["profile"] == "ring-ll" and ev["pid_changed"], "switch", **ev)
        return ev

    def _refused(self, server: dict[str, Any], ctl_args: list[str], tag: str) -> dict[str, Any]:
        before = self.status()
        self.reconfigure(**server)
        try:
            t = time.monotonic()
            rc, out, err = self.ctl(*ctl_args, "--json")
            wall = time.monotonic() - t
            after = self.status()
        finally:
            self.reconfigure()
        self.dump(f"refused-{tag}.json", {"exit": rc, "stdout": out, "stderr": err})
        ev = {
            "exit": rc,
            "wall_s": round(wall, 1),
            "message": (json.dumps(out) if isinstance(out, dict) else str(out))[-1500:],
            "stderr": err[-1500:],
            "same_pid": after["engine"]["pid"] == before["engine"]["pid"],
            "state": after["state"],
        }
        check(rc != 0 and ev["same_pid"] and after["state"] == "READY", "not refused", **ev)
        return ev

    def s_parser_refusal(self) -> dict[str, Any]:
        args = [*self.args.sglang_args, *PARSER_REFUSED_ARGS]
        return self._refused({"extra_args": args}, ["restart"], "parser")

    def s_resolve_refusal(self) -> dict[str, Any]:
        args = [*self.args.sglang_args, *RESOLVE_REFUSED_ARGS]
        return self._refused({"extra_args": args}, ["mode", "set", "eagle3"], "resolve")

    def s_fails_after_load(self) -> dict[str, Any]:
        draft = self.args.draft
        check(draft, "no --draft: nothing to break")
        broken = self.work / "broken-draft"
        shutil.rmtree(broken, ignore_errors=True)
        if Path(draft).is_dir():
            shutil.copytree(draft, broken)
            cfg = json.loads((broken / "config.json").read_text())
            cfg.update(BROKEN_DRAFT_PATCH)
            (broken / "config.json").write_text(json.dumps(cfg, indent=1))
            path = str(broken)
        else:  # the sim's hub-style name: its injected after-load failure stands in
            path = draft
        before = self.status()
        self.reconfigure(draft_model_path=path)
        action = ["restart"] if before["mode"] == "eagle3" else ["mode", "set", "eagle3"]
        try:
            t = time.monotonic()
            rc, out, err = self.ctl(*action, "--json")
            wall = time.monotonic() - t
        finally:
            self.reconfigure()
        st = self.daemon.wait_state("READY", self.timeout)
        hist = self.history(3)
        self.dump("fails-after-load.json", {"exit": rc, "stdout": out, "stderr": err, "hist": hist})
        failed = next((h for h in reversed(hist) if h.get("result") not in ("ok", None)), {})
        ev = {
            "exit": rc,
            "wall_s": round(wall, 1),
            "result": _trim(out),
            "failure": _trim(failed),
            "back_on": [st["profile"], st["mode"]],
            "rolled_back_to_last_good": [st["profile"], st["mode"]]
            == [before["profile"], before["mode"]],
        }
        check(rc == 1 and ev["rolled_back_to_last_good"], "no rollback", **ev)
        return ev

    def s_log_warning(self) -> dict[str, Any]:
        args = [*self.args.sglang_args, "--log-level", "warning"]
        self.reconfigure(extra_args=args)
        try:
            t = time.monotonic()
            rc, out, _err = self.ctl("restart", "--json")
            wall = time.monotonic() - t
            st = self.status()
            self.keep_engine_log("server-warning.log", st)
        finally:
            self.reconfigure()
        ev = {"exit": rc, "wall_s": round(wall, 1), "ready_by": st["engine"].get("ready_by"),
              "state": st["state"], "result": _trim(out)}  # fmt: skip
        check(rc == 0 and st["state"] == "READY", "not READY at --log-level warning", **ev)
        return ev

    def s_eagle3(self) -> dict[str, Any]:
        t = time.monotonic()
        rc, out, err = self.ctl("mode", "set", "eagle3", "--json")
        wall = time.monotonic() - t
        st = self.status()
        self.keep_engine_log("server-eagle3.log", st)
        first = None
        if rc != 0:
            # the drafter's CUDA-graph capture imports modules this machine may lack: record
            # that, then EAGLE-3 without CUDA graphs (a profile that requires them off)
            first = {"exit": rc, "result": _trim(out), "stderr": err[-800:]}
            (self.daemon.profile_dir / "eager.env").write_text(
                "# description: nccl-default without CUDA graphs\n# requires: cuda-graph=off\n"
            )
            t = time.monotonic()
            rc, out, err = self.ctl("profile", "set", "eager", "--mode", "eagle3", "--json")
            wall = time.monotonic() - t
            st = self.status()
            self.keep_engine_log("server-eagle3-eager.log", st)
        check(rc == 0 and st["mode"] == "eagle3", f"EAGLE-3 exit {rc}: {err[-800:]}",
              result=_trim(out), first_try=first)  # fmt: skip
        _code, gen = self.server_post(
            "/generate",
            {"input_ids": [1, 15, 27, 99, 5, 42, 7, 300],
             "sampling_params": {"max_new_tokens": 32, "temperature": 0, "ignore_eos": True}},
        )  # fmt: skip
        self.dump("generate-eagle3.json", gen)
        rc, bench, err = self.ctl(
            "bench", "-c", "2", "-d", "15", "--input-len", "64", "--output-len", "64",
            "--json", timeout=300,
        )  # fmt: skip
        self.dump("bench-eagle3.json", bench)
        check(rc == 0 and isinstance(bench, dict), f"bench exit {rc}: {err[-800:]}")
        meta = gen.get("meta_info", {}) if isinstance(gen, dict) else {}
        ev = {
            "switch_wall_s": round(wall, 1),
            "with_cuda_graphs": first is None,
            "first_try": first,
            "meta_info_keys": sorted(meta),
            "histogram_one_request": meta.get("spec_correct_drafts_histogram"),
            "spec_verify_ct": meta.get("spec_verify_ct"),
            "bench": _bench_summary(bench),
            "status_acceptance": _trim(st.get("acceptance") or st.get("speculation")),
        }
        check(meta.get("spec_correct_drafts_histogram") is not None, "no histogram", **ev)
        ev["trace"] = self.s_trace(span="TARGET_VERIFY", tag="eagle3")
        return ev

    def s_adaptive(self) -> dict[str, Any]:
        path = self.work / "adaptive-config.json"
        path.write_text(json.dumps(ADAPTIVE_CONFIG, indent=1))
        self.base_config["server"]["adaptive_config"] = str(path)
        self.reconfigure()
        t = time.monotonic()
        rc, out, err = self.ctl("mode", "set", "adaptive", "--json")
        wall = time.monotonic() - t
        check(rc == 0, f"mode set adaptive exit {rc}: {err[-800:]}", result=_trim(out))
        benches = {}
        for c in ("1", "8"):
            rc, b, err = self.ctl("bench", "-c", c, "-d", "12", "--input-len", "32",
                                  "--output-len", "64", "--json", timeout=300)  # fmt: skip
            benches[c] = _bench_summary(b) if rc == 0 and isinstance(b, dict) else err[-400:]
        st = self.status()
        log = self.keep_engine_log("server-adaptive.log", st)
        text = (self.raw / log).read_text()
        lines = [ln for ln in text.splitlines() if "adaptive" in ln.lower() or "steps" in ln][:60]
        ev = {
            "switch_wall_s": round(wall, 1),
            "benches": benches,
            "log_lines": lines,
            "status_speculation": _trim(st.get("speculation") or st.get("acceptance")),
        }
        return ev

    def s_spec_costs(self) -> dict[str, Any]:
        costs = self.work / "spec-costs.json"
        rc, out, err = self.ctl(
            "spec", "costs", "--max-steps", "2", "--batch-sizes", "1,4", "-d", "5",
            "--input-len", "32", "--output-len", "48", "--output", str(costs), "--json",
            "--warmup", "1",
            timeout=900,
        )  # fmt: skip
        self.dump("spec-costs-stdout.json", out)
        self.dump("spec-costs-stderr.txt", err)
        check(rc == 0 and costs.exists(), f"spec costs exit {rc}: {err[-800:]}")
        shutil.copy(costs, self.raw / "spec-costs.json")
        rc2, plan, err2 = self.ctl("spec", "plan", "--costs", str(costs), "--json", timeout=120)
        self.dump("spec-plan.json", {"exit": rc2, "stdout": plan, "stderr": err2})
        return {"costs": _trim(out), "plan_exit": rc2, "plan": _trim(plan), "plan_err": err2[-800:]}

    def s_hang(self) -> dict[str, Any]:
        import psutil

        st = self.status()
        pid = st["engine"]["pid"]
        kids = psutil.Process(pid).children(recursive=True)
        sched = [p for p in kids if "scheduler" in (p.name() + " ".join(p.cmdline())).lower()]
        target = sched[0] if sched else (kids[0] if kids else psutil.Process(pid))
        stopped = {"pid": target.pid, "name": target.name(), "cmdline": target.cmdline()[:3]}
        restarts0 = self.status()["restarts"]["total"]
        t = time.monotonic()
        os.kill(target.pid, signal.SIGSTOP)
        first_not_ready = None
        try:

            def left_ready() -> bool:
                nonlocal first_not_ready
                s = self.status()
                if s["state"] != "READY" and first_not_ready is None:
                    first_not_ready = time.monotonic() - t
                return s["restarts"]["total"] > restarts0

            self.daemon.wait_for(left_ready, 300, "the daemon to restart the hung engine")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target.pid, signal.SIGCONT)
        detected = time.monotonic() - t
        st2 = self.daemon.wait_state("READY", self.timeout)
        ready = time.monotonic() - t
        hist = self.history(2)
        return {
            "stopped": stopped,
            "detected_s": round(first_not_ready or detected, 1),
            "restart_counted_s": round(detected, 1),
            "ready_again_s": round(ready, 1),
            "new_pid": st2["engine"]["pid"],
            "history": _trim(hist),
            "restarts": st2["restarts"],
        }

    def s_kill9(self) -> dict[str, Any]:
        import psutil

        st = self.status()
        pid = st["engine"]["pid"]
        self.daemon.kill9()
        alive = psutil.pid_exists(pid)
        t = time.monotonic()
        self.daemon.restart_daemon(wait_ready=True, timeout=self.timeout)
        wall = time.monotonic() - t
        st2 = self.status()
        ours = self.our_engines()
        ev = {
            "engine_alive_after_kill9": alive,
            "adopted": st2["engine"].get("adopted"),
            "same_pid": st2["engine"]["pid"] == pid,
            "daemon_restart_to_ready_s": round(wall, 1),
            "engine_groups": ours,
        }
        check(len(ours) == 1, f"{len(ours)} engine groups after the restart", **ev)
        return ev

    # ------------------------------------------------------------------ SGLang's weight cache
    # (measured raw, as SGLang documents it: a standalone cache daemon, servers in client mode)
    def s_wc_cache_start(self) -> dict[str, Any]:
        ready = Path(WEIGHT_CACHE_READY.format(global_rank=0))
        check(not ready.exists(), f"{ready} exists: a cache daemon is already running")
        log = open(self.raw / "weight-cache-daemon.log", "wb")  # noqa: SIM115 - kept for the child
        argv = [self.args.python, "-m", "sglang.srt.weight_cache.daemon",
                "--model-path", self.args.model, "--tp-size", "1",
                "--load-format", self.args.load_format or "auto"]  # fmt: skip
        t = time.monotonic()
        self.cache = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)  # fmt: skip
        self.daemon.wait_for(lambda: ready.exists() or self.cache.poll() is not None, 600,
                             "the weight cache's ready file")  # fmt: skip
        wall = time.monotonic() - t
        check(self.cache.poll() is None, f"the cache daemon exited {self.cache.returncode}")
        return {"argv": argv[1:], "ready_s": round(wall, 1), "ready_file": ready.read_text(),
                "gpu": _gpu_processes()}  # fmt: skip

    def _timed(self, *ctl_args: str, tag: str) -> dict[str, Any]:
        t = time.monotonic()
        rc, out, err = self.ctl(*ctl_args, "--json")
        wall = time.monotonic() - t
        st = self.status()
        log = self.engine_log(st)
        self.dump(f"server-{tag}.log", log)
        ev = {"exit": rc, "wall_s": round(wall, 1), "engine_ready_s": (out or {}).get(
            "engine_ready_s") if isinstance(out, dict) else None, "phases": (out or {}).get(
            "phases") if isinstance(out, dict) else None, "load_lines": _load_lines(log),
            "state": st["state"], "profile": st["profile"]}  # fmt: skip
        check(rc == 0, f"{' '.join(ctl_args)} exit {rc}: {err[-600:]}", **ev)
        return ev

    def s_wc_client_restart(self) -> dict[str, Any]:
        self.base_config["server"]["extra_args"] = [
            *self.args.sglang_args,
            "--weight-cache-mode",
            "client",
        ]
        self.reconfigure()
        return self._timed("restart", tag="wc-client-restart")

    def s_wc_client_switch(self) -> dict[str, Any]:
        st = self.status()
        other = "nccl-default" if st.get("profile") == "ring-ll" else "ring-ll"
        return self._timed("profile", "set", other, tag="wc-client-switch")

    def s_wc_cache_stop(self) -> dict[str, Any]:
        cache = getattr(self, "cache", None)
        check(cache is not None, "no cache daemon was started")
        self.base_config["server"]["extra_args"] = list(self.args.sglang_args)
        self.reconfigure()
        ev = self._timed("restart", tag="wc-off-restart")  # back to disk loads, cache still up
        with contextlib.suppress(ProcessLookupError):
            os.killpg(cache.pid, signal.SIGTERM)
        try:
            cache.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(cache.pid, signal.SIGKILL)
            cache.wait(30)
        ev["cache_exit"] = cache.returncode
        return ev

    # ------------------------------------------------------------------ fastverifyd's cache
    # (weight_cache = "auto": the daemon owns SGLang's weight-cache daemon,
    # docs/guides/weight-cache.md)
    def _wc_status(self) -> dict[str, Any]:
        wc = self.status().get("weight_cache") or {}
        keys = ("setting", "state", "pid", "ranks", "rank_pids", "ready_s", "bytes", "log",
                "bytes_source", "adopted", "fingerprint", "last_failure",
                "memory_note")  # fmt: skip
        return {k: wc.get(k) for k in keys}

    def _fv_timed(self, *ctl_args: str, tag: str) -> dict[str, Any]:
        ev = self._timed(*ctl_args, tag=tag)
        st = self.status()
        ev["weight_load"] = (st["engine"] or {}).get("weight_load")
        ev["weight_cache"] = self._wc_status()
        return ev

    def s_fv_wc_on(self) -> dict[str, Any]:
        for p in Path("/tmp").glob("sglang_weight_cache_*.ready"):
            check(False, f"{p} exists: another weight cache runs on this machine")
        self.base_config["server"]["extra_args"] = list(self.args.sglang_args)
        self.base_config["server"]["weight_cache"] = "auto"
        self.reconfigure()
        ev = self._fv_timed("restart", tag="fv-wc-first")  # the cache loads, then a client
        wc = ev["weight_cache"]
        if wc.get("log") and Path(wc["log"]).exists():
            self.dump("weight-cache-daemon-fv.log", Path(wc["log"]).read_text(errors="replace"))
        check(wc["state"] == "ready" and (ev["weight_load"] or {}).get("source") == "cache",
              "the first start from fastverifyd's cache", **ev)  # fmt: skip
        self.fv_cache_pid = wc["pid"]
        ev["gpu"] = _gpu_processes()
        return ev

    def s_fv_wc_switches(self) -> dict[str, Any]:
        runs = []
        for name in ("nccl-default", "ring-ll", "nccl-default"):
            ev = self._fv_timed("profile", "set", name, tag=f"fv-wc-{name}-{len(runs)}")
            runs.append(ev)
            check(
                (ev["weight_load"] or {}).get("source") == "cache",
                f"{name} from the cache",
                runs=runs,
            )
            check(
                ev["weight_cache"]["pid"] == self.fv_cache_pid, "the cache kept its pid", runs=runs
            )
        return {"switches": runs, "cache_pid": self.fv_cache_pid}

    def s_fv_wc_eagle3(self) -> dict[str, Any]:
        check(bool(self.args.draft), "no --draft: nothing to switch to")
        p = self.daemon.ctl("mode", "set", "eagle3", timeout=self.timeout)  # the human stream
        out = p.stdout + p.stderr
        self.dump("fv-wc-eagle3-stream.txt", out)
        at = out.find("loads from disk (")  # "this mode loads from disk (~T s, ...): ..."
        ev = {"exit": p.returncode, "notice_before_stop": 0 <= at < out.find("state STOPPING"),
              "notice": out[at: at + 400] if at >= 0 else None,
              "weight_load": (self.status()["engine"] or {}).get("weight_load"),
              "weight_cache": self._wc_status()}  # fmt: skip
        back = self._fv_timed("mode", "set", "baseline", tag="fv-wc-back-to-baseline")
        ev["back_to_baseline"] = back
        check(
            ev["notice_before_stop"] and ev["weight_cache"]["pid"] == self.fv_cache_pid,
            "notice",
            **ev,
        )
        check(
            (back["weight_load"] or {}).get("source") == "cache",
            "baseline again from the cache",
            **ev,
        )
        return ev

    def s_fv_wc_kill9(self) -> dict[str, Any]:
        self.daemon.kill9()
        t = time.monotonic()
        self.daemon.restart_daemon(wait_ready=True, timeout=self.timeout)
        ev = {"daemon_restart_to_ready_s": round(time.monotonic() - t, 1),
              "weight_cache": self._wc_status(), "engine_groups": self.our_engines()}  # fmt: skip
        check(ev["weight_cache"]["pid"] == self.fv_cache_pid and ev["weight_cache"]["adopted"],
              "the new daemon adopted the cache", **ev)  # fmt: skip
        return ev

    def s_fv_wc_off(self) -> dict[str, Any]:
        import psutil

        self.base_config["server"]["weight_cache"] = "off"
        self.reconfigure()
        ev = self._fv_timed("restart", tag="fv-wc-off-disk")  # a disk start, for the ratio
        pid = getattr(self, "fv_cache_pid", None)
        ev["cache_stopped"] = not (pid and psutil.pid_exists(pid))
        check(ev["cache_stopped"] and (ev["weight_load"] or {}).get("source") == "disk",
              "off: the next start stops the cache and loads from disk", **ev)  # fmt: skip
        return ev

    def keep_logs(self) -> None:
        """The daemon's history and log and every engine log, into raw/ (also when a call's
        time runs out in the middle of a step: what it did so far is the evidence)."""
        d = self.daemon
        with contextlib.suppress(Exception):
            self.dump("history.json", self.history(200))
        self.dump("daemon.log", d.log_text())
        for log in Path(d.state_dir / "logs").glob("*.log"):
            shutil.copy(log, self.raw / f"engine-{log.name}")

    def s_stop(self) -> dict[str, Any]:
        d = self.daemon
        self.keep_logs()
        d.close()  # raises on a leaked engine process
        self.d = None
        left = self.our_engines()
        check(not left, f"engine processes left: {left}")
        return {"engine_groups_left": left, "gpu_after_stop": _gpu_processes()}


def _load_lines(log: str) -> list[str]:
    """SGLang's own lines about where the weights came from and what the start cost."""
    keys = ("Load weight end", "Load weight begin", "IpcModelLoader", "weight cache",
            "CUDA graph end", "Capture cuda graph end", "KV Cache is allocated",
            "Memory pool end", "fired up")  # fmt: skip
    return [ln[-300:] for ln in log.splitlines() if any(k in ln for k in keys)][:40]


def _host() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out["gpu"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout.strip()  # fmt: skip
    return out


def _gpu_processes() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout.strip()  # fmt: skip
    return "no nvidia-smi"


def _get_text(url: str | None) -> tuple[int, str]:
    if not url:
        return 0, ""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _bench_summary(b: Any) -> Any:
    if not isinstance(b, dict):
        return b
    keys = ("output_tokens_per_second", "per_request_tokens_per_second", "ttft_ms", "itl_ms",
            "accept_length", "accept_histogram", "accept_curve", "completed", "failed",
            "duration_s", "weights", "errors")  # fmt: skip
    out = {k: b[k] for k in keys if k in b}
    return out or _trim(b)


def _trim(v: Any, depth: int = 0) -> Any:
    """A JSON value cut to a readable size (long lists and strings shortened)."""
    if isinstance(v, dict):
        return {k: _trim(x, depth + 1) for k, x in list(v.items())[:60]}
    if isinstance(v, list):
        return [_trim(x, depth + 1) for x in v[:20]]
    if isinstance(v, str) and len(v) > 1500:
        return v[:700] + " ... " + v[-700:]
    return v


def _span_names(path: Path) -> dict[str, int]:
    """The profiler range names of a trace (step[...] spans, counted by their name up to
    the first space), and the kernel names that look like collectives."""
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    events = data.get("traceEvents", data) if isinstance(data, dict) else data
    names: dict[str, int] = {}
    for e in events:
        n = e.get("name", "") if isinstance(e, dict) else ""
        if n.startswith("step[") or "nccl" in n.lower() or "all_reduce" in n.lower():
            key = n.split(" ")[0] if n.startswith("step[") else n[:80]
            names[key] = names.get(key, 0) + 1
    return names


STEPS: list[tuple[str, str, float]] = [
    # name, method, seconds it needs at least (a start of the tiny model on the H200, or a
    # bench window)
    ("start", "s_start", 120),
    ("bench", "s_bench", 40),
    ("metrics", "s_metrics", 10),
    ("trace_baseline", "s_trace", 40),
    ("switch", "s_switch", 90),
    ("env_verify", "s_env", 10),
    ("kill9", "s_kill9", 60),
    ("parser_refusal", "s_parser_refusal", 60),
    ("resolve_refusal", "s_resolve_refusal", 60),
    ("eagle3", "s_eagle3", 150),
    ("adaptive", "s_adaptive", 120),
    ("hang", "s_hang", 120),
    ("spec_costs", "s_spec_costs", 420),  # 4 starts: 3 took 243 s (2026-12-01)
    ("fails_after_load", "s_fails_after_load", 100),
    ("log_warning", "s_log_warning", 60),
    ("stop", "s_stop", 5),
]
# A random-valued checkpoint of a realistic shape: the load, READY, a switch with and
# without SGLang's weight cache.
REALISTIC_STEPS: list[tuple[str, str, float]] = [
    ("start", "s_start", 240),
    ("bench", "s_bench", 40),
    ("metrics", "s_metrics", 10),
    ("switch", "s_switch", 150),
    ("env_verify", "s_env", 10),
    ("wc_cache_start", "s_wc_cache_start", 150),
    ("wc_client_restart", "s_wc_client_restart", 100),
    ("wc_client_switch", "s_wc_client_switch", 100),
    ("wc_cache_stop", "s_wc_cache_stop", 150),
    ("fv_wc_on", "s_fv_wc_on", 240),
    ("fv_wc_switches", "s_fv_wc_switches", 150),
    ("fv_wc_eagle3", "s_fv_wc_eagle3", 200),
    ("fv_wc_kill9", "s_fv_wc_kill9", 90),
    ("fv_wc_off", "s_fv_wc_off", 150),
    ("stop", "s_stop", 5),
]


def arguments(extra: Callable[[argparse.ArgumentParser], None]) -> argparse.Namespace:
    """The options every GPU run takes (and `extra`'s), with start and stop around --steps."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--engine", choices=["sglang", "sim"], default="sim")
    ap.add_argument("--python", default="", help="the server's interpreter (engine sglang)")
    ap.add_argument("--model", default="")
    ap.add_argument("--draft", default="")
    ap.add_argument("--load-format", default="dummy")
    ap.add_argument("--work", required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--steps", type=lambda s: [x for x in s.split(",") if x], default=[])
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--start-timeout", type=float, default=420)
    ap.add_argument("--sim-load-seconds", type=float, default=2.0)
    ap.add_argument("--sim-sglang-version", default="0.5.17")
    extra(ap)
    args = ap.parse_args()
    if args.steps and "start" not in args.steps:
        args.steps = ["start", *args.steps]
    if args.steps and "stop" not in args.steps:
        args.steps.append("stop")
    return args


def run_steps(run: Run, steps: list[tuple[str, str, float]]) -> int:
    """Each step in order while the daemon lives (a SIGTERM at the call's end makes the rest
    "not run"); the daemon stopped and the results saved whatever happens; 1 if one failed."""

    def stopped(signum: int, _frame: object) -> None:
        run.args.budget_s = 0  # the steps after this one are "not run"; `finally` stops it
        raise StepFailed(f"stopped by signal {signum} (the call's time ran out)")

    signal.signal(signal.SIGTERM, stopped)
    try:
        for name, method, need in steps:
            if name == "stop" or run.d is not None or name == "start":
                run.step(name, getattr(run, method), need if name != "stop" else 0)
    finally:
        if run.d is not None:
            with contextlib.suppress(Exception):
                run.keep_logs()
            with contextlib.suppress(Exception):
                run.d.close(check_leaks=False)
        run.save()
    bad = [s["step"] for s in run.results["steps"] if s["status"] == "failed"]
    print(json.dumps({s["step"]: s["status"] for s in run.results["steps"]}, indent=1))
    return 1 if bad else 0


def main() -> int:
    args = arguments(
        lambda ap: ap.add_argument("--shape", choices=["tiny", "realistic"], default="tiny")
    )
    args.sglang_args = TINY_SGLANG_ARGS if args.shape == "tiny" else REALISTIC_SGLANG_ARGS
    return run_steps(Run(args), STEPS if args.shape == "tiny" else REALISTIC_STEPS)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        sys.exit(main())
