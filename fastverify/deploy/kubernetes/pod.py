"""The pod's side of a Kubernetes render: where things live inside the pod (the image's
layout, Dockerfile), its ports, and the fastverifyd configuration every pod runs
(`pod_config`, written out by `daemon_config_text` and checked by loading it as the daemon
does), with mode adaptive's speculation plan beside it."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

from fastverify.config import Config
from fastverify.render import RenderError

CONFIG_DIR = "/etc/fastverify/k8s"
ADAPTIVE_CONFIG_KEY = "adaptive-config.json"  # mode adaptive: in the config ConfigMap
CONFIG_NAME = "fastverifyd.toml"
CONFIG = f"{CONFIG_DIR}/{CONFIG_NAME}"
DECLARED_PROFILE = "/etc/fastverify/profiles.d/declared"  # the rendered profile's files
USER_PROFILES = "/etc/fastverify/profiles.d/user"
SHIPPED_PROFILES = "/etc/fastverify/profiles.d/shipped"
STATE_DIR = "/var/lib/fastverify"
SOCKET_DIR = "/run/fastverify"
SOCKET = f"{SOCKET_DIR}/control.sock"
WEB_CONFIG_DIR = "/etc/fastverify/web"  # --web-config-secret's mount
WEB_CONFIG_KEY = "web-config.yml"
CACHE_DIR = "/var/cache/fastverify"
MODEL_DIR = "/models"
SGLANG_PORT = 30000  # the Service's port: the front door's (the engine's without one)
ENGINE_PORT = 30001  # behind the front door: the engine, on the pod's loopback only
METRICS_PORT = 9464
HEALTH_PORT = 8081
DIST_PORT = 20000  # SGLang's torch.distributed rendezvous on the leader (--dist-init-addr)
PROBE_PERIOD_S = 10


def adaptive_config_text(
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


def daemon_config_text(cfg: Config, source: str) -> str:
    """The pod's fastverifyd.toml: every key of `cfg`, spelled out (None values omitted)."""
    from fastverify import config as configmod

    return configmod.dumps(cfg, [
        "fastverifyd configuration of a Kubernetes pod, rendered by `fastverifyctl render",
        f"kubernetes` from {source}. Declarative: the profile and mode below are the",
        "manifest's (docs/guides/kubernetes.md); change them by rendering and applying again.",
    ])  # fmt: skip


def pod_config(
    cfg: Config, profile: str, mode: str, nodes: int, gpus: int, web_config: bool = False
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
        declarative=True,
        default_profile=profile,
        profile_dirs=(DECLARED_PROFILE, USER_PROFILES, SHIPPED_PROFILES),
    )
    api = dataclasses.replace(
        cfg.api,
        socket=SOCKET,
        socket_group="",  # the pod's user owns the socket (mode 0660); kubectl exec is it
        tcp_listen="",
        token_file="",
    )
    exporter = dataclasses.replace(
        cfg.exporter,
        metrics_listen=f"0.0.0.0:{METRICS_PORT}",
        web_config_file=f"{WEB_CONFIG_DIR}/{WEB_CONFIG_KEY}" if web_config else "",
        health_listen=f"0.0.0.0:{HEALTH_PORT}",
    )
    frontdoor = dataclasses.replace(
        cfg.frontdoor,
        # the front door of one pod holds its clients through a switch; across nodes the
        # engine is one server on the leader, and a front door per pod is not built
        mode="off" if nodes > 1 else cfg.frontdoor.mode,
        engine_port=ENGINE_PORT,
    )
    return dataclasses.replace(
        cfg, server=server, daemon=daemon, api=api, exporter=exporter, frontdoor=frontdoor
    )


def check_loads(text: str, nodes: int) -> None:
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
