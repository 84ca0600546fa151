"""What the control API's models are made of at run time: a TypedDict, `Annotated`,
`Required` and `NotRequired` that keep a model's fields and their help and nothing else (the
type checker reads typing's), and the words both the requests (fastverify.api_models) and
the answers (fastverify.api_answers) use.
"""

# No `from __future__ import annotations`: the models' TypedDicts are read at run time (their
# fields are the requests' checks and document the reference), and evaluated annotations cost
# less to import than strings.
from typing import TYPE_CHECKING, Any


class _Annotated:
    """`Annotated[type, metadata]` as the API models' fields are read at run time: the type
    and the metadata (a help text, a `Doc`), nothing else. typing's own costs ~20 µs a field
    to build, 2 ms of the CLI's start-up for the request models' ~100 fields; the type checker reads
    typing's (TYPE_CHECKING)."""

    __slots__ = ("meta", "type")

    def __init__(self, tp: Any, meta: Any) -> None:
        self.type, self.meta = tp, meta

    def __class_getitem__(cls, params: tuple[Any, Any]) -> "_Annotated":
        return cls(*params)

    def __call__(self) -> None:  # what TypedDict's check of a field's type asks of a type
        raise TypeError("an annotation, not a type")


class _Mark:
    """`Required` / `NotRequired` as the API models' fields are read at run time: `mark[hint]`
    is the hint, marked (typing's builds a generic alias, ~10 µs each)."""

    __slots__ = ("hint", "mark")

    def __init__(self, mark: Any = None, hint: Any = None) -> None:
        self.mark, self.hint = mark, hint

    def __getitem__(self, hint: Any) -> "_Mark":
        return _Mark(self, hint)

    def __call__(self) -> None:  # what a TypedDict's check of a field's type asks of a type
        raise TypeError("an annotation, not a type")


def unmarked(hint: Any) -> tuple[Any, Any]:
    """(its `Required`/`NotRequired` or None, the hint without it)."""
    if isinstance(hint, _Mark):
        return hint.mark, hint.hint
    return None, hint


class _TypedDict:
    """`TypedDict` as the API's models are read at run time: the fields
    (`__annotations__`, its bases' first) and which are required (`__required_keys__`),
    nothing else. typing's costs ~40 µs a model to build (a field's type checked, the bases
    merged), 2 ms of the CLI's start-up for ~50 models; the type checker reads
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
            marked, _ = unmarked(hint)
            if marked is Required or (total and marked is not NotRequired):
                required.add(name)
            else:
                required.discard(name)
        cls.__annotations__ = {**fields, **own}
        cls.__required_keys__ = frozenset(required)


def is_model(tp: Any) -> bool:
    """`tp` is one of the API's TypedDicts (at run time: `_TypedDict`s)."""
    return isinstance(tp, type) and issubclass(tp, _TypedDict)


if TYPE_CHECKING:
    from typing import Annotated, NotRequired, Required, TypedDict
else:
    Annotated, TypedDict = _Annotated, _TypedDict
    Required, NotRequired = _Mark(), _Mark()

# the history's page sizes (a query's default and bound; the client pages back by them)
HISTORY_PAGE = 100  # records of one `GET /v1/history` when `n` is not given
HISTORY_PAGE_MAX = 1000  # the most records one `GET /v1/history` answers

# words both sides use
ACCEPT_LENGTH_HELP = "accepted tokens per verify pass, bonus token included (>= 1)"
ACCEPTANCE_SOURCE_HELP = (
    "where the accept length came from: `measured`, or `forced "
    "(SGLANG_SIMULATE_ACC_LEN=L)` when SGLang forced it"
)
STORE_HELP = "a profile of the profile store"
MODES_HELP = "baseline, eagle3 or adaptive"
