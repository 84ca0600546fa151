"""The Kubernetes objects of a render, built as data (dicts and lists; yaml_out.py writes
them): the server pods' template (fastverifyd, declarative, supervising SGLang), the
Deployment or LeaderWorkerSet around it, the ConfigMaps (configuration and profiles named
by their content), the Service, PodDisruptionBudget, model PVC, the Prometheus Operator
monitor, the Grafana dashboards and datasource. `FILES` names the file of each and what it
holds; `Plan` is everything a render decided that the objects need."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastverify.deploy.kubernetes import pod as podmod
from fastverify.deploy.kubernetes import yaml_out
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
DATASOURCE_UID = "fastverify-prometheus"  # the dashboards' datasource (compose/grafana/)


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


# ------------------------------------------------------------------------- labels
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


def _workload_annotations(p: Plan) -> dict[str, str]:
    out = {f"{ANNOTATION}/profile": p.profile, f"{ANNOTATION}/mode": p.mode}
    if p.decision_file:
        out[f"{ANNOTATION}/decision"] = p.decision_file
        out[f"{ANNOTATION}/decision-sha256"] = str(p.decision_sha256)
        if p.decision_fingerprint:
            out[f"{ANNOTATION}/host-fingerprint"] = p.decision_fingerprint
    return out


# ------------------------------------------------------------------------- the pod
def _env(p: Plan) -> list[dict[str, Any]]:
    def field_ref(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    env: list[dict[str, Any]] = [
        {"name": "FASTVERIFY_CONFIG", "value": podmod.CONFIG},
        {"name": "FASTVERIFY_SOCKET", "value": podmod.SOCKET},
        # no passwd entry is needed for a non-root uid: HOME, USER and LOGNAME are set
        # (getpass.getuser() reads LOGNAME/USER first)
        {"name": "HOME", "value": podmod.CACHE_DIR},
        {"name": "USER", "value": "fastverify"},
        {"name": "LOGNAME", "value": "fastverify"},
        field_ref("POD_NAME", "metadata.name"),
        field_ref("NODE_NAME", "spec.nodeName"),
    ]
    if p.o.hf_token_secret:
        ref = {"secretKeyRef": {"name": p.o.hf_token_secret, "key": "HF_TOKEN"}}
        env.append({"name": "HF_TOKEN", "valueFrom": ref})
    return env


def _resources(p: Plan) -> dict[str, Any]:
    per_pod = {"cpu": p.o.cpu, "memory": p.o.memory, p.o.gpu_resource: p.gpus}
    per_pod.update(p.fleet.rdma_resources)
    return {"requests": dict(per_pod), "limits": dict(per_pod)}


def _container_security(p: Plan) -> dict[str, Any]:
    if p.fleet.rdma_devices:
        # the host's /dev/infiniband passes the device cgroup only in a privileged container
        out: dict[str, Any] = {"privileged": True}
    else:
        out = {"allowPrivilegeEscalation": False, "privileged": False}
    out["readOnlyRootFilesystem"] = True
    caps: dict[str, Any] = {"drop": ["ALL"]}
    if p.fleet.rdma:
        caps["add"] = ["IPC_LOCK"]  # RDMA registers (pins) NCCL's buffers: ibverbs locks memory
    out["capabilities"] = caps
    return out


def _probes() -> dict[str, Any]:
    period = podmod.PROBE_PERIOD_S

    def get(path: str) -> dict[str, Any]:
        return {"path": path, "port": "health"}

    return {
        # Ready = the daemon's verified READY of the declared profile (never SGLang's
        # /health alone): a profile that fails verification never becomes Ready.
        "readinessProbe": {"httpGet": get("/readyz"), "periodSeconds": period,
                           "timeoutSeconds": 5, "successThreshold": 1, "failureThreshold": 2},
        # Alive = the daemon's own health (its main loop answers), whatever the engine does.
        "livenessProbe": {"httpGet": get("/livez"), "periodSeconds": 20, "timeoutSeconds": 5,
                          "failureThreshold": 3},
    }  # fmt: skip


def _mounts(p: Plan) -> list[dict[str, Any]]:
    def mount(name: str, path: str, read_only: bool = False) -> dict[str, Any]:
        return {"name": name, "mountPath": path, **({"readOnly": True} if read_only else {})}

    out = [
        mount("config", podmod.CONFIG_DIR, True),
        mount("profile-declared", podmod.DECLARED_PROFILE, True),
        mount("profiles-user", podmod.USER_PROFILES, True),
        mount("profiles-shipped", podmod.SHIPPED_PROFILES, True),
        mount("models", podmod.MODEL_DIR, True),
        mount("cache", podmod.CACHE_DIR),
        mount("shm", "/dev/shm"),
        mount("state", podmod.STATE_DIR),
        mount("run", podmod.SOCKET_DIR),
        mount("tmp", "/tmp"),
    ]
    if p.o.web_config_secret:  # exporter-toolkit's web config for /metrics and its files
        out.append(mount("web-config", podmod.WEB_CONFIG_DIR, True))
    if p.fleet.rdma_devices:
        out.append(mount("infiniband", "/dev/infiniband"))
    return out


def _volumes(p: Plan) -> list[dict[str, Any]]:
    cm = p.configmaps
    out: list[dict[str, Any]] = []
    if p.o.web_config_secret:
        secret = {"secretName": p.o.web_config_secret, "defaultMode": 0o440}
        out.append({"name": "web-config", "secret": secret})
    if p.fleet.rdma_devices:
        host = {"path": "/dev/infiniband", "type": "Directory"}
        out.append({"name": "infiniband", "hostPath": host})
    for name, key in (("config", "config"), ("profile-declared", "declared"),
                      ("profiles-user", "user"), ("profiles-shipped", "shipped")):  # fmt: skip
        out.append({"name": name, "configMap": {"name": cm[key]}})
    if p.o.model_host_path:
        models: dict[str, Any] = {"hostPath": {"path": p.o.model_host_path, "type": "Directory"}}
    else:
        models = {"persistentVolumeClaim": {"claimName": p.model_pvc, "readOnly": True}}
    out.append({"name": "models", **models})
    # NCCL/FlashInfer/Triton caches (SGLANG_CACHE_DIR, FLASHINFER_AUTOTUNE_DIR)
    cache = (
        {"persistentVolumeClaim": {"claimName": p.o.cache_pvc}}
        if p.o.cache_pvc
        else {"emptyDir": {}}
    )
    out.append({"name": "cache", **cache})
    # NCCL's and SGLang's shared memory: in memory, counted against the memory limit
    out.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": p.o.shm_size}})
    out += [{"name": name, "emptyDir": {}} for name in ("state", "run", "tmp")]
    return out


def _pod_security(p: Plan) -> dict[str, Any]:
    if p.pod_user == 0:
        # root, with every capability dropped but IPC_LOCK: ibverbs pins NCCL's buffers past
        # the container's memlock limit only with an effective CAP_IPC_LOCK, and one added
        # for a non-root uid is not effective under containerd or CRI-O
        out: dict[str, Any] = {"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0}
    elif p.pod_user is not None:
        # every path written is a volume owned through fsGroup
        uid = p.pod_user
        out = {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid}
    else:
        out = {}
    out["seccompProfile"] = {"type": "RuntimeDefault"}
    return out


def pod_template(p: Plan, role: str) -> dict[str, Any]:
    """A server pod: `role` "server" (Deployment), "leader" or "worker" (LeaderWorkerSet)."""
    fleet = p.fleet
    meta_labels = {**labels(p.name, "server"), "fastverify/role": role, **fleet.pod_labels}
    annotations = {
        **fleet.pod_annotations,
        f"{ANNOTATION}/profile": p.profile,
        f"{ANNOTATION}/mode": p.mode,
        # sha256 of the declared profile's content (its file and every file its extends
        # chain names) and of the daemon configuration: another or an edited profile, or
        # another mode, is a new pod template (its ConfigMaps' names carry the same hashes)
        f"{ANNOTATION}/profile-checksum": p.profile_checksum,
        f"{ANNOTATION}/config-checksum": p.config_checksum,
    }
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": p.grace_s,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
    }
    if fleet.host_network:  # the nodes' own network (RDMA NICs, no overlay)
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"  # cluster DNS still resolves LWS's names
    if fleet.runtime_class:
        spec["runtimeClassName"] = fleet.runtime_class
    if fleet.priority_class:
        spec["priorityClassName"] = fleet.priority_class
    if fleet.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in fleet.image_pull_secrets]
    spec["tolerations"] = list(fleet.tolerations)
    if fleet.node_selector:
        spec["nodeSelector"] = dict(fleet.node_selector)
    if fleet.affinity:
        spec["affinity"] = fleet.affinity
    spec["securityContext"] = _pod_security(p)
    args = ["--config", podmod.CONFIG]
    ports = [
        {"name": "http", "containerPort": podmod.SGLANG_PORT},
        {"name": "metrics", "containerPort": podmod.METRICS_PORT},
        {"name": "health", "containerPort": podmod.HEALTH_PORT},
    ]
    if role != "server":
        # LWS's variables (its controller sets them in every container): the group's size,
        # this pod's index (0 = leader) and the leader's DNS name under LWS's headless Service
        args += ["--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
                 "--dist-init-addr", f"$(LWS_LEADER_ADDRESS):{podmod.DIST_PORT}"]  # fmt: skip
        ports.append({"name": "dist", "containerPort": podmod.DIST_PORT})
    container = {
        "name": "fastverifyd",
        "image": p.o.image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "env": _env(p),
        "ports": ports,
        "resources": _resources(p),
        "securityContext": _container_security(p),
        # Start-up: the first start settles (READY or FAILED) within the startup window, a
        # load of up to 30 minutes plus verification; liveness waits for it.
        "startupProbe": {
            "httpGet": {"path": "/startupz", "port": "health"},
            "periodSeconds": podmod.PROBE_PERIOD_S,
            "timeoutSeconds": 5,
            "failureThreshold": p.startup_failures,
        },
        **_probes(),
        "volumeMounts": _mounts(p),
    }
    spec["containers"] = [container]
    spec["volumes"] = _volumes(p)
    return {"metadata": {"labels": meta_labels, "annotations": annotations}, "spec": spec}


# ------------------------------------------------------------------------- objects
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
        "Rendered by `fastverifyctl render kubernetes`; docs/kubernetes.md. The profiles are the",
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
        "metadata": metadata(p, p.name, "server", annotations=_workload_annotations(p)),
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
    annotations = _workload_annotations(p)
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
        "(docs/kubernetes.md),",
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
