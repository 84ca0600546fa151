"""A values file's `affinity`, checked as the Kubernetes API server checks a pod's
(core/v1 Affinity: node affinity, pod affinity and anti-affinity) before the render passes it
through: a misspelt field or a wrong operator would otherwise render a Deployment that
`kubectl apply` refuses, and a misspelt `nodeAffinity` would count as pinning the pods.

`check(value, where)` raises RenderError naming the field path, what is wrong and what
would be right (`did you mean ...?` for a misspelt field); `pins(affinity)` says whether it
confines the pods to some nodes (a required node selector term).
"""

from __future__ import annotations

import difflib
from typing import Any

from fastverify.render import RenderError

NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"

# A field spec: "string", "int", ("enum", choices), ("list", spec), ("map", spec) (string
# keys), or an object {field: (spec, required)}.
_NODE_REQ = {"key": ("string", True), "operator": (("enum", NODE_OPERATORS), True),
             "values": (("list", "string"), False)}  # fmt: skip
_NODE_TERM = {"matchExpressions": (("list", _NODE_REQ), False),
              "matchFields": (("list", _NODE_REQ), False)}  # fmt: skip
_LABEL_SELECTOR = {
    "matchLabels": (("map", "string"), False),
    "matchExpressions": (("list", {"key": ("string", True),
                                   "operator": (("enum", LABEL_OPERATORS), True),
                                   "values": (("list", "string"), False)}), False),
}  # fmt: skip
_POD_TERM = {"labelSelector": (_LABEL_SELECTOR, False),
             "namespaceSelector": (_LABEL_SELECTOR, False),
             "namespaces": (("list", "string"), False), "topologyKey": ("string", True),
             "matchLabelKeys": (("list", "string"), False),
             "mismatchLabelKeys": (("list", "string"), False)}  # fmt: skip
_WEIGHT = ("weight", ("int", True))
_POD_AFFINITY = {
    REQUIRED: (("list", _POD_TERM), False),
    PREFERRED: (("list", dict([_WEIGHT, ("podAffinityTerm", (_POD_TERM, True))])), False),
}
AFFINITY = {
    "nodeAffinity": ({
        REQUIRED: ({"nodeSelectorTerms": (("list", _NODE_TERM), True)}, False),
        PREFERRED: (("list", dict([_WEIGHT, ("preference", (_NODE_TERM, True))])), False),
    }, False),
    "podAffinity": (_POD_AFFINITY, False),
    "podAntiAffinity": (_POD_AFFINITY, False),
}  # fmt: skip


def check(value: Any, where: str) -> None:
    """RenderError for the first problem of `value` as an Affinity (see the module doc)."""
    _check(value, AFFINITY, f"{where}: affinity")


def pins(affinity: dict[str, Any] | None) -> bool:
    """Does it confine the pods to some nodes (a required node selector term)?"""
    node = (affinity or {}).get("nodeAffinity") or {}
    return bool((node.get(REQUIRED) or {}).get("nodeSelectorTerms"))


def _check(value: Any, spec: Any, path: str) -> None:
    if spec == "string":
        if not isinstance(value, str):
            raise RenderError(f"{path}: {value!r} (expected a string)")
    elif spec == "int":
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 100:
            raise RenderError(f"{path}: {value!r} (expected an integer weight in 1..100)")
    elif isinstance(spec, tuple) and spec[0] == "enum":
        if value not in spec[1]:
            raise RenderError(f"{path}: {value!r} (expected one of {', '.join(spec[1])})")
    elif isinstance(spec, tuple) and spec[0] == "list":
        if not isinstance(value, list):
            raise RenderError(f"{path}: expected a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            _check(item, spec[1], f"{path}[{i}]")
    elif isinstance(spec, tuple) and spec[0] == "map":
        if not isinstance(value, dict):
            raise RenderError(f"{path}: expected a map, got {type(value).__name__}")
        for k, v in value.items():
            _check(v, spec[1], f"{path}.{k}")
    else:
        _check_object(value, spec, path)


def _check_object(value: Any, fields: dict[str, Any], path: str) -> None:
    if not isinstance(value, dict):
        raise RenderError(f"{path}: expected an object with {', '.join(fields)}")
    for key in value:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(fields)}"
            raise RenderError(f"{path}: unknown field {key!r} ({hint})")
    for key, (spec, required) in fields.items():
        if key in value:
            _check(value[key], spec, f"{path}.{key}")
        elif required:
            raise RenderError(f"{path}: {key} is required")
    if "operator" in fields:  # a selector requirement: the API server's rules for values
        _requirement(value, path)
    if "nodeSelectorTerms" in fields and not value["nodeSelectorTerms"]:
        raise RenderError(f"{path}.nodeSelectorTerms: must have at least one node selector term")


def _requirement(req: dict[str, Any], path: str) -> None:
    """Values by operator, as the API server's selector validation has them."""
    op, values = req["operator"], req.get("values") or []
    if op in ("In", "NotIn") and not values:
        raise RenderError(f"{path}.values: must be specified when `operator` is 'In' or 'NotIn'")
    if op in ("Exists", "DoesNotExist") and values:
        raise RenderError(
            f"{path}.values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        )
    if op in ("Gt", "Lt") and (len(values) != 1 or not str(values[0]).lstrip("-").isdigit()):
        raise RenderError(
            f"{path}.values: must be one integer when `operator` is 'Gt' or 'Lt', got {values!r}"
        )
