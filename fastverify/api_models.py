"""The control API's contract, declared once: every endpoint (method, path, what it does) with
its request's typed model (a TypedDict of its JSON body's or its query's fields, each an
`Annotated[type, Doc(help, default, ...)]`) and the name of its answer's model
(fastverify.api_answers: the status body and every other answer).

Everything else is derived from these declarations: the daemon's routes and request
validation (fastverify.daemon.api_requests, reading the fields through
fastverify.api_schema: a body checked against its model is that model), the typed methods of
fastverify.client (which the CLI calls: their keyword fields are the models', checked by the
type checker and again before anything is sent; `status()` answers a `StatusBody`), the
status assembly's type (fastverify.daemon.facade), and the reference part of
docs/reference/api.md (fastverify.api_reference). The status sections of the daemon's parts
are declared by the parts (`Part.SECTION`). TypedDicts and plain classes, no dataclasses or
NamedTuples: the CLI imports this module on its start-up path, and never the answers.
"""

# No `from __future__ import annotations` (as fastverify.api_base).
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from fastverify.api_base import ACCEPT_LENGTH_HELP, ACCEPTANCE_SOURCE_HELP, MODES_HELP, STORE_HELP

if TYPE_CHECKING:
    from typing import Annotated, Required, TypedDict

    from fastverify.api_answers import (
        AcceptanceCurves,
        AcceptanceRecord,
        BaselineRecord,
        Cancelled,
        DecisionRecord,
        HistoryRecord,
        Lease,
        LeaseInForce,
        LogEvent,
        OperationResult,
        ProfileBaselines,
        ProfileListed,
        Released,
        ServerArgv,
        SpecPlan,
        StatusBody,
        TraceCapture,
        Verification,
    )
    from fastverify.api_schema import Field
else:
    from fastverify.api_base import Annotated, Required, TypedDict

MAX_BODY = 64 * 1024  # bytes of any request body (an endpoint may allow fewer)
# Requests that write a record (`Endpoint.recorded`) are rate-limited per caller identity
# together: RECORD_BURST at once, then RECORD_RATE_PER_S a second (429 with Retry-After).
RECORD_RATE_PER_S = 2.0
RECORD_BURST = 30
HISTORY_PAGE = 100  # records of one `GET /v1/history` when `n` is not given
HISTORY_PAGE_MAX = 1000  # the most records one `GET /v1/history` answers


class Doc:
    """What a request model says of a field besides its name and type (`Annotated[type,
    Doc(...)]`; a field that may be left out without a default is `type | None`, as JSON's
    null is). `default`: the value the daemon uses when it is left out; `mirrors`: the
    configuration key whose check (and words) a value gets; `minimum`: the least value
    accepted, `why` says what it counts. (A plain class: the CLI's start-up creates one per
    field.)"""

    __slots__ = ("default", "help", "minimum", "mirrors", "why")

    def __init__(
        self,
        help: str,
        default: Any = None,
        mirrors: str | None = None,
        minimum: float | None = None,
        why: str = "",
    ) -> None:
        self.help, self.default, self.mirrors = help, default, mirrors
        self.minimum, self.why = minimum, why


class NoBody(TypedDict, total=False):
    """A request with no body (POST: `{}` or none) or no query parameters (GET)."""


B = TypeVar("B")  # a request model
A = TypeVar("A")  # an answer's model


