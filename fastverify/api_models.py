"""The control API's contract, declared once: every endpoint (method, path, what it does) with
its request's typed model (a TypedDict of its JSON body's or its query's fields, each an
`Annotated[type, Doc(help, default, ...)]`) and the status body, a TypedDict (`StatusBody`,
its `engine` an `EngineStatus`) whose fields carry their help.

Everything else is derived from these declarations: the daemon's routes and request
validation (fastverify.daemon.api_requests: a body checked against its model is that model),
the typed methods of fastverify.client (which the CLI calls: their keyword fields are the
models', checked by the type checker and again before anything is sent; `status()` answers a
`StatusBody`), the status assembly's type (fastverify.daemon.facade), and the reference part
of docs/reference/api.md (fastverify.api_reference). The status sections of the daemon's
parts are declared by the parts (`Part.SECTION`). TypedDicts and NamedTuples, no
dataclasses: the CLI imports this module on its start-up path.
"""

# No `from __future__ import annotations`: the models' TypedDicts are read at run time (their
# fields are the requests' checks and document the reference), and evaluated annotations cost
# less to import than strings.
from collections.abc import Iterator
from types import UnionType
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    NamedTuple,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
)


class _Annotated:
    """`Annotated[type, metadata]` as this module's fields are read at run time: the type
    and the metadata (a help text, a `Doc`), nothing else. typing's own costs ~20 µs a field
    to build, 2 ms of the CLI's start-up for the ~100 fields below; the type checker reads
    typing's (TYPE_CHECKING)."""

    __slots__ = ("meta", "type")

    def __init__(self, tp: Any, meta: Any) -> None:
        self.type, self.meta = tp, meta

    def __class_getitem__(cls, params: tuple[Any, Any]) -> "_Annotated":
        return cls(*params)

    def __call__(self) -> None:  # what TypedDict's check of a field's type asks of a type
        raise TypeError("an annotation, not a type")


class _Mark:
    """`Required` / `NotRequired` as this module's fields are read at run time: `mark[hint]`
    is the hint, marked (typing's builds a generic alias, ~10 µs each)."""

    __slots__ = ("hint", "mark")

    def __init__(self, mark: Any = None, hint: Any = None) -> None:
        self.mark, self.hint = mark, hint

    def __getitem__(self, hint: Any) -> "_Mark":
        return _Mark(self, hint)

    def __call__(self) -> None:  # what a TypedDict's check of a field's type asks of a type
        raise TypeError("an annotation, not a type")


def _unmarked(hint: Any) -> tuple[Any, Any]:
    """(its `Required`/`NotRequired` or None, the hint without it)."""
    if isinstance(hint, _Mark):
        return hint.mark, hint.hint
    return None, hint


class _TypedDict:
    """`TypedDict` as this module's models are read at run time: the fields
    (`__annotations__`, its bases' first) and which are required (`__required_keys__`),
    nothing else. typing's costs ~40 µs a model to build (a field's type checked, the bases
    merged), 2 ms of the CLI's start-up for the ~50 models below; the type checker reads
    typing's (TYPE_CHECKING). The functional form (`TypedDict(name, fields)`) declares
    a field whose name is a keyword."""

    if TYPE_CHECKING:  # (no annotation at run time: a model's are its fields)
        __required_keys__: frozenset[str]

    def __new__(cls, name: str, fields: dict[str, Any], total: bool = True) -> Any:
        return type(name, (_TypedDict,), {"__annotations__": fields}, total=total)

    def __init_subclass__(cls, total: bool = True) -> None:
        own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 (inspect: ~5 ms import)
        fields: dict[str, Any] = {}
        required: set[str] = set()
        for base in cls.__bases__:
            fields.update(getattr(base, "__annotations__", {}))
            required |= getattr(base, "__required_keys__", set())
        for name, hint in own.items():
            marked, _ = _unmarked(hint)
            if marked is Required or (total and marked is not NotRequired):
                required.add(name)
            else:
                required.discard(name)
        cls.__annotations__ = {**fields, **own}
        cls.__required_keys__ = frozenset(required)


