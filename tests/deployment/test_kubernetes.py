"""`fastverifyctl render kubernetes`: the manifests validate and say what they promise.

- Every render (single node, two nodes with RDMA, two nodes from a values file with a
  ServiceMonitor, three nodes over TCP): built-in kinds validate strictly (unknown fields
  are errors) with kubernetes-validate, for Kubernetes 1.33 (the floor) and 1.37 (the
  newest it ships); the LeaderWorkerSet's pod templates also as core PodTemplates; every
  LeaderWorkerSet and PodMonitor strictly against the projects' own CRDs in
  ../shared/k8s-crds (lws v0.10.0, prometheus-operator v0.93.0; missing = a failure); the
  monitors with the Prometheus Operator models scripts/k8s-schemas.sh installs.
- Semantics: GPUs per pod = the TP size per node, readiness on the daemon's /readyz, a
  startup window of at least 30 minutes, an in-memory /dev/shm, profiles byte for byte,
  a pod template that changes with the profile's content and not with unrelated files.

No Kubernetes control plane runs here; docs/guides/kubernetes.md gives the commands that run the
same checks against a cluster (`kubectl apply --dry-run=server`, a staging roll-out).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from fastverify import config as configmod
from fastverify.frontdoor import layout
from fastverify.profiles.store import ProfileStore
from tests.support.kube import (
    by_kind,
    configmap,
    ctl,
    docs,
    kubelet_volume,
    one,
    pod_templates,
    render,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "profiles"
DASHBOARDS = REPO / "compose" / "grafana" / "dashboards"
FLOOR = "1.33.0"
NEWEST = kv_utils.latest_version()
CRD_KINDS = {"LeaderWorkerSet", "PodMonitor", "ServiceMonitor"}


VALUES = {
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "llm",
                     "effect": "NoSchedule"}],
    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "example.com/fabric", "operator": "In", "values": ["ib-a"]}]}]}}},
    "runtimeClassName": "nvidia",
    "priorityClassName": "llm-serving",
    "imagePullSecrets": ["registry-creds"],
    "podLabels": {"team": "llm", "tier": "true"},
    "podAnnotations": {"example.com/owner": "llm@example.com"},
    "exclusiveTopology": "example.com/block",
    "hostNetwork": True,
    "rdmaResources": {"rdma/rdma_shared_device_a": 1},
    "monitorLabels": {"prometheus": "main"},
}  # fmt: skip
RENDERS = {
    "nccl-default": ("--profile", "nccl-default"),
    "ring-ll": ("--profile", "ring-ll"),
    "ring-ll-2-nodes": ("--profile", "ring-ll", "--nodes", "2", "--rdma", "rdma/ib=1"),
    # two nodes with the values file, the host's RDMA devices and a ServiceMonitor
    "values-2-nodes": ("--profile", "ring-ll", "--nodes", "2", "--values", "{values}",
                       "--rdma-devices", "--monitor", "servicemonitor", "--replicas", "2"),
    "tcp-3-nodes": ("--profile", "nccl-default", "--nodes", "3", "--allow-tcp",
                    "--model-pvc", "shared-models"),
}  # fmt: skip


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    values = tmp_path_factory.mktemp("values") / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES), encoding="utf-8")
    out = {}
    for key, args in RENDERS.items():
        d = tmp_path_factory.mktemp(key)
        render(d, *(a.replace("{values}", str(values)) for a in args))
        out[key] = docs(d)
    return out


# --------------------------------------------------------------------------- schemas
@pytest.mark.parametrize("version", [FLOOR, NEWEST])
@pytest.mark.parametrize("key", list(RENDERS))
def test_builtin_objects_validate_strictly(
    rendered: dict[str, list[dict[str, Any]]], key: str, version: str
) -> None:
    objs = rendered[key]
    kinds = {d["kind"] for d in objs}
    assert {"Namespace", "ConfigMap", "Service", "PodDisruptionBudget"} <= kinds
    assert kinds & {"PodMonitor", "ServiceMonitor"}
    checked = 0
    for doc in objs:
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    # the LeaderWorkerSet's pod templates are core PodTemplateSpecs: strictly valid too
    for role, template in pod_templates(objs).items():
        if role == "server":
            continue
        wrapper = {"apiVersion": "v1", "kind": "PodTemplate",
                   "metadata": {"name": f"lws-{role}"}, "template": template}  # fmt: skip
        kubernetes_validate.validate(wrapper, version, strict=True)
        checked += 1
    assert checked >= 6


def test_strict_validation_catches_a_misspelt_field(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    deployment = json.loads(json.dumps(one(rendered["ring-ll"], "Deployment")))
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["periodSecond"] = probe.pop("periodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, FLOOR, strict=True)


@pytest.fixture(scope="module")
def crd_schemas() -> Path:
    """The third-party schemas (scripts/k8s-schemas.sh); installed here when missing."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    dest = Path(os.environ.get("FASTVERIFY_K8S_SCHEMAS") or cache / "fastverify" / "k8s-schemas")
    marker = dest / "node_modules" / "@kubernetes-models" / "prometheus-operator" / "package.json"
    if shutil.which("node") is None:
        pytest.fail("node is missing: apt-get install nodejs npm (the PodMonitor's schema check)")
    if not marker.exists():
        proc = subprocess.run(
            [str(REPO / "scripts" / "k8s-schemas.sh")],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "FASTVERIFY_K8S_SCHEMAS": str(dest)},
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    pinned = json.loads((REPO / "tests/fixtures/k8s-schemas/package.json").read_text())
    installed = json.loads(marker.read_text())["version"]
    assert installed == pinned["dependencies"]["@kubernetes-models/prometheus-operator"]
    return dest