class Endpoint(Generic[B, A]):
    """One method on one path. `client`: the fastverify.client method that calls it;
    `model`: its request's typed model, the JSON body's fields (POST) or the query
    parameters (GET); `answer`: its answer's model (a TypedDict of fastverify.api_answers, or
    `list[...]`, `dict[str, ...]` of one; a stream's: one event's), named here (`answer_name`)
    and built when asked, so a client that only calls never builds the answer models; `notes`:
    what the answer's type cannot say (its status codes, `{}` when there is none); `streams`:
    the answer is NDJSON events; `max_body`: the most bytes its body may have (413 beyond);
    `recorded`: it writes a record (rate-limited: RECORD_RATE_PER_S)."""

    __slots__ = ("answer_name", "client", "max_body", "method", "model", "notes", "path",
                 "recorded", "streams", "summary")  # fmt: skip

    def __init__(
        self,
        method: str,
        path: str,
        client: str,
        summary: str,
        model: type[B] = NoBody,  # type: ignore[assignment]  # (none: no body or query)
        answer: str = "Empty",
        notes: str = "",
        streams: bool = False,
        max_body: int = MAX_BODY,
        recorded: bool = False,
    ) -> None:
        self.method, self.path, self.client, self.summary = method, path, client, summary
        self.model, self.answer_name, self.notes = model, answer, notes
        self.streams, self.max_body, self.recorded = streams, max_body, recorded

    @property
    def answer(self) -> Any:
        """The answer's type, built from fastverify.api_answers."""
        from fastverify import api_answers

        return eval(self.answer_name, vars(api_answers))  # (api_answers' own names)

    @property
    def fields(self) -> "tuple[Field, ...]":
        """The JSON body's fields (none for a GET)."""
        from fastverify.api_schema import declared

        return declared(self.model) if self.method == "POST" else ()

    @property
    def query(self) -> "tuple[Field, ...]":
        """The query parameters (none for a POST)."""
        from fastverify.api_schema import declared

        return declared(self.model) if self.method == "GET" else ()

    @property
    def names(self) -> tuple[str, ...]:
        """The fields' names, as the client checks a call's (cheap: no Field is built)."""
        return tuple(self.model.__annotations__)

    def defaults(self) -> dict[str, Any]:
        """The fields a request may leave out, with the value the daemon then uses."""
        from fastverify.api_schema import declared

        return {f.name: f.default for f in declared(self.model) if not f.required}

    def __repr__(self) -> str:
        return f"Endpoint({self.method} {self.path})"


# The declarations below are laid out by hand, one field to a line or two, to be read.
# fmt: off

# ---------------------------------------------------------------------- the request models
_FORCE_LEASE = "switch even while an experiment holds the lease"


# An operation's (switch, mode, restart) fields in pieces, each piece a model its requests
# take in the order they list their fields.
class _Answered(TypedDict, total=False):
    """How an operation is answered."""

    wait: Annotated[bool, Doc("answer with the final result (else 202 at once)", default=True)]
    stream: Annotated[bool, Doc("answer with NDJSON events until the result", default=False)]


class _ForceLease(TypedDict, total=False):
    force: Annotated[bool, Doc(_FORCE_LEASE, default=False)]


class _Scheduled(TypedDict, total=False):
    """How an operation is scheduled, and how long its start may take."""

    queue: Annotated[bool, Doc("wait for the operation in flight instead of a 409",
                               default=False)]
    timeout_s: Annotated[float | None, Doc(
        "readiness timeout of this start (default `daemon.readiness_timeout_s`); exceeding it "
        "fails the switch with `readiness_timeout` and rolls back",
        mirrors="daemon.readiness_timeout_s")]


class _Again(TypedDict, total=False):
    restart: Annotated[bool, Doc(
        "restart even when the profile and mode asked for already serve (else the answer is "
        '`{"result": "unchanged"}`)', default=False)]


class _Canary(TypedDict, total=False):
    canary: Annotated[bool, Doc(
        "declarative mode: serve something other than the declared profile and mode on "
        "purpose (see Declarative mode)", default=False)]


class _Leased(TypedDict, total=False):
    lease: Annotated[str | None, Doc(
        "the experiment's own operation: the id of the lease it holds (`POST /v1/lease`); "
        "without it the request is refused while a lease holds")]


class _ProfileName(TypedDict, total=False):
    name: Required[Annotated[str, Doc("the profile to serve")]]


class _ProfileMode(TypedDict, total=False):
    mode: Annotated[str | None, Doc(MODES_HELP + " (default: the active one)",
                                    mirrors="server.mode")]


class _ForceRefused(TypedDict, total=False):
    force: Annotated[bool, Doc(
        "accept a profile refused without it (a host whose PCIe ACS redirects the GPUs' peer "
        'traffic refuses a P2P profile with 422 `reason: "p2p_redirected"`, '
        "docs/guides/host.md), and " + _FORCE_LEASE, default=False)]


class _Trial(TypedDict, total=False):
    """A timing trial on dummy weights."""

    load_format: Annotated[str | None, Doc(
        "SGLang's `--load-format` for this switch and its rollback (default `[server] "
        'load_format`); `"dummy"` = a timing trial, labelled `weights: "dummy"` in the '
        "result, history, status and `fastverify_profile_info`")]
    eagle3_steps: Annotated[int | None, Doc(
        "a timing trial's EAGLE-3 draft steps (1..64, topk 1, steps + 1 draft tokens, as "
        "SGLang's adaptive worker runs them; only with mode `eagle3` and `load_format: "
        '"dummy"`, refused with 422 before anything stops otherwise; this start only, never '
        "persisted: the rollback and every later start run `[server.eagle3]`; `fastverifyctl "
        "spec costs`)", mirrors="server.eagle3.num_steps")]


