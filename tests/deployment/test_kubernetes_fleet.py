"""`render kubernetes` on a real cluster: names LWS leaves free, RDMA for multi-node,
scheduling from flags or a values file, monitoring a kube-prometheus-stack finds, objects
`kubectl apply` takes (Namespace, PVC, sizes), GitOps pruning and decision records, and
pcie-ipc refused where it cannot serve (more than one node).

The schemas of every render here are checked in test_kubernetes.py (strict, 1.33 and the
newest, the projects' CRDs); these tests check what the objects say.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.harness import run_ctl
from tests.support.kube import by_kind, ctl, docs, one, pod_templates, render

KEEP = {
    "argocd.argoproj.io/sync-options": "Prune=false",
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}


def rendered(tmp_path: Path, *args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    out = tmp_path / "out"
    info = render(out, *args)
    return docs(out), info


def container(template: dict[str, Any]) -> dict[str, Any]:
    (c,) = template["spec"]["containers"]
    return c


@pytest.mark.parametrize("name", ["fastverify", "llm"])
def test_no_service_is_named_like_the_leaderworkerset(tmp_path: Path, name: str) -> None:
    """LWS's controller creates the headless Service <lws> (the pods' subdomain, part of
    LWS_LEADER_ADDRESS) only if that name is free: a rendered Service of that name breaks
    the group's DNS."""
    objs, info = rendered(tmp_path, "--name", name, "--nodes", "2", "--rdma", "rdma/ib=1")
    lws = one(objs, "LeaderWorkerSet")
    services = [d["metadata"]["name"] for d in by_kind(objs, "Service")]
    assert services and lws["metadata"]["name"] not in services, services
    assert f"{name}-leader" in services
    assert any("headless Service LWS's controller creates" in n for n in info["notes"])


def test_two_nodes_with_rdma_get_ipc_lock_and_the_resource(tmp_path: Path) -> None:
    objs, info = rendered(tmp_path, "--profile", "ring-ll", "--nodes", "2", "--rdma",
                          "rdma/ib=2", "--rdma", "rdma/hca_shared_devices_a")  # fmt: skip
    for template in pod_templates(objs).values():
        c = container(template)
        for side in ("requests", "limits"):
            res = c["resources"][side]
            assert (res["rdma/ib"], res["rdma/hca_shared_devices_a"]) == (2, 1), res
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert "hostNetwork" not in template["spec"]
        # IPC_LOCK is effective for root only (a non-root uid's CapEff stays 0 under
        # containerd and CRI-O): the pod runs as uid 0 with that one capability
        psc = template["spec"]["securityContext"]
        assert (psc["runAsUser"], psc["runAsNonRoot"]) == (0, False), psc
    assert any(n.startswith("RDMA: the pods run as root (uid 0) with only IPC_LOCK")
               for n in info["notes"])  # fmt: skip
    # a non-root uid is refused for RDMA pods (its IPC_LOCK would do nothing), unless --force
    args = ("--output-dir", str(tmp_path / "uid"), "--image", "registry.example.com/fv:1",
            "--nodes", "2", "--rdma", "rdma/ib=1", "--run-as-user", "1000")  # fmt: skip
    r = ctl("render", "kubernetes", *args)
    assert r.returncode == 2, r.stderr
    assert "--run-as-user 1000 with RDMA: IPC_LOCK added for a non-root uid is not effective" in (
        r.stderr
    )
    assert not (tmp_path / "uid").exists()
    forced = ctl("render", "kubernetes", *args, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert any("unlimited memlock limit" in n for n in json.loads(forced.stdout)["notes"])
    # over TCP (accepted on request): no RDMA, no capability
    objs, info = rendered(tmp_path / "tcp", "--nodes", "2", "--allow-tcp")
    for template in pod_templates(objs).values():
        c = container(template)
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert not [r for r in c["resources"]["limits"] if r.startswith("rdma/")]
    assert any("--allow-tcp" in n and "TCP sockets" in n for n in info["notes"])


def test_a_values_file_and_flags_schedule_the_pods(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "# as a Helm user writes it\n"
        "tolerations:\n  - {key: dedicated, operator: Equal, value: llm, effect: NoSchedule}\n"
        "nodeSelector:\n  nvidia.com/gpu.product: NVIDIA-H200\n  pool: a\n"
        "runtimeClassName: nvidia\npriorityClassName: llm-serving\n"
        "imagePullSecrets: [registry-creds, {name: other}]\n"
        "podLabels: {team: llm}\npodAnnotations: {example.com/owner: llm@example.com}\n"
        "exclusiveTopology: example.com/block\nhostNetwork: true\n"
        "rdmaResources: {rdma/ib: 1}\nmonitorLabels: {prometheus: main}\n"
    )
    objs, info = rendered(
        tmp_path, "--profile", "ring-ll", "--nodes", "2", "--values", str(values),
        "--node-selector", "pool=b", "--toleration", "spot:NoExecute", "--label", "env=prod",
        "--runtime-class", "nvidia-cdi",
    )  # fmt: skip
    lws = one(objs, "LeaderWorkerSet")
    assert lws["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"] == (
        "example.com/block"
    )
    for template in pod_templates(objs).values():
        spec = template["spec"]
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
        ]
        # flags win over the file's scalars and add to its maps
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "b"}
        assert spec["runtimeClassName"] == "nvidia-cdi"
        assert spec["priorityClassName"] == "llm-serving"
        assert spec["imagePullSecrets"] == [{"name": "registry-creds"}, {"name": "other"}]
        assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
        labels = template["metadata"]["labels"]
        assert (labels["team"], labels["env"]) == ("llm", "prod")
        assert template["metadata"]["annotations"]["example.com/owner"] == "llm@example.com"
        assert container(template)["resources"]["limits"]["rdma/ib"] == 1
    assert one(objs, "PodMonitor")["metadata"]["labels"]["prometheus"] == "main"
    assert "release" not in one(objs, "PodMonitor")["metadata"]["labels"]
    # pinned by a nodeSelector: no warning; hostNetwork without NCCL_SOCKET_IFNAME: a note
    assert not [n for n in info["notes"] if n.startswith("UNPINNED")]
    assert any("NCCL_SOCKET_IFNAME" in n for n in info["notes"])


