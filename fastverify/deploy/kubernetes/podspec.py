"""The pod template of a server pod: fastverifyd (declarative) supervising SGLang, its
probes on the daemon's health listener, its volumes (configuration and profile ConfigMaps,
the model volume, caches, an in-memory /dev/shm) and the security context RDMA needs."""

from __future__ import annotations

from typing import Any

from fastverify.deploy.kubernetes import pod as podmod
from fastverify.deploy.kubernetes.plan import ANNOTATION, Plan, labels


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
        # /health alone): a profile that fails verification never becomes Ready. While
        # the pod's front door holds requests for a switch or a restart, it stays Ready:
        # the Service keeps sending to the front door, which holds them (health.py).
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