def crd_check(schemas: Path, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    proc = subprocess.run(
        ["node", str(Path(__file__).with_name("crd_check.mjs")), str(schemas)],
        input=json.dumps(objs),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_monitors_validate_against_the_prometheus_operator_schema(
    rendered: dict[str, list[dict[str, Any]]], crd_schemas: Path
) -> None:
    monitors = [d for objs in rendered.values() for d in objs
                if d["kind"] in ("PodMonitor", "ServiceMonitor")]  # fmt: skip
    assert {d["kind"] for d in monitors} == {"PodMonitor", "ServiceMonitor"}
    results = crd_check(crd_schemas, monitors)
    assert [r["ok"] for r in results] == [True] * len(monitors), results
    # the schema is a real check: a wrong type is refused
    bad = json.loads(json.dumps(monitors[0]))
    bad["spec"]["podMetricsEndpoints"][0]["interval"] = 15
    assert crd_check(crd_schemas, [bad])[0]["ok"] is False


# --------------------------------------------------------------------------- semantics
@pytest.mark.parametrize("key", list(RENDERS))
def test_pods_ask_for_the_tp_gpus_and_probe_the_daemon(
    rendered: dict[str, list[dict[str, Any]]], key: str
) -> None:
    objs = rendered[key]
    config = configmap(objs, "config")["data"]["fastverifyd.toml"]
    image_cfg = configmod.load(REPO / "compose" / "fastverifyd.container.toml")
    assert image_cfg.server.tp_size == 8
    templates = pod_templates(objs)
    assert set(templates) == ({"leader", "worker"} if "nodes" in key else {"server"})
    for template in templates.values():
        spec = template["spec"]
        (c,) = spec["containers"]
        res = c["resources"]
        assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == 8
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert f'health_listen = "0.0.0.0:{ports["health"]}"' in config
        assert f'metrics_listen = "0.0.0.0:{ports["metrics"]}"' in config
        ready, start, live = c["readinessProbe"], c["startupProbe"], c["livenessProbe"]
        assert ready["httpGet"] == {"path": "/readyz", "port": "health"}
        assert live["httpGet"] == {"path": "/livez", "port": "health"}
        assert start["httpGet"] == {"path": "/startupz", "port": "health"}
        assert start["periodSeconds"] * start["failureThreshold"] >= 30 * 60
        # the startup window covers the daemon's own readiness timeout for one load
        assert start["periodSeconds"] * start["failureThreshold"] > (
            image_cfg.restart.readiness_timeout_s
        )
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
        claim = volumes[mounts["/models"]]["persistentVolumeClaim"]["claimName"]
        assert claim == ("shared-models" if key == "tcp-3-nodes" else "fastverify-models")
        # the claim the pods mount is rendered (with its access mode), or is an existing one
        pvcs = {d["metadata"]["name"]: d for d in by_kind(objs, "PersistentVolumeClaim")}
        if key == "tcp-3-nodes":
            assert not pvcs
        else:
            args = RENDERS[key]
            replicas = int(args[args.index("--replicas") + 1]) if "--replicas" in args else 1
            pods = replicas * len(templates)
            assert pvcs[claim]["spec"]["accessModes"] == [
                "ReadOnlyMany" if pods > 1 else "ReadWriteOnce"
            ]
        cache = mounts["/var/cache/fastverify"]
        assert cache in volumes
        for var in ("SGLANG_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_AUTOTUNE_DIR"):
            assert f'{var} = "/var/cache/fastverify/' in config
        sc = c["securityContext"]
        if key == "values-2-nodes":  # the host's /dev/infiniband: a privileged container
            assert sc["privileged"] is True and "allowPrivilegeEscalation" not in sc
        else:
            assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sc["readOnlyRootFilesystem"] is True
        rdma = any(r.startswith("rdma/") for r in res["limits"]) or "/dev/infiniband" in mounts
        if rdma:  # root, whose IPC_LOCK is effective (and the only capability)
            assert spec["securityContext"]["runAsNonRoot"] is False
            assert spec["securityContext"]["runAsUser"] == 0
            assert sc["capabilities"]["add"] == ["IPC_LOCK"]
        else:
            assert spec["securityContext"]["runAsNonRoot"] is True
            assert spec["securityContext"]["runAsUser"] != 0
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["USER"] and env["LOGNAME"] and env["HOME"] == "/var/cache/fastverify"
        # the GPU operator's taint is tolerated on every render
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]


def test_deployment_rolls_one_pod_at_a_time(rendered: dict[str, list[dict[str, Any]]]) -> None:
    dep = one(rendered["ring-ll"], "Deployment")
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    start = dep["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    # a roll-out is declared stalled only after a new pod had its whole start-up window
    assert (
        dep["spec"]["progressDeadlineSeconds"] > start["periodSeconds"] * start["failureThreshold"]
    )
    pdb = one(rendered["ring-ll"], "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = dep["spec"]["template"]["metadata"]["labels"]
    for obj in (pdb, one(rendered["ring-ll"], "PodMonitor")):
        assert obj["spec"]["selector"]["matchLabels"].items() <= labels.items()
    svc = one(rendered["ring-ll"], "Service")
    assert svc["spec"]["selector"].items() <= labels.items()
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_two_nodes_give_a_leaderworkerset(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["ring-ll-2-nodes"]
    assert not by_kind(objs, "Deployment")
    lws = one(objs, "LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    spec = lws["spec"]
    assert spec["leaderWorkerTemplate"]["size"] == 2
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {
        "maxUnavailable": 1,
        "maxSurge": 0,
    }
    templates = pod_templates(objs)
    leader = templates["leader"]["spec"]["containers"][0]["args"]
    worker = templates["worker"]["spec"]["containers"][0]["args"]
    for args in (leader, worker):  # LWS's variables, as its SGLang example passes them
        assert args[args.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
        assert args[args.index("--nnodes") + 1] == "$(LWS_GROUP_SIZE)"
        assert args[args.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
    # clients reach the leaders only (node rank 0 serves HTTP)
    svc = one(objs, "Service")
    assert svc["spec"]["selector"]["fastverify/role"] == "leader"
    assert svc["metadata"]["name"] == "fastverify-leader"
    assert templates["leader"]["metadata"]["labels"]["fastverify/role"] == "leader"
    # the pod configuration: TP over both nodes' GPUs, nnodes 2 (node rank from the flags)
    text = configmap(objs, "config")["data"]["fastverifyd.toml"]
    assert "tp_size = 16" in text and "nnodes = 2" in text


def test_profiles_travel_byte_for_byte(tmp_path: Path) -> None:
    user = tmp_path / "profiles"
    user.mkdir()
    # text a YAML block cannot hold as is: no final newline, trailing spaces, a tab
    awkward = b"# description: awkward   \n# note:\ttabbed\nNCCL_ALGO=Ring"
    (user / "awkward.env").write_bytes(awkward)
    (user / "mine.env").write_bytes(b"# extends: ring-ll\nNCCL_MAX_NCHANNELS=4\n")
    (user / "README.txt").write_text("not a profile\n")
    out = tmp_path / "out"
    render(out, "--profile", "mine", "--profile-dir", str(user))
    objs = docs(out)
    shipped = configmap(objs, "profiles-shipped")["data"]
    assert set(shipped) == {p.name for p in SHIPPED.glob("*.env")}
    for name, text in shipped.items():
        assert text.encode("utf-8") == (SHIPPED / name).read_bytes(), name
    mine = configmap(objs, "profiles-user")["data"]
    assert set(mine) == {"awkward.env", "mine.env"}
    assert mine["awkward.env"].encode() == awkward
    assert mine["mine.env"].encode() == (user / "mine.env").read_bytes()
    dashboards = one(objs, "ConfigMap", "fastverify-dashboards")
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert set(dashboards["data"]) == {p.name for p in DASHBOARDS.glob("*.json")}
    for name, text in dashboards["data"].items():
        assert text.encode() == (DASHBOARDS / name).read_bytes(), name
    datasource = one(objs, "ConfigMap", "fastverify-datasource")
    assert datasource["metadata"]["labels"]["grafana_datasource"] == "1"
    assert "uid: fastverify-prometheus" in datasource["data"]["fastverify-datasource.yaml"]


def test_configmap_volumes_load_in_the_daemons_store(tmp_path: Path) -> None:
    """The pod's search path (declared profile, user profiles, shipped profiles) built from
    the rendered ConfigMaps as the kubelet mounts them resolves every profile as this host
    does; the store follows the kubelet's links (they stay inside each directory)."""
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "mine.env").write_text("# extends: ring-ll\nNCCL_MAX_NCHANNELS=4\n")
    out = tmp_path / "out"
    render(out, "--profile", "mine", "--profile-dir", str(user))
    objs = docs(out)
    dirs = [
        kubelet_volume(tmp_path / role, configmap(objs, role)["data"])
        for role in ("profile-declared", "profiles-user", "profiles-shipped")
    ]
    declared = configmap(objs, "profile-declared")["data"]
    assert {k: v.encode() for k, v in declared.items()} == {
        "mine.env": (user / "mine.env").read_bytes(),
        "ring-ll.env": (SHIPPED / "ring-ll.env").read_bytes(),
    }
    pod = ProfileStore(user_dirs=dirs, shipped_dir=tmp_path / "image-has-none")
    host = ProfileStore(user_dirs=[user], shipped_dir=SHIPPED)
    assert {p.name for p in pod.list()} == {p.name for p in host.list()}
    for name in ("mine", "ring-ll", "nccl-default"):
        assert pod.load(name).env == host.load(name).env, name
    assert pod.find("mine").file.startswith(str(dirs[0]))  # the declared copy wins


def template_of(out: Path) -> dict[str, Any]:
    return one(docs(out), "Deployment")["spec"]["template"]


def test_pod_template_changes_with_the_profile_and_its_content(tmp_path: Path) -> None:
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "base.env").write_text("NCCL_ALGO=Ring\n")
    (user / "child.env").write_text("# extends: base\nNCCL_PROTO=LL\n")
    (user / "other.env").write_text("NCCL_ALGO=Ring\n")
    args = ("--profile-dir", str(user))

    def template(profile: str, where: str) -> dict[str, Any]:
        out = tmp_path / where
        render(out, "--profile", profile, *args)
        return template_of(out)

    first = template("child", "a")
    assert first == template("child", "a-again")  # deterministic
    assert template("nccl-default", "default") != first  # another profile
    ann = "fastverify/profile-checksum"
    (user / "other.env").write_text("NCCL_ALGO=Tree\n")  # unrelated profile edited
    assert template("child", "b") == first
    (user / "base.env").write_text("NCCL_ALGO=Ring\nNCCL_MAX_NCHANNELS=2\n")  # its parent
    edited = template("child", "c")
    assert edited["metadata"]["annotations"][ann] != first["metadata"]["annotations"][ann]
    (user / "child.env").write_text("# extends: base\nNCCL_PROTO=Simple\n")  # itself
    again = template("child", "d")
    assert again["metadata"]["annotations"][ann] not in (
        first["metadata"]["annotations"][ann],
        edited["metadata"]["annotations"][ann],
    )
    # the mode is part of the template too (through the daemon configuration)
    out = tmp_path / "mode"
    render(out, "--profile", "child", "--mode", "eagle3", *args)
    assert (
        template_of(out)["metadata"]["annotations"]["fastverify/config-checksum"]
        != (again["metadata"]["annotations"]["fastverify/config-checksum"])
    )


def test_pod_configuration_is_declarative_and_loads(tmp_path: Path) -> None:
    out = tmp_path / "out"
    info = render(out, "--profile", "ring-ll", "--mode", "eagle3")
    assert (info["profile"], info["mode"], info["workload"]) == ("ring-ll", "eagle3", "Deployment")
    text = configmap(docs(out), "config")["data"]["fastverifyd.toml"]
    path = tmp_path / "fastverifyd.toml"
    path.write_text(text)
    cfg = configmod.load(path)
    assert cfg.daemon.declarative is True
    assert (cfg.daemon.default_profile, cfg.server.mode) == ("ring-ll", "eagle3")
    assert cfg.daemon.profile_dirs == (
        "/etc/fastverify/profiles.d/declared",
        "/etc/fastverify/profiles.d/user",
        "/etc/fastverify/profiles.d/shipped",
    )
    assert cfg.server.host == "0.0.0.0" and cfg.api.tcp_listen == ""
    # the front door on the Service's port, the engine behind it on the pod's loopback
    assert (cfg.frontdoor.mode, cfg.server.port) == ("hold", 30000)
    inner = layout.engine_side(cfg).server
    assert (inner.host, inner.port, inner.public_port) == ("127.0.0.1", 30001, 30000)


def decision(tmp_path: Path, body: Any) -> Path:
    path = tmp_path / "decision.json"
    path.write_text(json.dumps(body))
    return path


def test_from_decision_takes_tunes_profile_and_mode(tmp_path: Path) -> None:
    record = {
        "decision": {"profile": "ring-ll", "mode": "eagle3", "backend": "nccl",
                     "applied": True, "why": "fastest verified"},
        "stages": [],
    }  # fmt: skip
    out = tmp_path / "out"
    info = render(out, "--from-decision", str(decision(tmp_path, record)))
    assert (info["profile"], info["mode"]) == ("ring-ll", "eagle3")
    dep = one(docs(out), "Deployment")
    assert dep["spec"]["template"]["metadata"]["annotations"]["fastverify/profile"] == "ring-ll"
    assert dep["metadata"]["annotations"]["fastverify/decision"] == "decision.json"


def test_adaptive_decision_carries_its_plan_into_the_config_configmap(tmp_path: Path) -> None:
    plan = {"1": {"candidate_steps": [0, 2], "down_hysteresis": 0.1, "up_hysteresis": 0.0},
            "8": {"candidate_steps": [0]}}  # fmt: skip
    record = {
        "decision": {"profile": "ring-ll", "mode": "adaptive", "backend": "nccl",
                     "applied": True, "why": "the plan drafts at 1 request",
                     "adaptive_config": "/var/lib/fastverify/adaptive-config.json",
                     "adaptive_config_json": plan},
        "stages": [],
    }  # fmt: skip
    out = tmp_path / "out"
    info = render(out, "--from-decision", str(decision(tmp_path, record)))
    assert info["mode"] == "adaptive"
    cm = configmap(docs(out), "config")
    assert json.loads(cm["data"]["adaptive-config.json"]) == plan
    toml = tomllib.loads(cm["data"]["fastverifyd.toml"])
    assert toml["server"]["mode"] == "adaptive"
    assert toml["server"]["adaptive_config"] == "/etc/fastverify/k8s/adaptive-config.json"
    # another plan is another config ConfigMap (content-addressed: rollout undo restores it)
    record["decision"]["adaptive_config_json"] = {"1": {"candidate_steps": [0, 3]}}
    out2 = tmp_path / "out2"
    render(out2, "--from-decision", str(decision(tmp_path, record)))
    assert configmap(docs(out2), "config")["metadata"]["name"] != cm["metadata"]["name"]
    # a decision without the plan, or a bad one, is refused before anything is written
    for bad, says in ((None, "there is none to render"),
                      ({"1": {"candidate_steps": [-1]}}, "candidate_steps")):  # fmt: skip
        record["decision"]["adaptive_config_json"] = bad
        out3 = tmp_path / "out3"
        r = ctl("render", "kubernetes", "--output-dir", str(out3), "--image", "fastverify:test",
                "--from-decision", str(decision(tmp_path, record)))  # fmt: skip
        assert r.returncode == 2 and says in r.stderr, r.stderr
        assert not out3.exists()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"stages": []}, 'no "decision" object'),
        ({"decision": {"mode": "baseline"}}, "decision.profile is missing"),
        ({"decision": {"profile": "ring-ll"}}, "decision.mode is null"),
        ({"decision": {"profile": "ring-ll", "mode": "fast"}}, 'decision.mode is "fast"'),
        ({"decision": {"profile": "no-such", "mode": "baseline"}}, "no-such"),
    ],
)
def test_a_bad_decision_record_is_refused(tmp_path: Path, body: Any, says: str) -> None:
    path = decision(tmp_path, body)
    out = tmp_path / "out"
    r = ctl("render", "kubernetes", "--output-dir", str(out), "--from-decision", str(path),
            "--image", "fastverify:test")  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr and (str(path) in r.stderr or "no-such" in r.stderr), r.stderr
    assert not out.exists()  # nothing written


def test_decision_and_profile_flag_must_agree(tmp_path: Path) -> None:
    path = decision(tmp_path, {"decision": {"profile": "ring-ll", "mode": "baseline"}})
    r = ctl("render", "kubernetes", "--output-dir", str(tmp_path / "o"), "--from-decision",
            str(path), "--profile", "tree-ll", "--image", "fastverify:test")  # fmt: skip
    assert r.returncode == 2 and "contradicts" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--startup-seconds", "600"), "at least 1800"),
        (("--shm-size", "500Gi"), "must be below --memory"),
        (("--nodes", "0"), "--nodes 0"),
        (("--profile", "tree-ll", "--mode", "eagle3", "--config", "{empty}"), "draft"),
        (("--name", "Bad_Name"), "DNS label"),
        (("--image", ""), "--image is required"),
        # multi-node over TCP sockets only: refused without --allow-tcp
        (("--nodes", "2"), "--allow-tcp"),
        (("--nodes", "2", "--rdma", "rdma/ib=1", "--profile", "{no-ib}",
          "--profile-dir", "{dir}"), "turns NCCL's IB/RoCE transport off"),
        (("--rdma", "rdma/ib=x"), "COUNT must be an integer"),
        (("--toleration", "nvidia.com/gpu"), "KEY[=VALUE]:EFFECT"),
        (("--node-selector", "nokey"), "expected KEY=VALUE"),
        (("--label", "app.kubernetes.io/name=x"), "the render's own"),
        (("--exclusive-topology", "example.com/block"), "LeaderWorkerSet's"),
        (("--values", "{values}"), "unknown key(s) nodeselector"),
        (("--values", "{bad-yaml}"), "bad.yaml:2: not YAML"),
    ],
)  # fmt: skip
def test_bad_options_are_refused(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text('[server]\nmodel_path = "/models/m"\n')
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "sockets.env").write_text("# extends: ring-ll\nNCCL_IB_DISABLE=1\n")
    (tmp_path / "values.yaml").write_text("nodeselector: {a: b}\n")  # nodeSelector, misspelt
    (tmp_path / "bad.yaml").write_text("tolerations:\n\t- key: a\n")  # a tab
    subst = {
        "{empty}": str(empty),
        "{no-ib}": "sockets",
        "{dir}": str(tmp_path / "p"),
        "{values}": str(tmp_path / "values.yaml"),
        "{bad-yaml}": str(tmp_path / "bad.yaml"),
    }
    argv = ["--image", "fastverify:test", *(subst.get(a, a) for a in args)]  # fmt: skip
    r = ctl("render", "kubernetes", "--output-dir", str(tmp_path / "o"), *argv)
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()  # nothing written