class SetProfileOptions(_ProfileMode, _Answered, _ForceRefused, _Scheduled, _Again, _Trial,
                        _Canary, _Leased):
    """`POST /v1/profile`'s fields but the profile's name (`ControlClient.set_profile`)."""


class SetProfileBody(_ProfileName, SetProfileOptions):
    """`POST /v1/profile`."""


class _Mode(TypedDict, total=False):
    mode: Required[Annotated[str, Doc(MODES_HELP, mirrors="server.mode")]]


class SetModeOptions(_Answered, _ForceLease, _Scheduled, _Again, _Canary, _Leased):
    """`POST /v1/mode`'s fields but the mode (`ControlClient.set_mode`)."""


class SetModeBody(_Mode, SetModeOptions):
    """`POST /v1/mode`."""


class RestartBody(_Answered, _ForceLease, _Scheduled, _Leased):
    """`POST /v1/restart`."""


class RecordBaselineBody(TypedDict, total=False):
    """`POST /v1/baselines`: one baseline measurement."""

    profile: Required[Annotated[str, Doc(STORE_HELP)]]
    tokens_per_second: Required[Annotated[float, Doc("throughput, finite and > 0")]]
    per_request_tokens_per_second: Required[Annotated[float, Doc(
        "per request, finite and > 0")]]
    concurrency: Annotated[int | None, Doc(
        "the concurrent requests it was measured at, >= 1, required (the daemon says why "
        "when absent): the exporter's break-even and speedup gauges compare EAGLE-3 only with "
        "the baseline of the running-request count it reads")]
    measured_at: Annotated[float | None, Doc(
        "unix seconds, default now; not before 2020-01-01 nor more than 60 s in the future")]
    accept_length: Annotated[float | None, Doc(
        ACCEPT_LENGTH_HELP + ": EAGLE-3 with real weights; trial sweeps judge break-even accept "
        "lengths by it", minimum=1, why="bonus token included")]
    acceptance_source: Annotated[str | None, Doc(ACCEPTANCE_SOURCE_HELP)]


class CaptureTraceBody(TypedDict, total=False):
    """`POST /v1/trace/capture`."""

    steps: Annotated[int | None, Doc("forward steps to record (default `daemon.trace_steps`)",
                                     mirrors="daemon.trace_steps")]


class RecordDecisionBody(TypedDict, total=False):
    """`POST /v1/decision`: what `fastverifyctl tune` decided."""

    profile: Required[Annotated[str, Doc(STORE_HELP)]]
    mode: Required[Annotated[str, Doc(MODES_HELP)]]
    backend: Required[Annotated[str, Doc("the all-reduce backend's name (`[a-z][a-z0-9_]*`)")]]
    applied: Required[Annotated[bool, Doc("whether tune applied it")]]
    why: Required[Annotated[str, Doc("the reason, at most 2000 characters")]]
    report: Annotated[str | None, Doc("the report file it wrote")]
    accept_length: Annotated[float | None, Doc(ACCEPT_LENGTH_HELP)]
    acceptance_source: Annotated[str | None, Doc(ACCEPTANCE_SOURCE_HELP)]
    tokens_per_second: Annotated[float | None, Doc("the throughput it measured")]
    adaptive_config: Annotated[str | None, Doc("mode adaptive: the plan's SGLang config")]


class _Experiment(TypedDict, total=False):
    experiment: Required[Annotated[str, Doc('"sweep", "tune" or "spec-costs"')]]


class TakeLeaseOptions(TypedDict, total=False):
    """`POST /v1/lease`'s fields but the experiment (`ControlClient.take_lease`)."""

    description: Annotated[str | None, Doc("what it runs, for status")]
    force: Annotated[bool, Doc("take it even while another lease holds", default=False)]


class TakeLeaseBody(_Experiment, TakeLeaseOptions):
    """`POST /v1/lease`."""


class ReleaseLeaseBody(TypedDict, total=False):
    """`POST /v1/lease/release`."""

    id: Required[Annotated[str, Doc("the lease's id")]]


