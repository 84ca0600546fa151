"""The value golden: what the exporter publishes when fed what a real SGLang 0.5.17 printed
and served on an H200 (tests/fixtures/sglang-0.5.17-h200/: its logs, its /metrics text and
a /generate's meta_info), every value of every series, beside the full-scrape golden of
names, types and labels (tests/integration/test_exporter_full_scrape.py).

The feed takes the exporter's own roads: the log file through `follow.Tail` into
`hub.logs.on_line` (as the daemon and `fastverify-exporter --log-file` read it), the /metrics
text through `sglang_metrics.reduce` into `hub.decode.on_poll` (the poller), the
meta_info as SGLang's request-metrics file holds it (`request_metrics.parse_line` into
`hub.speculation.on_requests`) and as a bench records its histogram
(`hub.speculation.on_acceptance`).

The expected values are computed here from the raw fixture bytes with this file's own
readers (a regex over SGLang's decode line, a line reader of the exposition text, the
meta_info's JSON), never with fastverify's parsers; the scrape must hold exactly the
expected series (one more or one fewer fails) with exactly their values."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

from fastverify.exporters import request_metrics, sglang_metrics
from fastverify.exporters.catalog import DOWNTIME_BUCKETS, SWITCH_DOOR_MODES
from fastverify.exporters.hub import MetricsHub
from fastverify.follow import Tail
from tests.support.hub import Clock, scrape

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang-0.5.17-h200"
PROFILE = "nccl-default"
SWITCHES = ("cancelled", "failed", "ok", "rolled_back")
# SGLang 0.5.17's decode line, as printed (the accept fields only on a speculative server)
DECODE = re.compile(
    r"Decode batch, #running-req: (?P<running>\d+), #token: \d+, "
    r"token usage: (?P<usage>[\d.]+), "
    r"(?:accept len: (?P<accept_len>[\d.]+), accept rate: (?P<accept_rate>[\d.]+), )?"
    r"cuda graph: \w+, gen throughput \(token/s\): (?P<tps>[\d.]+), #queue-req: (?P<queue>\d+)"
)
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<v>\S+)$")

Key = tuple[str, tuple[tuple[str, str], ...]]
HUB_SOURCES = ("engine", "decode", "baselines", "speculation", "traces", "inspector", "daemon",
               "api_auth", "logs", "sources")  # fmt: skip


def key(name: str, **labels: str) -> Key:
    return (name, tuple(sorted(labels.items())))


def raw_lines(path: Path) -> list[str]:
    """The file's newline-terminated lines, each as its last carriage-return frame (what a
    terminal showed of a progress bar)."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), path
    return [ln.split(b"\r")[-1].decode() for ln in data.split(b"\n")[:-1]]


def last_decode(path: Path) -> dict[str, float | None]:
    """The last decode line of a log, its fields as numbers."""
    found = [m for ln in raw_lines(path) if (m := DECODE.search(ln))]
    assert found, f"{path.name} holds no decode line"
    return {k: None if v is None else float(v) for k, v in found[-1].groupdict().items()}