def test_a_profile_directory_with_a_binary_file_is_refused(tmp_path: Path) -> None:
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "latin1.env").write_bytes(b"# caf\xe9\nNCCL_ALGO=Ring\n")
    out = tmp_path / "out"
    r = ctl("render", "kubernetes", "--output-dir", str(out), "--profile-dir", str(user),
            "--image", "fastverify:test")  # fmt: skip
    assert r.returncode == 2 and "latin1.env: byte 5 is not UTF-8" in r.stderr, r.stderr
    assert not out.exists()


def test_pod_templates_name_their_own_configmaps(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """`kubectl rollout undo` restores a pod template; it must find the configuration it
    was rendered with, not the one applied since: ConfigMap names carry their content."""
    names = {}
    for key, objs in rendered.items():
        present = {d["metadata"]["name"] for d in by_kind(objs, "ConfigMap")}
        for template in pod_templates(objs).values():
            refs = {v["configMap"]["name"] for v in template["spec"]["volumes"] if "configMap" in v}
            assert len(refs) == 4 and refs <= present, (refs, present)
        names[key] = configmap(objs, "config")["metadata"]["name"]
    # one name per configuration: the two 2-node renders differ only outside the daemon's
    assert names["ring-ll-2-nodes"] == names["values-2-nodes"]
    assert len({names[k] for k in RENDERS if k != "values-2-nodes"}) == len(RENDERS) - 1, names
    declared = {
        k: configmap(o, "profile-declared")["metadata"]["name"] for k, o in rendered.items()
    }
    assert declared["ring-ll"] == declared["ring-ll-2-nodes"] != declared["nccl-default"]
    assert configmap(rendered["ring-ll"], "profile-declared")["data"] == {
        "ring-ll.env": (SHIPPED / "ring-ll.env").read_text()
    }


def test_a_user_profile_refining_the_shipped_one_of_its_name(tmp_path: Path) -> None:
    """`# extends: ring-ll` in a user ring-ll.env means the shipped ring-ll: both files are
    in the checksum (an edit of either rolls), the pod finds the base further down."""
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "ring-ll.env").write_text("# extends: ring-ll\nNCCL_MAX_NCHANNELS=4\n")
    out = tmp_path / "out"
    r = ctl("render", "kubernetes", "--output-dir", str(out), "--profile", "ring-ll",
            "--profile-dir", str(user), "--image", "fastverify:test")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "extends ring-ll of the same name" in r.stderr
    objs = docs(out)
    declared = configmap(objs, "profile-declared")["data"]
    assert declared == {"ring-ll.env": (user / "ring-ll.env").read_text()}
    dirs = [
        kubelet_volume(tmp_path / role, configmap(objs, role)["data"])
        for role in ("profile-declared", "profiles-user", "profiles-shipped")
    ]
    pod = ProfileStore(user_dirs=dirs, shipped_dir=tmp_path / "none").load("ring-ll")
    host = ProfileStore(user_dirs=[user], shipped_dir=SHIPPED).load("ring-ll")
    assert pod.env == host.env and host.env["NCCL_MAX_NCHANNELS"] == "4"
    assert host.env["NCCL_ALGO"] == "Ring"  # from the shipped base


