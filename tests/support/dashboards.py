"""The provisioned Grafana dashboards as the tests read them: the files, every panel (rows'
nested panels included), every PromQL expression (panel targets and annotations) and the
series they name that the metric catalog does not declare."""

from __future__ import annotations

import re

from fastverify.exporters import catalog
from tests.support.containers import REPO

COMPOSE = REPO / "compose"
DASHBOARDS = sorted((COMPOSE / "grafana/dashboards").glob("*.json"))


def all_panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def dashboard_exprs(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in all_panels(dashboard) for t in p.get("targets", [])]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    return exprs


# a series name in PromQL: ours and the engine's (a label or a function never starts so)
_SERIES = re.compile(r"\b(?:fastverify_|sglang:)[A-Za-z0-9_:]*")


def unknown_series(exprs: list[str]) -> dict[str, str]:
    """Series the expressions name that the metric catalog does not declare (ours, with
    their histogram sample names) nor the engine's series it reads: {series: expression}."""
    known = catalog.sample_names(catalog.CATALOG) | catalog.sample_names(catalog.SGLANG)
    return {name: expr for expr in exprs for name in _SERIES.findall(expr) if name not in known}
