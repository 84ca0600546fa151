"""The sim engine as a real SGLang stand-in: start-up, endpoints, metrics, logs, TP workers,
NCCL debug files, profile traces and throughput, against one shared EAGLE-3 server (TP 4)."""

from __future__ import annotations

import gzip
import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastverify.sglang import envrules
from fastverify.sglang import metrics as m
from fastverify.sglang.launch import LaunchArgs
from fastverify.sim import costmodel
from tests.support.field import RING_LL
from tests.support.sim import (
    READY,
    SimProcess,
    children_of,
    cpu_seconds,
    decode_lines_rate,
    environ_of,
    group_members,
)

TP = 4
DECODE_RE = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Decode batch, #running-req: (\d+), #token: (\d+), "
    r"token usage: (\d+\.\d\d), accept len: (\d+\.\d\d), accept rate: (\d+\.\d\d), "
    r"cuda graph: (True|False), gen throughput \(token/s\): (\d+\.\d\d), #queue-req: (\d+)$"
)
PREFILL_RE = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Prefill batch, #new-seq: \d+, #new-token: \d+, "
    r"#cached-token: \d+, token usage: \d+\.\d\d, #running-req: \d+, #queue-req: \d+"
)


@pytest.fixture(scope="module")
def nccl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nccl")


@pytest.fixture(scope="module")
def sim(nccl_dir: Path):
    env = dict(
        RING_LL,
        NCCL_DEBUG="INFO",
        NCCL_DEBUG_SUBSYS="INIT,ENV,TUNING",
        NCCL_DEBUG_FILE=str(nccl_dir / "nccl-%h-%p.log"),
    )
    proc = SimProcess(tp=TP, eagle3=True, load=0.3, env=env, extra=["--decode-log-interval", "10"])
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def test_startup_lines_in_sglang_order(sim: SimProcess) -> None:
    text = sim.text()
    order = [
        "SIMULATION",
        "TP0] Load weight begin. avail mem=",
        "Loading safetensors checkpoint shards: 100% Completed | 64/64",
        "TP0] Load weight end. elapsed=",
        "TP0] Capture target prefill CUDA graph begin. backend=breakable,",
        "TP0] Capture target prefill CUDA graph end.",
        "TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4,",
        "TP0] Capture target verify CUDA graph end. bs=",
        "TP0] Capture draft prefill CUDA graph begin. backend=breakable,",
        "TP0] Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=",
        "TP0] Capture draft extend CUDA graph end.",
        "Engine startup timings (s): load_weight=",
        "INFO:     Uvicorn running on http://127.0.0.1:",
        READY,
    ]
    positions = [text.find(s) for s in order]
    assert all(p >= 0 for p in positions), dict(zip(order, positions, strict=True))
    assert positions == sorted(positions)
    ready = [line for _, line in sim.lines if READY in line]
    assert len(ready) == 1
    assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] " + READY, ready[0])
    # every TP rank logs its own load lines
    for rank in range(TP):
        assert f"TP{rank}] Load weight begin." in text


def test_info_endpoints_say_simulation(sim: SimProcess) -> None:
    model = sim.get_json("/get_model_info")
    assert model["simulated"] is True and model["model_path"] == "sim/kimi-k2.5"
    assert model["is_generation"] is True
    for path in ("/get_server_info", "/server_info"):
        info = sim.get_json(path)
        assert info["simulated"] is True and "SIMULATION" in info["note"]
        state = info["internal_states"][0]
        assert {"avg_spec_accept_length", "last_gen_throughput"} <= set(state)
        assert info["tp_size"] == TP and info["speculative_algorithm"] == "EAGLE3"
    models = sim.get_json("/v1/models")
    assert models["object"] == "list" and models["data"][0]["id"] == "sim/kimi-k2.5"
    status, _, _ = sim.request("GET", "/no/such/endpoint")
    assert status == 404
    status, _, body = sim.request("POST", "/flush_cache")
    assert status == 200 and body.startswith(b"Cache flushed")
    assert sim.request("GET", "/health")[0] == 200
    assert sim.request("GET", "/health_generate")[0] == 200


