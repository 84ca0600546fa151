"""The control API's models read as fields: a request model's (its kind, default, help; the
daemon checks a request's body and query against them) and an answer's (its JSON type and
help, as docs/reference/api.md documents them). Read when the daemon or the reference asks,
never on the CLI's start-up.
"""

from collections.abc import Iterator
from types import UnionType
from typing import Any, NamedTuple, Union, get_args, get_origin

from fastverify.api_base import is_model, unmarked

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


def fields_of(model: Any) -> Iterator[tuple[str, Any, Any]]:
    """(name, type, metadata) of each field of a TypedDict `model`, in declaration order."""
    for name, hint in model.__annotations__.items():
        _, hint = unmarked(hint)
        yield name, hint.type, hint.meta


def field_types(model: Any) -> Iterator[tuple[str, Any]]:
    """(name, type) of each field of a TypedDict `model`."""
    for name, tp, _ in fields_of(model):
        yield name, tp


def request_kind(tp: Any) -> str:
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
                request_kind(tp),
                d.help,
                name in required,
                d.default,
                d.mirrors,
                d.minimum,
                d.why,
            )
            for name, tp, d in fields_of(model)
        )
    return _DECLARED[model]


def json_kind(tp: Any) -> str:
    """A field's type in JSON's words, as the reference prints it: `int | null`, `object`."""
    if get_origin(tp) in (Union, UnionType):
        return " | ".join(json_kind(t) for t in get_args(tp))
    named = {str: "str", bool: "bool", int: "int", float: "number", type(None): "null"}
    if tp in named:
        return named[tp]
    if is_model(tp):
        return str(tp.__name__)
    args = get_args(tp)
    if (get_origin(tp) or tp) is list:
        return f"list of {json_kind(args[0])}" if args and is_model(args[0]) else "list"
    if (get_origin(tp) or tp) is dict:
        return f"object of {json_kind(args[1])}" if args and is_model(args[1]) else "object"
    if tp is Any:
        return "any"
    raise TypeError(f"no JSON name for {tp!r}")


def models_of(tp: Any) -> Iterator[Any]:
    """The TypedDicts an answer's type names: its own (`list[...]`, `dict[str, ...]`, a
    union's), then those its fields name, depth first, each once a call."""
    seen: set[Any] = set()

    def walk(t: Any) -> Iterator[Any]:
        if is_model(t):
            if t not in seen:
                seen.add(t)
                yield t
                for _, ft, _ in fields_of(t):
                    yield from walk(ft)
            return
        for arg in get_args(t):
            yield from walk(arg)

    return walk(tp)


def documented(body: Any) -> tuple[Field, ...]:
    """The fields of a body's TypedDict, as the reference documents them: name, kind, help
    (read when asked: the CLI's start-up never pays for it)."""
    return tuple(Field(name, json_kind(tp), help_) for name, tp, help_ in fields_of(body))