def pod_daemon(tmp_path: Path, profile: str) -> tuple[Any, str]:
    """The real fastverifyd (sim engine) run with a rendered pod's configuration and its
    ConfigMaps mounted as the kubelet does; only what the sim cannot have is changed: the
    engine (flag), ports and directories on this machine."""
    import tomllib

    from tests.support.harness import DaemonHarness, free_port

    user = tmp_path / "profiles"
    user.mkdir(parents=True)
    (user / "t.tuner.csv").write_text(
        "collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes\n"
        "AllReduce,0,1024,Ring,LL,-1,2,1\n"
    )
    # starts, answers /health, then fails verification: NCCL cannot find this tuner plugin
    (user / "unverifiable.env").write_text(
        "# extends: nccl-default\nFASTVERIFY_TUNER_TABLE=t.tuner.csv\n"
        "NCCL_TUNER_PLUGIN=fastverify-missing\n"
    )
    out = tmp_path / "out"
    render(out, "--profile", profile, "--profile-dir", str(user), "--gpus-per-node", "2")
    objs = docs(out)
    cfg = tomllib.loads(configmap(objs, "config")["data"]["fastverifyd.toml"])
    cfg["daemon"]["profile_dirs"] = [
        str(kubelet_volume(tmp_path / "vol" / role, configmap(objs, role)["data"]))
        for role in ("profile-declared", "profiles-user", "profiles-shipped")
    ]
    health = free_port()
    cfg["exporter"]["health_listen"] = f"127.0.0.1:{health}"
    for table, key in (("daemon", "state_dir"), ("api", "socket"), ("exporter", "metrics_listen")):
        del cfg[table][key]  # the harness's (flags)
    del cfg["server"]["port"]
    cfg["server"]["host"] = "127.0.0.1"
    cfg["server"]["model_path"] = cfg["server"]["draft_model_path"] = ""  # the sim's own
    cfg["frontdoor"]["engine_port"] = free_port()  # 30001 may be another's on this machine
    assert cfg["daemon"]["declarative"] is True and cfg["server"]["tp_size"] == 2
    return DaemonHarness(tmp_path / "d", config=cfg, start=False), f"http://127.0.0.1:{health}"