if TYPE_CHECKING:
    from typing import Annotated, NotRequired, Required, TypedDict
else:
    Annotated, TypedDict = _Annotated, _TypedDict
    Required, NotRequired = _Mark(), _Mark()

MAX_BODY = 64 * 1024  # bytes of any request body (an endpoint may allow fewer)
# Requests that write a record (`Endpoint.recorded`) are rate-limited per caller identity
# together: RECORD_BURST at once, then RECORD_RATE_PER_S a second (429 with Retry-After).
RECORD_RATE_PER_S = 2.0
RECORD_BURST = 30
HISTORY_PAGE = 100  # records of one `GET /v1/history` when `n` is not given
HISTORY_PAGE_MAX = 1000  # the most records one `GET /v1/history` answers

# request field kind -> the JSON types it accepts (a bool is never a number)
KINDS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "bool": (bool,),
    "int": (int,),
    "number": (int, float),
    "list": (list,),
    "dict": (dict,),
}
# a request field's declared type (without None) -> its kind (`float` is JSON's number)
_KIND_OF: dict[Any, str] = {str: "str", bool: "bool", int: "int", float: "number", list: "list",
                            dict: "dict"}  # fmt: skip


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


class Field(NamedTuple):
    """One field of a request body or query as its model declares it (`declared`), or of the
    status body (`documented`). `kind`: a KINDS key for request fields (checked), JSON's name
    of the type for the status body; the rest: the field's `Doc`."""

    name: str
    kind: str
    help: str
    required: bool = False
    default: Any = None
    mirrors: str | None = None
    minimum: float | None = None
    why: str = ""


def _annotated(model: Any) -> Iterator[tuple[str, Any, Any]]:
    """(name, type, metadata) of each field of a TypedDict `model`, in declaration order."""
    for name, hint in model.__annotations__.items():
        _, hint = _unmarked(hint)
        yield name, hint.type, hint.meta


def _annotated_types(model: Any) -> Iterator[tuple[str, Any]]:
    """(name, type) of each field of a TypedDict `model`."""
    for name, tp, _ in _annotated(model):
        yield name, tp


def _request_kind(tp: Any) -> str:
    """A request field's kind (KINDS) from its declared type: `int | None` is an int."""
    if get_origin(tp) in (Union, UnionType):
        (tp,) = (t for t in get_args(tp) if t is not type(None))
    return _KIND_OF[get_origin(tp) or tp]


_DECLARED: dict[Any, tuple[Field, ...]] = {}


def declared(model: Any) -> tuple[Field, ...]:
    """The fields of request model `model` (read when the daemon or the reference asks: the
    CLI's start-up never pays for it)."""
    if model not in _DECLARED:
        required = model.__required_keys__
        _DECLARED[model] = tuple(
            Field(
                name,
                _request_kind(tp),
                d.help,
                name in required,
                d.default,
                d.mirrors,
                d.minimum,
                d.why,
            )
            for name, tp, d in _annotated(model)
        )
    return _DECLARED[model]


class NoBody(TypedDict, total=False):
    """A request with no body (POST: `{}` or none) or no query parameters (GET)."""


B = TypeVar("B")  # a request model
A = TypeVar("A")  # an answer's model


class Empty(TypedDict):
    """`{}`: an answer with nothing to say."""


