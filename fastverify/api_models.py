"""The control API's contract, declared once: every endpoint (method, path, what it does) with
the names of its request's typed model (fastverify.api_bodies: a TypedDict of its JSON body's
or its query's fields, each an `Annotated[type, Doc(help, default, ...)]`) and of its
answer's model (fastverify.api_answers: the status body and every other answer).

Everything else is derived from these declarations: the daemon's routes and request
validation (fastverify.daemon.api_requests, reading the fields through
fastverify.api_schema: a body checked against its model is that model), the typed methods of
fastverify.client (which the CLI calls: their keyword fields are the models', checked by the
type checker and again before anything is sent; `status()` answers a `StatusBody`), the
status assembly's type (fastverify.daemon.facade), and the reference part of
docs/reference/api.md (fastverify.api_reference). The status sections of the daemon's parts
are declared by the parts (`Part.SECTION`). Plain classes, no dataclasses or NamedTuples: the
CLI imports this module on its start-up path, and builds a request's model only for a call
that has fields, never the answers' models.
"""

# No `from __future__ import annotations` (as fastverify.api_base).
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from fastverify.api_base import HISTORY_PAGE as HISTORY_PAGE
from fastverify.api_base import HISTORY_PAGE_MAX as HISTORY_PAGE_MAX

if TYPE_CHECKING:
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
    from fastverify.api_bodies import (
        CaptureTraceBody,
        HistoryQuery,
        LogsQuery,
        NoBody,
        RecordAcceptanceBody,
        RecordBaselineBody,
        RecordDecisionBody,
        ReleaseLeaseBody,
        RestartBody,
        ServerArgvQuery,
        SetModeBody,
        SetProfileBody,
        StoreSpecPlanBody,
        TakeLeaseBody,
    )
    from fastverify.api_schema import Field

MAX_BODY = 64 * 1024  # bytes of any request body (an endpoint may allow fewer)
# Requests that write a record (`Endpoint.recorded`) are rate-limited per caller identity
# together: RECORD_BURST at once, then RECORD_RATE_PER_S a second (429 with Retry-After).
RECORD_RATE_PER_S = 2.0
RECORD_BURST = 30


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

    __slots__ = ("answer_name", "client", "max_body", "method", "model_name", "notes", "path",
                 "recorded", "streams", "summary")  # fmt: skip

    def __init__(
        self,
        method: str,
        path: str,
        client: str,
        summary: str,
        model: str = "NoBody",
        answer: str = "Empty",
        notes: str = "",
        streams: bool = False,
        max_body: int = MAX_BODY,
        recorded: bool = False,
    ) -> None:
        self.method, self.path, self.client, self.summary = method, path, client, summary
        self.model_name, self.answer_name, self.notes = model, answer, notes
        self.streams, self.max_body, self.recorded = streams, max_body, recorded

    @property
    def model(self) -> "type[B]":
        """The request's model, built from fastverify.api_bodies."""
        from fastverify import api_bodies

        return cast("type[B]", getattr(api_bodies, self.model_name))

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
        """The fields' names, as the client checks a call's (a request without fields builds
        no model)."""
        return () if self.model_name == "NoBody" else tuple(self.model.__annotations__)

    def defaults(self) -> dict[str, Any]:
        """The fields a request may leave out, with the value the daemon then uses."""
        from fastverify.api_schema import declared

        return {f.name: f.default for f in declared(self.model) if not f.required}

    def __repr__(self) -> str:
        return f"Endpoint({self.method} {self.path})"


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
    model="HistoryQuery", answer="list[HistoryRecord]",
    notes="`switch`: how the operation looked to clients (see Operations); `outcome`, "
    "`put_back`: a request a killed daemon left unanswered, closed by the next one with "
    "result `interrupted`",
)
LOGS: "Endpoint[LogsQuery, LogEvent]" = Endpoint(
    "GET", "/v1/logs", "logs", "The engine's and the daemon's log lines.",
    model="LogsQuery", answer="LogEvent", streams=True,
)
SERVER_ARGV: "Endpoint[ServerArgvQuery, ServerArgv]" = Endpoint(
    "GET", "/v1/server/argv", "server_argv", "The server command line a profile and mode get.",
    model="ServerArgvQuery", answer="ServerArgv",
)
SET_PROFILE: "Endpoint[SetProfileBody, OperationResult]" = Endpoint(
    "POST", "/v1/profile", "set_profile", "Switch to a profile (and mode): stop the engine, "
    "start it with the profile, verify, roll back on failure.",
    model="SetProfileBody", answer="OperationResult", notes=_WAIT, streams=True,
)
SET_MODE: "Endpoint[SetModeBody, OperationResult]" = Endpoint(
    "POST", "/v1/mode", "set_mode", "Switch the mode of the active profile (adaptive without a "
    'stored plan is 422 `reason: "no_adaptive_plan"` before anything stops; a start in which '
    "SGLang logs `speculative_adaptive disabled: ...` fails as `adaptive_disabled` and rolls "
    "back).",
    model="SetModeBody", answer="OperationResult", notes=_WAIT, streams=True,
)
RESTART: "Endpoint[RestartBody, OperationResult]" = Endpoint(
    "POST", "/v1/restart", "restart", "Restart the engine with the active profile and mode.",
    model="RestartBody", answer="OperationResult", notes=_WAIT, streams=True,
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
    model="RecordBaselineBody", answer="BaselineRecord", notes=_INVALID % "invalid_baseline",
    max_body=4 * 1024, recorded=True,
)
CAPTURE_TRACE: "Endpoint[CaptureTraceBody, TraceCapture]" = Endpoint(
    "POST", "/v1/trace/capture", "capture_trace", "Record one profile window of the serving "
    "engine now and analyse it. A window records forward steps, which only happen under "
    "load; a client that disconnects while waiting cancels the window.",
    model="CaptureTraceBody", answer="TraceCapture",
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
    model="RecordDecisionBody", answer="DecisionRecord", notes=_INVALID % "invalid_decision",
    max_body=16 * 1024, recorded=True,
)
LEASE: "Endpoint[NoBody, LeaseInForce]" = Endpoint(
    "GET", "/v1/lease", "lease", "The experiment's lease in force, if any.",
    answer="LeaseInForce", notes="`id` only when the caller is the holder (the identity that "
    "took it)",
)
TAKE_LEASE: "Endpoint[TakeLeaseBody, Lease]" = Endpoint(
    "POST", "/v1/lease", "take_lease", "Hold the daemon for an experiment (see Leases).",
    model="TakeLeaseBody", answer="Lease",
    notes="the lease belongs to the caller's identity (uid on the Unix socket, certificate "
    'subject + token name on TCP); 409 `{error, reason: "leased", lease}` while another '
    "lease holds; taken with `force` over another's, the override is recorded in the "
    "history (kind `lease_override`)",
)
RELEASE_LEASE: "Endpoint[ReleaseLeaseBody, Released]" = Endpoint(
    "POST", "/v1/lease/release", "release_lease", "End an experiment's lease.",
    model="ReleaseLeaseBody", answer="Released",
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
    model="RecordAcceptanceBody", answer="AcceptanceRecord",
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
    model="StoreSpecPlanBody", answer="SpecPlan",
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
