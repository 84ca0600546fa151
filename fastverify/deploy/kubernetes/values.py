"""The fleet settings of `render kubernetes` that are the cluster's, not fastverify's:
scheduling (tolerations, nodeSelector, affinity, runtimeClassName, priorityClassName,
imagePullSecrets, extra pod labels and annotations, LWS exclusive topology), the multi-node
network (RDMA resources or devices, hostNetwork) and the monitoring labels.

They come from repeatable flags or from one YAML values file (the keys Helm users know,
camelCase); flags add to the file's lists and maps and win over its scalars. `load_values`
checks every key and type and says which file, key and what would be right; nothing else
here reads files. `Fleet` is what the manifests are built from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify.deploy.kubernetes import affinity as affinity_rules
from fastverify.render import RenderError

# kube-prometheus-stack's Prometheus selects PodMonitors/ServiceMonitors labelled
# `release: <helm release>` (prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues:
# true); the chart's README installs the release as kube-prometheus-stack.
DEFAULT_MONITOR_LABELS = {"release": "kube-prometheus-stack"}
# NVIDIA's GPU operator and most managed GPU node pools taint GPU nodes with this key.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
LABEL_KEY_RE = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
RESOURCE_RE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

KEYS = {
    "tolerations": "a list of Toleration objects ({key, operator, value, effect})",
    "nodeSelector": "a map of node label -> value",
    "affinity": "an Affinity object ({nodeAffinity: ...})",
    "runtimeClassName": "a RuntimeClass name (e.g. nvidia)",
    "priorityClassName": "a PriorityClass name",
    "imagePullSecrets": "a list of Secret names",
    "podLabels": "a map of label -> value for the pods",
    "podAnnotations": "a map of annotation -> value for the pods",
    "exclusiveTopology": "a node label key (LWS: one group per topology domain)",
    "hostNetwork": "true or false",
    "rdmaResources": "a map of device-plugin resource -> count per pod (rdma/ib: 1)",
    "rdmaDevices": "true: mount the host's /dev/infiniband (privileged container)",
    "monitorLabels": "a map of label -> value for the PodMonitor/ServiceMonitor",
}


@dataclass
class Fleet:
    """Scheduling, network and monitoring settings, checked, as the manifests use them."""

    tolerations: list[dict[str, Any]] = field(default_factory=lambda: [dict(GPU_TOLERATION)])
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: dict[str, Any] | None = None
    runtime_class: str | None = None
    priority_class: str | None = None
    image_pull_secrets: list[str] = field(default_factory=list)
    pod_labels: dict[str, str] = field(default_factory=dict)
    pod_annotations: dict[str, str] = field(default_factory=dict)
    exclusive_topology: str | None = None
    host_network: bool = False
    rdma_resources: dict[str, int] = field(default_factory=dict)
    rdma_devices: bool = False
    monitor_labels: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_MONITOR_LABELS))

    @property
    def rdma(self) -> bool:
        return bool(self.rdma_resources) or self.rdma_devices

    def pinned(self) -> bool:
        """Whether the pods are pinned to some nodes (a nodeSelector or a node affinity)."""
        return bool(self.node_selector) or affinity_rules.pins(self.affinity)


def _where(source: str, key: str) -> str:
    """A flag names itself; a values file is `FILE: key`."""
    return source if source.startswith("--") else f"{source}: {key}"


def _label_map(value: Any, source: str, key: str, *, annotations: bool = False) -> dict[str, str]:
    if not isinstance(value, dict):
        raise RenderError(f"{_where(source, key)}: expected {KEYS[key]}, got {value!r}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not LABEL_KEY_RE.fullmatch(k) or len(k) > 316:
            raise RenderError(
                f"{_where(source, key)}: {k!r} is not a label key (prefix/name, e.g. "
                "example.com/tier or tier)"
            )
        if isinstance(v, bool) or v is None:
            raise RenderError(
                f'{_where(source, key)}: {k}: {v!r} must be a string (quote it: "{v}")'
            )
        text = str(v)
        if not annotations and not LABEL_VALUE_RE.fullmatch(text):
            raise RenderError(
                f"{_where(source, key)}: {k}={text!r}: a label value is at most 63 letters, "
                "digits, '-', '_' or '.', starting and ending alphanumeric"
            )
        out[k] = text
    return out


def _toleration(value: Any, source: str) -> dict[str, Any]:
    where = _where(source, "tolerations")
    if not isinstance(value, dict) or not value:
        raise RenderError(f"{where}: expected {KEYS['tolerations']}, got {value!r}")
    allowed = {"key", "operator", "value", "effect", "tolerationSeconds"}
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise RenderError(f"{where}: unknown field(s) {', '.join(unknown)} (a Toleration has "
                          f"{', '.join(sorted(allowed))})")  # fmt: skip
    if value.get("operator", "Equal") not in ("Equal", "Exists"):
        raise RenderError(f"{where}: operator {value['operator']!r}: expected Equal or Exists")
    if "effect" in value and value["effect"] not in EFFECTS:
        raise RenderError(f"{where}: effect {value['effect']!r}: expected {', '.join(EFFECTS)}")
    return dict(value)


def parse_toleration_flag(text: str) -> dict[str, Any]:
    """`KEY[=VALUE]:EFFECT` (no VALUE: operator Exists) as a Toleration."""
    flag = f"--toleration {text!r}"
    spec, sep, effect = text.rpartition(":")
    if not sep or effect not in EFFECTS or not spec:
        raise RenderError(
            f"{flag}: expected KEY[=VALUE]:EFFECT with EFFECT one of {', '.join(EFFECTS)} "
            "(e.g. nvidia.com/gpu:NoSchedule or dedicated=llm:NoSchedule)"
        )
    key, eq, value = spec.partition("=")
    if not LABEL_KEY_RE.fullmatch(key):
        raise RenderError(f"{flag}: {key!r} is not a taint key")
    if eq:
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return {"key": key, "operator": "Exists", "effect": effect}


def parse_pairs(flag: str, items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Repeated `KEY=VALUE` flags as a map (the last one of a key wins)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RenderError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _parse_resources(value: Any, source: str) -> dict[str, int]:
    where = _where(source, "rdmaResources")
    if not isinstance(value, dict):
        raise RenderError(f"{where}: expected {KEYS['rdmaResources']}, got {value!r}")
    out = {}
    for name, count in value.items():
        if not isinstance(name, str) or not RESOURCE_RE.fullmatch(name):
            raise RenderError(
                f"{where}: {name!r} is not an extended resource name (vendor/name, e.g. "
                "rdma/ib or rdma/rdma_shared_device_a)"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise RenderError(f"{where}: {name}: {count!r} must be a positive integer")
        out[name] = count
    return out


def parse_rdma_flag(items: tuple[str, ...] | list[str]) -> dict[str, int]:
    """`--rdma NAME[=COUNT]` (repeatable): RDMA device-plugin resources per pod."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, count = item.partition("=")
        try:
            out[name] = int(count) if sep else 1
        except ValueError:
            raise RenderError(f"--rdma {item!r}: COUNT must be an integer (NAME[=COUNT])") from None
    return _parse_resources(out, "--rdma")


