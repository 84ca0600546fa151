"""The Kubernetes render's guards: what it refuses before it writes anything
(`validate_options`: names, quantities, paths), and what it tells the operator about its
output: the objects too large for client-side `kubectl apply`, what the model volume must
hold and what the cluster must have. RenderError says what is wrong and what would be
right."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

import yaml

from fastverify.config import ServerConfig
from fastverify.deploy.kubernetes.options import ACCESS_MODES, MONITORS, KubeOptions
from fastverify.deploy.kubernetes.pod import MODEL_DIR
from fastverify.render import RenderError

NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
QUANTITY_RE = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?")
# Client-side `kubectl apply` stores the whole object in the last-applied-configuration
# annotation; annotations may hold 256 KiB in all (apimachinery TotalAnnotationSizeLimitB).
CLIENT_APPLY_LIMIT = 256 * 1024
CONFIGMAP_LIMIT = 1024 * 1024  # bytes of data one ConfigMap may hold (etcd's object limit)


def validate_options(options: KubeOptions) -> None:
    if not NAME_RE.fullmatch(options.name) or len(options.name) > 40:
        raise RenderError(
            f"--name {options.name!r}: expected a DNS label of at most 40 characters "
            "(lower case letters, digits, '-'; the objects get suffixes)"
        )
    if not NAME_RE.fullmatch(options.namespace) or len(options.namespace) > 63:
        raise RenderError(f"--namespace {options.namespace!r}: expected a DNS label")
    if not 1 <= options.nodes <= 64:
        raise RenderError(f"--nodes {options.nodes}: expected 1..64")
    if not 0 <= options.replicas <= 1000:
        raise RenderError(f"--replicas {options.replicas}: expected 0..1000")
    for flag, value in (("--cpu", options.cpu), ("--memory", options.memory),
                        ("--shm-size", options.shm_size)):  # fmt: skip
        if not QUANTITY_RE.fullmatch(value):
            raise RenderError(f"{flag} {value!r}: expected a Kubernetes quantity like 32 or 64Gi")
    if options.startup_s < 1800:
        raise RenderError(
            f"--startup-seconds {options.startup_s}: expected at least 1800 (a model load "
            "may take 30 minutes before verification)"
        )
    if not options.image:
        raise RenderError(
            "--image is required: the reference your cluster pulls the fastverify image from "
            "(e.g. registry.example.com/llm/fastverify:0.1.0, pushed after `docker build`); "
            "a bare fastverify:TAG resolves to docker.io, where no such image exists"
        )
    if any(ch.isspace() for ch in options.image):
        raise RenderError(f"--image {options.image!r}: expected an image reference")
    if options.monitor not in MONITORS:
        raise RenderError(f"--monitor {options.monitor!r}: expected one of {', '.join(MONITORS)}")
    if not NAME_RE.fullmatch(options.grafana_namespace):
        raise RenderError(f"--grafana-namespace {options.grafana_namespace!r}: a DNS label")
    if options.model_access_mode is not None and options.model_access_mode not in ACCESS_MODES:
        raise RenderError(
            f"--model-access-mode {options.model_access_mode!r}: expected one of "
            f"{', '.join(ACCESS_MODES)}"
        )
    if not QUANTITY_RE.fullmatch(options.model_size):
        raise RenderError(f"--model-size {options.model_size!r}: expected a quantity like 2Ti")
    if options.model_storage_class is not None and not NAME_RE.fullmatch(
        options.model_storage_class
    ):
        raise RenderError(f"--model-storage-class {options.model_storage_class!r}: a name")
    if options.model_pvc and options.model_host_path:
        raise RenderError("--model-pvc and --model-host-path: give one of them")
    if options.model_host_path and not options.model_host_path.startswith("/"):
        raise RenderError(
            f"--model-host-path {options.model_host_path!r}: expected an absolute path"
        )
    names: tuple[tuple[str, str | None], ...] = (
        ("--model-pvc", options.model_pvc), ("--cache-pvc", options.cache_pvc),
        ("--hf-token-secret", options.hf_token_secret),
        ("--web-config-secret", options.web_config_secret),
    )  # fmt: skip
    for flag, named in names:
        if named is not None and not NAME_RE.fullmatch(named):
            raise RenderError(f"{flag} {named!r}: expected the name of an object (a DNS label)")


def in_models(flag: str, value: str | None) -> str | None:
    """`--model-path` as the pod sees it: under the model volume (/models); a relative
    path is taken inside it."""
    if value is None:
        return None
    path = os.path.normpath(value if value.startswith("/") else f"{MODEL_DIR}/{value}")
    if not path.startswith(MODEL_DIR + "/"):
        raise RenderError(
            f"{flag} {value!r}: the model volume is mounted at {MODEL_DIR} in the pod; give a "
            f"path under it (e.g. {MODEL_DIR}/Kimi-K2.5) or one relative to it (Kimi-K2.5)"
        )
    return path


def quantity_bytes(q: str) -> float:
    units = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
             "Ti": 2**40, "m": 1e-3, "": 1}  # fmt: skip
    m = QUANTITY_RE.fullmatch(q)
    assert m is not None
    return float(q[: len(q) - len(m.group(2) or "")]) * units[m.group(2) or ""]


def size_guard(files: Mapping[str, str], *, server_side: bool) -> list[str]:
    """Client-side `kubectl apply` fails on an object whose JSON exceeds what the
    last-applied-configuration annotation may hold: refuse it, naming the object, unless the
    operator applies server-side (`--server-side`, no such annotation)."""
    notes = []
    for fname, text in files.items():
        for obj in yaml.safe_load_all(text):
            if not obj:
                continue
            size = len(json.dumps(obj, separators=(",", ":")).encode())
            if size < CLIENT_APPLY_LIMIT:
                continue
            what = f"{obj['kind']} {obj['metadata']['name']} ({fname}, {size} bytes)"
            if not server_side:
                raise RenderError(
                    f"{what} exceeds the {CLIENT_APPLY_LIMIT} bytes client-side `kubectl "
                    "apply` can record in its last-applied-configuration annotation: apply "
                    "with `kubectl apply --server-side -f DIR` and render with --server-side, "
                    "or remove unused profiles (tuner tables) from the profile directories"
                )
            notes.append(f"{what}: apply it with `kubectl apply --server-side`")
    return notes


def layout(server: ServerConfig, mode: str) -> list[str]:
    """What the model volume must hold, as the pod's configuration names it."""
    out = [f"{server.model_path} (the model: --model-path, server.model_path)"]
    if mode != "baseline":
        out.append(f"{server.draft_model_path} (the EAGLE-3 drafter: --draft-model-path)")
    return out


def prerequisites(options: KubeOptions, workload: str) -> list[str]:
    """What the cluster must have for `kubectl apply` of this render to work."""
    out = []
    if workload == "LeaderWorkerSet":
        out.append("the LeaderWorkerSet controller (leaderworkerset.x-k8s.io/v1 CRD)")
    if options.monitor != "none":
        kind = "PodMonitor" if options.monitor == "podmonitor" else "ServiceMonitor"
        out.append(f"the Prometheus Operator's {kind} CRD (monitoring.coreos.com/v1; "
                   "kube-prometheus-stack installs it)")  # fmt: skip
    if options.grafana:
        out.append(f"the namespace {options.grafana_namespace} (Grafana's sidecar reads the "
                   "dashboard ConfigMaps there; --grafana-namespace, --no-grafana)")  # fmt: skip
    if not options.create_namespace:
        out.append(f"the namespace {options.namespace} (--no-namespace: not rendered)")
    if options.model_pvc:
        out.append(f"the claim {options.model_pvc} in {options.namespace}, holding the model")
    return out