class Endpoint(NamedTuple, Generic[B, A]):
    """One method on one path. `client`: the fastverify.client method that calls it;
    `model`: its request's typed model, the JSON body's fields (POST) or the query
    parameters (GET); `answer`: its answer's model (a TypedDict, or `list[...]`, `dict[str,
    ...]` of one; a stream's: one event's); `notes`: what the answer's type cannot say (its
    status codes, `{}` when there is none); `streams`: the answer is NDJSON events;
    `max_body`: the most bytes its body may have (413 beyond); `recorded`: it writes a
    record (rate-limited: RECORD_RATE_PER_S)."""

    method: str
    path: str
    client: str
    summary: str
    model: type[B] = NoBody  # type: ignore[assignment]  # (none: no body or query)
    answer: type[A] = Empty  # type: ignore[assignment]
    notes: str = ""
    streams: bool = False
    max_body: int = MAX_BODY
    recorded: bool = False

    @property
    def fields(self) -> tuple[Field, ...]:
        """The JSON body's fields (none for a GET)."""
        return declared(self.model) if self.method == "POST" else ()

    @property
    def query(self) -> tuple[Field, ...]:
        """The query parameters (none for a POST)."""
        return declared(self.model) if self.method == "GET" else ()

    @property
    def names(self) -> tuple[str, ...]:
        """The fields' names, as the client checks a call's (cheap: no Field is built)."""
        return tuple(self.model.__annotations__)

    def defaults(self) -> dict[str, Any]:
        """The fields a request may leave out, with the value the daemon then uses."""
        return {f.name: f.default for f in declared(self.model) if not f.required}

    def __repr__(self) -> str:
        return f"Endpoint({self.method} {self.path})"


# The declarations below are laid out by hand, one field to a line or two, to be read.
# fmt: off

# ---------------------------------------------------------------------- the request models
_FORCE_LEASE = "switch even while an experiment holds the lease"
_ACCEPT_LENGTH = "accepted tokens per verify pass, bonus token included (>= 1)"
_ACCEPTANCE_SOURCE = ("where the accept length came from: `measured`, or `forced "
                      "(SGLANG_SIMULATE_ACC_LEN=L)` when SGLang forced it")
_STORE = "a profile of the profile store"
_MODES = "baseline, eagle3 or adaptive"


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
    mode: Annotated[str | None, Doc(_MODES + " (default: the active one)",
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
    mode: Required[Annotated[str, Doc(_MODES, mirrors="server.mode")]]


class SetModeOptions(_Answered, _ForceLease, _Scheduled, _Again, _Canary, _Leased):
    """`POST /v1/mode`'s fields but the mode (`ControlClient.set_mode`)."""


class SetModeBody(_Mode, SetModeOptions):
    """`POST /v1/mode`."""


class RestartBody(_Answered, _ForceLease, _Scheduled, _Leased):
    """`POST /v1/restart`."""


class RecordBaselineBody(TypedDict, total=False):
    """`POST /v1/baselines`: one baseline measurement."""

    profile: Required[Annotated[str, Doc(_STORE)]]
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
        _ACCEPT_LENGTH + ": EAGLE-3 with real weights; trial sweeps judge break-even accept "
        "lengths by it", minimum=1, why="bonus token included")]
    acceptance_source: Annotated[str | None, Doc(_ACCEPTANCE_SOURCE)]


class CaptureTraceBody(TypedDict, total=False):
    """`POST /v1/trace/capture`."""

    steps: Annotated[int | None, Doc("forward steps to record (default `daemon.trace_steps`)",
                                     mirrors="daemon.trace_steps")]


class RecordDecisionBody(TypedDict, total=False):
    """`POST /v1/decision`: what `fastverifyctl tune` decided."""

    profile: Required[Annotated[str, Doc(_STORE)]]
    mode: Required[Annotated[str, Doc(_MODES)]]
    backend: Required[Annotated[str, Doc("the all-reduce backend's name (`[a-z][a-z0-9_]*`)")]]
    applied: Required[Annotated[bool, Doc("whether tune applied it")]]
    why: Required[Annotated[str, Doc("the reason, at most 2000 characters")]]
    report: Annotated[str | None, Doc("the report file it wrote")]
    accept_length: Annotated[float | None, Doc(_ACCEPT_LENGTH)]
    acceptance_source: Annotated[str | None, Doc(_ACCEPTANCE_SOURCE)]
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


