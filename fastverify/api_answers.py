"""The control API's answers, declared once: the status body (`StatusBody`, its `engine` an
`EngineStatus`) and every endpoint's answer model, TypedDicts whose fields carry their help.
fastverify.api_models names each endpoint's answer; the daemon builds these, the client's
methods return them (typed), docs/reference/api.md documents them. The CLI's start-up never
builds them (the client imports them for the type checker only).
"""

# No `from __future__ import annotations` (as fastverify.api_base).
from typing import TYPE_CHECKING, Any

from fastverify.api_base import (
    ACCEPT_LENGTH_HELP,
    ACCEPTANCE_SOURCE_HELP,
    MODES_HELP,
    STORE_HELP,
)

if TYPE_CHECKING:
    from typing import Annotated, NotRequired, Required, TypedDict
else:
    from fastverify.api_base import Annotated, NotRequired, Required, TypedDict

# The declarations below are laid out by hand, one field to a line or two, to be read.
# fmt: off


class Empty(TypedDict):
    """`{}`: an answer with nothing to say."""


# ---------------------------------------------------------------------- the status body
class EngineStatus(TypedDict):
    """`engine` of the status body: the serving engine."""

    name: Annotated[str, "the engine adapter: `sglang` or `sim`"]
    pid: Annotated[int | None, "the server's pid while it lives"]
    pgid: Annotated[int | None, "its process group (what the daemon stops)"]
    url: Annotated[str, "the server's HTTP address"]
    simulated: Annotated[bool, "the sim serves (never a measurement of hardware)"]
    identity: Annotated[dict[str, Any],
        "`{kind, version, simulated}`: which engine measures here (also in every decision "
        "record)"]
    reason: Annotated[str, "why this engine adapter was chosen"]
    engine_env: Annotated[dict[str, str] | None,
        "the environment the server was started with (secrets masked)"]
    log: Annotated[str | None, "the server's log file"]
    started_at: Annotated[float | None, "unix time the server was started"]
    start_seconds: Annotated[float | None, "its time to ready"]
    ready_by: Annotated[str | None,
        "how it was found ready: `endpoints` when no INFO ready line came (`--log-level "
        "warning`: `/model_info` answered and `/health_generate` was 200)"]
    progress: Annotated[dict[str, Any] | None, "`{phase, percent, message}` while loading"]
    adopted: Annotated[bool, "a live engine found after a daemon crash"]
    weights: Annotated[str | None, "`dummy` for a timing trial, else the weights' label"]
    forced_acceptance: NotRequired[Annotated[dict[str, Any] | None,
        "a drafting server whose environment forces SGLang's accept length "
        "(`SGLANG_SIMULATE_ACC_LEN` from `[server.env]` or the profile): `{source, label, "
        "variable, accept_length, method, token_mode}` (the speculation part's)"]]
    acceptance_source: NotRequired[Annotated[str | None,
        "what its acceptance is: `forced (SGLANG_SIMULATE_ACC_LEN=L)` when SGLang forces it, "
        "else `measured`"]]
    weight_load: NotRequired[Annotated[dict[str, Any] | None,
        "where the weights came from: `{source: cache|disk, seconds, bytes, reason, why, "
        "fallback, text, phases: {weights, cuda_graph, rest}}`"]]
    tuner: NotRequired[Annotated[dict[str, Any] | None,
        "the NCCL tuner plugin confirmed at verify: `{name, abi_version, path, rows_applied, "
        "rows_total, table, files}` (the tuner part's)"]]
    allreduce: NotRequired[Annotated[dict[str, Any] | None,
        "the TP all-reduce backend confirmed at verify (below; the all-reduce part's)"]]
    health: Annotated[dict[str, Any] | None,
        "the watch of SGLang's `/health_generate` after READY: `{checks, failed_checks, "
        "failing_since, last_failed, failures_limit, summary}`"]
    capabilities: Annotated[dict[str, Any] | None,
        "the engine's own all-reduce capabilities (below)"]