def exposition(path: Path) -> dict[str, list[tuple[str, float]]]:
    """Sample name -> [(label text, value)] of an exposition text (comments skipped)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for ln in path.read_text().splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = SAMPLE.match(ln)
        assert m, ln
        out.setdefault(m["name"], []).append((m["labels"] or "", float(m["v"])))
    return out


def identity(mode: str, *, up: float, weights: str) -> dict[Key, float]:
    """Series that come from the feed's identity, not from SGLang's output."""
    return {
        key("fastverify_up"): up,
        key("fastverify_profile_info", profile=PROFILE, mode=mode, engine="sglang",
            nccl_algo="unset", nccl_proto="unset", weights=weights): 1.0,
        **{key("fastverify_profile_switches_total", result=r): 0.0 for r in SWITCHES},
        **no_downtime(),
        # each source of the hub collected, successfully, in no time of the fixed clock (the
        # weight cache's source is its part's, not on this hub; `scrape` reports the others)
        **{key(f"fastverify_scrape_collector_{s}", collector=c): v for c in HUB_SOURCES
           for s, v in (("success", 1.0), ("duration_seconds", 0.0))},
    }  # fmt: skip


def no_downtime() -> dict[Key, float]:
    """The switch-downtime histogram of a feed without switches: every mode at 0."""
    out: dict[Key, float] = {}
    for mode in SWITCH_DOOR_MODES:
        for le in (*DOWNTIME_BUCKETS, "+Inf"):
            le_text = le if isinstance(le, str) else repr(float(le))
            out[key("fastverify_switch_downtime_seconds_bucket", le=le_text, mode=mode)] = 0.0
        out[key("fastverify_switch_downtime_seconds_count", mode=mode)] = 0.0
        out[key("fastverify_switch_downtime_seconds_sum", mode=mode)] = 0.0
    return out


def log_series(path: Path, mode: str) -> dict[Key, float]:
    """What the exporter derives from a log read up to its end, scraped at once: the last
    decode line is the reading (requests, KV usage, tokens/s, and on a speculative server
    the accept length and rate, and the cycle = running x accept length / tokens/s), the
    lines read, and NCCL's WARN lines (none: these servers ran without NCCL_DEBUG)."""
    d = last_decode(path)
    pm = {"profile": PROFILE, "mode": mode}
    lines = raw_lines(path)
    assert not any("NCCL INFO" in ln or "NCCL version" in ln for ln in lines)
    out = {
        key("fastverify_log_lines_total"): float(len(lines)),
        key("fastverify_nccl_warnings_total"): float(sum("NCCL WARN" in ln for ln in lines)),
        key("fastverify_running_requests", **pm): d["running"],
        key("fastverify_queued_requests", **pm): d["queue"],
        key("fastverify_kv_token_usage_ratio", **pm): d["usage"],
        key("fastverify_generation_tokens_per_second", **pm): d["tps"],
    }
    if d["accept_len"] is not None:
        out[key("fastverify_spec_accept_length", **pm)] = d["accept_len"]
        out[key("fastverify_spec_accept_rate", **pm)] = d["accept_rate"]
        cycle = d["running"] * d["accept_len"] / d["tps"]
        out[key("fastverify_spec_cycle_seconds", **pm)] = cycle
    return out


def assert_values(got: dict[Key, float], want: dict[Key, float]) -> None:
    assert set(got) == set(want), (
        f"series only scraped: {sorted(set(got) - set(want))}; "
        f"series only expected: {sorted(set(want) - set(got))}"
    )
    wrong = {k: (got[k], v) for k, v in want.items() if not math.isclose(got[k], v, rel_tol=1e-12)}
    assert not wrong, f"(scraped, expected): {wrong}"


def feed_log(hub: MetricsHub, path: Path, tmp: Path) -> None:
    """The log through the one tailer of the project, as written while the hub watched."""
    copy = tmp / path.name
    shutil.copyfile(path, copy)
    Tail(copy, hub.logs.on_line).read_now()