class RecordAcceptanceBody(TypedDict, total=False):
    """`POST /v1/acceptance`: a bench's acceptance on the served EAGLE-3 engine."""

    histogram: Required[Annotated[list[Any], Doc(
        "accepted drafts per verify pass, summed: non-negative ints, at least one pass, at "
        "most steps + 1 entries")]]
    requests: Annotated[list[Any] | None, Doc("each request's histogram")]
    dataset: Annotated[dict[str, Any] | None, Doc("`{name, format, sha256, prompts, synthetic}`")]
    sampling: Annotated[dict[str, Any] | None, Doc("`{temperature, top_p}`")]
    input_len: Annotated[int | None, Doc("prompt tokens per request")]
    output_len: Annotated[int | None, Doc("generated tokens per request")]
    profile: Annotated[str | None, Doc("the profile the client measured (checked against the "
                                       "served)")]
    mode: Annotated[str | None, Doc("the mode the client measured (checked against the served)")]
    measured_at: Annotated[float | None, Doc("unix seconds, default now")]


class StoreSpecPlanBody(TypedDict, total=False):
    """`POST /v1/spec/plan`."""

    plan: Required[Annotated[dict[str, Any], Doc("the plan (`Plan.to_dict`)")]]
    adaptive_config: Required[Annotated[dict[str, Any], Doc("SGLang's adaptive config")]]


class HistoryQuery(TypedDict, total=False):
    """`GET /v1/history`'s query."""

    n: Annotated[int, Doc(f"the newest N records (at most {HISTORY_PAGE_MAX})",
                          default=HISTORY_PAGE, minimum=1)]
    before: Annotated[float | None, Doc(
        "only records that finished before this unix time: the oldest `finished_at` of the "
        "page before, for the next page back (a page never splits records of the same "
        "`finished_at`)")]


class LogsQuery(TypedDict, total=False):
    """`GET /v1/logs`'s query."""

    n: Annotated[int, Doc("the newest N lines first", default=100)]
    follow: Annotated[bool, Doc("keep the stream open for new lines", default=False)]


class ServerArgvQuery(TypedDict, total=False):
    """`GET /v1/server/argv`'s query."""

    profile: Annotated[str | None, Doc("the profile (default: the active one)")]
    mode: Annotated[str | None, Doc("the mode (default: the active one)")]
    check: Annotated[bool, Doc("run the engine's own argv parser on it", default=False)]


# The keys every part's status section has besides its own fields (the status body's `parts`)
PART_SUMMARY = "summary"
PART_SHARED_LOADS = "shared_loads"
# seconds the part took to load what it shares (the weight cache: its own read of the
# checkpoint); null when unknown or nothing is shared
PART_SHARED_LOAD_S = "shared_load_s"


def part_section(status: "StatusBody", name: str) -> dict[str, Any]:
    """The section part `name` adds to `status` (its `STATUS`, listed in `parts`; each part
    declares its own); {} when the daemon runs no such part or it has nothing to say now."""
    found: dict[str, Any] | None = cast(dict[str, Any], status).get(name)
    return found or {}


# fmt: off
# ---------------------------------------------------------------------- the endpoints
# (Their types quoted: a module's annotations are evaluated at import, and a generic's
# subscript costs the CLI's start-up ~0.1 ms each; the answers' models are named, in
# fastverify.api_answers.)
_WAIT = "with `wait: false`, 202 `Accepted` at once"  # an operation's
_INVALID = ("422 `{error, fields: {field: what is wrong}, reason: \"%s\"}` naming every bad "
            "field (nothing is stored then)")