class StatusBody(TypedDict):
    """The status body (`GET /v1/status`); a part's section (NotRequired) is there
    when the daemon runs that part."""

    state: Annotated[str,
        "STOPPED, STARTING, VERIFYING, READY, STOPPING, FAILED, ROLLING_BACK or BACKOFF "
        "(transitions: `fastverify/daemon/states.py`)"]
    since: Annotated[float, "unix time of the last transition"]
    profile: Annotated[str | None, "the active profile"]
    mode: Annotated[str | None, "the active mode: baseline, eagle3 or adaptive"]
    engine: Annotated[EngineStatus, "the serving engine (below)"]
    last_good: Annotated[str | None, "the last profile that served verified"]
    last_good_mode: Annotated[str | None, "its mode"]
    last_failure: Annotated[dict[str, Any] | None,
        "`{reason, message, line, log, at, profile, mode, op, current, kept_serving?}`; "
        "`current`: false once an engine that started after it serves READY, or while the "
        "engine a failed standby start left serving (`kept_serving`) serves READY"]
    switch_in_flight: Annotated[dict[str, Any] | None,
        "`{id, kind, profile, mode, started_at, elapsed_s, by}`"]
    queued: Annotated[int, "requests waiting for their turn (`queue: true`)"]
    restarts: Annotated[dict[str, Any], "`{total, by_reason}`"]
    recovery: Annotated[dict[str, Any],
        "FAILED left by policy: `{retries, limit, backoff_s, next_in_s, running, spent, last, "
        "target: {profile, mode, why}}`"]
    trial: Annotated[bool, "the engine serves dummy weights (a timing trial)"]
    tokens_per_second: Annotated[float | None, "decode throughput (the exporter's)"]
    status_line: Annotated[str,
        "systemd's STATUS= line, e.g. \"serving tree-ll/eagle3 82.4 tok/s\""]
    config: Annotated[dict[str, Any],
        "`{source, error}`: the configuration file and its last error"]
    declarative: Annotated[dict[str, Any] | None,
        "`{profile, mode, source, canary: {profile, mode, since, op} | null}` in declarative "
        "mode"]
    lease: Annotated[dict[str, Any] | None,
        "`{experiment, description, holder, pid, since}`: who holds the daemon (its id goes to "
        "its holder only)"]
    decision: Annotated[dict[str, Any] | None,
        "`{profile, mode, backend, applied, decided_at, report, engine, serving}`; `serving`: "
        "the decision's profile and mode serve now, READY and real weights (a manual switch "
        "away makes it false)"]
    sglang: Annotated[dict[str, Any] | None,
        "the server's SGLang release and the facts serving it"]
    findings: Annotated[list[str],
        "what the daemon found wrong and works around, one sentence each"]
    daemon: Annotated[dict[str, Any],
        "`{pid, state_dir, profile_dirs, fingerprint}`; `profile_dirs`: where it reads user "
        "profiles (before the shipped ones); `fingerprint`: the host fingerprint `{id, facts}` "
        "computed at start (docs/guides/host.md; null until known)"]
    parts: Annotated[list[str],
        "the sections below that the daemon's parts add (docs/architecture.md, \"Parts\"), in "
        "order; each (null: nothing to say now) has, besides its own fields, `summary` (list: "
        "its lines in `fastverifyctl status`), `shared_loads` (list: the modes whose "
        "real-weight loads it serves from memory two engines share) and `shared_load_s` "
        "(number or null: the seconds it took to load what it shares, e.g. the weight cache's "
        "own read of the checkpoint; `fastverifyctl tune` prices a load from disk with it)"]


class ProfileListed(TypedDict):
    """One profile file of the daemon's profile store (`fastverify.profiles.listing`)."""

    name: Annotated[str, "the profile's name"]
    description: Annotated[str, "its `# description:`"]
    source: Annotated[str, "`user` or `shipped`"]
    path: Annotated[str, "its file (on the daemon's host)"]
    overrides_shipped: Annotated[bool, "a user profile with a shipped profile's name"]
    shadows: Annotated[str | None, "the shipped file it overrides"]
    valid: Annotated[bool, "it has no error (`profile set` would load it)"]
    problems: Annotated[list[dict[str, Any]], "`{path, line, message, severity}` each"]
    tags: Annotated[list[str], "its `# tags:`"]
    requires: Annotated[dict[str, Any], "its `# requires:`"]
    extends: Annotated[str | None, "the profile it extends"]
    active: Annotated[bool | None,
        "it is the active profile (null: not known, a listing made without a daemon)"]


