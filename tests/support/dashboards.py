"""The provisioned Grafana dashboards as the tests read them: the files, every panel (rows'
nested panels included) and every PromQL expression (panel targets and annotations)."""

from __future__ import annotations

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