def test_generate_non_streaming_and_streaming(sim: SimProcess) -> None:
    out = sim.post_json(
        "/generate",
        {
            "text": "Say something long enough to count tokens.",
            "sampling_params": {"max_new_tokens": 20},
        },
    )
    meta = out["meta_info"]
    assert meta["completion_tokens"] == 20 and meta["prompt_tokens"] >= 1
    # accept length 2.0: the first token comes from prefill, then 1 + the accepted drafts
    # (a chain: 0..3 per pass) per verify cycle, ~2 on average
    hist = meta["spec_correct_drafts_histogram"]
    assert sum(hist) == meta["spec_verify_ct"] and 6 <= meta["spec_verify_ct"] <= 16
    assert sum((j + 1) * n for j, n in enumerate(hist)) >= 19 and len(hist) <= 4
    assert isinstance(out["text"], str) and out["text"]

    chunks = [
        c
        for _, c in sim.stream(
            "/generate",
            {
                "input_ids": [1, 2, 3, 4, 5],
                "sampling_params": {"max_new_tokens": 12},
                "stream": True,
            },
        )
    ]
    assert chunks[-1] is None  # data: [DONE]
    last = chunks[-2]
    assert last["meta_info"]["completion_tokens"] == 12
    assert last["meta_info"]["prompt_tokens"] == 5
    counts = [c["meta_info"]["completion_tokens"] for c in chunks[:-1]]
    assert counts == sorted(counts) and len(counts) >= 5