class Served(TypedDict):
    """A profile and mode (`null`s: nothing)."""

    profile: Annotated[str | None, "the profile"]
    mode: Annotated[str | None, "the mode"]


_OP_PREVIOUS = "what served before it"


class _Outcome(TypedDict):
    """What every operation's result and every history record says."""

    kind: Annotated[str, "`start`, `switch`, `mode`, `restart`, `rollback`, `recover` (history: "
                         "also `decision`, `lease_override`, `interrupted`)"]
    result: Annotated[str, "`ok`, `unchanged`, `rolled_back`, `failed`, `cancelled` (history: "
                           "also `interrupted`, `applied`, `recorded`, `overridden`)"]
    profile: Annotated[str, "the profile it started"]
    mode: Annotated[str, "the mode it started"]
    reason: Annotated[str | None, "a failure's reason (e.g. `readiness_timeout`)"]
    message: Annotated[str | None, "what happened, one sentence"]
    duration_s: Annotated[float, "how long it took"]


class _Started(TypedDict, total=False):
    """What an operation's result may add (its history record the same, but `verify` and
    `log_tail`)."""

    caller: Annotated[dict[str, Any], "who asked: `{door, uid, user, pid, comm}` (Unix "
                                      "socket) or the TCP door's identity"]
    cancelled_by: Annotated[str, "who cancelled it"]
    eagle3_steps: Annotated[int, "a timing trial's EAGLE-3 draft steps"]
    previous: Annotated[Served, _OP_PREVIOUS]
    rolled_back_to: Annotated[Served, "what it rolled back to"]
    rollback_failure: Annotated[dict[str, Any], "the rollback's own failure"]
    switch: Annotated[dict[str, Any],
        "how the operation looked to clients: `{mode, downtime_s, held, longest_wait_s, "
        "refused, cut, cut_requests}` (see Operations)"]
    engine_ready_s: Annotated[float, "the new engine's time to ready"]
    engine_env: Annotated[dict[str, Any] | None,
        "what the engine added to its workers' NCCL environment"]
    pid: Annotated[int | None, "the server's pid"]
    phases: Annotated[dict[str, float], "seconds of each phase (`stop`, `engine_ready`, "
                                        "`verify`, ...)"]
    weight_load: Annotated[dict[str, Any] | None,
        "where the weights came from (as the status's `engine.weight_load`)"]
    weights_notice: Annotated[dict[str, Any] | None,
        "the notice about the weights' load given before anything stopped"]
    tuner: Annotated[dict[str, Any] | None, "the NCCL tuner plugin confirmed"]
    allreduce: Annotated[dict[str, Any] | None, "the TP all-reduce backend confirmed"]
    speculation: Annotated[dict[str, Any] | None, "mode adaptive: its plan"]


class OperationResult(_Outcome, _Started):
    """An operation's result (200 for `ok` and `unchanged`, else 502); with `stream: true`
    the last event, `{"event": "result", ts, ...}`."""

    id: Annotated[str, "the operation's id"]
    log: Annotated[str | None, "the engine's log file"]
    line: Annotated[str | None, "the log line that told the failure"]
    serving: Annotated[Served, "what serves now"]
    by: Annotated[str, "who asked (`fastverifyd`: the daemon itself)"]
    weights: Annotated[str, "`real`, or `dummy` for a timing trial"]
    verify: NotRequired[Annotated[dict[str, Any] | None, "the verifiers' evidence"]]
    log_tail: NotRequired[Annotated[list[str], "the failed engine's last log lines"]]


class OperationInFlight(TypedDict):
    """An operation that has not answered yet."""

    id: Annotated[str, "its id"]
    kind: Annotated[str, "`switch`, `mode`, `restart`, ..."]
    profile: Annotated[str, "the profile it starts"]
    mode: Annotated[str, "the mode it starts"]
    started_at: Annotated[float, "unix time it started"]
    elapsed_s: Annotated[float, "seconds since"]
    by: Annotated[str, "who asked"]


class Accepted(TypedDict):
    """202 of an operation asked with `wait: false`."""

    accepted: Annotated[bool, "always `true`"]
    op: Annotated[OperationInFlight, "the operation"]


