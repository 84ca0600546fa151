"""What `fastverifyctl render kubernetes` takes, declared once: each `KubeOptions` field is
an option of the command, with its default, its flag and its help (`fastverify.flags`); the
CLI builds its options from these (fastverify/cli/options.py), and `from_flags` turns what
the command line gave back into `KubeOptions`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastverify.config import MODES
from fastverify.flags import from_flags, option

ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
MONITORS = ("podmonitor", "servicemonitor", "none")


@dataclass(frozen=True)
class KubeOptions:
    """Every option of `render kubernetes`; the defaults are the production layout."""

    profile: str | None = option(
        None, "Profile every pod serves (default: the decision's, else default_profile)."
    )
    mode: str | None = option(
        None,
        "Decoding mode (default: the decision's, else server.mode; adaptive comes with "
        "--from-decision, whose record carries the speculation plan it serves).",
        choices=MODES,
    )
    nodes: int = option(
        1,
        "Pods per server: > 1 is one model over several nodes (LeaderWorkerSet).",
        show_default=True,
    )
    replicas: int = option(1, "Servers (pods, or LeaderWorkerSet groups).", show_default=True)
    namespace: str = option("fastverify", show_default=True)
    name: str = option("fastverify", "Prefix of every object.", show_default=True)
    image: str = option(
        "", "Image the cluster pulls (required), e.g. registry.example.com/fastverify:0.1.0."
    )
    from_decision: str | None = option(
        None, "tune's decision record: its decision.profile and decision.mode.", file=True
    )
    config_file: str | None = option(
        None, "Daemon configuration to start from (default: the image's).", name="--config",
        file=True,
    )  # fmt: skip
    profile_dirs: tuple[str, ...] | None = option(
        None,
        "Operator profile directory (repeatable; default: the config's profile_dirs).",
        name="--profile-dir",
        multiple=True,
    )
    gpus_per_node: int | None = option(
        None,
        "GPUs per pod (default: the config's tp_size; SGLang's TP = nodes x this).",
        low=1,
        high=64,
    )
    gpu_resource: str = option("nvidia.com/gpu", show_default=True)
    cpu: str = option("32", "CPU request = limit per pod.", show_default=True)
    memory: str = option(
        "480Gi", "Memory request = limit per pod (includes /dev/shm).", show_default=True
    )
    shm_size: str = option("64Gi", "In-memory /dev/shm size.", show_default=True)
    model_pvc: str | None = option(
        None,
        "An existing claim with the models, mounted at /models (default: render <name>-models).",
    )
    model_size: str = option("2Ti", "Rendered model PVC size.", show_default=True)
    # None: the cluster's default StorageClass
    model_storage_class: str | None = option(None, "Rendered model PVC's StorageClass.")
    model_access_mode: str | None = option(
        None,
        "Rendered model PVC's access mode (default: ReadOnlyMany for > 1 pod, else RWO).",
        choices=ACCESS_MODES,
    )
    model_host_path: str | None = option(None, "Host directory instead of a PVC.")
    # where in the model volume (mounted at /models) the pod finds the model and the
    # EAGLE-3 drafter
    model_path: str | None = option(
        None,
        "The model in the pod, under the model volume /models (absolute, or relative to "
        "it; default: the config's server.model_path).",
    )
    draft_model_path: str | None = option(
        None, "The EAGLE-3 drafter under /models (default: the config's server.draft_model_path)."
    )
    cache_pvc: str | None = option(
        None, "PVC for the NCCL/FlashInfer/Triton caches (default: an emptyDir per pod)."
    )
    # None: uid 1000, or for RDMA pods root with only IPC_LOCK (checks.pod_identity)
    run_as_user: int | None = option(
        None,
        "Non-root user (and group) the pod runs as (default 1000; RDMA pods: root with only "
        "IPC_LOCK, as ibverbs needs).",
        low=1,
    )
    run_as_root: bool = option(
        False, "Run as the image's user (root) when the engine image needs it.", switch=True
    )
    startup_s: int = option(
        2400,
        "Startup probe window (>= 1800: a 30-minute load plus verification).",
        name="--startup-seconds",
        show_default=True,
    )
    progress_deadline_s: int | None = option(
        None,
        "Deployment progressDeadlineSeconds (default: startup + 1200).",
        name="--progress-deadline-seconds",
        low=60,
    )
    prometheus_url: str = option(
        "http://prometheus-operated.monitoring.svc:9090",
        "Prometheus for the Grafana datasource ConfigMap.",
        show_default=True,
    )
    hf_token_secret: str | None = option(None, "Secret whose key HF_TOKEN the pod gets.")
    web_config_secret: str | None = option(
        None,
        "Secret with web-config.yml (exporter-toolkit: TLS, bcrypt basic auth) and the files "
        "it names, mounted for the daemon's /metrics (which the monitor then scrapes over "
        "https).",
    )
    force: bool = option(
        False,
        "Accept what is refused without it: LL128, PCIe-IPC where it cannot serve, a "
        "decision tune did not apply.",
        switch=True,
    )
    # scheduling and network (values.py): flags, or one YAML values file
    values_file: str | None = option(
        None,
        "YAML values: tolerations, nodeSelector, affinity, runtimeClassName, "
        "priorityClassName, imagePullSecrets, podLabels, podAnnotations, exclusiveTopology, "
        "hostNetwork, rdmaResources, rdmaDevices, monitorLabels (flags add to it).",
        name="--values",
        file=True,
    )
    tolerations: tuple[str, ...] = option(
        (), "KEY[=VALUE]:EFFECT (repeatable).", name="--toleration", multiple=True
    )
    node_selector: tuple[str, ...] = option((), "Node label KEY=VALUE (repeatable).", multiple=True)
    runtime_class: str | None = option(None, "runtimeClassName (e.g. nvidia).")
    priority_class: str | None = option(None, "priorityClassName.")
    image_pull_secrets: tuple[str, ...] = option(
        (), "(repeatable)", name="--image-pull-secret", multiple=True
    )
    labels: tuple[str, ...] = option(
        (), "Pod label KEY=VALUE (repeatable).", name="--label", multiple=True
    )
    annotations: tuple[str, ...] = option(
        (), "Pod annotation KEY=VALUE.", name="--annotation", multiple=True
    )
    exclusive_topology: str | None = option(
        None, "LWS: one group per domain of this node label (e.g. a rack or network block label)."
    )
    host_network: bool = option(False, "Pods on the nodes' network (RDMA NICs).", switch=True)
    rdma: tuple[str, ...] = option(
        (),
        "RDMA device-plugin resource NAME[=COUNT] per pod, e.g. rdma/ib=1 (repeatable).",
        multiple=True,
    )
    rdma_devices: bool = option(
        False, "Mount the host's /dev/infiniband (privileged).", switch=True
    )
    allow_tcp: bool = option(
        False,
        "Render --nodes > 1 without RDMA: NCCL over TCP sockets between the nodes.",
        switch=True,
    )
    # monitoring
    monitor: str = option(
        "podmonitor",
        "Prometheus Operator object that scrapes the exporters.",
        choices=MONITORS,
        show_default=True,
    )
    # None: release=kube-prometheus-stack
    monitor_labels: tuple[str, ...] | None = option(
        None,
        "Label KEY=VALUE the Prometheus selects monitors by (repeatable; default "
        "release=kube-prometheus-stack).",
        name="--monitor-label",
        multiple=True,
    )
    grafana_namespace: str = option(
        "monitoring",
        "Namespace of Grafana (its sidecar finds datasources only there).",
        show_default=True,
    )
    grafana: bool = option(
        True,
        "Do not render the dashboards and datasource ConfigMaps (no Grafana sidecar).",
        name="--no-grafana",
        switch=True,
    )
    create_namespace: bool = option(
        True,
        "Do not render the Namespace object (it is managed elsewhere).",
        name="--no-namespace",
        switch=True,
    )
    server_side: bool = option(
        False,
        "You apply with `kubectl apply --server-side`: objects over 256 KiB are fine.",
        switch=True,
    )

    @classmethod
    def from_flags(cls, **given: Any) -> KubeOptions:
        """`KubeOptions` from what the command line gave (fastverify.flags.from_flags)."""
        return from_flags(cls, **given)