def load_values(path: str | None) -> dict[str, Any]:
    """The values file's mapping, every key known and typed; {} without a file."""
    if path is None:
        return {}
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RenderError(f"{path}: cannot read the values file ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise RenderError(f"{path}{line}: not YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RenderError(f"{path}: expected a mapping of {', '.join(KEYS)}")
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        import difflib

        def meant(key: object) -> str:
            close = difflib.get_close_matches(str(key), list(KEYS), n=1, cutoff=0.75)
            return f"{key} (did you mean {close[0]}?)" if close else str(key)

        known = "\n".join(f"  {k}: {v}" for k, v in KEYS.items())
        what = ", ".join(meant(k) for k in unknown)
        raise RenderError(f"{path}: unknown key(s) {what}; known:\n{known}")
    return data


def build_fleet(values: dict[str, Any], source: str, flags: dict[str, Any]) -> Fleet:
    """Fleet settings from a values file's mapping (`source` names it) and the flags."""
    fleet = Fleet()
    v = values
    for item in v.get("tolerations") or []:
        tol = _toleration(item, source)
        if tol not in fleet.tolerations:
            fleet.tolerations.append(tol)
    if "tolerations" in v and not isinstance(v["tolerations"], list):
        raise RenderError(f"{source}: tolerations: expected {KEYS['tolerations']}")
    for tol in flags.get("tolerations") or ():
        if tol not in fleet.tolerations:
            fleet.tolerations.append(tol)
    fleet.node_selector = {
        **_label_map(v.get("nodeSelector") or {}, source, "nodeSelector"),
        **_label_map(flags.get("node_selector") or {}, "--node-selector", "nodeSelector"),
    }
    if "affinity" in v:
        affinity_rules.check(v["affinity"], source)  # as the API server would, before it
        fleet.affinity = v["affinity"]
    scalars = {"runtimeClassName": "runtime_class", "priorityClassName": "priority_class",
               "exclusiveTopology": "exclusive_topology"}  # fmt: skip
    for key, attr in scalars.items():
        value = flags.get(attr) or v.get(key)
        if value is None:
            continue
        pattern = LABEL_KEY_RE if key == "exclusiveTopology" else DNS_LABEL_RE
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise RenderError(f"{_where(source, key)}: {value!r}: expected {KEYS[key]}")
        setattr(fleet, attr, value)
    secrets = list(v.get("imagePullSecrets") or [])
    for s in secrets + list(flags.get("image_pull_secrets") or ()):
        name = s.get("name") if isinstance(s, dict) else s
        if not isinstance(name, str) or not DNS_LABEL_RE.fullmatch(name):
            raise RenderError(f"{_where(source, 'imagePullSecrets')}: {s!r}: expected a name")
        if name not in fleet.image_pull_secrets:
            fleet.image_pull_secrets.append(name)
    fleet.pod_labels = {
        **_label_map(v.get("podLabels") or {}, source, "podLabels"),
        **_label_map(flags.get("labels") or {}, "--label", "podLabels"),
    }
    fleet.pod_annotations = {
        **_label_map(v.get("podAnnotations") or {}, source, "podAnnotations", annotations=True),
        **_label_map(flags.get("annotations") or {}, "--annotation", "podAnnotations",
                     annotations=True),
    }  # fmt: skip
    for key in ("hostNetwork", "rdmaDevices"):
        if key in v and not isinstance(v[key], bool):
            raise RenderError(f"{source}: {key}: expected true or false, got {v[key]!r}")
    fleet.host_network = bool(flags.get("host_network") or v.get("hostNetwork"))
    fleet.rdma_devices = bool(flags.get("rdma_devices") or v.get("rdmaDevices"))
    fleet.rdma_resources = {
        **_parse_resources(v.get("rdmaResources") or {}, source),
        **(flags.get("rdma_resources") or {}),
    }
    monitor = flags.get("monitor_labels")
    if monitor is not None or "monitorLabels" in v:
        fleet.monitor_labels = {
            **_label_map(v.get("monitorLabels") or {}, source, "monitorLabels"),
            **_label_map(monitor or {}, "--monitor-label", "monitorLabels"),
        }
    return fleet