def test_monitoring_defaults_match_kube_prometheus_stack(tmp_path: Path) -> None:
    objs, _ = rendered(tmp_path, "--profile", "ring-ll")
    pm = one(objs, "PodMonitor")
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # the chart's Grafana sidecar finds datasources only in Grafana's namespace
    for cm in ("fastverify-datasource", "fastverify-dashboards"):
        assert one(objs, "ConfigMap", cm)["metadata"]["namespace"] == "monitoring"
    # a ServiceMonitor (and the Service it needs) instead, with other labels
    objs, _ = rendered(tmp_path / "sm", "--monitor", "servicemonitor", "--monitor-label",
                       "prometheus=main", "--grafana-namespace", "grafana")  # fmt: skip
    assert not by_kind(objs, "PodMonitor")
    sm = one(objs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["prometheus"] == "main"
    assert "release" not in sm["metadata"]["labels"]
    metrics = one(objs, "Service", "fastverify-metrics")
    assert sm["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert metrics["spec"]["selector"].items() <= pod_labels.items()
    assert metrics["spec"]["ports"][0]["targetPort"] == "metrics"
    assert one(objs, "ConfigMap", "fastverify-datasource")["metadata"]["namespace"] == "grafana"
    objs, _ = rendered(tmp_path / "none", "--monitor", "none", "--no-grafana")
    assert not by_kind(objs, "PodMonitor") and not by_kind(objs, "ServiceMonitor")
    assert not [d for d in by_kind(objs, "ConfigMap") if "grafana" in str(d["metadata"])]
    assert not (tmp_path / "none" / "out" / "50-grafana.yaml").exists()


def test_apply_ready_namespace_and_model_claim(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render(out, "--namespace", "llm", "--replicas", "3", "--model-storage-class", "nfs",
           "--model-size", "500Gi")  # fmt: skip
    files = sorted(p.name for p in out.glob("*.yaml"))
    assert files[0] == "00-namespace.yaml"  # `kubectl apply -f DIR` creates it first
    objs = docs(out)
    assert one(objs, "Namespace")["metadata"]["name"] == "llm"
    pvc = one(objs, "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == "fastverify-models"
    assert pvc["spec"]["accessModes"] == ["ReadOnlyMany"]  # 3 pods mount it
    assert pvc["spec"]["storageClassName"] == "nfs"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "500Gi"
    assert pvc["metadata"]["annotations"].items() >= KEEP.items()
    # an existing claim: mounted, not rendered; no Namespace when it is managed elsewhere
    render(out, "--model-pvc", "weights", "--no-namespace")
    objs = docs(out)
    assert not by_kind(objs, "PersistentVolumeClaim") and not by_kind(objs, "Namespace")
    volumes = one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"claimName": "weights", "readOnly": True} in [
        v.get("persistentVolumeClaim") for v in volumes
    ]


def test_content_named_configmaps_survive_gitops_pruning(tmp_path: Path) -> None:
    objs, _ = rendered(tmp_path, "--profile", "ring-ll")
    for cm in by_kind(objs, "ConfigMap"):
        role = cm["metadata"]["labels"].get("fastverify/configmap")
        kept = cm["metadata"].get("annotations", {}).items() >= KEEP.items()
        # exactly the hash-named ones (a pod template of an older revision names them)
        assert kept == (role in ("config", "profile-declared")), cm["metadata"]["name"]


def test_an_object_over_client_side_apply_is_refused_by_name(tmp_path: Path) -> None:
    """16 user profiles with tuner tables (199 KB in a real fleet, here 16 x 20 KB) make one
    ConfigMap larger than client-side apply's annotation can hold."""
    user = tmp_path / "profiles"
    user.mkdir()
    rows = "".join(f"AllReduce,{i * 64},{i * 64 + 63},Ring,LL,-1,8,1\n" for i in range(640))
    for i in range(16):
        (user / f"t{i}.tuner.csv").write_text(
            "collective,min_bytes,max_bytes,algorithm,protocol,channels,nranks,nnodes\n" + rows
        )
        (user / f"t{i}.env").write_text(f"# extends: nccl-default\nFASTVERIFY_TUNER_TABLE=t{i}"
                                        ".tuner.csv\n")  # fmt: skip
    out = tmp_path / "out"
    args = ("render", "kubernetes", "--output-dir", str(out), "--image", "fastverify:test",
            "--profile", "ring-ll", "--profile-dir", str(user))  # fmt: skip
    r = ctl(*args)
    assert r.returncode == 2, r.stderr
    assert "ConfigMap fastverify-profiles-user (05-configmaps.yaml" in r.stderr, r.stderr
    assert "--server-side" in r.stderr and not out.exists()
    r = ctl(*args, "--server-side")
    assert r.returncode == 0, r.stderr
    assert "fastverify-profiles-user" in r.stderr and "kubectl apply --server-side" in r.stderr
    user_cm = [d for d in docs(out) if d["metadata"]["name"] == "fastverify-profiles-user"]
    assert len(json.dumps(user_cm[0])) > 256 * 1024  # the guard measured a real excess


def decision_file(tmp_path: Path, applied: Any, backend: str = "nccl") -> Path:
    path = tmp_path / "decision.json"
    path.write_text(json.dumps({
        "decision": {"profile": "ring-ll", "mode": "baseline", "backend": backend,
                     "applied": applied, "why": "rehearse failed: NCCL timeout"},
        "stages": [],
    }))  # fmt: skip
    return path


def test_a_decision_tune_did_not_apply_needs_force(tmp_path: Path) -> None:
    path = decision_file(tmp_path, applied=False)
    out = tmp_path / "out"
    r = ctl("render", "kubernetes", "--output-dir", str(out), "--image", "fastverify:test",
            "--from-decision", str(path))  # fmt: skip
    assert r.returncode == 2 and not out.exists(), r.stderr
    assert '"applied": false' in r.stderr and "rehearse failed" in r.stderr
    assert "--force" in r.stderr
    info = render(out, "--from-decision", str(path), "--force")
    assert any("because of --force" in n for n in info["notes"])
    ann = one(docs(out), "Deployment")["metadata"]["annotations"]
    assert ann["fastverify/decision-sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    # measured on one host's topology, and not pinned to such nodes: said
    assert any(n.startswith("UNPINNED: tune decided ring-ll") for n in info["notes"])


def test_a_decision_records_its_host_fingerprint_and_checks_the_pinned_hardware(
    tmp_path: Path,
) -> None:
    """tune's decision.json carries the host fingerprint (fastverify.host.fingerprint): the
    render records its id and says when the pods are pinned to other GPUs, or none."""
    path = tmp_path / "decision.json"
    fp = {"id": "3f2a9c0d11e4b7a6", "facts": {"gpu_model": "NVIDIA H200", "gpu_count": 2}}
    path.write_text(json.dumps({
        "decision": {"profile": "ring-ll", "mode": "baseline", "backend": "nccl",
                     "applied": True, "why": "measured"},
        "stages": [], "fingerprint": fp,
    }))  # fmt: skip
    base = ("--from-decision", str(path), "--gpus-per-node", "2")
    objs, info = rendered(tmp_path / "a", *base)
    ann = one(objs, "Deployment")["metadata"]["annotations"]
    assert ann["fastverify/host-fingerprint"] == "3f2a9c0d11e4b7a6"
    unpinned = [n for n in info["notes"] if n.startswith("UNPINNED")]
    assert unpinned and "nvidia.com/gpu.product=NVIDIA-H200" in unpinned[0]
    _, info = rendered(tmp_path / "b", *base, "--node-selector",
                       "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")  # fmt: skip
    assert any(n.startswith("HARDWARE MISMATCH") and "NVIDIA-H100-80GB-HBM3" in n
               and "3f2a9c0d11e4b7a6" in n for n in info["notes"]), info["notes"]  # fmt: skip
    _, info = rendered(tmp_path / "c", *base, "--node-selector", "pool=gpu")
    assert any(n.startswith("NOT PINNED TO THE MEASURED HARDWARE") for n in info["notes"])
    _, info = rendered(tmp_path / "d", *base, "--node-selector",
                       "nvidia.com/gpu.product=NVIDIA-H200")  # fmt: skip
    assert not [n for n in info["notes"] if "PINNED" in n or "MISMATCH" in n], info["notes"]
    _, info = rendered(tmp_path / "e", "--from-decision", str(path), "--gpus-per-node", "8",
                       "--node-selector", "nvidia.com/gpu.product=NVIDIA-H200")  # fmt: skip
    assert any("with 2 GPU(s), the pods get 8" in n for n in info["notes"]), info["notes"]


def test_a_pcie_only_profile_unpinned_is_said(tmp_path: Path) -> None:
    _, info = rendered(tmp_path, "--profile", "pcie-ipc")
    assert any(n.startswith("UNPINNED: pcie-ipc is for one topology") for n in info["notes"])
    _, info = rendered(tmp_path / "pinned", "--profile", "pcie-ipc", "--node-selector",
                       "example.com/gpu-link=pcie")  # fmt: skip
    assert not [n for n in info["notes"] if n.startswith("UNPINNED")]
    _, info = rendered(tmp_path / "any", "--profile", "nccl-default")
    assert not [n for n in info["notes"] if n.startswith("UNPINNED")]


def test_render_pcie_ipc_over_two_nodes_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "k8s"
    # --image and RDMA (required, and a multi-node render needs RDMA): what is
    # refused here is the all-reduce backend alone
    fleet = ("--image", "registry.example.com/fastverify:test", "--rdma", "rdma/ib=1")
    r = run_ctl("render", "kubernetes", "--profile", "pcie-ipc", "--nodes", "2", *fleet,
                "--output-dir", str(out))  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert not out.exists()
    assert "SGLang TP 16" not in r.stdout
    err = r.stderr
    assert "at SGLang TP 16 (2 nodes x 8 GPUs) every all-reduce would be NCCL" in err, err
    assert "2/4/8 ranks only" in err and "--force" in err
    # the same fact `profile show --effective` gives at that world size
    show = run_ctl("profile", "show", "pcie-ipc", "--effective", "--tp-size", "16")
    assert "all all-reduces: NCCL" in show.stdout and "2/4/8 ranks only" in show.stdout
    # two nodes of 4 GPUs: world size 8, but IPC does not cross nodes
    r4 = run_ctl("render", "kubernetes", "--profile", "pcie-ipc", "--nodes", "2", *fleet,
                 "--gpus-per-node", "4", "--output-dir", str(out))  # fmt: skip
    assert r4.returncode == 2 and "one node only" in r4.stderr, r4.stderr
    assert not out.exists()
    # --force renders it, with the note naming what will serve
    f = run_ctl("render", "kubernetes", "--profile", "pcie-ipc", "--nodes", "2", "--force",
                *fleet, "--output-dir", str(out))  # fmt: skip
    assert f.returncode == 0, f.stderr
    assert re.search(r"note: .*every all-reduce would be NCCL", f.stderr), f.stderr
    # one node of 8, pinned to PCIe-only nodes (else the render says it is unpinned):
    # PCIe-IPC serves, no note
    ok = run_ctl("render", "kubernetes", "--profile", "pcie-ipc", "--output-dir",
                 str(tmp_path / "one"), "--image", "registry.example.com/fastverify:test",
                 "--node-selector", "example.com/gpu-link=pcie")  # fmt: skip
    assert ok.returncode == 0 and "note:" not in ok.stderr, ok.stderr


def test_values_file_problems_name_the_file_and_key(tmp_path: Path) -> None:
    cases = {
        "tolerations: [{key: a, effect: Sometimes}]\n": "effect 'Sometimes'",
        "podLabels: {tier: [a]}\n": "tier=\"['a']\"",
        "hostNetwork: yes-please\n": "hostNetwork: expected true or false",
        "rdmaResources: {rdma/ib: 0}\n": "must be a positive integer",
        "- a list\n": "expected a mapping",
    }
    for text, says in cases.items():
        values = tmp_path / "v.yaml"
        values.write_text(text)
        r = ctl("render", "kubernetes", "--output-dir", str(tmp_path / "o"), "--image", "x:1",
                "--values", str(values))  # fmt: skip
        assert r.returncode == 2, (text, r.stderr)
        assert str(values) in r.stderr and says in r.stderr, (text, r.stderr)


def test_rendered_files_are_plain_yaml_documents(tmp_path: Path) -> None:
    """Every file parses as YAML with kind, name and namespace (where namespaced)."""
    out = tmp_path / "out"
    render(out, "--nodes", "2", "--rdma-devices", "--monitor", "servicemonitor")
    for path in out.glob("*.yaml"):
        for d in yaml.safe_load_all(path.read_text()):
            assert d["kind"] and d["metadata"]["name"], path
            if d["kind"] != "Namespace":
                assert d["metadata"]["namespace"], (path, d["metadata"])


GOOD_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                   "values": ["NVIDIA-H200"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [
                {"key": "pool", "operator": "Exists"}]}}],
    },
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                           "labelSelector": {"matchLabels": {"a": "b"}}}}]},
}  # fmt: skip