# The keys every part's status section has besides its own fields (`parts` below)
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

# fmt: on


def _kind(tp: Any) -> str:
    """A field's type in JSON's words, as the reference prints it: `int | null`, `object`."""
    if get_origin(tp) in (Union, UnionType):
        return " | ".join(_kind(t) for t in get_args(tp))
    named = {str: "str", bool: "bool", int: "int", float: "number", type(None): "null"}
    if tp in named:
        return named[tp]
    if is_model(tp):
        return str(tp.__name__)
    args = get_args(tp)
    if (get_origin(tp) or tp) is list:
        return f"list of {_kind(args[0])}" if args and is_model(args[0]) else "list"
    if (get_origin(tp) or tp) is dict:
        return f"object of {_kind(args[1])}" if args and is_model(args[1]) else "object"
    if tp is Any:
        return "any"
    raise TypeError(f"no JSON name for {tp!r}")


def is_model(tp: Any) -> bool:
    """`tp` is one of this module's TypedDicts (at run time: `_TypedDict`s)."""
    return isinstance(tp, type) and issubclass(tp, _TypedDict)


def models_of(tp: Any) -> Iterator[Any]:
    """The TypedDicts an answer's type names: its own (`list[...]`, `dict[str, ...]`, a
    union's), then those its fields name, depth first, each once a call."""
    seen: set[Any] = set()

    def walk(t: Any) -> Iterator[Any]:
        if is_model(t):
            if t not in seen:
                seen.add(t)
                yield t
                for _, ft, _ in _annotated(t):
                    yield from walk(ft)
            return
        for arg in get_args(t):
            yield from walk(arg)

    return walk(tp)


def documented(body: Any) -> tuple[Field, ...]:
    """The fields of a body's TypedDict, as the reference documents them: name, kind, help
    (read when asked: the CLI's start-up never pays for it)."""
    return tuple(Field(name, _kind(tp), help_) for name, tp, help_ in _annotated(body))


# fmt: off
# ---------------------------------------------------------------------- the endpoints
# (Their types quoted: a module's annotations are evaluated at import, and a generic's
# subscript costs the CLI's start-up ~0.1 ms each.)
# Each endpoint with its answer's models above it (a model another endpoint answers too
# stands above the first).
STATUS: "Endpoint[NoBody, StatusBody]" = Endpoint(
    "GET", "/v1/status", "status", "The daemon's state, the serving engine and what it knows.",
    answer=StatusBody,
)


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


PROFILES: "Endpoint[NoBody, list[ProfileListed]]" = Endpoint(
    "GET", "/v1/profiles", "profiles", "Every profile the daemon can switch to, from its own "
    "profile directories then the shipped ones, validated against its host, the active one "
    "marked (`fastverifyctl profile list`).",
    answer=list[ProfileListed],
)


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


_WAIT = "with `wait: false`, 202 `Accepted` at once"


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


HISTORY: "Endpoint[HistoryQuery, list[HistoryRecord]]" = Endpoint(
    "GET", "/v1/history", "history", "The journal of operations, oldest first, one page "
    "at a time (the client's `history()` and `fastverifyctl history` page back to the "
    "start when asked for all). Operations (start, switch, mode, restart, rollback) and "
    "crashes are kept in the daemon's own journal; recorded decisions in a journal of "
    "their own, so no number of them can rotate an operation out.",
    model=HistoryQuery, answer=list[HistoryRecord],
    notes="`switch`: how the operation looked to clients (see Operations); `outcome`, "
    "`put_back`: a request a killed daemon left unanswered, closed by the next one with "
    "result `interrupted`",
)


class LogEvent(TypedDict):
    """One log line."""

    event: Annotated[str, '`"log"`']
    seq: Annotated[int, "its number"]
    ts: Annotated[float, "unix time"]
    source: Annotated[str, '`"engine"` or `"daemon"`']
    line: Annotated[str, "the line"]


