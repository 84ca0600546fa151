"""What the Kubernetes objects of a render are built from (`Plan`: everything render.py
decided that they need) and the labels and metadata every object carries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastverify.deploy.kubernetes import pod as podmod
from fastverify.deploy.kubernetes.options import KubeOptions
from fastverify.deploy.kubernetes.values import Fleet

ANNOTATION = "fastverify"  # annotation prefix: fastverify/profile-checksum, ...
# Pruning tools delete objects that left the rendered set; old hash-named ConfigMaps must
# stay for `kubectl rollout undo` (Argo CD sync option, Flux kustomize-controller).
KEEP_ANNOTATIONS = {
    "argocd.argoproj.io/sync-options": "Prune=false",
    "argocd.argoproj.io/compare-options": "IgnoreExtraneous",
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}


@dataclass(frozen=True)
class Plan:
    """What the objects are built from (render.py decides it)."""

    o: KubeOptions
    fleet: Fleet
    pod_user: int | None  # None: the image's user
    profile: str
    mode: str
    gpus: int
    workload: str  # "Deployment" | "LeaderWorkerSet"
    shipped: Mapping[str, str]  # the profile ConfigMaps' data
    user: Mapping[str, str]
    declared: Mapping[str, str]
    config_text: str
    adaptive_text: str | None
    dashboards: Mapping[str, str]
    profile_checksum: str
    config_checksum: str
    decision_file: str | None
    decision_sha256: str | None
    decision_fingerprint: str | None
    startup_failures: int
    grace_s: int

    @property
    def name(self) -> str:
        return self.o.name

    @property
    def namespace(self) -> str:
        return self.o.namespace

    @property
    def nodes(self) -> int:
        return self.o.nodes

    @property
    def tp_size(self) -> int:
        return self.gpus * self.o.nodes

    @property
    def pods(self) -> int:
        return self.o.replicas * self.o.nodes

    @property
    def startup_window(self) -> int:
        return self.startup_failures * podmod.PROBE_PERIOD_S

    @property
    def progress_deadline(self) -> int:
        return self.o.progress_deadline_s or self.startup_window + 1200

    @property
    def model_pvc(self) -> str:
        return self.o.model_pvc or f"{self.o.name}-models"

    @property
    def render_pvc(self) -> bool:
        return self.o.model_pvc is None and self.o.model_host_path is None

    @property
    def model_access_mode(self) -> str:
        return self.o.model_access_mode or ("ReadOnlyMany" if self.pods > 1 else "ReadWriteOnce")

    @property
    def service_name(self) -> str:
        # LWS's controller creates a headless Service named after the LeaderWorkerSet (the
        # pods' subdomain, LWS_LEADER_ADDRESS): the client Service must be named apart
        return f"{self.name}-leader" if self.workload == "LeaderWorkerSet" else self.name

    @property
    def configmaps(self) -> dict[str, str]:
        """Content-addressed: a pod template names the exact ConfigMaps it was rendered with
        (the profile directories are stable objects: editing another profile rolls no pod)."""
        return {
            "config": f"{self.name}-config-{self.config_checksum[:10]}",
            "declared": f"{self.name}-profile-{self.profile_checksum[:10]}",
            "user": f"{self.name}-profiles-user",
            "shipped": f"{self.name}-profiles-shipped",
        }


def selector(name: str) -> dict[str, str]:
    """The labels every object's pods are selected by."""
    return {"app.kubernetes.io/name": "fastverify", "app.kubernetes.io/instance": name}


def labels(name: str, component: str) -> dict[str, str]:
    return {
        **selector(name),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "fastverifyctl",
    }


def server_selector(name: str) -> dict[str, str]:
    return {**selector(name), "app.kubernetes.io/component": "server"}


def metadata(p: Plan, name: str, component: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": p.namespace, "labels": labels(p.name, component), **extra}


def workload_annotations(p: Plan) -> dict[str, str]:
    out = {f"{ANNOTATION}/profile": p.profile, f"{ANNOTATION}/mode": p.mode}
    if p.decision_file:
        out[f"{ANNOTATION}/decision"] = p.decision_file
        out[f"{ANNOTATION}/decision-sha256"] = str(p.decision_sha256)
        if p.decision_fingerprint:
            out[f"{ANNOTATION}/host-fingerprint"] = p.decision_fingerprint
    return out


@dataclass(frozen=True)
class Bundle:
    """What a render returns: the rendered files (name -> text), the plan they were built
    from (its profile, mode, workload, GPUs, checksums, configuration), and what the CLI
    reports besides."""

    files: dict[str, str]
    plan: Plan
    notes: list[str] = field(default_factory=list)
    layout: list[str] = field(default_factory=list)  # what the model volume must hold
    prerequisites: list[str] = field(default_factory=list)  # what the cluster must have