def test_every_value_from_the_baseline_servers_log_and_metrics(tmp_path: Path) -> None:
    """`fastverify-exporter` beside the baseline server (run 2: start, bench, trace window,
    SIGTERM): its log, then two polls of its /metrics after the bench, 10 s apart."""
    log, text = FIX / "server-info-baseline.log", FIX / "metrics-baseline.txt"
    clock = Clock()
    hub = MetricsHub(clock=clock, timer=clock)
    hub.set_labels(PROFILE, "baseline", {}, "sglang")
    feed_log(hub, log, tmp_path)
    sources = {
        key("fastverify_source_up", source="logs"): 1.0,
        key("fastverify_source_last_success_timestamp_seconds", source="logs"): clock.t,
    }
    # the standalone exporter says up only once SGLang's /metrics answered
    want = {**identity("baseline", up=0.0, weights="real"), **log_series(log, "baseline"),
            **sources}  # fmt: skip
    assert_values(scrape(hub), want)

    for step in (40.0, 10.0):  # past the decode line's freshness: the polls are the reading
        clock.t += step
        hub.decode.on_poll(sglang_metrics.reduce(text.read_text()))
    raw = exposition(text)

    def gauge(name: str) -> float:
        (only,) = raw[name]  # TP 1: one scheduler, one sample
        return only[1]

    pm = {"profile": PROFILE, "mode": "baseline"}
    generated = sum(v for _, v in raw["sglang:generation_tokens_total"])  # per is_streaming
    assert generated == 33800.0  # 8 + 33792, the bench's tokens (read by hand)
    want = {
        **identity("baseline", up=1.0, weights="real"),
        **{k: v for k, v in log_series(log, "baseline").items() if "_total" in k[0]},
        **sources,
        key("fastverify_source_up", source="sglang_metrics"): 1.0,
        key("fastverify_source_last_success_timestamp_seconds", source="sglang_metrics"): clock.t,
        # SGLang's counter from 0 at the first poll; two equal polls: nothing generated since
        key("fastverify_generation_tokens_total", **pm): generated,
        key("fastverify_generation_tokens_per_second", **pm): (generated - generated) / 10.0,
        key("fastverify_running_requests", **pm): gauge("sglang:num_running_reqs"),
        key("fastverify_queued_requests", **pm): gauge("sglang:num_queue_reqs"),
        key("fastverify_kv_token_usage_ratio", **pm): gauge("sglang:token_usage"),
    }
    assert_values(scrape(hub), want)


def test_every_value_from_the_eagle3_servers_log_and_meta_info(tmp_path: Path) -> None:
    """fastverifyd serving EAGLE-3 on dummy weights (3 steps, the fixture README): the
    server's log, then the meta_info of one /generate as SGLang's request-metrics file
    holds it and as a bench records its accepted-drafts histogram."""
    log = FIX / "server-info-eagle3.log"
    meta = json.loads((FIX / "generate-eagle3.json").read_text())["meta_info"]
    steps = 3
    clock = Clock()
    hub = MetricsHub(clock=clock, timer=clock)
    hub.set_engine(True, PROFILE, "eagle3", {"weights": "dummy"}, "sglang",
                   "http://127.0.0.1:30000")  # fmt: skip
    feed_log(hub, log, tmp_path)
    # dummy weights: finished requests' acceptance is noise, never published as live
    line = json.dumps({"request_parameters": "{}", **meta})
    hub.speculation.on_requests([request_metrics.parse_line(line)] * request_metrics.MIN_REQUESTS)
    hist = meta["spec_correct_drafts_histogram"]
    hub.speculation.on_acceptance({"profile": PROFILE, "mode": "eagle3", "steps": steps,
                                   "weights": "dummy", "usable": False,
                                   "histogram": hist})  # fmt: skip

    labels = {"profile": PROFILE, "mode": "eagle3", "steps": str(steps), "weights": "dummy",
              "usable": "false", "source": "measured"}  # fmt: skip
    assert hist == [31] and meta["spec_verify_ct"] == 31  # every verify accepted 0 drafts
    verifies = sum(hist)
    recorded = {
        # L(k) = 1 + sum_j min(j, k) * h[j] / verifies: the target's token plus the drafts
        key("fastverify_spec_recorded_accept_length", **labels, k=str(k)): round(
            1 + sum(min(j, k) * n for j, n in enumerate(hist)) / verifies, 4
        )
        for k in range(1, steps + 1)
    }
    ratios = {
        key("fastverify_spec_accepted_drafts_ratio", **labels, drafts=str(j)): n / verifies
        for j, n in enumerate(hist)
    }
    want = {
        **identity("eagle3", up=1.0, weights="dummy"),
        **log_series(log, "eagle3"),
        key("fastverify_source_up", source="daemon"): 1.0,
        key("fastverify_source_last_success_timestamp_seconds", source="daemon"): clock.t,
        key("fastverify_source_up", source="logs"): 1.0,
        key("fastverify_source_last_success_timestamp_seconds", source="logs"): clock.t,
        **recorded,
        **ratios,
    }
    assert_values(scrape(hub), want)