def _pod_with(affinity: dict[str, Any]) -> dict[str, Any]:
    spec = {"containers": [{"name": "c", "image": "i"}], "affinity": affinity}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


@pytest.mark.parametrize(
    ("bad", "said", "schema_refuses"),
    [
        ({"nodeAfinity": GOOD_AFFINITY["nodeAffinity"]},
         "affinity: unknown field 'nodeAfinity' (did you mean nodeAffinity?)", True),
        ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "in"}]}]}}},
         "nodeSelectorTerms[0].matchExpressions[0].operator: 'in' (expected one of In, NotIn",
         False),
        ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]}}},
         "matchExpressions[0].values: must be specified when `operator` is 'In' or 'NotIn'",
         False),
        ({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"a": "b"}}}]}},
         "requiredDuringSchedulingIgnoredDuringExecution[0]: topologyKey is required", True),
    ],
)  # fmt: skip
def test_a_values_affinity_is_checked_as_the_api_server_would(
    tmp_path: Path, bad: dict[str, Any], said: str, schema_refuses: bool
) -> None:
    """Each refused by the API server: by its OpenAPI schema (strict: unknown and required
    fields), or by its own selector validation (ValidateNodeSelectorRequirement: the
    operators and their values), which the schema does not carry."""
    import kubernetes_validate

    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"affinity": bad}))
    r = ctl("render", "kubernetes", "--output-dir", str(tmp_path / "out"), "--image",
            "registry.example.com/fv:1", "--values", str(values))  # fmt: skip
    assert r.returncode == 2 and said in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
    if schema_refuses:  # the real schema agrees
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(_pod_with(bad), "1.33.0", strict=True)