def test_openai_endpoints(sim: SimProcess) -> None:
    out = sim.post_json("/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 7})
    assert out["object"] == "text_completion"
    assert out["usage"] == {
        "prompt_tokens": out["usage"]["prompt_tokens"],
        "completion_tokens": 7,
        "total_tokens": out["usage"]["prompt_tokens"] + 7,
    }
    assert out["choices"][0]["finish_reason"] == "length"

    chunks = [
        c
        for _, c in sim.stream(
            "/v1/completions",
            {
                "prompt": "hi",
                "max_tokens": 9,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
    ]
    assert chunks[-1] is None
    assert chunks[-2]["usage"]["completion_tokens"] == 9
    assert all(c["object"] == "text_completion" for c in chunks[:-1])

    chat = sim.post_json(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 5},
    )
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 5

    chunks = [
        c
        for _, c in sim.stream(
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 6, "stream": True},
        )
    ]
    assert chunks[-1] is None
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    assert text and chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_bad_requests_are_400(sim: SimProcess) -> None:
    assert sim.request("POST", "/generate", {"sampling_params": {}})[0] == 400
    assert sim.request("POST", "/v1/chat/completions", {"messages": []})[0] == 400
    assert sim.request("POST", "/generate", {"input_ids": "1 2 3"})[0] == 400
    assert sim.request("POST", "/generate", {"input_ids": [[1, 2], 3]})[0] == 400
    batch = sim.post_json(
        "/generate", {"input_ids": [[1, 2], [3, 4, 5]], "sampling_params": {"max_new_tokens": 3}}
    )
    assert [b["meta_info"]["prompt_tokens"] for b in batch] == [2, 3]
    status, _, body = sim.request(
        "POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 0}}
    )
    assert status == 400 and b"max_new_tokens" in body


def _metrics(sim: SimProcess) -> dict[str, list]:
    status, headers, body = sim.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def test_metrics_have_sglang_names_and_labels(sim: SimProcess) -> None:
    before = _metrics(sim)
    sim.post_json("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 10}})
    after = _metrics(sim)
    names = {
        m.GEN_THROUGHPUT,
        m.SPEC_ACCEPT_LENGTH,
        m.NUM_RUNNING_REQS,
        m.NUM_QUEUE_REQS,
        m.TOKEN_USAGE,
        m.IS_CUDA_GRAPH,
        m.CUDA_GRAPH_PASSES_TOTAL,
        m.SPEC_VERIFY_CALLS_TOTAL,
        m.STARTUP_CUDA_GRAPH_TIME_SECONDS,
        m.GENERATION_TOKENS_TOTAL,
        m.PROMPT_TOKENS_TOTAL,
        m.NUM_REQUESTS_TOTAL,
        m.TIME_TO_FIRST_TOKEN_SECONDS,
        m.INTER_TOKEN_LATENCY_SECONDS,
        m.E2E_REQUEST_LATENCY_SECONDS,
    }
    # the parser names a counter family without its _total suffix
    fams = {k if k in after else k.removesuffix("_total"): k for k in names}
    assert set(fams) <= set(after), set(fams) - set(after)
    for fam, name in fams.items():
        assert after[fam], name
        for sample in after[fam]:
            # SGLang 0.5.23's label names (tests/contract checks them on the real package)
            assert set(sample.labels) - {"le"} == set(m.label_names(name)), name
    assert {s.labels["mode"] for s in after["sglang:cuda_graph_passes"]} >= {
        "decode_cuda_graph",
        "prefill_cuda_graph",
    }
    # every phase SGLang names, zero where it captured none (EAGLE-3: verify, not decode)
    phases = {s.labels["phase"]: s.value for s in after[m.STARTUP_CUDA_GRAPH_TIME_SECONDS]}
    assert set(phases) == {"prefill", "decode", "target_verify", "draft_prefill",
                           "draft_decode", "draft_extend"}  # fmt: skip
    assert phases["decode"] == 0.0 and phases["target_verify"] > 0.0
    assert [s.value for s in after[m.IS_CUDA_GRAPH]] == [1.0]
    assert m.WEIGHT_LOAD_DURATION_SECONDS in after  # declared; SGLang sets it on updates
    assert after[m.WEIGHT_LOAD_DURATION_SECONDS] == []

    def value(fams: dict, sample_name: str) -> float:
        return sum(s.value for f in fams.values() for s in f if s.name == sample_name)

    assert (
        value(after, "sglang:generation_tokens_total")
        - value(before, "sglang:generation_tokens_total")
        >= 10
    )
    assert (
        value(after, "sglang:num_requests_total") - value(before, "sglang:num_requests_total") >= 1
    )
    assert value(after, "sglang:e2e_request_latency_seconds_count") > 0


def test_tp_workers_share_environment_and_process_group(sim: SimProcess) -> None:
    workers = children_of(sim.pid)
    assert len(workers) == TP - 1
    assert sorted(group_members(sim.pid)) == sorted([sim.pid, *workers])  # group kept
    parent_env = environ_of(sim.pid)
    nccl = {k: v for k, v in parent_env.items() if k.startswith("NCCL_")}
    assert {k: nccl[k] for k in RING_LL} == RING_LL
    # the workers hold the environment plus what SGLang 0.5.23 adds by its own rules for
    # this argv (TP > 1 with CUDA graphs: NCCL_GRAPH_REGISTER=0; tests/contract checks
    # the rules against the real package); the server's own environ stays as started
    assert "NCCL_GRAPH_REGISTER" not in nccl
    sim_argv = sim.argv[sim.argv.index("fastverify.sim") + 1 :]
    added = envrules.engine_env(LaunchArgs.from_argv(sim_argv), parent_env).added
    assert added["NCCL_GRAPH_REGISTER"] == "0"
    for pid in workers:
        env = environ_of(pid)
        assert {k: v for k, v in env.items() if k.startswith("NCCL_")} == {**nccl, **added}
    info = sim.get_json("/get_server_info")
    assert info["sim"]["pids"] == [sim.pid, *workers]


def test_nccl_debug_file_one_per_rank_in_nccl_format(sim: SimProcess, nccl_dir: Path) -> None:
    pids = [sim.pid, *children_of(sim.pid)]
    host = socket.gethostname()
    for rank, pid in enumerate(pids):
        path = nccl_dir / f"nccl-{host}-{pid}.log"
        lines = path.read_text().splitlines()
        assert lines, path
        prefix = re.compile(rf"^{re.escape(host.split('.')[0])}:{pid}:\d+ \[{rank}\] NCCL INFO ")
        assert all(prefix.match(ln) for ln in lines), lines[:3]
        body = [prefix.sub("", ln) for ln in lines]
        assert "NCCL version 2.28.9+cuda13.0" in body
        assert "NCCL_BUFFSIZE set by environment to 16777216." in body
        assert "NCCL_P2P_LEVEL set by environment to SYS" in body
        assert "NCCL_ALGO set by environment to Ring" in body
        tuning = [b for b in body if " Bytes -> Algo " in b]
        if rank == 0:  # NCCL prints TUNING lines on rank 0 only
            assert "AllReduce: 14336 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..15}" in tuning
        else:
            assert tuning == []


def test_profile_window_writes_per_rank_traces(sim: SimProcess, tmp_path: Path) -> None:
    bg = threading.Thread(
        target=sim.post_json,
        args=("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 60}}),
        daemon=True,
    )
    bg.start()
    time.sleep(0.1)
    status, _, body = sim.request(
        "POST",
        "/start_profile",
        {
            "output_dir": str(tmp_path),
            "num_steps": 5,
            "profile_prefix": "fv",
            "activities": ["CPU", "GPU"],
            "record_shapes": False,
            "with_stack": False,
            "profile_by_stage": False,
        },
        timeout=30,
    )
    assert status == 200, body
    bg.join(30)
    files = sorted(tmp_path.glob("*.trace.json.gz"))
    assert len(files) == TP
    ids = {re.fullmatch(r"fv-(\d+\.\d+)-TP-(\d+)\.trace\.json\.gz", f.name).group(1) for f in files}
    assert len(ids) == 1
    profile_id = ids.pop()
    pids = [sim.pid, *children_of(sim.pid)]
    for rank in range(TP):
        path = tmp_path / f"fv-{profile_id}-TP-{rank}.trace.json.gz"
        trace = json.loads(gzip.decompress(path.read_bytes()))
        assert trace["schemaVersion"] == 1 and trace["distributedInfo"]["rank"] == rank
        events = trace["traceEvents"]
        verify = [
            e
            for e in events
            if e.get("cat") == "gpu_user_annotation" and e["name"] == "step[VERIFY bs=1]"
        ]
        assert len(verify) == 5
        cpu = {e["pid"] for e in events if e.get("cat") == "user_annotation"}
        assert cpu == {pids[rank]}
        kernels = [e for e in events if e.get("cat") == "kernel"]
        for v in verify:
            inside = [
                k
                for k in kernels
                if v["ts"] <= k["ts"] < v["ts"] + v["dur"] and k["pid"] == v["pid"]
            ]
            ar = [k for k in inside if k["name"].startswith("ncclDevKernel_AllReduce")]
            assert len(ar) == 122
        drafts = [
            e
            for e in events
            if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("step[DRAFT ")
        ]
        assert len(drafts) == 5 * 3  # 3 steps: 2 drafter forwards (SGLang's) + 1 draft extend


def test_decode_lines_and_client_throughput_match_cost_model(sim: SimProcess) -> None:
    start = len(sim.lines)
    arrivals = []
    prompt = 0
    for t, chunk in sim.stream(
        "/generate", {"text": "go", "stream": True, "sampling_params": {"max_new_tokens": 162}}
    ):
        if chunk is not None:
            arrivals.append((t, chunk["meta_info"]["completion_tokens"]))
            prompt = chunk["meta_info"]["prompt_tokens"]
    # least-squares slope of tokens over arrival time (robust to one late chunk on a busy box)
    pts = arrivals[1:]  # the first chunk is the prefill token
    mt = sum(t for t, _ in pts) / len(pts)
    mn = sum(n for _, n in pts) / len(pts)
    client_tps = sum((t - mt) * (n - mn) for t, n in pts) / sum((t - mt) ** 2 for t, _ in pts)
    decode = [m for _, line in sim.lines[start:] if (m := DECODE_RE.match(line))]
    assert len(decode) >= 6
    # the model at the accept length this run drew (its passes draw it: 2.0 on average, a
    # 54-pass run a few % either side), which the sim's steps only overshoot (a busy host)
    drawn = sum(float(m.group(4)) for m in decode) / len(decode)
    pred = costmodel.predict(RING_LL, "eagle3", TP, 1, True, drawn)
    assert 0.6 * pred.tokens_per_second <= client_tps <= 1.03 * pred.tokens_per_second
    # the lines' rate over the window they cover (the partial first and last interval out),
    # against the client's over the same tokens: the line's KV tokens are the prompt and
    # what it generated, and the client saw those tokens come in that much later (a stall
    # on a busy host then falls in both or in neither)
    covered = decode[:-1]
    logged_tps, rates = decode_lines_rate([m.group(0) for m in covered])

    def seen_at(kv_tokens: int) -> float:
        return next(t for t, n in arrivals if n >= kv_tokens - prompt)

    first, last = int(covered[0].group(2)), int(covered[-1].group(2))
    same_window_tps = (last - first) / (seen_at(last) - seen_at(first))
    assert logged_tps == pytest.approx(same_window_tps, rel=0.04)
    # acceptance is drawn per pass (a chain, as SGLang's drafts are): an interval of 10
    # passes sees its own accept length, the run sees the configured 2.0
    assert all(rate == pytest.approx(client_tps, rel=0.2) for rate in rates)
    lengths = [float(m.group(4)) for m in decode]
    assert sum(lengths) / len(lengths) == pytest.approx(2.0, rel=0.04)
    assert all(float(m.group(5)) == pytest.approx((float(m.group(4)) - 1) / 3, abs=0.006)
               for m in decode)  # fmt: skip
    assert all(m.group(6) == "True" for m in decode)
    assert any(PREFILL_RE.match(line) for _, line in sim.lines[start:])
    info = sim.get_json("/server_info")["internal_states"][0]
    # the server reports its last decode interval's figures
    assert any(info["avg_spec_accept_length"] == pytest.approx(v, abs=0.006) for v in lengths)
    assert any(info["last_gen_throughput"] == pytest.approx(float(m.group(7)), rel=1e-3)
               for m in decode)  # fmt: skip


def test_64_concurrent_streams_and_cpu_budget(sim: SimProcess) -> None:
    pids = [sim.pid, *children_of(sim.pid)]
    idle0 = cpu_seconds(pids)
    time.sleep(1.0)
    assert cpu_seconds(pids) - idle0 < 0.05  # idle: no busy loop
    results: list[int] = []
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            chunks = [
                c
                for _, c in sim.stream(
                    "/v1/chat/completions",
                    {
                        "messages": [{"role": "user", "content": f"req {i}"}],
                        "max_tokens": 16,
                        "stream": True,
                        "stream_options": {"include_usage": True},
                    },
                )
            ]
            assert chunks[-1] is None
            results.append(chunks[-2]["usage"]["completion_tokens"])
        except BaseException as exc:
            errors.append(exc)

    c0, w0 = cpu_seconds(pids), time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    busy = (cpu_seconds(pids) - c0) / (time.monotonic() - w0)
    assert not errors, errors[:3]
    assert results == [16] * 64
    assert busy < 0.5  # a fraction of one core while serving 64 streams


def test_keep_alive_connection_survives_errors(sim: SimProcess) -> None:
    """Unread bodies never corrupt the next request on a kept-alive connection."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    try:
        for path, body, want in [
            ("/nope", b'{"x": 1}', 404),
            ("/generate", b"{not json", 400),
            ("/generate", b'{"text": "x", "sampling_params": {"max_new_tokens": 2}}', 200),
            ("/v1/completions", b"[1, 2]", 400),
            ("/get_model_info", b"", 200),
        ]:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == want, (path, resp.status)
    finally:
        conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    try:
        conn.putrequest("POST", "/generate")
        conn.putheader("Content-Length", "abc")
        conn.endheaders()
        resp = conn.getresponse()
        assert resp.status == 400 and b"Content-Length" in resp.read()
    finally:
        conn.close()
    assert sim.request("GET", "/health")[0] == 200


def test_client_disconnect_aborts_the_request(sim: SimProcess) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    conn.request(
        "POST",
        "/generate",
        body=json.dumps(
            {"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 100000}}
        ),
        headers={"Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")  # it is running
    deadline = time.monotonic() + 5
    while sim.get_json("/get_server_info")["internal_states"][0]["num_running_reqs"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    deadline = time.monotonic() + 5
    while sim.get_json("/get_server_info")["internal_states"][0]["num_running_reqs"] != 0:
        assert time.monotonic() < deadline, "request kept running after its client left"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("release", "status"),
    [("0.5.23", 200), ("0.5.1.post3", 503)],
)
def test_health_without_generation_only_where_the_release_reads_the_variable(
    release: str, status: int
) -> None:
    """With SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0, a release that reads it (its facts)
    answers /health with a plain 200 even with the scheduler hung; 0.5.1.post3 has no such
    variable, and its /health is /health_generate: 503 after SGLANG_HEALTH_CHECK_TIMEOUT."""
    import os
    import signal

    from fastverify.sglang.facts import resolve
    from fastverify.sim.server import HEALTH_GENERATION_VAR

    reads = HEALTH_GENERATION_VAR in resolve(release).env["sglang_vars"]
    assert reads == (status == 200)
    env = {HEALTH_GENERATION_VAR: "0", "SGLANG_HEALTH_CHECK_TIMEOUT": "1"}
    sim = SimProcess(tp=1, eagle3=False, env=env, extra=["--sim-sglang-version", release])
    try:
        sim.wait_ready(60)
        os.kill(sim.pid, signal.SIGUSR1)  # the scheduler hangs while the process lives
        # the hang has taken effect once /health_generate fails (the signal's handler runs
        # when the main thread next gets the interpreter: a busy machine delays it)
        deadline = time.monotonic() + 60
        while sim.request("GET", "/health_generate", timeout=30)[0] != 503:
            assert time.monotonic() < deadline, "the hang never took effect"
        got, _, _ = sim.request("GET", "/health", timeout=30)
        assert got == status
    finally:
        sim.stop()