def http_get(url: str) -> tuple[int, dict[str, Any]]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_rendered_pod_serves_its_profile_and_a_failing_one_is_never_ready(
    tmp_path: Path,
) -> None:
    d, health = pod_daemon(tmp_path / "good", "ring-ll")
    with d:
        d.start(wait_ready=True, timeout=60)
        code, body = http_get(health + "/readyz")
        assert (code, body["profile"], body["mode"]) == (200, "ring-ll", "baseline"), body
        assert d.status()["declarative"]["profile"] == "ring-ll"

    d, health = pod_daemon(tmp_path / "bad", "unverifiable")
    with d:
        d.start(wait_ready=False, timeout=60)
        st = d.wait_state("FAILED", timeout=90)
        assert st["last_failure"]["reason"] == "tuner_not_loaded", st["last_failure"]
        code, body = http_get(health + "/readyz")
        assert code == 503 and "tuner_not_loaded" in body["why"], body
        assert http_get(health + "/startupz")[0] == 200  # settled: liveness takes over
        assert http_get(health + "/livez")[0] == 200  # the daemon is fine: no restart loop
        assert all(r["result"] != "ok" for r in d.client.get("/v1/history"))


def test_a_pod_whose_front_door_holds_stays_ready(tmp_path: Path) -> None:
    # a restart of the declared profile: while the front door holds its requests, the pod
    # stays in the Service (the requests wait, then go to the new engine)
    d, health = pod_daemon(tmp_path, "ring-ll")
    d.sim_load_seconds = 4  # the new engine's start keeps the hold open while probed
    with d:
        d.start(wait_ready=True, timeout=60)
        assert d.status()["frontdoor"]["state"] == "serving"
        restart = threading.Thread(target=lambda: d.ctl("restart"), daemon=True)
        restart.start()
        d.wait_for(lambda: d.status()["state"] == "STARTING", 60, "the new engine's start")
        code, body = http_get(health + "/readyz")
        assert code == 200 and "front door holds" in body["why"], body
        restart.join(120)
        assert http_get(health + "/readyz")[0] == 200


