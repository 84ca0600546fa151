"""The Kubernetes manifests' SGLang facts against the real sglang==0.5.23.

A LeaderWorkerSet pod runs `fastverifyd --config ... --nnodes $(LWS_GROUP_SIZE) --node-rank
$(LWS_WORKER_INDEX) --dist-init-addr $(LWS_LEADER_ADDRESS):20000`; the kubelet substitutes
the variables LWS's controller (kubernetes-sigs/lws v0.10.0, pkg/utils/pod/pod_utils.go
AddLWSVariables) puts in every container, the daemon loads the rendered configuration with
those flags (its own parse_args/overrides/config.load) and builds SGLang's argv. That argv,
for the leader and for a worker, goes through SGLang's own `prepare_server_args` in the
contract venv: the multi-node arguments must arrive as SGLang reads them. The cache
variables the pod configuration sets must be the ones SGLang 0.5.23 reads.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fastverify import config as configmod
from fastverify.daemon import main as daemon_main
from fastverify.deploy.kubernetes.options import KubeOptions
from fastverify.deploy.kubernetes.render import render
from fastverify.engines.sglang import SGLangEngine
from fastverify.profiles.store import ProfileStore
from fastverify.sglang.envrules import engine_env
from fastverify.sglang.launch import LaunchArgs
from fastverify.sglang.versions import PINNED_VERSION
from tests.support.contract import run_probe

GROUP = 3  # the LWS group (replica) index of the pods whose argv is built
LEADER_ADDRESS = "fastverify-3.fastverify.llm"  # the controller's value for that group


def lws_env(lws: dict[str, Any], worker_index: int) -> dict[str, str]:
    """The variables LWS v0.10.0's controller sets in a pod of `lws` (AddLWSVariables):
    LWS_LEADER_ADDRESS = <lws>-<group>.<subdomain>.<namespace>, the subdomain being the
    headless Service named after the LWS (SubdomainShared, the default without
    spec.networkConfig); LWS_GROUP_SIZE = spec.leaderWorkerTemplate.size."""
    assert "networkConfig" not in lws["spec"]  # the shared subdomain: the LWS's own name
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    return {
        "LWS_LEADER_ADDRESS": f"{name}-{GROUP}.{name}.{namespace}",
        "LWS_GROUP_SIZE": str(lws["spec"]["leaderWorkerTemplate"]["size"]),
        "LWS_WORKER_INDEX": str(worker_index),
    }


def kubelet_expand(arg: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion of container args (variables of the container)."""
    return re.sub(r"\$\(([A-Za-z_]\w*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def pod_argvs(tmp_path: Path, nodes: int) -> dict[str, list[str]]:
    """SGLang's argv (without interpreter) per pod role, built as the pod's daemon does."""
    bundle = render(KubeOptions(profile="ring-ll", nodes=nodes, image="fastverify:test",
                                namespace="llm", rdma=("rdma/ib=1",)))  # fmt: skip
    objs = [d for text in bundle.files.values() for d in yaml.safe_load_all(text) if d]
    lws_objs = [d for d in objs if d["kind"] == "LeaderWorkerSet"]
    # LWS's controller creates the headless Service <lws> only if the name is free
    for lws in lws_objs:
        services = [d["metadata"]["name"] for d in objs if d["kind"] == "Service"]
        assert lws["metadata"]["name"] not in services, services
    (config,) = [d for d in objs if d["metadata"]["labels"].get("fastverify/configmap") == "config"]
    config_text = config["data"]["fastverifyd.toml"]
    config_path = tmp_path / "fastverifyd.toml"
    config_path.write_text(config_text, encoding="utf-8")
    roles: dict[str, dict[str, Any]] = {}
    for d in objs:
        if d["kind"] == "Deployment":
            roles["server"] = d["spec"]["template"]
        if d["kind"] == "LeaderWorkerSet":
            roles["leader"] = d["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
            roles["worker"] = d["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    store = ProfileStore(user_dirs=[])
    profile = store.load("ring-ll")
    out = {}
    for role, template in roles.items():
        (container,) = template["spec"]["containers"]
        env = lws_env(lws_objs[0], 0 if role == "leader" else 1) if lws_objs else {}
        args = [kubelet_expand(a, env) for a in container["args"]]
        assert not any("$(" in a for a in args), args  # every variable is one LWS sets
        args[args.index("--config") + 1] = str(config_path)
        ns = daemon_main.parse_args(args)
        cfg = configmod.load(ns.config, daemon_main.overrides(ns))
        engine = SGLangEngine("python-not-used", flags="new")
        out[role] = engine.build_argv(cfg.server, cfg.server.mode, profile.requires)[3:]
        out[f"{role}:env"] = {k: v for k, v in profile.env.items() if k.startswith("NCCL_")}
    return out


@pytest.fixture(scope="module")
def facts(sglang_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    argvs = {
        **pod_argvs(tmp_path_factory.mktemp("two"), 2),
        **pod_argvs(tmp_path_factory.mktemp("one"), 1),
    }
    roles = [r for r in argvs if ":" not in r]
    out = run_probe(
        sglang_python, {"argvs": [{"argv": argvs[r], "env": argvs[f"{r}:env"]} for r in roles]}
    )
    return {"argv": argvs, "real": dict(zip(roles, out["argvs"], strict=True))}


@pytest.mark.parametrize(("role", "rank"), [("leader", 0), ("worker", 1)])
def test_multi_node_args_reach_sglang(facts: dict[str, Any], role: str, rank: int) -> None:
    real = facts["real"][role]
    assert real["parsed"], real.get("error")
    assert (real["nnodes"], real["node_rank"]) == (2, rank)
    assert real["dist_init_addr"] == f"{LEADER_ADDRESS}:20000"
    assert real["tp_size"] == 16  # 8 GPUs on each of the 2 nodes
    assert (real["host"], real["port"]) == ("0.0.0.0", 30000)
    ours = LaunchArgs.from_argv(facts["argv"][role])
    assert (ours.nnodes, ours.node_rank, ours.dist_init_addr) == (
        real["nnodes"],
        real["node_rank"],
        real["dist_init_addr"],
    )
    assert ours.follower is (rank >= 1)
    # the NCCL environment SGLang's schedulers inherit == the rules' prediction
    env = facts["argv"][f"{role}:env"]
    assert real["env"] == engine_env(ours, env, PINNED_VERSION).final(env)


def test_single_node_pod_has_no_multi_node_args(facts: dict[str, Any]) -> None:
    real = facts["real"]["server"]
    assert real["parsed"], real.get("error")
    assert (real["nnodes"], real["node_rank"], real["tp_size"]) == (1, 0, 8)
    assert "--nnodes" not in facts["argv"]["server"]


CACHE_PROBE = """
import json, os, warnings
warnings.filterwarnings("ignore")
os.environ["SGLANG_CACHE_DIR"] = "/var/cache/fastverify/sglang"
from sglang.srt.environ import envs, third_party_cache_defaults
print(json.dumps({"cache_dir": envs.SGLANG_CACHE_DIR.get(),
                  "defaults": third_party_cache_defaults()}))
"""


def test_pod_cache_variables_are_sglangs(sglang_python: Path) -> None:
    out = subprocess.run(
        [str(sglang_python), "-c", CACHE_PROBE],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    real = json.loads(out.stdout.strip().splitlines()[-1])
    assert real["cache_dir"] == "/var/cache/fastverify/sglang"
    # SGLang derives FlashInfer's workspace base (and Triton's, Inductor's, CUDA's caches)
    # from SGLANG_CACHE_DIR: the pod's explicit FLASHINFER_WORKSPACE_BASE says the same
    bundle = render(KubeOptions(profile="ring-ll", image="fastverify:test"))
    assert f'FLASHINFER_WORKSPACE_BASE = "{real["defaults"]["FLASHINFER_WORKSPACE_BASE"]}"' in (
        bundle.plan.config_text
    )
