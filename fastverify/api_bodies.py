"""The control API's requests, declared once: each request body's or query's typed model (a
TypedDict whose fields are each an `Annotated[type, Doc(help, default, ...)]`).
fastverify.api_models names each endpoint's model; the daemon checks a request against it
(fastverify.daemon.api_requests, through fastverify.api_schema), the client's typed methods
take its fields (checked by the type checker), docs/reference/api.md documents it. The CLI's
start-up never builds them: a call with fields builds them when it checks its fields.
"""

# No `from __future__ import annotations` (as fastverify.api_base).
from typing import TYPE_CHECKING, Any

from fastverify.api_base import (
    ACCEPT_LENGTH_HELP,
    ACCEPTANCE_SOURCE_HELP,
    HISTORY_PAGE,
    HISTORY_PAGE_MAX,
    MODES_HELP,
    STORE_HELP,
)

if TYPE_CHECKING:
    from typing import Annotated, Required, TypedDict
else:
    from fastverify.api_base import Annotated, Required, TypedDict


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

# fmt: on