STATUS: "Endpoint[NoBody, StatusBody]" = Endpoint(
    "GET", "/v1/status", "status", "The daemon's state, the serving engine and what it knows.",
    answer="StatusBody",
)
PROFILES: "Endpoint[NoBody, list[ProfileListed]]" = Endpoint(
    "GET", "/v1/profiles", "profiles", "Every profile the daemon can switch to, from its own "
    "profile directories then the shipped ones, validated against its host, the active one "
    "marked (`fastverifyctl profile list`).",
    answer="list[ProfileListed]",
)
HISTORY: "Endpoint[HistoryQuery, list[HistoryRecord]]" = Endpoint(
    "GET", "/v1/history", "history", "The journal of operations, oldest first, one page "
    "at a time (the client's `history()` and `fastverifyctl history` page back to the "
    "start when asked for all). Operations (start, switch, mode, restart, rollback) and "
    "crashes are kept in the daemon's own journal; recorded decisions in a journal of "
    "their own, so no number of them can rotate an operation out.",
    model=HistoryQuery, answer="list[HistoryRecord]",
    notes="`switch`: how the operation looked to clients (see Operations); `outcome`, "
    "`put_back`: a request a killed daemon left unanswered, closed by the next one with "
    "result `interrupted`",
)
LOGS: "Endpoint[LogsQuery, LogEvent]" = Endpoint(
    "GET", "/v1/logs", "logs", "The engine's and the daemon's log lines.",
    model=LogsQuery, answer="LogEvent", streams=True,
)
SERVER_ARGV: "Endpoint[ServerArgvQuery, ServerArgv]" = Endpoint(
    "GET", "/v1/server/argv", "server_argv", "The server command line a profile and mode get.",
    model=ServerArgvQuery, answer="ServerArgv",
)
SET_PROFILE: "Endpoint[SetProfileBody, OperationResult]" = Endpoint(
    "POST", "/v1/profile", "set_profile", "Switch to a profile (and mode): stop the engine, "
    "start it with the profile, verify, roll back on failure.",
    model=SetProfileBody, answer="OperationResult", notes=_WAIT, streams=True,
)
SET_MODE: "Endpoint[SetModeBody, OperationResult]" = Endpoint(
    "POST", "/v1/mode", "set_mode", "Switch the mode of the active profile (adaptive without a "
    'stored plan is 422 `reason: "no_adaptive_plan"` before anything stops; a start in which '
    "SGLang logs `speculative_adaptive disabled: ...` fails as `adaptive_disabled` and rolls "
    "back).",
    model=SetModeBody, answer="OperationResult", notes=_WAIT, streams=True,
)
RESTART: "Endpoint[RestartBody, OperationResult]" = Endpoint(
    "POST", "/v1/restart", "restart", "Restart the engine with the active profile and mode.",
    model=RestartBody, answer="OperationResult", notes=_WAIT, streams=True,
)
CANCEL: "Endpoint[NoBody, Cancelled]" = Endpoint(
    "POST", "/v1/cancel", "cancel", "Cancel the operation in flight (see Cancel).",
    answer="Cancelled", notes="200 once accepted; 404 when no operation is in flight",
)
BASELINES: "Endpoint[NoBody, dict[str, ProfileBaselines]]" = Endpoint(
    "GET", "/v1/baselines", "baselines", "The recorded baseline measurements.",
    answer="dict[str, ProfileBaselines]", notes="keyed by profile",
)
RECORD_BASELINE: "Endpoint[RecordBaselineBody, BaselineRecord]" = Endpoint(
    "POST", "/v1/baselines", "record_baseline", "Record a baseline measurement (bench, sweep).",
    model=RecordBaselineBody, answer="BaselineRecord", notes=_INVALID % "invalid_baseline",
    max_body=4 * 1024, recorded=True,
)
CAPTURE_TRACE: "Endpoint[CaptureTraceBody, TraceCapture]" = Endpoint(
    "POST", "/v1/trace/capture", "capture_trace", "Record one profile window of the serving "
    "engine now and analyse it. A window records forward steps, which only happen under "
    "load; a client that disconnects while waiting cancels the window.",
    model=CaptureTraceBody, answer="TraceCapture",
    notes="409 (nothing started) when the exporter is off, no engine is "
    "READY, another profile window still runs after the capture timeout (a background window "
    "in progress is waited for), or the engine is idle: over 3 s SGLang's /metrics showed no "
    "running or queued request and none of its activity counters moved "
    "(`sglang:cuda_graph_passes_total`, generated/prompt tokens, finished requests; one "
    "sample of the gauges is not evidence, SGLang refreshes them at log intervals); a server "
    "without those counters is not refused (the window's timeout applies); every 409 but "
    '"another window runs" and "an operation is in flight" has `busy: false`; 502 when the '
    "window failed or timed out: the daemon then stops it on the server (`POST "
    "/stop_profile`) and removes its directory",
)
DECISION: "Endpoint[NoBody, DecisionRecord]" = Endpoint(
    "GET", "/v1/decision", "decision", "The newest tuning decision (`fastverifyctl tune`).",
    answer="DecisionRecord", notes="`{}` when none",
)
RECORD_DECISION: "Endpoint[RecordDecisionBody, DecisionRecord]" = Endpoint(
    "POST", "/v1/decision", "record_decision", "Record what `fastverifyctl tune` decided, "
    "after it applied it through `POST /v1/profile`: kept in `decision.json` of the state "
    "dir, appended to the history (kind `decision`) and exported as "
    "`fastverify_decision_info{profile,mode,backend,applied,serving} 1` (`serving`: whether "
    "it is what serves now; also after a daemon restart).",
    model=RecordDecisionBody, answer="DecisionRecord", notes=_INVALID % "invalid_decision",
    max_body=16 * 1024, recorded=True,
)
LEASE: "Endpoint[NoBody, LeaseInForce]" = Endpoint(
    "GET", "/v1/lease", "lease", "The experiment's lease in force, if any.",
    answer="LeaseInForce", notes="`id` only when the caller is the holder (the identity that "
    "took it)",
)
TAKE_LEASE: "Endpoint[TakeLeaseBody, Lease]" = Endpoint(
    "POST", "/v1/lease", "take_lease", "Hold the daemon for an experiment (see Leases).",
    model=TakeLeaseBody, answer="Lease",
    notes="the lease belongs to the caller's identity (uid on the Unix socket, certificate "
    'subject + token name on TCP); 409 `{error, reason: "leased", lease}` while another '
    "lease holds; taken with `force` over another's, the override is recorded in the "
    "history (kind `lease_override`)",
)
RELEASE_LEASE: "Endpoint[ReleaseLeaseBody, Released]" = Endpoint(
    "POST", "/v1/lease/release", "release_lease", "End an experiment's lease.",
    model=ReleaseLeaseBody, answer="Released",
    notes='404 `{reason: "no_lease"}` when that lease is not in force; 403 `{reason: '
    '"not_holder"}` when another identity holds it',
)
ACCEPTANCE: "Endpoint[NoBody, AcceptanceCurves]" = Endpoint(
    "GET", "/v1/acceptance", "acceptance", "Every bench's accepted-drafts histograms, the "
    "summed one and each request's, newest 50 kept.",
    answer="AcceptanceCurves",
)
RECORD_ACCEPTANCE: "Endpoint[RecordAcceptanceBody, AcceptanceRecord]" = Endpoint(
    "POST", "/v1/acceptance", "record_acceptance", "Record a bench's acceptance on the served "
    "EAGLE-3 engine, labelled from what the daemon serves: profile, mode, model, drafter, "
    "topk, launch steps, weights.",
    model=RecordAcceptanceBody, answer="AcceptanceRecord",
    notes='409 `reason: "not_serving"` / `"served_changed"` (the client measured another '
    'profile/mode); 422 `"not_speculative"` (a baseline server) or `"invalid_histogram"`',
    max_body=MAX_BODY, recorded=True,
)
SPEC_PLAN: "Endpoint[NoBody, SpecPlan]" = Endpoint(
    "GET", "/v1/spec/plan", "spec_plan", "The stored speculation plan (`fastverifyctl spec "
    "plan`, `fastverify.speculation.plan.Plan.to_dict`).",
    answer="SpecPlan", notes="`{}` when none",
)
VERIFY: "Endpoint[NoBody, Verification]" = Endpoint(
    "GET", "/v1/verify", "verify", "Run the after-READY verifiers again on the serving engine "
    "(read-only: it keeps serving whatever the verdict; `fastverifyctl verify`).",
    answer="Verification",
    notes="409 (`reason` `busy` or `not_serving`) while an operation runs or nothing serves",
)
STORE_SPEC_PLAN: "Endpoint[StoreSpecPlanBody, SpecPlan]" = Endpoint(
    "POST", "/v1/spec/plan", "store_spec_plan", "Store a speculation plan: the config is "
    "checked as SGLang's `_load_adaptive_config` checks it (422 `reason: \"invalid_plan\"`), "
    "then written to `adaptive-config.json` in the state dir (mode adaptive serves it) beside "
    "`spec-plan.json`.",
    model=StoreSpecPlanBody, answer="SpecPlan",
)


ENDPOINTS: "tuple[Endpoint[Any, Any], ...]" = (
    STATUS, PROFILES, HISTORY, LOGS, SERVER_ARGV, BASELINES, ACCEPTANCE, SPEC_PLAN, DECISION,
    LEASE, VERIFY, SET_PROFILE, SET_MODE, RESTART, CANCEL, TAKE_LEASE, RELEASE_LEASE,
    RECORD_BASELINE, RECORD_DECISION, RECORD_ACCEPTANCE, STORE_SPEC_PLAN, CAPTURE_TRACE,
)
# fmt: on

# path -> its methods (the daemon's routes)
ROUTES: dict[str, tuple[str, ...]] = {}
for _ep in ENDPOINTS:
    ROUTES[_ep.path] = (*ROUTES.get(_ep.path, ()), _ep.method)
del _ep


def endpoint(method: str, path: str) -> "Endpoint[Any, Any] | None":
    return next((e for e in ENDPOINTS if (e.method, e.path) == (method, path)), None)