LOGS: "Endpoint[LogsQuery, LogEvent]" = Endpoint(
    "GET", "/v1/logs", "logs", "The engine's and the daemon's log lines.",
    model=LogsQuery, answer=LogEvent, streams=True,
)


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


SERVER_ARGV: "Endpoint[ServerArgvQuery, ServerArgv]" = Endpoint(
    "GET", "/v1/server/argv", "server_argv", "The server command line a profile and mode get.",
    model=ServerArgvQuery, answer=ServerArgv,
)
SET_PROFILE: "Endpoint[SetProfileBody, OperationResult]" = Endpoint(
    "POST", "/v1/profile", "set_profile", "Switch to a profile (and mode): stop the engine, "
    "start it with the profile, verify, roll back on failure.",
    model=SetProfileBody, answer=OperationResult, notes=_WAIT, streams=True,
)
SET_MODE: "Endpoint[SetModeBody, OperationResult]" = Endpoint(
    "POST", "/v1/mode", "set_mode", "Switch the mode of the active profile (adaptive without a "
    'stored plan is 422 `reason: "no_adaptive_plan"` before anything stops; a start in which '
    "SGLang logs `speculative_adaptive disabled: ...` fails as `adaptive_disabled` and rolls "
    "back).",
    model=SetModeBody, answer=OperationResult, notes=_WAIT, streams=True,
)
RESTART: "Endpoint[RestartBody, OperationResult]" = Endpoint(
    "POST", "/v1/restart", "restart", "Restart the engine with the active profile and mode.",
    model=RestartBody, answer=OperationResult, notes=_WAIT, streams=True,
)


class Cancelled(TypedDict):
    """A cancel the daemon accepted."""

    result: Annotated[str, '`"cancelled"`']
    operation: Annotated[OperationInFlight, "the operation cancelled"]


CANCEL: "Endpoint[NoBody, Cancelled]" = Endpoint(
    "POST", "/v1/cancel", "cancel", "Cancel the operation in flight (see Cancel).",
    answer=Cancelled, notes="200 once accepted; 404 when no operation is in flight",
)


class BaselineRecord(TypedDict):
    """A baseline measurement as stored."""

    profile: Annotated[str, "the profile measured"]
    tokens_per_second: Annotated[float, "total decode throughput"]
    per_request_tokens_per_second: Annotated[float, "per request"]
    measured_at: Annotated[float, "unix time"]
    concurrency: Annotated[int, "requests at once"]
    accept_length: NotRequired[Annotated[float, _ACCEPT_LENGTH]]
    acceptance_source: NotRequired[Annotated[str, _ACCEPTANCE_SOURCE]]


class ProfileBaselines(BaselineRecord):
    """A profile's baselines: its newest record, and the last one at each concurrency."""

    by_concurrency: NotRequired[Annotated[dict[str, BaselineRecord],
                                          '`{"N": record}`, the last at each concurrency']]


BASELINES: "Endpoint[NoBody, dict[str, ProfileBaselines]]" = Endpoint(
    "GET", "/v1/baselines", "baselines", "The recorded baseline measurements.",
    answer=dict[str, ProfileBaselines], notes="keyed by profile",
)
_INVALID = ("422 `{error, fields: {field: what is wrong}, reason: \"%s\"}` naming every bad "
            "field (nothing is stored then)")
RECORD_BASELINE: "Endpoint[RecordBaselineBody, BaselineRecord]" = Endpoint(
    "POST", "/v1/baselines", "record_baseline", "Record a baseline measurement (bench, sweep).",
    model=RecordBaselineBody, answer=BaselineRecord, notes=_INVALID % "invalid_baseline",
    max_body=4 * 1024, recorded=True,
)


class TraceCapture(TypedDict, total=False):
    """A profile window's analysis (fastverify.traces)."""

    steps: Required[Annotated[int, "forward steps recorded"]]
    ranks: Required[Annotated[list[dict[str, Any]], "one trace per TP rank: `{rank, file, "
                                                    "...}`"]]


