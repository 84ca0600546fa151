"""The Kubernetes objects of a render, built as data (dicts and lists; yaml_out.py writes
them): the Deployment or LeaderWorkerSet around the server pods' template (podspec.py), the
ConfigMaps (configuration and profiles named by their content), the Service,
PodDisruptionBudget, model PVC, the Prometheus Operator monitor, the Grafana dashboards and
datasource. `FILES` names the file of each and what it holds; `build(plan)` writes them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastverify.deploy.kubernetes import pod as podmod
from fastverify.deploy.kubernetes import yaml_out
from fastverify.deploy.kubernetes.plan import (
    ANNOTATION,
    KEEP_ANNOTATIONS,
    Plan,
    labels,
    metadata,
    selector,
    server_selector,
    workload_annotations,
)
from fastverify.deploy.kubernetes.podspec import pod_template

DATASOURCE_UID = "fastverify-prometheus"  # the dashboards' datasource (compose/grafana/)


Built = tuple[list[str], list[dict[str, Any]]]  # (header comment lines, documents)


def namespace(p: Plan) -> Built:
    doc = {"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": p.namespace,
                        "labels": {"app.kubernetes.io/managed-by": "fastverifyctl"}}}  # fmt: skip
    return ["The namespace every object below lives in (--no-namespace when it is managed "
            "elsewhere)."], [doc]  # fmt: skip


def configmaps(p: Plan) -> Built:
    cm = p.configmaps
    config_data = {podmod.CONFIG_NAME: p.config_text}
    if p.adaptive_text:  # mode adaptive: SGLang's --speculative-adaptive-config, tune's plan
        config_data[podmod.ADAPTIVE_CONFIG_KEY] = p.adaptive_text

    def configmap(key: str, component: str, role: str, data: Mapping[str, str],
                  annotations: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
        meta = metadata(p, cm[key], component)
        meta["labels"]["fastverify/configmap"] = role
        if annotations is not None:
            meta["annotations"] = dict(annotations)
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}

    # kept when a GitOps tool prunes what left the rendered set: `rollout undo` needs them
    declared_annotations = {f"{ANNOTATION}/profile": p.profile, **KEEP_ANNOTATIONS}
    docs = [
        configmap("config", "config", "config", config_data, KEEP_ANNOTATIONS),
        configmap("declared", "profiles", "profile-declared", p.declared, declared_annotations),
        configmap("shipped", "profiles", "profiles-shipped", p.shipped),
        configmap("user", "profiles", "profiles-user", p.user),
    ]
    header = [
        "Rendered by `fastverifyctl render kubernetes`; docs/guides/kubernetes.md. The profiles "
        "are the",
        "env files byte for byte (the shipped ones and the operator's); the daemon's",
        "configuration declares the profile and mode of every pod. The configuration and the",
        "declared profile's own files (its extends chain) live in ConfigMaps named by a hash",
        "of their content: a pod template names exactly what it was rendered with, so",
        "`kubectl rollout undo` brings back the previous template with its configuration and",
        "profile (applying never edits them). All profiles are there too (stable names) for",
        "canaries and `profile list` in a pod.",
    ]
    return header, docs


def _rolling(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"maxUnavailable": 1, "maxSurge": 0, **(extra or {})}


def deployment(p: Plan) -> Built:
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(p, p.name, "server", annotations=workload_annotations(p)),
        "spec": {
            "replicas": p.o.replicas,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": p.progress_deadline,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": _rolling()},
            "selector": {"matchLabels": server_selector(p.name)},
            "template": pod_template(p, "server"),
        },
    }
    header = [
        f"One server per pod, {p.gpus} GPUs each. A roll-out replaces one pod at a time and starts",
        "the new one only after the old one released its GPUs (maxSurge 0); a new pod whose",
        "profile fails verification stays un-Ready and the roll-out stalls at",
        "progressDeadlineSeconds (`kubectl rollout undo` brings the previous template back).",
    ]
    return header, [doc]


def leaderworkerset(p: Plan) -> Built:
    annotations = workload_annotations(p)
    if p.fleet.exclusive_topology:  # one group per domain of this node label, and no other
        annotations["leaderworkerset.sigs.k8s.io/exclusive-topology"] = p.fleet.exclusive_topology
    doc = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": metadata(p, p.name, "server", annotations=annotations),
        "spec": {
            "replicas": p.o.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": _rolling()},
            "leaderWorkerTemplate": {
                "size": p.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(p, "leader"),
                "workerTemplate": pod_template(p, "worker"),
            },
        },
    }
    header = [
        f"One server over {p.nodes} pods ({p.gpus} GPUs each, SGLang --tp-size {p.tp_size} "
        f"--nnodes {p.nodes}):",
        "LeaderWorkerSet (leaderworkerset.x-k8s.io) starts the leader (node rank 0) and "
        f"{p.nodes - 1} worker(s)",
        "per group and gives each pod LWS_LEADER_ADDRESS (<lws>-<group>.<lws>.<namespace>: the",
        f"leader under the headless Service named {p.name} that LWS's controller creates),",
        "LWS_GROUP_SIZE and LWS_WORKER_INDEX; every pod's fastverifyd passes them to SGLang as",
        "--dist-init-addr, --nnodes and --node-rank and verifies its own ranks. A failed pod",
        "recreates its group.",
    ]
    return header, [doc]


def pvc(p: Plan) -> Built:
    spec: dict[str, Any] = {"accessModes": [p.model_access_mode]}
    if p.o.model_storage_class:
        spec["storageClassName"] = p.o.model_storage_class
    spec["resources"] = {"requests": {"storage": p.o.model_size}}
    # never pruned with the rendered set: the weights take hours to copy
    meta = metadata(p, p.model_pvc, "models", annotations=dict(KEEP_ANNOTATIONS))
    doc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
    header = [
        f"The model volume, mounted read-only at /models in every server pod ({p.pods} pod(s):",
        f"{p.model_access_mode}). A new claim is empty: fill it before the first start "
        "(docs/guides/kubernetes.md),",
        "or give an existing claim with --model-pvc and this file is not rendered.",
    ]
    return header, [doc]


def service(p: Plan) -> Built:
    sel = server_selector(p.name)
    if p.workload == "LeaderWorkerSet":
        sel["fastverify/role"] = "leader"
    port = {"name": "http", "port": podmod.SGLANG_PORT, "targetPort": "http", "protocol": "TCP"}
    doc = {"apiVersion": "v1", "kind": "Service",
           "metadata": metadata(p, p.service_name, "server"),
           "spec": {"type": "ClusterIP", "selector": sel, "ports": [port]}}  # fmt: skip
    header = [
        "SGLang's HTTP API of every Ready server pod (the leaders of a LeaderWorkerSet): a",
        "router or clients use this; pods that are not READY and verified receive no traffic.",
        "With a LeaderWorkerSet it is <name>-leader: the name <name> is LWS's own headless",
        "Service.",
    ]
    return header, [doc]


def pdb(p: Plan) -> Built:
    doc = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": metadata(p, p.name, "server"),
           "spec": {"maxUnavailable": 1,
                    "selector": {"matchLabels": server_selector(p.name)}}}  # fmt: skip
    return ["Voluntary disruptions (node drains) take at most one server pod at a time."], [doc]


RELABELINGS = [  # the node, role, declared profile and mode on every scraped series
    {"sourceLabels": [f"__meta_kubernetes_pod_{source}"], "targetLabel": target}
    for source, target in (
        ("node_name", "node"),
        ("label_fastverify_role", "role"),
        ("annotation_fastverify_profile", "declared_profile"),
        ("annotation_fastverify_mode", "declared_mode"),
    )
]


def _endpoint(p: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {"port": "metrics", "path": "/metrics", "interval": "15s"}
    if p.o.web_config_secret:  # add tlsConfig and basicAuth for your Prometheus
        out["scheme"] = "https"
    out["relabelings"] = [dict(r) for r in RELABELINGS]
    return out


def _monitor_meta(p: Plan) -> dict[str, Any]:
    meta = metadata(p, p.name, "monitoring")
    # what the Prometheus selects monitors by (--monitor-label; default: the
    # kube-prometheus-stack chart's `release: <release name>`)
    meta["labels"].update(p.fleet.monitor_labels)
    return meta


def podmonitor(p: Plan) -> Built:
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
           "metadata": _monitor_meta(p),
           "spec": {"selector": {"matchLabels": server_selector(p.name)},
                    "podMetricsEndpoints": [_endpoint(p)]}}  # fmt: skip
    header = [
        "Prometheus Operator: scrape every server pod's exporter (fastverify_* metrics). The",
        "operator adds namespace, pod and container labels; the relabelings add the node, the",
        "pod's profile and mode (from its annotations) and, for a LeaderWorkerSet, its role.",
    ]
    return header, [doc]


def servicemonitor(p: Plan) -> Built:
    port = {"name": "metrics", "port": podmod.METRICS_PORT, "targetPort": "metrics",
            "protocol": "TCP"}  # fmt: skip
    headless = {"apiVersion": "v1", "kind": "Service",
                "metadata": metadata(p, f"{p.name}-metrics", "monitoring"),
                "spec": {"clusterIP": "None", "selector": server_selector(p.name),
                         "ports": [port]}}  # fmt: skip
    monitoring = {**selector(p.name), "app.kubernetes.io/component": "monitoring"}
    monitor = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
               "metadata": _monitor_meta(p),
               "spec": {"selector": {"matchLabels": monitoring},
                        "endpoints": [_endpoint(p)]}}  # fmt: skip
    header = [
        "Prometheus Operator without PodMonitor support in its Prometheus selection: a headless",
        "Service over every server pod's exporter port and a ServiceMonitor that scrapes it.",
        "The relabelings add the node, role, declared profile and mode as the PodMonitor does.",
    ]
    return header, [headless, monitor]


def datasource(prometheus_url: str) -> str:
    """Grafana's provisioning file of the dashboards' Prometheus datasource."""
    doc = {"apiVersion": 1, "datasources": [{
        "name": DATASOURCE_UID, "uid": DATASOURCE_UID, "type": "prometheus", "access": "proxy",
        "url": prometheus_url, "editable": False, "jsonData": {"timeInterval": "15s"},
    }]}  # fmt: skip
    return yaml_out.dump([doc])


def grafana(p: Plan) -> Built:
    ns = p.o.grafana_namespace

    def configmap(suffix: str, label: str, data: Mapping[str, str]) -> dict[str, Any]:
        meta = {"name": f"{p.name}-{suffix}", "namespace": ns,
                "labels": {**labels(p.name, "dashboards"), label: "1"}}  # fmt: skip
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}

    docs = [
        configmap("dashboards", "grafana_dashboard", p.dashboards),
        configmap("datasource", "grafana_datasource",
                  {"fastverify-datasource.yaml": datasource(p.o.prometheus_url)}),
    ]  # fmt: skip
    header = [
        "Grafana's sidecar (k8s-sidecar, as in the Grafana and kube-prometheus-stack charts)",
        'loads ConfigMaps labelled grafana_dashboard / grafana_datasource (labelValue "1"). The',
        "kube-prometheus-stack chart searches ALL namespaces for dashboards but only Grafana's",
        f"own for datasources: both ConfigMaps live in {ns} (--grafana-namespace). The",
        "dashboards are the compose stack's, byte for byte; they use the datasource uid",
        f"{DATASOURCE_UID}.",
    ]
    return header, docs


# file -> (what it holds, its objects); `kubectl apply -f DIR` applies in name order: the
# Namespace first
FILES: dict[str, tuple[str, Callable[[Plan], Built]]] = {
    "00-namespace.yaml": ("namespace", namespace),
    "05-configmaps.yaml": ("configmaps", configmaps),
    "06-persistentvolumeclaim.yaml": ("pvc", pvc),
    "10-deployment.yaml": ("deployment", deployment),
    "10-leaderworkerset.yaml": ("leaderworkerset", leaderworkerset),
    "20-service.yaml": ("service", service),
    "30-poddisruptionbudget.yaml": ("pdb", pdb),
    "40-podmonitor.yaml": ("podmonitor", podmonitor),
    "40-servicemonitor.yaml": ("servicemonitor", servicemonitor),
    "50-grafana.yaml": ("grafana", grafana),
}
RETIRED_FILES = ("00-configmaps.yaml",)  # names earlier releases wrote


def skipped(p: Plan) -> set[str]:
    """The kinds of object this render leaves out."""
    o = p.o
    flags = {
        "deployment": p.workload != "Deployment",
        "leaderworkerset": p.workload != "LeaderWorkerSet",
        "namespace": not o.create_namespace,
        "pvc": not p.render_pvc,
        "podmonitor": o.monitor != "podmonitor",
        "servicemonitor": o.monitor != "servicemonitor",
        "grafana": not o.grafana,
    }
    return {kind for kind, skip in flags.items() if skip}


def build(p: Plan) -> dict[str, str]:
    """file name -> its text, for every file this render writes."""
    skip = skipped(p)
    out = {}
    for fname, (kind, builder) in FILES.items():
        if kind not in skip:
            header, docs = builder(p)
            out[fname] = yaml_out.dump(docs, header)
    return out