class HistoryRecord(_Outcome, _Started, total=False):
    """A record of `GET /v1/history`: an operation's result but its `verify` and `log_tail`
    (its fields below, if any, as the result's); a decision (kind `decision`); a lease
    override (kind `lease_override`)."""

    type: Required[Annotated[str, "`switch`"]]
    started_at: Required[Annotated[float, "unix time it started"]]
    finished_at: Required[Annotated[float, "unix time it finished"]]
    id: Annotated[str, "an operation's"]
    log: Annotated[str | None, "an operation's"]
    line: Annotated[str | None, "an operation's"]
    serving: Annotated[Served, "an operation's"]
    by: Annotated[str, "who asked (an operation, a lease override)"]
    weights: Annotated[str, "an operation's"]
    fallback_to: Annotated[str, "a crash restart's fallback profile"]
    outcome: Annotated[str, "kind `interrupted`: what became of it"]
    put_back: Annotated[Served | None, "kind `interrupted`: what was put back"]
    interrupted_at: Annotated[float, "kind `interrupted`: when the daemon stopped"]
    backend: Annotated[str, "kind `decision`: the all-reduce backend"]
    applied: Annotated[bool, "kind `decision`: whether tune applied it"]
    report: Annotated[str | None, "kind `decision`: the report file"]
    lease: Annotated[dict[str, Any], "kind `lease_override`: the lease overridden"]


class LogEvent(TypedDict):
    """One log line."""

    event: Annotated[str, '`"log"`']
    seq: Annotated[int, "its number"]
    ts: Annotated[float, "unix time"]
    source: Annotated[str, '`"engine"` or `"daemon"`']
    line: Annotated[str, "the line"]


class ArgvCheck(TypedDict):
    """The engine's own argv parser's verdict."""

    ok: Annotated[bool | None, "true, false, or null: it cannot tell"]
    message: Annotated[str, "what it said"]
    steps: NotRequired[Annotated[list[Any], "what it did"]]
    version: NotRequired[Annotated[str, "the parser's SGLang release"]]
    env_added: NotRequired[Annotated[dict[str, str], "what SGLang adds to the environment"]]
    cuda_graph: NotRequired[Annotated[Any, "its CUDA graph batch sizes"]]


class ServerArgv(TypedDict):
    """A profile and mode's server command line."""

    engine: Annotated[str, "the engine adapter"]
    simulated: Annotated[bool, "the sim serves"]
    profile: Annotated[str, "the profile"]
    mode: Annotated[str, "the mode"]
    argv: Annotated[list[str], "the command line (secret flag values masked)"]
    check: Annotated[ArgvCheck | None, "with `check`: the parser's verdict"]


class Cancelled(TypedDict):
    """A cancel the daemon accepted."""

    result: Annotated[str, '`"cancelled"`']
    operation: Annotated[OperationInFlight, "the operation cancelled"]


class BaselineRecord(TypedDict):
    """A baseline measurement as stored."""

    profile: Annotated[str, "the profile measured"]
    tokens_per_second: Annotated[float, "total decode throughput"]
    per_request_tokens_per_second: Annotated[float, "per request"]
    measured_at: Annotated[float, "unix time"]
    concurrency: Annotated[int, "requests at once"]
    accept_length: NotRequired[Annotated[float, ACCEPT_LENGTH_HELP]]
    acceptance_source: NotRequired[Annotated[str, ACCEPTANCE_SOURCE_HELP]]


class ProfileBaselines(BaselineRecord):
    """A profile's baselines: its newest record, and the last one at each concurrency."""

    by_concurrency: NotRequired[Annotated[dict[str, BaselineRecord],
                                          '`{"N": record}`, the last at each concurrency']]


class TraceCapture(TypedDict, total=False):
    """A profile window's analysis (fastverify.traces)."""

    steps: Required[Annotated[int, "forward steps recorded"]]
    ranks: Required[Annotated[list[dict[str, Any]], "one trace per TP rank: `{rank, file, "
                                                    "...}`"]]


class EngineIdentity(TypedDict):
    """Which engine measures here."""

    kind: Annotated[str, "`sglang` or `sim`"]
    version: Annotated[str | None, "the SGLang release it is or plays"]
    simulated: Annotated[bool, "the sim (never a measurement of hardware)"]