CAPTURE_TRACE: "Endpoint[CaptureTraceBody, TraceCapture]" = Endpoint(
    "POST", "/v1/trace/capture", "capture_trace", "Record one profile window of the serving "
    "engine now and analyse it. A window records forward steps, which only happen under "
    "load; a client that disconnects while waiting cancels the window.",
    model=CaptureTraceBody, answer=TraceCapture,
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


class EngineIdentity(TypedDict):
    """Which engine measures here."""

    kind: Annotated[str, "`sglang` or `sim`"]
    version: Annotated[str | None, "the SGLang release it is or plays"]
    simulated: Annotated[bool, "the sim (never a measurement of hardware)"]


class DecisionRecord(TypedDict):
    """A tuning decision as stored."""

    profile: Annotated[str, _STORE]
    mode: Annotated[str, _MODES]
    backend: Annotated[str, "the all-reduce backend"]
    applied: Annotated[bool, "whether tune applied it"]
    why: Annotated[str, "the reason"]
    decided_at: Annotated[float, "unix time"]
    engine: Annotated[EngineIdentity, "the engine that measured"]
    report: NotRequired[Annotated[str, "the report file"]]
    accept_length: NotRequired[Annotated[float, _ACCEPT_LENGTH]]
    acceptance_source: NotRequired[Annotated[str, _ACCEPTANCE_SOURCE]]
    tokens_per_second: NotRequired[Annotated[float, "the throughput measured"]]
    adaptive_config: NotRequired[Annotated[str, "mode adaptive: the plan's SGLang config"]]
    by: NotRequired[Annotated[str, "who recorded it"]]


DECISION: "Endpoint[NoBody, DecisionRecord]" = Endpoint(
    "GET", "/v1/decision", "decision", "The newest tuning decision (`fastverifyctl tune`).",
    answer=DecisionRecord, notes="`{}` when none",
)
RECORD_DECISION: "Endpoint[RecordDecisionBody, DecisionRecord]" = Endpoint(
    "POST", "/v1/decision", "record_decision", "Record what `fastverifyctl tune` decided, "
    "after it applied it through `POST /v1/profile`: kept in `decision.json` of the state "
    "dir, appended to the history (kind `decision`) and exported as "
    "`fastverify_decision_info{profile,mode,backend,applied,serving} 1` (`serving`: whether "
    "it is what serves now; also after a daemon restart).",
    model=RecordDecisionBody, answer=DecisionRecord, notes=_INVALID % "invalid_decision",
    max_body=16 * 1024, recorded=True,
)


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


LEASE: "Endpoint[NoBody, LeaseInForce]" = Endpoint(
    "GET", "/v1/lease", "lease", "The experiment's lease in force, if any.",
    answer=LeaseInForce, notes="`id` only when the caller is the holder (the identity that "
    "took it)",
)
TAKE_LEASE: "Endpoint[TakeLeaseBody, Lease]" = Endpoint(
    "POST", "/v1/lease", "take_lease", "Hold the daemon for an experiment (see Leases).",
    model=TakeLeaseBody, answer=Lease,
    notes="the lease belongs to the caller's identity (uid on the Unix socket, certificate "
    'subject + token name on TCP); 409 `{error, reason: "leased", lease}` while another '
    "lease holds; taken with `force` over another's, the override is recorded in the "
    "history (kind `lease_override`)",
)


class Released(TypedDict):
    released: Annotated[Lease, "the lease released"]


RELEASE_LEASE: "Endpoint[ReleaseLeaseBody, Released]" = Endpoint(
    "POST", "/v1/lease/release", "release_lease", "End an experiment's lease.",
    model=ReleaseLeaseBody, answer=Released,
    notes='404 `{reason: "no_lease"}` when that lease is not in force; 403 `{reason: '
    '"not_holder"}` when another identity holds it',
)


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
    acceptance_source: Annotated[str, _ACCEPTANCE_SOURCE]
    forced: Annotated[dict[str, Any] | None, "SGLang's forced acceptance, if any"]
    usable_forced: Annotated[bool, "usable as a forced acceptance"]
    fingerprint: Annotated[dict[str, Any] | None, "the host fingerprint `{id, facts}`"]
    why_not_usable: NotRequired[Annotated[str, "why it is not usable"]]


class AcceptanceCurves(TypedDict):
    curves: Annotated[dict[str, AcceptanceRecord],
                      '`{"PROFILE/MODE/STEPS@MEASURED_AT": record}`']


ACCEPTANCE: "Endpoint[NoBody, AcceptanceCurves]" = Endpoint(
    "GET", "/v1/acceptance", "acceptance", "Every bench's accepted-drafts histograms, the "
    "summed one and each request's, newest 50 kept.",
    answer=AcceptanceCurves,
)
RECORD_ACCEPTANCE: "Endpoint[RecordAcceptanceBody, AcceptanceRecord]" = Endpoint(
    "POST", "/v1/acceptance", "record_acceptance", "Record a bench's acceptance on the served "
    "EAGLE-3 engine, labelled from what the daemon serves: profile, mode, model, drafter, "
    "topk, launch steps, weights.",
    model=RecordAcceptanceBody, answer=AcceptanceRecord,
    notes='409 `reason: "not_serving"` / `"served_changed"` (the client measured another '
    'profile/mode); 422 `"not_speculative"` (a baseline server) or `"invalid_histogram"`',
    max_body=MAX_BODY, recorded=True,
)


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


SPEC_PLAN: "Endpoint[NoBody, SpecPlan]" = Endpoint(
    "GET", "/v1/spec/plan", "spec_plan", "The stored speculation plan (`fastverifyctl spec "
    "plan`, `fastverify.speculation.plan.Plan.to_dict`).",
    answer=SpecPlan, notes="`{}` when none",
)


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


VERIFY: "Endpoint[NoBody, Verification]" = Endpoint(
    "GET", "/v1/verify", "verify", "Run the after-READY verifiers again on the serving engine "
    "(read-only: it keeps serving whatever the verdict; `fastverifyctl verify`).",
    answer=Verification,
    notes="409 (`reason` `busy` or `not_serving`) while an operation runs or nothing serves",
)


STORE_SPEC_PLAN: "Endpoint[StoreSpecPlanBody, SpecPlan]" = Endpoint(
    "POST", "/v1/spec/plan", "store_spec_plan", "Store a speculation plan: the config is "
    "checked as SGLang's `_load_adaptive_config` checks it (422 `reason: \"invalid_plan\"`), "
    "then written to `adaptive-config.json` in the state dir (mode adaptive serves it) beside "
    "`spec-plan.json`.",
    model=StoreSpecPlanBody, answer=SpecPlan,
)


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


ENDPOINTS: tuple[Endpoint[Any, Any], ...] = (
    STATUS, PROFILES, HISTORY, LOGS, SERVER_ARGV, BASELINES, ACCEPTANCE, SPEC_PLAN, DECISION, LEASE, VERIFY,
    SET_PROFILE, SET_MODE, RESTART, CANCEL, TAKE_LEASE, RELEASE_LEASE, RECORD_BASELINE,
    RECORD_DECISION, RECORD_ACCEPTANCE, STORE_SPEC_PLAN, CAPTURE_TRACE,
)
# fmt: on

# path -> its methods (the daemon's routes)
ROUTES: dict[str, tuple[str, ...]] = {}
for _ep in ENDPOINTS:
    ROUTES[_ep.path] = (*ROUTES.get(_ep.path, ()), _ep.method)
del _ep


def endpoint(method: str, path: str) -> Endpoint[Any, Any] | None:
    return next((e for e in ENDPOINTS if (e.method, e.path) == (method, path)), None)
