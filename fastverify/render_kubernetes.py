"""Render the Kubernetes manifests of a fleet from the daemon configuration (jinja2 templates
under kubernetes/, beside the systemd and compose ones).

One server per pod (a Deployment, `maxUnavailable: 1`, `maxSurge: 0`) or, with `nodes` > 1,
one server over several pods (a LeaderWorkerSet whose daemons add SGLang's multi-node
arguments from LWS's variables). Every pod runs fastverifyd in declarative mode: the profile
and mode are the manifest's; readiness is the daemon's verified READY (/readyz on its health
listener); a checksum of the profile's content and of the daemon configuration in the pod
template makes another profile, or an edited one, a roll-out.

`render(KubeOptions) -> Bundle` is pure apart from reading the profile directories, the
config file, the dashboards and a decision record; `write_bundle(dir, bundle)` writes the
files. `RenderError` (from fastverify.render) says what is wrong and what would be right.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastverify import paths
from fastverify.render import RenderError

# Where things live inside the pod (the image's layout: Dockerfile, DESIGN.md).
CONFIG_DIR = "/etc/fastverify/k8s"
ADAPTIVE_CONFIG_KEY = "adaptive-config.json"  # mode adaptive: in the config ConfigMap
CONFIG_NAME = "fastverifyd.toml"
DECLARED_PROFILE = "/etc/fastverify/profiles.d/declared"  # the rendered profile's files
USER_PROFILES = "/etc/fastverify/profiles.d/user"
SHIPPED_PROFILES = "/etc/fastverify/profiles.d/shipped"
STATE_DIR = "/var/lib/fastverify"
SOCKET = "/run/fastverify/control.sock"
WEB_CONFIG_DIR = "/etc/fastverify/web"  # --web-config-secret's mount
WEB_CONFIG_KEY = "web-config.yml"
CACHE_DIR = "/var/cache/fastverify"
MODEL_DIR = "/models"
SGLANG_PORT = 30000
METRICS_PORT = 9464
HEALTH_PORT = 8081
DIST_PORT = 20000  # SGLang's torch.distributed rendezvous on the leader (--dist-init-addr)
PROBE_PERIOD_S = 10
CONFIGMAP_LIMIT = 1024 * 1024  # bytes of data one ConfigMap may hold (etcd's object limit)
NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
QUANTITY_RE = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?")
KEY_RE = re.compile(r"[-._a-zA-Z0-9]+")
ANNOTATION = "fastverify"  # annotation prefix: fastverify/profile-checksum, ...
POD_PATHS = {
    "config_dir": CONFIG_DIR,
    "config": f"{CONFIG_DIR}/{CONFIG_NAME}",
    "declared": DECLARED_PROFILE,
    "user": USER_PROFILES,
    "shipped": SHIPPED_PROFILES,
    "state": STATE_DIR,
    "socket_dir": os.path.dirname(SOCKET),
    "web_config": WEB_CONFIG_DIR,
    "socket": SOCKET,
    "cache": CACHE_DIR,
    "models": MODEL_DIR,
}
POD_PORTS = {
    "sglang": SGLANG_PORT,
    "metrics": METRICS_PORT,
    "health": HEALTH_PORT,
    "dist": DIST_PORT,
    "period": PROBE_PERIOD_S,
}
FILES = {  # `kubectl apply -f DIR` applies in name order: the Namespace first
    "namespace": "00-namespace.yaml",
    "configmaps": "05-configmaps.yaml",
    "pvc": "06-persistentvolumeclaim.yaml",
    "deployment": "10-deployment.yaml",
    "leaderworkerset": "10-leaderworkerset.yaml",
    "service": "20-service.yaml",
    "pdb": "30-poddisruptionbudget.yaml",
    "podmonitor": "40-podmonitor.yaml",
    "servicemonitor": "40-servicemonitor.yaml",
    "grafana": "50-grafana.yaml",
}
RETIRED_FILES = ("00-configmaps.yaml",)  # names earlier releases wrote
# Client-side `kubectl apply` stores the whole object in the last-applied-configuration
# annotation; annotations may hold 256 KiB in all (apimachinery TotalAnnotationSizeLimitB).
CLIENT_APPLY_LIMIT = 256 * 1024
ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
MONITORS = ("podmonitor", "servicemonitor", "none")
# Pruning tools delete objects that left the rendered set; old hash-named ConfigMaps must
# stay for `kubectl rollout undo` (Argo CD sync option, Flux kustomize-controller).
KEEP_ANNOTATIONS = {
    "argocd.argoproj.io/sync-options": "Prune=false",
    "argocd.argoproj.io/compare-options": "IgnoreExtraneous",
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}


@dataclass(frozen=True)
class KubeOptions:
    """What `fastverifyctl render kubernetes` takes; defaults are the production layout."""

    profile: str | None = None  # None: decision record's, else the config's default_profile
    mode: str | None = None  # None: decision record's, else the config's server.mode
    nodes: int = 1
    replicas: int = 1
    namespace: str = "fastverify"
    name: str = "fastverify"
    image: str = ""  # required: a reference the cluster can pull (registry/name:tag)
    config_file: str | None = None  # None: the image's own configuration
    profile_dirs: tuple[str, ...] | None = None  # None: the configuration's profile_dirs
    from_decision: str | None = None
    gpus_per_node: int | None = None  # None: the configuration's server.tp_size
    gpu_resource: str = "nvidia.com/gpu"
    cpu: str = "32"
    memory: str = "480Gi"
    shm_size: str = "64Gi"
    model_pvc: str | None = None  # an existing claim; None: render "<name>-models"
    model_size: str = "2Ti"  # the rendered model PVC's request
    model_storage_class: str | None = None  # None: the cluster's default StorageClass
    model_access_mode: str | None = None  # None: ReadOnlyMany for > 1 pod, else ReadWriteOnce
    model_host_path: str | None = None  # instead of a PVC
    # where in the model volume (mounted at /models) the pod finds the model and the
    # EAGLE-3 drafter; None: the configuration's server.model_path / draft_model_path
    model_path: str | None = None
    draft_model_path: str | None = None
    cache_pvc: str | None = None  # None: an emptyDir per pod
    # None: uid 1000, or for RDMA pods root with only IPC_LOCK (pod_identity)
    run_as_user: int | None = None
    run_as_root: bool = False  # as the image says (root for lmsysorg/sglang), no capability
    startup_s: int = 2400  # startup probe window: >= a 30-minute load + verification
    progress_deadline_s: int | None = None  # None: startup window + 20 minutes
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    hf_token_secret: str | None = None  # a Secret with key HF_TOKEN
    # a Secret with key web-config.yml (exporter-toolkit's YAML) and the files it names
    # (relative to it): mounted at WEB_CONFIG_DIR, the daemon's /metrics then uses it
    web_config_secret: str | None = None
    force: bool = False  # LL128 without NVLink, a decision tune did not apply
    # scheduling and network (fastverify.kube_values): flags, or one YAML values file
    values_file: str | None = None
    tolerations: tuple[str, ...] = ()  # KEY[=VALUE]:EFFECT
    node_selector: tuple[str, ...] = ()  # KEY=VALUE
    runtime_class: str | None = None
    priority_class: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()  # KEY=VALUE on the pods
    annotations: tuple[str, ...] = ()  # KEY=VALUE on the pods
    exclusive_topology: str | None = None  # LWS: one group per domain of this node label
    host_network: bool = False
    rdma: tuple[str, ...] = ()  # RDMA device-plugin resources, NAME[=COUNT]
    rdma_devices: bool = False  # the host's /dev/infiniband (privileged)
    allow_tcp: bool = False  # multi-node over TCP sockets only
    # monitoring
    monitor: str = "podmonitor"  # podmonitor | servicemonitor | none
    monitor_labels: tuple[str, ...] | None = None  # None: release=kube-prometheus-stack
    grafana_namespace: str = "monitoring"  # where the Grafana chart's sidecars look
    grafana: bool = True  # False: no dashboards/datasource ConfigMaps (no Grafana there)
    # apply
    create_namespace: bool = True
    server_side: bool = False  # objects over client-side apply's limit are fine


@dataclass(frozen=True)
class Bundle:
    """Rendered files (name -> text) and what the tests and the CLI report."""

    files: dict[str, str]
    profile: str
    mode: str
    workload: str  # "Deployment" | "LeaderWorkerSet"
    gpus_per_node: int
    tp_size: int
    profile_checksum: str
    config_checksum: str
    config_text: str
    notes: list[str] = field(default_factory=list)
    layout: list[str] = field(default_factory=list)  # what the model volume must hold
    prerequisites: list[str] = field(default_factory=list)  # what the cluster must have


# ------------------------------------------------------------------------- inputs
def read_decision(path: str) -> tuple[str, str, dict[str, Any]]:
    """`decision.profile` and `decision.mode` of tune's decision record (and the decision)."""
    from fastverify.config import MODES

    expected = (
        'expected tune\'s decision record: {"decision": {"profile": "ring-ll", '
        '"mode": "baseline"|"eagle3"|"adaptive", ...}, "stages": [...]}'
    )
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        why = exc.strerror or exc
        raise RenderError(f"{path}: cannot read the decision record ({why})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RenderError(f"{path}: not JSON ({exc}; {expected})") from None
    decision = data.get("decision") if isinstance(data, dict) else None
    if not isinstance(decision, dict):
        raise RenderError(f'{path}: no "decision" object ({expected})')
    profile, mode = decision.get("profile"), decision.get("mode")
    if not isinstance(profile, str) or not profile:
        raise RenderError(f"{path}: decision.profile is missing or not a string ({expected})")
    if mode not in MODES:
        raise RenderError(
            f"{path}: decision.mode is {json.dumps(mode)} (expected one of {', '.join(MODES)})"
        )
    return profile, mode, decision


def _simulated_decision(path: str, decision: dict[str, Any], force: bool) -> list[str]:
    """A decision the sim engine made is no fleet's decision: refused unless `force`, then a
    note; a record that names no engine (made before tune recorded one) gets a note."""
    eng = decision.get("engine")
    if not isinstance(eng, dict):
        return [
            f"{path}: the decision records no engine (a tune before decisions carried one): "
            "it may come from the sim; check where it was made"
        ]
    if not eng.get("simulated"):
        return []
    what = (
        f"{path}: tune decided {decision.get('profile')}/{decision.get('mode')} on the "
        f"{eng.get('kind')} engine (simulated, playing SGLang {eng.get('version')}): its "
        "figures come from a cost model, not from hardware"
    )
    if not force:
        raise RenderError(
            f"{what}. Run tune on a GPU host with the real engine (fastverifyd --engine "
            "sglang), or render it anyway with --force"
        )
    return [f"{what}; rendering it because of --force"]


def _load_config(options: KubeOptions) -> Any:
    from fastverify import config as configmod

    path = Path(options.config_file) if options.config_file else image_config()
    try:
        return configmod.load(path)
    except configmod.ConfigError as exc:
        raise RenderError(str(exc)) from None


def image_config() -> Path:
    """The configuration the image ships (compose/fastverifyd.container.toml)."""
    return paths.template_dir("compose") / "fastverifyd.container.toml"


def _profile_files(directory: str, *, user: bool) -> dict[str, bytes]:
    """`NAME.env` files of one profile directory, byte for byte (symbolic links only inside
    it, as the daemon reads them), plus the tuner tables user profiles name beside them."""
    from fastverify.profiles import envfile
    from fastverify.profiles.store import SUFFIX, name_problem

    root = Path(directory)
    out: dict[str, bytes] = {}
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return out
    except OSError as exc:
        why = exc.strerror or exc
        raise RenderError(f"{root}: cannot list the profile directory ({why})") from None
    for name in names:
        if not name.endswith(SUFFIX) or name_problem(name[: -len(SUFFIX)]) is not None:
            continue
        path = root / name
        try:
            out[name] = envfile.read_checked(path, root)
        except (envfile.UnsafeFile, OSError) as exc:
            raise RenderError(f"{path}: {exc}") from None
        if user:
            table = _tuner_table(out[name])
            if table and "/" not in table and KEY_RE.fullmatch(table) and (root / table).is_file():
                out[table] = envfile.read_checked(root / table, root)
    return out


def _tuner_table(content: bytes) -> str | None:
    for line in content.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "FASTVERIFY_TUNER_TABLE":
            return value.strip()
    return None


def _chain(store: Any, name: str) -> list[Any]:
    """The profile and every profile its `# extends:` chain names, as the store resolves
    them (a base of the profile's own name is the next file of that name down the search
    path); a missing base ends it (the store has refused such a profile already)."""
    from fastverify.profiles import envfile
    from fastverify.profiles.store import SUFFIX, Entry

    search = [(paths.normalize(d), src) for d, src in store.search_path()]
    out = []
    entry = store.find(name)
    while entry is not None and len(out) <= 32:
        out.append(entry)
        meta = envfile.parse_file(entry.file, entry.root_dir).meta
        if "extends" not in meta:
            break
        base = meta["extends"][1]
        if base != entry.name:
            entry = store.find(base)
            continue
        dirs = [d for d, _ in search]
        after = search[dirs.index(entry.root_dir) + 1 :] if entry.root_dir in dirs else []
        entry = next(
            (
                Entry(base, os.path.join(d, base + SUFFIX), src, root=d)
                for d, src in after
                if os.path.isfile(os.path.join(d, base + SUFFIX))
            ),
            None,
        )
    return out


def _texts(files: Mapping[str, bytes], where: str) -> dict[str, str]:
    """ConfigMap `data` values are text: every file must be UTF-8 (profiles are)."""
    out = {}
    for key, content in files.items():
        try:
            out[key] = content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RenderError(
                f"{where}: {key}: byte {exc.start} is not UTF-8 (a profile is plain text; "
                "fix or remove the file)"
            ) from None
    return out


def _checksum(parts: Mapping[str, bytes]) -> str:
    h = hashlib.sha256()
    for key in sorted(parts):
        h.update(key.encode() + b"\0" + hashlib.sha256(parts[key]).digest())
    return h.hexdigest()


# ------------------------------------------------------------------------- config text
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string (same escapes)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML spelling for {value!r}")


def _adaptive_config_text(
    mode: str, decision: dict[str, Any] | None, source: str | None
) -> str | None:
    """Mode adaptive: SGLang's adaptive config from the tune decision that chose it (tune
    copies the daemon's speculation plan into its decision record), checked as SGLang's
    `_load_adaptive_config` would; None for the other modes."""
    from fastverify.sglang import adaptive

    if mode != "adaptive":
        return None
    cfg = (decision or {}).get("adaptive_config_json")
    if cfg is None:
        where = source or "--mode adaptive without --from-decision"
        raise RenderError(
            f"{where}: mode adaptive serves a speculation plan, and there is none to render: "
            "render --from-decision with the decision.json of a tune that chose adaptive (it "
            "carries the plan `fastverifyctl spec plan` stored)"
        )
    try:
        adaptive.tiers(cfg)
    except adaptive.AdaptiveConfigError as exc:
        raise RenderError(f"{source}: decision.adaptive_config_json: {exc}") from None
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def daemon_config_text(cfg: Any, source: str) -> str:
    """The pod's fastverifyd.toml: every key of `cfg`, spelled out (None values omitted)."""
    server = dataclasses.asdict(cfg.server)
    eagle3 = server.pop("eagle3")
    env = server.pop("env")
    daemon = dataclasses.asdict(cfg.daemon)
    lines = [
        "# fastverifyd configuration of a Kubernetes pod, rendered by `fastverifyctl render",
        f"# kubernetes` from {source}. Declarative: the profile and mode below are the",
        "# manifest's (docs/kubernetes.md); change them by rendering and applying again.",
        "",
        "[server]",
    ]
    lines += [f"{k} = {_toml_value(v)}" for k, v in server.items() if v is not None]
    lines += ["", "[server.eagle3]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in eagle3.items()]
    lines += ["", "[server.env]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in sorted(env.items())]
    lines += ["", "[daemon]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in daemon.items() if v is not None]
    return "\n".join(lines) + "\n"


def pod_config(
    cfg: Any, profile: str, mode: str, nodes: int, gpus: int, web_config: bool = False
) -> Any:
    """The daemon configuration a pod runs: the operator's server settings, with the pod's
    paths, listeners, declared profile/mode and (multi-node) the total TP size."""
    env = dict(cfg.server.env)
    # SGLang points Triton, Inductor, CUDA and FlashInfer JIT caches under SGLANG_CACHE_DIR
    # (sglang/srt/environ.py third_party_cache_defaults); FlashInfer's PCIe-IPC all-reduce
    # persists its tactics under FLASHINFER_AUTOTUNE_DIR: all on the cache volume.
    env.setdefault("SGLANG_CACHE_DIR", f"{CACHE_DIR}/sglang")
    env.setdefault("FLASHINFER_WORKSPACE_BASE", f"{CACHE_DIR}/sglang")
    env.setdefault("FLASHINFER_AUTOTUNE_DIR", f"{CACHE_DIR}/flashinfer-autotune")
    server = dataclasses.replace(
        cfg.server,
        host="0.0.0.0",
        port=SGLANG_PORT,
        mode=mode,
        tp_size=gpus * nodes,
        nnodes=nodes,
        node_rank=0,
        dist_init_addr="",  # each pod's fastverifyd gets it from LWS (--dist-init-addr)
        env=env,
    )
    daemon = dataclasses.replace(
        cfg.daemon,
        state_dir=STATE_DIR,
        socket=SOCKET,
        socket_group="",  # the pod's user owns the socket (mode 0660); kubectl exec is it
        tcp_listen="",
        token_file="",
        metrics_listen=f"0.0.0.0:{METRICS_PORT}",
        web_config_file=f"{WEB_CONFIG_DIR}/{WEB_CONFIG_KEY}" if web_config else "",
        health_listen=f"0.0.0.0:{HEALTH_PORT}",
        declarative=True,
        default_profile=profile,
        profile_dirs=(DECLARED_PROFILE, USER_PROFILES, SHIPPED_PROFILES),
    )
    return dataclasses.replace(cfg, server=server, daemon=daemon)


# ------------------------------------------------------------------------- checks
def _check(options: KubeOptions) -> None:
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
    for flag, value in (("--model-pvc", options.model_pvc), ("--cache-pvc", options.cache_pvc),
                        ("--hf-token-secret", options.hf_token_secret),
                        ("--web-config-secret", options.web_config_secret)):  # fmt: skip
        if value is not None and not NAME_RE.fullmatch(value):
            raise RenderError(f"{flag} {value!r}: expected the name of an object (a DNS label)")


def _fleet(options: KubeOptions) -> Any:
    """Scheduling, network and monitoring settings from the values file and the flags."""
    from fastverify import kube_values as kv

    flags: dict[str, Any] = {
        "tolerations": [kv.parse_toleration_flag(t) for t in options.tolerations],
        "node_selector": kv.parse_pairs("--node-selector", options.node_selector),
        "runtime_class": options.runtime_class,
        "priority_class": options.priority_class,
        "image_pull_secrets": list(options.image_pull_secrets),
        "labels": kv.parse_pairs("--label", options.labels),
        "annotations": kv.parse_pairs("--annotation", options.annotations),
        "exclusive_topology": options.exclusive_topology,
        "host_network": options.host_network,
        "rdma_resources": kv.parse_rdma_flag(options.rdma),
        "rdma_devices": options.rdma_devices,
        "monitor_labels": (
            None if options.monitor_labels is None
            else kv.parse_pairs("--monitor-label", options.monitor_labels)
        ),
    }  # fmt: skip
    values = kv.load_values(options.values_file)
    fleet = kv.build_fleet(values, options.values_file or "values", flags)
    reserved = [k for k in fleet.pod_labels if k.startswith(("app.kubernetes.io/", "fastverify/"))]
    if reserved:
        raise RenderError(
            f"pod label {reserved[0]}: the app.kubernetes.io/ and fastverify/ labels are the "
            "render's own (selectors, roles); choose another key"
        )
    if fleet.exclusive_topology and options.nodes == 1:
        raise RenderError(
            "--exclusive-topology is LeaderWorkerSet's (--nodes > 1): one group per domain"
        )
    return fleet


def _network_checks(options: KubeOptions, fleet: Any, profile: Any) -> list[str]:
    """A multi-node server's NCCL needs a fast network between the pods: RDMA (a device
    plugin's resource or the host's devices) and a profile that does not turn it off.
    TCP sockets only is refused unless --allow-tcp. Notes for what NCCL may guess wrong."""
    if options.nodes == 1:
        return []
    env = profile.env
    notes = []
    tcp_by_profile = env.get("NCCL_IB_DISABLE") == "1" or env.get("NCCL_NET", "").lower() == (
        "socket"
    )
    if not fleet.rdma or tcp_by_profile:
        why = (
            f"profile {profile.name} turns NCCL's IB/RoCE transport off "
            f"(NCCL_IB_DISABLE={env.get('NCCL_IB_DISABLE', '-')}, "
            f"NCCL_NET={env.get('NCCL_NET', '-')})"
            if tcp_by_profile
            else "no RDMA resource (--rdma rdma/ib=1, a device plugin's) or device "
            "(--rdma-devices) is requested"
        )
        if not options.allow_tcp:
            raise RenderError(
                f"--nodes {options.nodes}: {why}, so NCCL's all-reduces between the nodes go "
                "over TCP sockets, an order of magnitude slower than RDMA. Request RDMA "
                "(--rdma NAME[=COUNT] or --rdma-devices; docs/kubernetes.md), or accept TCP "
                "with --allow-tcp"
            )
        notes.append(f"--allow-tcp: {why}; NCCL runs over TCP sockets between the nodes")
        return notes
    if "NCCL_IB_HCA" not in env:
        notes.append(
            f"profile {profile.name} sets no NCCL_IB_HCA: NCCL uses every RDMA device it finds "
            "in the pod (RoCE also needs NCCL_IB_GID_INDEX); name the HCAs in a profile that "
            "extends this one"
        )
    if fleet.host_network and "NCCL_SOCKET_IFNAME" not in env:
        notes.append(
            f"hostNetwork: profile {profile.name} sets no NCCL_SOCKET_IFNAME: NCCL's bootstrap "
            "picks the host's first interface (not lo/docker); name the one the nodes share"
        )
    return notes


def _placement_notes(
    options: KubeOptions,
    fleet: Any,
    profile: Any,
    decision: dict[str, Any] | None,
    decision_fingerprint: dict[str, Any] | None = None,
    gpus: int | None = None,
) -> list[str]:
    """A decision tune measured on one host, or a profile that holds only on some hardware
    (the PCIe-IPC all-reduce: PCIe-only hosts), is pinned by a nodeSelector or node
    affinity; unpinned, the render says so."""
    if fleet.pinned():
        return _hardware_mismatch(fleet, decision_fingerprint, gpus, pinned=True)
    if decision is not None:
        why = (
            f"tune decided {profile.name} ({decision.get('backend') or 'nccl'} all-reduce) on "
            "one host's topology"
        )
    elif profile.env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == "1" or "PCIe-only" in (
        profile.description or ""
    ):
        why = f"{profile.name} is for one topology ({profile.description})"
    else:
        return []
    facts = (decision_fingerprint or {}).get("facts") or {}
    label = gfd_product(facts.get("gpu_model")) or "NVIDIA-H200"
    unpinned = (
        f"UNPINNED: {why}, but the pods may land on any node with {options.gpu_resource}; pin "
        "them to that hardware with --node-selector KEY=VALUE (e.g. GPU feature discovery's "
        f"{GFD_PRODUCT}={label}) or a values file's affinity"
    )
    return [unpinned, *_hardware_mismatch(fleet, decision_fingerprint, gpus, pinned=False)]


GFD_PRODUCT = "nvidia.com/gpu.product"  # GPU feature discovery's node labels
GFD_COUNT = "nvidia.com/gpu.count"


def gfd_product(model: str | None) -> str | None:
    """GPU feature discovery's `nvidia.com/gpu.product` value for an nvidia-smi GPU name
    (spaces become dashes: "NVIDIA H200" -> "NVIDIA-H200")."""
    return "-".join(model.split()) if model else None


def _hardware_mismatch(
    fleet: Any, fingerprint: dict[str, Any] | None, gpus: int | None, pinned: bool
) -> list[str]:
    """A decision's host fingerprint against the pods: the GPU count it was measured with,
    and (`pinned`) the nodeSelector's GPU model and count (GPU feature discovery's labels),
    said when the selector names others or none."""
    facts = (fingerprint or {}).get("facts") or {}
    if not facts:
        return []
    want = gfd_product(facts.get("gpu_model"))
    sel = dict(getattr(fleet, "node_selector", None) or {})
    where = f"tune measured this decision on host fingerprint {fingerprint.get('id')}"
    out = []
    if not pinned:
        want = None
    if want and sel.get(GFD_PRODUCT) not in (None, want):
        out.append(
            f"HARDWARE MISMATCH: {where} ({facts.get('gpu_model')}, {GFD_PRODUCT}={want}), "
            f"but the pods are pinned to {GFD_PRODUCT}={sel[GFD_PRODUCT]}"
        )
    elif want and GFD_PRODUCT not in sel:
        out.append(
            f"NOT PINNED TO THE MEASURED HARDWARE: {where} ({facts.get('gpu_model')}); the "
            f"nodeSelector names no GPU model: add --node-selector {GFD_PRODUCT}={want}"
        )
    count = facts.get("gpu_count")
    if count and gpus and count != gpus:
        out.append(
            f"HARDWARE MISMATCH: {where} with {count} GPU(s), the pods get {gpus} each; "
            f"tune again on a {gpus}-GPU node"
        )
    if count and sel.get(GFD_COUNT) not in (None, str(count)):
        out.append(f"HARDWARE MISMATCH: {where} with {count} GPUs, but the pods are pinned "
                   f"to {GFD_COUNT}={sel[GFD_COUNT]}")  # fmt: skip
    return out


DEFAULT_USER = 1000


def _in_models(flag: str, value: str | None) -> str | None:
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


def layout(server: Any, mode: str) -> list[str]:
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


def pod_identity(options: KubeOptions, fleet: Any) -> tuple[int | None, list[str]]:
    """The uid the pod runs as (None: the image's user, root) and notes. RDMA pods run as
    root with every capability dropped but IPC_LOCK: ibverbs pins NCCL's buffers, and past
    the container's memlock limit only an effective CAP_IPC_LOCK lets it; a capability added
    for a non-root uid is not effective under containerd or CRI-O (the runtime fills only
    the bounding and inheritable sets; CapEff stays 0). A non-root uid for an RDMA pod is
    refused unless --force (then the nodes' runtime must give an unlimited memlock limit)."""
    if options.run_as_root:
        return None, []
    if not fleet.rdma:
        return options.run_as_user or DEFAULT_USER, []
    if options.run_as_user is None:
        return 0, [
            "RDMA: the pods run as root (uid 0) with only IPC_LOCK added: ibverbs pins NCCL's "
            "buffers, and a capability added for a non-root uid is not effective under "
            "containerd or CRI-O; the daemon's start-up check says what each pod can pin"
        ]
    why = (
        f"--run-as-user {options.run_as_user} with RDMA: IPC_LOCK added for a non-root uid is "
        "not effective under containerd or CRI-O (CapEff stays 0), so ibverbs can pin only "
        "up to the container's memlock limit (often 64 KiB or 8 MiB) and NCCL's first "
        "connection fails ('Call to ibv_reg_mr failed with error Cannot allocate memory')"
    )
    if not options.force:
        raise RenderError(
            f"{why}. Drop --run-as-user (RDMA pods then run as root with only IPC_LOCK), or "
            "pass --force when the nodes' container runtime gives an unlimited memlock limit"
        )
    return options.run_as_user, [
        f"{why}; rendered because of --force: the nodes' container runtime must give an "
        "unlimited memlock limit (the daemon's start-up check in each pod says what it finds)"
    ]


def _allreduce_mismatch(loaded: Any, nodes: int, gpus: int) -> str | None:
    """Why a profile that asks for FlashInfer's PCIe-IPC all-reduce would not get it in
    these pods, naming what would really serve (None when it would)."""
    from fastverify.profiles.effective import effective_env
    from fastverify.sglang import allreduce

    env = effective_env(loaded)
    if allreduce.requested_backend(env) != allreduce.PCIE_IPC:
        return None
    tp = gpus * nodes
    d = allreduce.dispatch(env=env, args=allreduce.ServerArgs(tp_size=tp))
    if d.serving == allreduce.PCIE_IPC and nodes == 1:
        return None
    if d.serving != allreduce.PCIE_IPC:
        what = f"every all-reduce would be NCCL ({'; '.join(d.fallbacks) or d.serving})"
    else:
        what = (
            f"its CUDA IPC channels join the GPUs of one node only (pcie_ipc_ar.py: 'for "
            f"switch-free intra-node machines'), not {nodes} nodes"
        )
    sizes = "/".join(map(str, allreduce.PCIE_IPC_WORLD_SIZES))
    return (
        f"profile {loaded.name} asks for FlashInfer's PCIe-IPC all-reduce "
        f"({allreduce.ENABLE_VAR}=1), but at SGLang TP {tp} ({nodes} node{'s' * (nodes > 1)}"
        f" x {gpus} GPUs) {what}; render a profile without it (e.g. nccl-default), or one "
        f"node of {sizes} GPUs (--nodes 1 --gpus-per-node N)"
    )


def _quantity_bytes(q: str) -> float:
    units = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
             "Ti": 2**40, "m": 1e-3, "": 1}  # fmt: skip
    m = QUANTITY_RE.fullmatch(q)
    assert m is not None
    return float(q[: len(q) - len(m.group(2) or "")]) * units[m.group(2) or ""]


# ------------------------------------------------------------------------- render
def render(options: KubeOptions) -> Bundle:
    """Every manifest for `options` (see the module docstring); RenderError when invalid."""
    from fastverify.config import MODES
    from fastverify.engines.base import EngineArgError
    from fastverify.engines.sglang import server_args
    from fastverify.profiles import envfile
    from fastverify.profiles.model import ProfileError
    from fastverify.profiles.store import ProfileStore
    from fastverify.profiles.validate import Topology
    from fastverify.sglang.versions import PINNED_VERSION, generation_for

    _check(options)
    notes: list[str] = []
    cfg = _load_config(options)
    profile, mode = options.profile, options.mode
    decision: dict[str, Any] | None = None
    if options.from_decision:
        d_profile, d_mode, decision = read_decision(options.from_decision)
        for flag, given, recorded in (("--profile", profile, d_profile), ("--mode", mode, d_mode)):
            if given is not None and given != recorded:
                raise RenderError(
                    f"{flag} {given} contradicts {options.from_decision}: the decision is "
                    f"{recorded} (drop {flag}, or render without --from-decision)"
                )
        profile, mode = d_profile, d_mode
        if decision.get("applied") is not True:
            why = decision.get("why") or "no reason recorded"
            if not options.force:
                raise RenderError(
                    f"{options.from_decision}: tune did not apply {d_profile}/{d_mode} on its "
                    f'host ("applied": {json.dumps(decision.get("applied"))}; why: {why}): a '
                    "profile never served verified there is not a fleet's decision. Run tune "
                    "again until it applies one, or render it anyway with --force"
                )
            notes.append(
                f"{options.from_decision}: tune did not apply {d_profile}/{d_mode} on its host"
                f" ({why}); rendering it as decided because of --force"
            )
        notes += _simulated_decision(options.from_decision, decision, options.force)
    decision_sha256 = None
    decision_fingerprint: dict[str, Any] | None = None
    if options.from_decision:  # which record, exactly: its content, not only its name
        raw = Path(options.from_decision).read_bytes()
        decision_sha256 = hashlib.sha256(raw).hexdigest()
        fp = json.loads(raw).get("fingerprint")
        decision_fingerprint = fp if isinstance(fp, dict) else None
    profile = profile or cfg.daemon.default_profile
    mode = mode or cfg.server.mode
    if mode not in MODES:
        raise RenderError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    adaptive_text = _adaptive_config_text(mode, decision, options.from_decision)

    user_dirs = list(options.profile_dirs if options.profile_dirs is not None else
                     (str(d) for d in cfg.profile_dirs))  # fmt: skip
    shipped_dir = str(paths.shipped_profile_dir())
    # The render host's GPUs say nothing about the cluster's: LL128 needs --force here.
    store = ProfileStore(user_dirs=user_dirs, shipped_dir=shipped_dir,
                         topology=Topology(None, "unknown: rendering for a cluster"))  # fmt: skip
    try:
        loaded = store.load(profile, force=options.force, allow_path=False)
    except ProfileError as exc:
        problems = "\n".join(str(p) for p in exc.problems)
        raise RenderError(f"profile {profile!r} cannot be rendered:\n{problems}") from None

    gpus = options.gpus_per_node or cfg.server.tp_size
    if backend_note := _allreduce_mismatch(loaded, options.nodes, gpus):
        if not options.force:
            raise RenderError(backend_note + " (or pass --force to render it anyway)")
        notes.append(backend_note)
    fleet = _fleet(options)
    pod_user, identity_notes = pod_identity(options, fleet)
    notes += identity_notes
    notes += _network_checks(options, fleet, loaded)
    notes += _placement_notes(options, fleet, loaded, decision, decision_fingerprint, gpus)
    pod_cfg = pod_config(
        cfg, loaded.name, mode, options.nodes, gpus, options.web_config_secret is not None
    )
    paths_given = {
        k: v
        for k, v in (
            ("model_path", _in_models("--model-path", options.model_path)),
            ("draft_model_path", _in_models("--draft-model-path", options.draft_model_path)),
        )
        if v is not None
    }
    if paths_given:
        pod_cfg = dataclasses.replace(
            pod_cfg, server=dataclasses.replace(pod_cfg.server, **paths_given)
        )
    if adaptive_text is not None:  # the pod reads it from the config ConfigMap's mount
        pod_cfg = dataclasses.replace(pod_cfg, server=dataclasses.replace(
            pod_cfg.server, adaptive_config=f"{CONFIG_DIR}/{ADAPTIVE_CONFIG_KEY}"))  # fmt: skip
    if options.web_config_secret:
        notes.append(
            f"--web-config-secret {options.web_config_secret}: /metrics follows its "
            f"{WEB_CONFIG_KEY} (TLS, basic auth); the {options.monitor} scrapes https: give "
            "it the tlsConfig and basicAuth of your Prometheus (its CA, client certificate "
            "and password Secrets)"
        )
    generation = (
        cfg.server.sglang_flags if cfg.server.sglang_flags != "auto"
        else generation_for(PINNED_VERSION)
    )  # fmt: skip
    try:  # the argv node 0 will build: eagle3 without a drafter, bad requires, ... fail here
        probe = dataclasses.replace(pod_cfg.server, dist_init_addr="leader:1")
        with tempfile.TemporaryDirectory(prefix="fv-render-") as tmp:
            if adaptive_text is not None:  # the argv reads the config: here, a local copy
                local = Path(tmp) / ADAPTIVE_CONFIG_KEY
                local.write_text(adaptive_text, encoding="utf-8")
                probe = dataclasses.replace(probe, adaptive_config=str(local))
            server_args(
                probe, mode, loaded.requires, generation, probe.model_path or "/models/model"
            )
    except EngineArgError as exc:
        raise RenderError(f"{loaded.name}/{mode}: {exc}") from None
    source = os.path.basename(cfg.source) if cfg.source else "the built-in defaults"
    config_text = daemon_config_text(pod_cfg, source)
    _reparse(config_text, options.nodes)

    shipped = _profile_files(shipped_dir, user=False)
    user: dict[str, bytes] = {}
    for d in user_dirs:  # the first directory wins, as in the daemon's search
        for key, content in _profile_files(d, user=True).items():
            user.setdefault(key, content)
    for label, files in (("shipped", shipped), ("user", user)):
        size = sum(len(v) for v in files.values())
        if size > CONFIGMAP_LIMIT:
            raise RenderError(
                f"the {label} profiles hold {size} bytes, more than one ConfigMap takes "
                f"({CONFIGMAP_LIMIT}); remove unused profiles from {user_dirs or shipped_dir}"
            )
    # The declared profile's own files (it and its extends chain, as the store resolved
    # them here), in a ConfigMap named by their content: the pod searches it first.
    snapshot: dict[str, bytes] = {}
    checked: dict[str, bytes] = {}  # what the checksum covers: the snapshot and any base
    for entry in _chain(store, loaded.name):
        content = envfile.read_checked(Path(entry.file), Path(entry.root_dir))
        key = os.path.basename(entry.file)
        checked[f"{len(checked)}:{key}"] = content
        if key in snapshot:  # a user profile refining the shipped one of the same name
            notes.append(
                f"{loaded.name} extends {key[: -len('.env')]} of the same name: the pod finds "
                "that base in the profiles ConfigMaps (a rollout undo restores the file, not "
                "its base)"
            )
            continue
        snapshot[key] = content
        table = _tuner_table(content)
        if entry.source == "user" and table in user:
            snapshot[table] = checked[f"{len(checked)}:{table}"] = user[table]
    profile_checksum = _checksum(checked)
    config_checksum = hashlib.sha256((config_text + (adaptive_text or "")).encode()).hexdigest()

    dashboards_dir = paths.template_dir("compose") / "grafana" / "dashboards"
    dashboards = {
        p.name: p.read_text(encoding="utf-8") for p in sorted(dashboards_dir.glob("*.json"))
    }

    startup_failures = math.ceil(
        max(options.startup_s, cfg.daemon.readiness_timeout_s + 300) / PROBE_PERIOD_S
    )
    startup_window = startup_failures * PROBE_PERIOD_S
    shm = _quantity_bytes(options.shm_size)
    if shm >= _quantity_bytes(options.memory):
        raise RenderError(
            f"--shm-size {options.shm_size} must be below --memory {options.memory}: the "
            "in-memory /dev/shm counts against the container's memory limit"
        )
    workload = "LeaderWorkerSet" if options.nodes > 1 else "Deployment"
    context = {
        "o": options,
        "pod_user": pod_user,
        "name": options.name,
        "namespace": options.namespace,
        "profile": loaded.name,
        "profile_source": loaded.source,
        "mode": mode,
        "nodes": options.nodes,
        "gpus": gpus,
        "tp_size": gpus * options.nodes,
        "workload": workload,
        "shipped": _texts(shipped, shipped_dir),
        "user": _texts(user, ", ".join(user_dirs)),
        "config_text": config_text,
        "adaptive_config_key": ADAPTIVE_CONFIG_KEY,
        "adaptive_config_text": adaptive_text,
        "dashboards": dashboards,
        "profile_checksum": profile_checksum,
        "config_checksum": config_checksum,
        "decision": decision,
        "decision_file": os.path.basename(options.from_decision) if options.from_decision else None,
        "decision_sha256": decision_sha256,
        "decision_fingerprint": (decision_fingerprint or {}).get("id"),
        "fleet": fleet,
        "pods": options.replicas * options.nodes,
        "model_access_mode": options.model_access_mode
        or ("ReadOnlyMany" if options.replicas * options.nodes > 1 else "ReadWriteOnce"),
        "render_pvc": options.model_pvc is None and options.model_host_path is None,
        "keep_annotations": KEEP_ANNOTATIONS,
        # LWS's controller creates a headless Service named after the LeaderWorkerSet (the
        # pods' subdomain, LWS_LEADER_ADDRESS): the client Service must be named apart
        "service_name": f"{options.name}-leader" if workload == "LeaderWorkerSet" else options.name,
        "startup_failures": startup_failures,
        "startup_window": startup_window,
        "progress_deadline": options.progress_deadline_s or startup_window + 1200,
        "model_pvc": options.model_pvc or f"{options.name}-models",
        # content-addressed: a pod template names the exact ConfigMaps it was rendered with
        # (the profile directories are stable objects: editing another profile rolls no pod)
        "cm": {
            "config": f"{options.name}-config-{config_checksum[:10]}",
            "declared": f"{options.name}-profile-{profile_checksum[:10]}",
            "user": f"{options.name}-profiles-user",
            "shipped": f"{options.name}-profiles-shipped",
        },
        "declared": _texts(snapshot, loaded.name),
        "paths": POD_PATHS,
        "ports": POD_PORTS,
        "grace_s": int(cfg.daemon.stop_grace_s + cfg.daemon.gpu_release_timeout_s + 30),
        "annotation": ANNOTATION,
    }
    env = _environment()
    skip = {
        "deployment": workload != "Deployment",
        "leaderworkerset": workload != "LeaderWorkerSet",
        "namespace": not options.create_namespace,
        "pvc": not context["render_pvc"],
        "podmonitor": options.monitor != "podmonitor",
        "servicemonitor": options.monitor != "servicemonitor",
        "grafana": not options.grafana,
    }
    files = {}
    for key, out in FILES.items():
        if not skip.get(key):
            files[out] = env.get_template(f"{key}.yaml.j2").render(**context)
    notes += _size_guard(files, server_side=options.server_side)
    if workload == "LeaderWorkerSet":
        notes.append(
            f"the client Service is {context['service_name']}: the name {options.name} is the "
            "headless Service LWS's controller creates (delete a Service of that name left by "
            "an earlier single-node render before applying)"
        )
    return Bundle(
        files=files,
        profile=loaded.name,
        mode=mode,
        workload=workload,
        gpus_per_node=gpus,
        tp_size=gpus * options.nodes,
        profile_checksum=profile_checksum,
        config_checksum=config_checksum,
        config_text=config_text,
        notes=notes,
        layout=layout(pod_cfg.server, mode),
        prerequisites=prerequisites(options, workload),
    )


def _size_guard(files: Mapping[str, str], *, server_side: bool) -> list[str]:
    """Client-side `kubectl apply` fails on an object whose JSON exceeds what the
    last-applied-configuration annotation may hold: refuse it, naming the object, unless the
    operator applies server-side (`--server-side`, no such annotation)."""
    import yaml

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


def _reparse(text: str, nodes: int) -> None:
    """The rendered configuration must load in the daemon as the pods run it (every key
    checked; multi-node with the flags a leader's container passes)."""
    import tempfile

    from fastverify import config as configmod

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / CONFIG_NAME
        path.write_text(text, encoding="utf-8")
        try:
            tomllib.loads(text)
            flags = {"server": {"node_rank": 0, "dist_init_addr": f"leader:{DIST_PORT}"}}
            configmod.load(path, flags if nodes > 1 else None)
        except (tomllib.TOMLDecodeError, configmod.ConfigError) as exc:  # a renderer bug
            raise RenderError(f"rendered configuration does not load: {exc}") from None


def _yaml_text(value: str, indent: int) -> str:
    """`value` as a YAML scalar that reads back byte for byte: a literal block (`|`) when
    the text allows it, else a double-quoted string with YAML's escapes."""
    lines = value.split("\n")
    plain = (
        value.endswith("\n")
        and not value.endswith("\n\n")
        and "\r" not in value
        and "\t" not in value
        and all(line == line.rstrip() for line in lines)
        and not value.startswith((" ", "\n"))
        and all(ch.isprintable() for ch in value.replace("\n", ""))
        and "\ufeff" not in value
    )
    if not plain:
        return _yaml_quoted(value)
    pad = " " * indent
    body = "\n".join(pad + line if line else "" for line in lines[:-1])
    return "|\n" + body


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _yaml_quoted(value: str) -> str:
    """A YAML double-quoted scalar: printable characters as they are (UTF-8), everything
    else as a YAML escape (\\xXX, \\uXXXX, \\UXXXXXXXX: one code point each, never a
    surrogate pair, which YAML readers decode as two broken halves)."""
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.template_dir("kubernetes"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["yaml_text"] = _yaml_text
    env.filters["json"] = json.dumps
    return env


def write_bundle(output_dir: Path, bundle: Bundle) -> list[Path]:
    """Write the bundle's files (each replaced atomically); the paths written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in bundle.files.items():
        path = output_dir / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    for stale in (*FILES.values(), *RETIRED_FILES):  # e.g. the other workload's file
        if stale not in bundle.files and (output_dir / stale).exists():
            (output_dir / stale).unlink()
    return written