class DecisionRecord(TypedDict):
    """A tuning decision as stored."""

    profile: Annotated[str, STORE_HELP]
    mode: Annotated[str, MODES_HELP]
    backend: Annotated[str, "the all-reduce backend"]
    applied: Annotated[bool, "whether tune applied it"]
    why: Annotated[str, "the reason"]
    decided_at: Annotated[float, "unix time"]
    engine: Annotated[EngineIdentity, "the engine that measured"]
    report: NotRequired[Annotated[str, "the report file"]]
    accept_length: NotRequired[Annotated[float, ACCEPT_LENGTH_HELP]]
    acceptance_source: NotRequired[Annotated[str, ACCEPTANCE_SOURCE_HELP]]
    tokens_per_second: NotRequired[Annotated[float, "the throughput measured"]]
    adaptive_config: NotRequired[Annotated[str, "mode adaptive: the plan's SGLang config"]]
    by: NotRequired[Annotated[str, "who recorded it"]]


class _LeaseFields(TypedDict):
    experiment: Annotated[str, "the experiment"]
    description: Annotated[str, "what it runs"]
    holder: Annotated[str, "the identity that took it"]
    pid: Annotated[int | None, "its process (Unix socket), for the lease to lapse with"]
    since: Annotated[float, "unix time it was taken"]


class LeaseSeen(_LeaseFields):
    """A lease as anyone sees it."""

    id: NotRequired[Annotated[str, "its id: to its holder only"]]


class Lease(_LeaseFields):
    """A lease as its holder has it."""

    id: Annotated[str, "its id (`lease` of the operations it runs)"]


class LeaseInForce(TypedDict):
    lease: Annotated[LeaseSeen | None, "the lease in force"]


class Released(TypedDict):
    released: Annotated[Lease, "the lease released"]


class AcceptanceRecord(TypedDict):
    """A bench's accepted-drafts histograms, labelled from what the daemon served."""

    profile: Annotated[str, "the profile served"]
    mode: Annotated[str, "the mode served"]
    model: Annotated[str, "the target model"]
    drafter: Annotated[str, "the draft model"]
    topk: Annotated[int, "EAGLE topk"]
    steps: Annotated[int, "the launch's draft steps"]
    weights: Annotated[str, "`real` or `dummy`"]
    dataset: Annotated[dict[str, Any], "`{name, format, sha256, prompts, synthetic}`"]
    synthetic: Annotated[bool, "random token ids: planned with only with `spec plan "
                               "--allow-synthetic`"]
    sampling: Annotated[dict[str, Any], "`{temperature, top_p}`"]
    input_len: Annotated[int | None, "prompt tokens per request"]
    output_len: Annotated[int | None, "generated tokens per request"]
    histogram: Annotated[list[int], "accepted drafts per verify pass, summed"]
    requests: Annotated[list[list[int]], "each request's histogram"]
    verifies: Annotated[int, "verify passes"]
    measured_at: Annotated[float, "unix time"]
    usable: Annotated[bool, "real weights, fixed steps, topk 1, per-request histograms (a "
                            "dummy-weights, adaptive or tree server's record is kept, "
                            "labelled, and never planned with)"]
    acceptance_source: Annotated[str, ACCEPTANCE_SOURCE_HELP]
    forced: Annotated[dict[str, Any] | None, "SGLang's forced acceptance, if any"]
    usable_forced: Annotated[bool, "usable as a forced acceptance"]
    fingerprint: Annotated[dict[str, Any] | None, "the host fingerprint `{id, facts}`"]
    why_not_usable: NotRequired[Annotated[str, "why it is not usable"]]


class AcceptanceCurves(TypedDict):
    curves: Annotated[dict[str, AcceptanceRecord],
                      '`{"PROFILE/MODE/STEPS@MEASURED_AT": record}`']


class SpecTier(TypedDict):
    """One tier of a speculation plan: the batch sizes that draft as many steps."""

    batch_sizes: Annotated[list[int], "its batch sizes"]
    config: Annotated[dict[str, Any], "SGLang's adaptive config of it"]
    steps: Annotated[int, "draft steps"]
    break_even_accept_length: Annotated[float | None, "the accept length it breaks even at"]
    per_batch_size: Annotated[dict[str, Any], "each batch size's figures"]
    what_would_change: Annotated[Any, "what would change the tier"]