def test_multi_node_pods_run_without_a_front_door(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    text = configmap(rendered["ring-ll-2-nodes"], "config")["data"]["fastverifyd.toml"]
    assert tomllib.loads(text)["frontdoor"]["mode"] == "off"
    one = configmap(rendered["ring-ll"], "config")["data"]["fastverifyd.toml"]
    assert tomllib.loads(one)["frontdoor"]["mode"] == "hold"


# --------------------------------------------------------------- the projects' own CRDs
# The LeaderWorkerSet and Prometheus Operator CRDs as their projects publish them (release
# YAML) live in the steering repository's shared/ (this workplace keeps files fetched from
# GitHub out of the project): ../shared/k8s-crds/<name>.yaml plus a README giving each
# file's project, release and URL ($FASTVERIFY_K8S_CRDS names another folder). CI has
# them beside the clone: a missing CRD is a failure, never a skip.
SHARED_CRDS = Path(os.environ.get("FASTVERIFY_K8S_CRDS") or REPO.parent / "shared" / "k8s-crds")


def _crd_schemas(kind: str) -> dict[str, Any]:
    """version name -> openAPIV3Schema for `kind`, from the CRD files in SHARED_CRDS."""
    found: dict[str, Any] = {}
    for path in sorted(SHARED_CRDS.glob("*.y*ml")):
        for crd in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            if crd["spec"]["names"]["kind"] != kind:
                continue
            for version in crd["spec"]["versions"]:
                found[version["name"]] = version["schema"]["openAPIV3Schema"]
    return found


def _strict(schema: Any) -> Any:
    """The API server's view: a field a structural schema does not declare is unknown
    (kubectl --validate=strict refuses it) unless the schema preserves unknown fields."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@pytest.mark.parametrize("kind", ["LeaderWorkerSet", "PodMonitor"])
def test_crd_objects_validate_against_their_projects_crds(
    rendered: dict[str, list[dict[str, Any]]], kind: str
) -> None:
    import jsonschema

    schemas = _crd_schemas(kind)
    assert schemas, f"no CRD for {kind} in {SHARED_CRDS} (shared/k8s-crds/README.md lists them)"
    objs = [d for key in RENDERS for d in by_kind(rendered[key], kind)]
    assert len(objs) >= 2, kind  # more than one render of each kind is checked
    for obj in objs:
        version = obj["apiVersion"].split("/")[-1]
        assert version in schemas, f"{kind} {version} is not served by the CRD ({sorted(schemas)})"
        validator = jsonschema.Draft7Validator(_strict(schemas[version]))
        errors = sorted(validator.iter_errors(obj), key=str)
        assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])
    bad = json.loads(json.dumps(objs[0]))
    bad["spec"]["fastverifyMisspelt"] = 1  # the check is a real one: an unknown field fails
    assert list(jsonschema.Draft7Validator(_strict(schemas[version])).iter_errors(bad))


def test_web_config_secret_is_mounted_for_the_metrics(tmp_path: Path) -> None:
    out = tmp_path / "out"
    info = render(out, "--web-config-secret", "fv-web")
    objs = docs(out)
    pod = pod_templates(objs)["server"]["spec"]
    vol = [v for v in pod["volumes"] if v["name"] == "web-config"]
    assert vol == [{"name": "web-config", "secret": {"secretName": "fv-web", "defaultMode": 0o440}}]
    mounts = [m for c in pod["containers"] for m in c["volumeMounts"] if m["name"] == "web-config"]
    assert mounts == [{"name": "web-config", "mountPath": "/etc/fastverify/web", "readOnly": True}]
    cfg_path = tmp_path / "fastverifyd.toml"
    cfg_path.write_text(configmap(objs, "config")["data"]["fastverifyd.toml"])
    assert configmod.load(cfg_path).exporter.web_config_file == "/etc/fastverify/web/web-config.yml"
    endpoint = one(objs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    assert endpoint["scheme"] == "https"
    assert any("--web-config-secret fv-web" in n for n in info["notes"]), info["notes"]
    plain = tmp_path / "plain"
    render(plain)
    pod = pod_templates(docs(plain))["server"]["spec"]
    assert not [v for v in pod["volumes"] if v["name"] == "web-config"]
    assert "scheme" not in one(docs(plain), "PodMonitor")["spec"]["podMetricsEndpoints"][0]
