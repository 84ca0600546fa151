"""The front door on a real SGLang 0.5.17: switches under closed-loop load, as clients see them.

    bash benchmarks/gpu/real_sglang.sh frontdoor --mode hold        # or standby, off
    python benchmarks/gpu/frontdoor_sglang.py --engine sim --work DIR --mode hold   # the sim

fastverifyd with `[frontdoor] mode` = --mode (the engine on an internal port, the clients on
the public one; "off": the clients reach the engine directly), a Llama-3.1-8B-shaped model on
dummy weights (sglang_pack/llama8b-shape plus a word-level tokenizer written into the work dir
at run time: the OpenAI routes need one, the pack has none). The steps:

- start: the daemon's first start (a cold 8B-shape start: 130-190 s);
- switches: closed-loop clients (half streaming chat completions, half non-streaming
  completions, `bench_frontdoor.one` classifies each request: ok / cut / failed / refused)
  through `fastverifyctl profile set` ring-ll, tree-ll (on the real engine it fails at its
  capture and rolls back, or serves), nccl-default, with a window of load outside any switch
  before each and after the last. Recorded: each switch's answer (its `switch` section: mode,
  downtime, held, longest wait, cut, refused), the clients' own counts, TTFT p50/p99 of
  streams started during and outside switches, the longest time no request completed around
  each switch, GPU memory per engine process sampled every second (nvidia-smi per PID: both
  engines at the overlap; "not measured" without nvidia-smi), and the engine's own /metrics
  (SGLang's request and abort counters) just before each switch and at the end;
- stop.

A switch that no longer fits the call's budget is recorded `not run`; the figures so far are
in `results.json`'s "frontdoor" after every switch, so a call cut short keeps them.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "benchmarks"))

import real_sglang as rs  # noqa: E402
from bench_frontdoor import one  # noqa: E402

from fastverify.percentiles import percentile  # noqa: E402
from tests.support.net import free_port  # noqa: E402

PACK = REPO / "benchmarks" / "gpu" / "sglang_pack"
MODES = ("off", "hold", "standby")
# (profile, seconds planned for it on the 8B shape: a restart ~60 s; tree-ll's failed start
# plus the rollback's start, or a restart where it serves)
SWITCHES: tuple[tuple[str, float], ...] = (("ring-ll", 70), ("tree-ll", 130), ("nccl-default", 70))
# a cold 8B-shape start: 130-190 s (JIT builds, graph capture); from a checkpoint with the
# weight cache, the cache's own start and load come first
START_S = {"dummy": 190, "checkpoint": 240}
STOP_S = 15
# The realistic shape's flags with a tokenizer (the OpenAI routes apply a chat template and
# decode).
FD_SGLANG_ARGS = [
    "--attention-backend", "triton", "--sampling-backend", "pytorch",
    "--grammar-backend", "none", "--mm-feature-transport", "cpu",
    "--max-running-requests", "32", "--cuda-graph-max-bs-decode", "32",
]  # fmt: skip
# The static share, the same in every mode, small enough for a standby switch on an 80 GiB
# card: SGLang 0.5.17 sizes a KV pool as share x (memory free before its load) - the weights
# it loads (mem_cache/kv_cache_configurator.py `_profile_available_bytes`); beside 15 GiB of
# cached weights that is ~0.35 x 64 = 22 GiB for the first engine, and 2 x (22 + graphs) +
# 15 fits in 80 x 0.95 where 2 x 32 + 15 at 0.5 would not (frontdoor/standby.py's rule).
MEM_FRACTION = 0.35
SGLANG_COUNTERS = (
    "sglang:num_requests_total",
    "sglang:num_aborted_requests_total",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:generation_tokens_total",
    "sglang:prompt_tokens_total",
    "sglang:http_requests_total",
    "sglang:num_retracted_requests_total",
)


def with_tokenizer(model: Path, work: Path) -> Path:
    """A model dir with a word-level tokenizer covering the whole vocabulary ("wN" for id N,
    the config's BOS/EOS as special tokens) and a plain chat template: enough for SGLang's
    OpenAI routes on random weights (random ids decode to "wN" words). A checkpoint gets it
    beside its shards; a config-only dir (dummy weights) is copied into `work` first."""
    cfg = json.loads((model / "config.json").read_text())
    out = model if any(model.glob("*.safetensors")) else work / f"{model.name}-with-tokenizer"
    out.mkdir(parents=True, exist_ok=True)
    if out != model:
        shutil.copy(model / "config.json", out / "config.json")
    special = {cfg["bos_token_id"]: "<|begin_of_text|>", cfg["eos_token_id"]: "<|end_of_text|>"}
    vocab = {special.get(i, f"w{i}"): i for i in range(cfg["vocab_size"])}
    added = [
        {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, s in special.items()
    ]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"},
    }
    (out / "tokenizer.json").write_text(json.dumps(tok))
    template = (
        "{{ bos_token }}{% for m in messages %}{{ m['role'] }} {{ m['content'] }} "
        "{% endfor %}{% if add_generation_prompt %}assistant {% endif %}"
    )
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": special[cfg["bos_token_id"]],
                "eos_token": special[cfg["eos_token_id"]],
                "unk_token": "w0",
                "model_max_length": cfg.get("max_position_embeddings", 8192),
                "chat_template": template,
            }
        )
    )
    return out


class Clients:
    """Closed-loop clients on the public port: (start, end, streaming, outcome, TTFT s) per
    request; a client pauses 50 ms after a request that did not succeed."""

    def __init__(self, port: int, n: int):
        self.port = port
        self.records: list[tuple[float, float, bool, str, float | None]] = []
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.threads = [
            threading.Thread(target=self._loop, args=(i % 2 == 0,), daemon=True) for i in range(n)
        ]

    def _loop(self, streaming: bool) -> None:
        while not self.halt.is_set():
            t0 = time.monotonic()
            outcome, ttft, _tokens = one(self.port, streaming)
            with self.lock:
                self.records.append((t0, time.monotonic(), streaming, outcome, ttft))
            if outcome != "ok":
                self.halt.wait(0.05)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self, wait_s: float) -> int:
        """Stop after each client's request in hand; the clients still in a request after
        `wait_s` (their requests are not counted)."""
        self.halt.set()
        deadline = time.monotonic() + wait_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() for t in self.threads)

    def snapshot(self) -> list[tuple[float, float, bool, str, float | None]]:
        with self.lock:
            return list(self.records)


class GpuSampler:
    """nvidia-smi once a second: the card's used memory and each compute process's, by the
    fastverify engine id of its process (`Run.our_engines`), else "other"."""

    def __init__(self, run: rs.Run, t0: float):
        self.run, self.t0 = run, t0
        self.samples: list[dict[str, Any]] = []
        self.halt = threading.Event()
        self.available = shutil.which("nvidia-smi") is not None
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.halt.wait(1.0):
            with contextlib.suppress(Exception):
                self.samples.append(self.sample())

    def sample(self) -> dict[str, Any]:
        def smi(*q: str) -> list[list[str]]:
            out = subprocess.run(
                ["nvidia-smi", *q, "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
            return [[x.strip() for x in ln.split(",")] for ln in out.stdout.splitlines() if ln]

        t = round(time.monotonic() - self.t0, 1)
        used = smi("--query-gpu=memory.used")
        apps = smi("--query-compute-apps=pid,used_memory")
        owner = {pid: eid[:8] for eid, pids in self.run.our_engines().items() for pid in pids}
        per: dict[str, int] = {}
        for pid, mib in (a for a in apps if len(a) == 2):
            key = owner.get(int(pid), f"other:{pid}") if pid.isdigit() else f"other:{pid}"
            per[key] = per.get(key, 0) + int(float(mib))
        return {
            "t_s": t,
            "processes": len(apps),
            "gpu_used_mib": [int(float(u[0])) for u in used],
            "by_process": per,
            "engines": sorted(k for k in per if not k.startswith("other")),
        }

    def start(self) -> None:
        if self.available:
            self.thread.start()

    def stop(self) -> None:
        self.halt.set()
        if self.thread.is_alive():
            self.thread.join(30)

    def during(self, a: float, b: float) -> dict[str, Any]:
        """Within [a, b] (seconds from t0): the sample with the most used memory, and the
        samples where two engines held GPU memory at once (the overlap)."""
        if not self.available:
            return {"measured": False, "why": "not measured (no nvidia-smi: the sim)"}
        inside = [s for s in self.samples if a <= s["t_s"] <= b]
        overlap = [s for s in inside if len(s["engines"]) >= 2]
        peak = max(inside, key=lambda s: sum(s["gpu_used_mib"]), default=None)
        most = max((s["processes"] for s in inside), default=0)
        top = max(overlap, key=lambda s: sum(s["gpu_used_mib"]), default=None)
        return {
            "measured": True,
            "samples": len(inside),
            "peak": peak,
            "overlap_samples": len(overlap),
            "overlap_peak": top,
            "most_processes_with_gpu_memory": most,
        }


def counters(text: str) -> dict[str, float]:
    """SGLang's own request counters from an engine's /metrics (summed over label sets)."""
    out: dict[str, float] = {}
    for ln in text.splitlines():
        name = ln.split("{")[0].split(" ")[0]
        if name in SGLANG_COUNTERS:
            with contextlib.suppress(ValueError):
                out[name] = out.get(name, 0.0) + float(ln.rsplit(" ", 1)[-1])
    return out


def ms(xs: list[float], q: float) -> float | None:
    return round(percentile(sorted(xs), q) * 1e3, 1) if xs else None


def summarize(records: list, windows: list[tuple[float, float]], t0: float) -> dict[str, Any]:
    """The clients' figures: outcomes, TTFT of streams and latency of whole answers started
    during and outside switches, and per switch the longest time no request completed."""

    def during(t: float) -> bool:
        return any(a <= t <= b for a, b in windows)

    counts = {k: sum(1 for r in records if r[3] == k) for k in ("ok", "failed", "cut", "refused")}
    split: dict[str, Any] = {}
    for name, inside in (("during_switches", True), ("outside_switches", False)):
        ttft = [r[4] for r in records if r[2] and r[3] == "ok" and during(r[0]) == inside]
        whole = [
            r[1] - r[0] for r in records if not r[2] and r[3] == "ok" and during(r[0]) == inside
        ]
        split[name] = {
            "stream_ttft_ms": {"p50": ms(ttft, 50), "p99": ms(ttft, 99), "n": len(ttft)},
            "completion_latency_ms": {"p50": ms(whole, 50), "p99": ms(whole, 99), "n": len(whole)},
            **{
                k: sum(1 for r in records if r[3] == k and during(r[0]) == inside)
                for k in ("failed", "cut", "refused")
            },
        }
    done = sorted(r[1] for r in records if r[3] == "ok")
    gaps = []
    for a, b in windows:
        marks = [a] + [t for t in done if a < t < b] + [b]
        after = next((t for t in done if t >= b), None)  # the first completion after it
        if after is not None:
            marks[-1] = after
        before = [t for t in done if t <= a]
        if before:
            marks[0] = before[-1]
        gaps.append(round(max(y - x for x, y in itertools.pairwise(marks)), 2))
    return {
        "requests": len(records),
        **counts,
        **split,
        "longest_without_a_completed_request_s": gaps,
        "windows_s": [[round(a - t0, 1), round(b - t0, 1)] for a, b in windows],
    }


class FrontDoorRun(rs.Run):
    def config(self) -> dict[str, Any]:
        cfg = super().config()
        a = self.args
        if a.engine == "sglang":
            cfg["server"]["model_path"] = str(with_tokenizer(Path(a.model), self.work))
        cfg["server"]["extra_args"] = [*a.sglang_args, "--mem-fraction-static", str(a.mem_fraction)]
        cfg["server"]["weight_cache"] = a.weight_cache
        self.engine_port = free_port()
        cfg["frontdoor"] = {
            "mode": a.mode,
            "engine_port": self.engine_port,
            "max_wait_s": a.max_wait_s,
            "drain_timeout_s": 60,
            **a.frontdoor_keys,
        }
        return cfg

    def engine_url(self) -> str:
        """The serving engine's own address (status says: behind a front door an internal
        port, which a standby switch alternates), else the public one."""
        if self.args.mode == "off":
            return self.daemon.server_url
        url = (self.status().get("engine") or {}).get("url")
        return str(url or f"http://127.0.0.1:{self.engine_port}")

    def engine_metrics(self, tag: str) -> dict[str, float]:
        _code, text = rs._get_text(self.engine_url() + "/metrics")
        self.dump(f"sglang-metrics-{tag}.txt", text)
        return counters(text)

    def s_start(self) -> dict[str, Any]:
        ev = super().s_start()
        st = self.status()
        ev["frontdoor"] = st.get("frontdoor")
        ev["engine_url"] = self.engine_url()
        ev["sglang_counters"] = self.engine_metrics("after-start")
        ev["gpu"] = rs._gpu_processes()
        return ev

    def s_switches(self) -> dict[str, Any]:
        a = self.args
        st = self.status()
        rs.check(st["state"] == "READY", f"nothing serves: state {st['state']}")
        port = int(self.daemon.server_url.rsplit(":", 1)[1])
        t0 = time.monotonic()
        clients, gpu = Clients(port, a.clients), GpuSampler(self, t0)
        windows: list[tuple[float, float]] = []
        runs: list[dict[str, Any]] = []
        fd: dict[str, Any] = {"mode": a.mode, "clients": a.clients, "switches": runs}
        self.results["frontdoor"] = fd

        def record() -> None:
            fd["clients_figures"] = summarize(clients.snapshot(), windows, t0)
            fd["gpu_samples"] = len(gpu.samples)
            self.save()

        gpu.start()
        clients.start()
        try:
            time.sleep(a.window_s)  # load outside any switch
            for name, need in SWITCHES:
                if self.left() < need + a.window_s + STOP_S:
                    runs.append(
                        {
                            "profile": name,
                            "status": "not run",
                            "reason": f"{self.left():.0f} s left, needs ~{need:.0f}",
                        }
                    )
                    continue
                before = self.engine_metrics(f"before-{name}-{len(runs)}")
                pid = (self.status().get("engine") or {}).get("pid")
                ta = time.monotonic()
                print(
                    f"   switch to {name} ({self.left():.0f} s left, planned ~{need:.0f} s)",
                    flush=True,
                )
                rc, out, err = self.ctl("profile", "set", name, "--json", timeout=need + 240)
                tb = time.monotonic()
                windows.append((ta, tb))
                st = self.status()
                res = out if isinstance(out, dict) else {}
                self.dump(
                    f"switch-{len(runs)}-{name}.json",
                    {"exit": rc, "stdout": out, "stderr": err[-3000:]},
                )
                runs.append(
                    {
                        "profile": name,
                        "exit": rc,
                        "wall_s": round(tb - ta, 1),
                        "result": res.get("result"),
                        "switch": res.get("switch"),
                        "message": (res.get("message") or err[-600:] or None),
                        "serving_after": [st.get("profile"), st.get("state")],
                        "engine_replaced": (st.get("engine") or {}).get("pid") != pid,
                        "sglang_counters_old_engine": before,
                        "gpu_memory": gpu.during(ta - t0 - 1, tb - t0 + 1),
                    }
                )
                print(
                    f"   {name}: exit {rc}, {res.get('result')}, switch {res.get('switch')}",
                    flush=True,
                )
                time.sleep(a.window_s)  # load outside any switch
                record()
        finally:
            stuck = clients.stop(60)
            gpu.stop()
            fd["clients_still_in_a_request_at_stop"] = stuck
            record()
        fd["sglang_counters_end"] = self.engine_metrics("end")
        _code, etext = rs._get_text(self.daemon.metrics_url)
        self.dump("exporter-metrics-end.txt", etext)
        fd["exporter"] = {
            ln.split(" ")[0]: ln.rsplit(" ", 1)[-1]
            for ln in etext.splitlines()
            if ln.startswith(("fastverify_frontdoor_", "fastverify_switch_downtime"))
            and "_bucket" not in ln
        }
        self.dump("gpu-samples.json", gpu.samples)
        self.dump("client-records.json", clients.snapshot())
        self.save()
        ran = [r for r in runs if "exit" in r]
        rs.check(ran, "no switch fitted the budget", **fd)
        return {"switches": len(ran), "see": "results.json 'frontdoor'"}


def steps(args: argparse.Namespace) -> list[tuple[str, str, float]]:
    start = START_S["dummy" if args.load_format == "dummy" else "checkpoint"]
    return [
        ("start", "s_start", start),
        ("switches", "s_switches", SWITCHES[0][1]),  # each switch checks its own need
        ("stop", "s_stop", STOP_S),
    ]


def plan(args: argparse.Namespace) -> str:
    """The planned seconds per step against the budget."""
    need = {"start": steps(args)[0][2]}
    need["switches"] = sum(n for _p, n in SWITCHES) + args.window_s * (len(SWITCHES) + 1)
    need["stop"] = STOP_S
    lines = [f"   {k:<9} ~{v:.0f} s" for k, v in need.items()]
    lines[1] += " (" + ", ".join(f"{p} ~{n:.0f}" for p, n in SWITCHES) + f", {len(SWITCHES) + 1}"
    lines[1] += f" x {args.window_s:.0f} s of load outside switches)"
    total = sum(need.values())
    return "\n".join(
        [
            "plan (seconds):",
            *lines,
            f"   total     ~{total:.0f} s of a {args.budget_s:.0f} s budget",
        ]
    )


def main() -> int:
    def extra(ap: argparse.ArgumentParser) -> None:
        ap.add_argument(
            "--mode",
            choices=MODES,
            default=os.environ.get("FRONTDOOR_MODE", "hold"),
            help="[frontdoor] mode (default: $FRONTDOOR_MODE, else hold)",
        )
        ap.add_argument("--clients", type=int, default=8, help="half stream chat completions")
        ap.add_argument("--window-s", type=float, default=5.0, help="load outside switches")
        ap.add_argument("--mem-fraction", type=float, default=MEM_FRACTION)
        ap.add_argument("--max-wait-s", type=float, default=300.0)
        ap.add_argument(
            "--weight-cache",
            choices=["off", "auto"],
            default=None,
            help="[server] weight_cache (default: auto from a checkpoint, off on dummy weights, "
            "which the cache never serves: a standby switch then holds)",
        )
        ap.add_argument(
            "--frontdoor-key",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="one more [frontdoor] key (a JSON value or a string), e.g. standby_kv_share=0.5",
        )
        ap.add_argument("--shape", default="frontdoor")

    args = rs.arguments(extra)
    args.sglang_args = FD_SGLANG_ARGS
    if args.weight_cache is None:
        args.weight_cache = "off" if args.load_format == "dummy" else "auto"
    args.frontdoor_keys = dict(_key_value(kv) for kv in args.frontdoor_key)
    args.label = f"{args.label or args.engine}, front door {args.mode}"
    print(plan(args), flush=True)
    return rs.run_steps(FrontDoorRun(args), steps(args))


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--frontdoor-key {text!r}: write KEY=VALUE, e.g. standby_kv_share=0.5")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryDirectory():
        sys.exit(main())