# `for` is a keyword: the functional form
_PlanFor = TypedDict("_PlanFor", {"for": Annotated[
    dict[str, Any], "`{profile, engine, simulated, costs_from}`: what it was planned for"]})


class SpecPlan(_PlanFor):
    """A speculation plan as stored (`fastverify.speculation.plan.Plan.to_dict`)."""

    tiers: Annotated[dict[str, SpecTier], '`{"KEY": tier}`']
    adaptive_config: Annotated[str, "the adaptive config's file"]
    adaptive_config_json: Annotated[dict[str, Any], "SGLang's adaptive config"]
    launch_steps: Annotated[Any, "the launch's draft steps"]
    drafts: Annotated[Any, "the draft tokens"]
    accept_curve: Annotated[dict[str, float], "accept length by steps"]
    accept_histogram: Annotated[list[int], "the accepted-drafts histogram planned with"]
    accept_interval: Annotated[list[float], "its confidence interval"]
    accept_requests: Annotated[list[list[int]], "each request's histogram"]
    accept_steps: Annotated[int, "the steps it was measured at"]
    acceptance: Annotated[dict[str, Any], "the acceptance record's labels"]
    lower_acceptance: Annotated[Any, "the lower accept length it was checked against"]
    floor: Annotated[Any, "the least gain a tier drafts for"]
    min_gain: Annotated[Any, "the least gain asked"]
    unpriced_batch_sizes: Annotated[Any, "batch sizes without a measured cost"]
    memory: Annotated[dict[str, Any], "the memory it needs and has"]
    skip_zero_step_extend: Annotated[Any, "SGLang's zero-step extend skipped"]
    workload: Annotated[dict[str, Any], "`{input_len, output_len, chunked_prefill_tokens}`"]
    predictions: Annotated[dict[str, Any],
        '`{"C": {baseline, eagle, adaptive, adaptive_ci, if_lower, gain}}` by concurrency']
    costs: Annotated[dict[str, Any], "the step costs planned with"]
    host: Annotated[Any, "the host it was planned on"]
    requests: Annotated[Any, "the requests it was planned for"]
    why: Annotated[Any, "why, in sentences"]
    stored_at: Annotated[float, "unix time it was stored"]
    context_note: NotRequired[Annotated[str, "what the plan's context length leaves out"]]


class VerifierResult(TypedDict):
    """One verifier's verdict."""

    name: Annotated[str, "the verifier"]
    status: Annotated[str, "`ok`, `failed` or `skipped`"]
    message: Annotated[str, "what it found"]
    evidence: Annotated[Any, "what it saw"]
    reason: NotRequired[Annotated[str, "a failure's reason"]]
    line: NotRequired[Annotated[str, "the log line that told it"]]


class Verification(TypedDict):
    """The verifiers' verdict on the serving engine."""

    ok: Annotated[bool, "every verifier passed"]
    profile: Annotated[str, "the profile serving"]
    mode: Annotated[str, "the mode serving"]
    pid: Annotated[int | None, "the server's pid"]
    engine_id: Annotated[str | None, "the engine's id"]
    reason: Annotated[str | None, "the first failure's reason"]
    message: Annotated[str, "the verdict, one sentence"]
    verifiers: Annotated[list[VerifierResult], "each verifier's verdict"]


class ApiError(TypedDict):
    """Every 4xx and 5xx but an operation's 502 (its result)."""

    error: Annotated[str, "what is wrong and what to send instead"]
    reason: NotRequired[Annotated[str, "a word for scripts (e.g. `leased`, `invalid_baseline`)"]]
    fields: NotRequired[Annotated[dict[str, str], "422: each bad field and what is wrong"]]
    busy: NotRequired[Annotated[bool, "409: another operation is in flight"]]
    retry_after_s: NotRequired[Annotated[int, "429: seconds to wait (`Retry-After`)"]]
    lease: NotRequired[Annotated[LeaseSeen, "409 `leased`: the lease in force"]]
    in_flight: NotRequired[Annotated[OperationInFlight, "409 `busy`: the operation"]]
    declared: NotRequired[Annotated[Served, "403 `declarative`: what is declared"]]

# fmt: on