def test_a_good_affinity_pins_and_the_output_says_layout_and_prerequisites(
    tmp_path: Path,
) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(_pod_with(GOOD_AFFINITY), "1.33.0", strict=True)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"affinity": GOOD_AFFINITY}))
    out = tmp_path / "out"
    image = ("--image", "registry.example.com/fv:1")
    r = ctl("render", "kubernetes", "--output-dir", str(out), *image, "--values", str(values),
            "--profile", "pcie-ipc", "--mode", "eagle3", "--model-path", "Kimi-K2.5",
            "--draft-model-path", "/models/Kimi-K2.5-eagle3")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "UNPINNED" not in r.stderr  # a required node affinity pins the pcie-ipc pods
    maps = [d["data"] for d in docs(out) if d["kind"] == "ConfigMap"]
    config = next(m["fastverifyd.toml"] for m in maps if "fastverifyd.toml" in m)
    assert 'model_path = "/models/Kimi-K2.5"' in config
    assert 'draft_model_path = "/models/Kimi-K2.5-eagle3"' in config
    assert (
        "the model volume must hold: /models/Kimi-K2.5 (the model: --model-path, "
        "server.model_path); /models/Kimi-K2.5-eagle3 (the EAGLE-3 drafter"
    ) in r.stdout
    nxt = next(x for x in r.stdout.splitlines() if "; next: kubectl apply" in x)
    assert "needs: the Prometheus Operator's PodMonitor CRD (monitoring.coreos.com/v1" in nxt
    assert "the namespace monitoring (Grafana's sidecar" in nxt, nxt
    # only a preferred node affinity does not pin
    preferred = "preferredDuringSchedulingIgnoredDuringExecution"
    only = {"nodeAffinity": {preferred: GOOD_AFFINITY["nodeAffinity"][preferred]}}
    values.write_text(yaml.safe_dump({"affinity": only}))
    r = ctl("render", "kubernetes", "--output-dir", str(out), *image, "--values", str(values),
            "--profile", "pcie-ipc")  # fmt: skip
    assert r.returncode == 0 and "UNPINNED" in r.stderr, r.stderr
    r = ctl("render", "kubernetes", "--output-dir", str(tmp_path / "x"), "--image",
            "registry.example.com/fv:1", "--model-path", "/data/model")  # fmt: skip
    assert r.returncode == 2 and "the model volume is mounted at /models" in r.stderr


def test_mode_adaptive_says_it_comes_with_from_decision(tmp_path: Path) -> None:
    r = ctl("render", "kubernetes", "--output-dir", str(tmp_path / "out"), "--image",
            "registry.example.com/fv:1", "--mode", "adaptive")  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "--mode adaptive without --from-decision: mode adaptive serves a speculation plan" in (
        r.stderr
    )
    assert "render --from-decision with the decision.json of a tune that chose adaptive" in (
        r.stderr
    )


def test_a_profile_that_failed_on_this_host_is_noted(tmp_path: Path) -> None:
    from tests.support.harness import DaemonHarness

    with DaemonHarness(tmp_path / "d", metrics=False) as d:
        assert d.ctl("profile", "set", "tree-ll").returncode == 1  # CUDA-graph capture
        r = d.ctl("render", "kubernetes", "--output-dir", str(tmp_path / "out"), "--image",
                  "registry.example.com/fv:1", "--profile", "tree-ll")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "note: tree-ll/baseline failed on this host's daemon 1 time(s), last at " in r.stderr
    assert ": cuda_graph_capture (" in r.stderr and "pods on the same GPUs" in r.stderr
