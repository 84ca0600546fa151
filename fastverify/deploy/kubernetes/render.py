"""Render the Kubernetes manifests of a fleet from the daemon configuration.

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
import tempfile
from pathlib import Path
from typing import Any

from fastverify import paths
from fastverify.config import Config
from fastverify.deploy.kubernetes import guards, inputs, manifests, placement
from fastverify.deploy.kubernetes import pod as podmod
from fastverify.deploy.kubernetes.options import KubeOptions
from fastverify.deploy.kubernetes.plan import Bundle
from fastverify.durable import atomic_write_text
from fastverify.render import RenderError


@dataclasses.dataclass
class _Decision:
    """What --from-decision contributes: the record, its file's digest, the host
    fingerprint it was measured on."""

    record: dict[str, Any] | None = None
    sha256: str | None = None
    fingerprint: dict[str, Any] | None = None


def _from_decision(
    options: KubeOptions, notes: list[str]
) -> tuple[str | None, str | None, _Decision]:
    """(profile, mode, decision): the options', or the decision record's (which they must
    not contradict); a decision tune did not apply, or made on the sim, needs --force."""
    profile, mode = options.profile, options.mode
    path = options.from_decision
    if not path:
        return profile, mode, _Decision()
    d_profile, d_mode, decision = inputs.read_decision(path)
    for flag, given, recorded in (("--profile", profile, d_profile), ("--mode", mode, d_mode)):
        if given is not None and given != recorded:
            raise RenderError(
                f"{flag} {given} contradicts {path}: the decision is "
                f"{recorded} (drop {flag}, or render without --from-decision)"
            )
    if decision.get("applied") is not True:
        why = decision.get("why") or "no reason recorded"
        if not options.force:
            raise RenderError(
                f"{path}: tune did not apply {d_profile}/{d_mode} on its "
                f'host ("applied": {json.dumps(decision.get("applied"))}; why: {why}): a '
                "profile never served verified there is not a fleet's decision. Run tune "
                "again until it applies one, or render it anyway with --force"
            )
        notes.append(
            f"{path}: tune did not apply {d_profile}/{d_mode} on its host"
            f" ({why}); rendering it as decided because of --force"
        )
    raw = Path(path).read_bytes()  # which record, exactly: its content, not only its name
    fp = json.loads(raw).get("fingerprint")
    notes += inputs.simulated_decision(path, decision, options.force, fp)
    found = _Decision(
        decision, hashlib.sha256(raw).hexdigest(), fp if isinstance(fp, dict) else None
    )
    return d_profile, d_mode, found


def _probe_argv(
    pod_cfg: Config, loaded: Any, mode: str, generation: str, adaptive: str | None
) -> None:
    """The argv node 0 will build: eagle3 without a drafter, bad requires, ... fail here."""
    from fastverify.engines.base import EngineArgError
    from fastverify.engines.sglang import server_args

    try:
        probe = dataclasses.replace(pod_cfg.server, dist_init_addr="leader:1")
        with tempfile.TemporaryDirectory(prefix="fv-render-") as tmp:
            if adaptive is not None:  # the argv reads the config: here, a local copy
                local = Path(tmp) / podmod.ADAPTIVE_CONFIG_KEY
                local.write_text(adaptive, encoding="utf-8")
                probe = dataclasses.replace(probe, adaptive_config=str(local))
            server_args(
                probe, mode, loaded.requires, generation, probe.model_path or "/models/model"
            )
    except EngineArgError as exc:
        raise RenderError(f"{loaded.name}/{mode}: {exc}") from None


def _pod_config(options: KubeOptions, cfg: Config, loaded: Any, mode: str, gpus: int,
                adaptive: str | None) -> Config:  # fmt: skip
    """The daemon configuration of the pods, with the model paths and the plan's file."""
    pod_cfg = podmod.pod_config(
        cfg, loaded.name, mode, options.nodes, gpus, options.web_config_secret is not None
    )
    given = {
        k: v
        for k, v in (
            ("model_path", guards.in_models("--model-path", options.model_path)),
            ("draft_model_path", guards.in_models("--draft-model-path", options.draft_model_path)),
        )
        if v is not None
    }
    if adaptive is not None:  # the pod reads it from the config ConfigMap's mount
        given["adaptive_config"] = f"{podmod.CONFIG_DIR}/{podmod.ADAPTIVE_CONFIG_KEY}"
    if given:
        pod_cfg = dataclasses.replace(pod_cfg, server=dataclasses.replace(pod_cfg.server, **given))
    return pod_cfg


def _profile_sets(
    store: Any, loaded: Any, user_dirs: list[str], shipped_dir: str, notes: list[str]
) -> tuple[dict[str, bytes], dict[str, bytes], dict[str, bytes], str]:
    """(shipped, user, declared snapshot, profile checksum): the profile ConfigMaps' files.
    The declared profile's own files (it and its extends chain, as the store resolved them
    here) go in a ConfigMap named by their content: the pod searches it first."""
    from fastverify.profiles import envfile

    shipped = inputs.profile_files(shipped_dir, user=False)
    user: dict[str, bytes] = {}
    for d in user_dirs:  # the first directory wins, as in the daemon's search
        for key, content in inputs.profile_files(d, user=True).items():
            user.setdefault(key, content)
    for label, files in (("shipped", shipped), ("user", user)):
        size = sum(len(v) for v in files.values())
        if size > guards.CONFIGMAP_LIMIT:
            raise RenderError(
                f"the {label} profiles hold {size} bytes, more than one ConfigMap takes "
                f"({guards.CONFIGMAP_LIMIT}); remove unused profiles from "
                f"{user_dirs or shipped_dir}"
            )
    snapshot: dict[str, bytes] = {}
    checked: dict[str, bytes] = {}  # what the checksum covers: the snapshot and any base
    for entry in inputs.extends_chain(store, loaded.name):
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
        table = inputs.tuner_table(content)
        if entry.source == "user" and table in user:
            snapshot[table] = checked[f"{len(checked)}:{table}"] = user[table]
    return shipped, user, snapshot, inputs.checksum(checked)


def _profile_dir_hint(profile: str, searched: list[str]) -> str:
    """Where this host keeps `profile` (the directories `profile list` reads), as the
    --profile-dir to pass; else how to pass a directory of one's own."""
    from fastverify import paths
    from fastverify.config.load import operator_profile_dirs

    for d in operator_profile_dirs():
        if d not in searched and (Path(d) / f"{profile}.env").is_file():
            where = f"{paths.config_file_str()} or $FASTVERIFY_PROFILE_DIRS"
            return (
                f"\n{profile} is in {d}, a profile directory of this host ({where}) that the"
                f" pod's configuration does not name: render it with --profile-dir {d}"
            )
    return "\na profile of your own: pass its directory with --profile-dir DIR (repeatable)"


def render(options: KubeOptions) -> Bundle:
    """Every manifest for `options` (see the module docstring); RenderError when invalid."""
    from fastverify.config import MODES
    from fastverify.profiles.model import ProfileError
    from fastverify.profiles.store import ProfileStore
    from fastverify.profiles.validate import Topology
    from fastverify.sglang.versions import PINNED_VERSION, generation_for

    guards.validate_options(options)
    notes: list[str] = []
    cfg = inputs.load_config(options)
    profile, mode, decision = _from_decision(options, notes)
    profile = profile or cfg.daemon.default_profile
    mode = mode or cfg.server.mode
    if mode not in MODES:
        raise RenderError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    adaptive = podmod.adaptive_config_text(mode, decision.record, options.from_decision)

    # The image's own configuration names the pod's profile directories, not this host's: on
    # the render host only --profile-dir (or a --config-file's directories) are read.
    from_config = [] if options.config_file is None else [str(d) for d in cfg.profile_dirs]
    user_dirs = list(options.profile_dirs if options.profile_dirs is not None else from_config)
    shipped_dir = str(paths.shipped_profile_dir())
    # The render host's GPUs say nothing about the cluster's: LL128 needs --force here.
    store = ProfileStore(user_dirs=user_dirs, shipped_dir=shipped_dir,
                         topology=Topology(None, "unknown: rendering for a cluster"))  # fmt: skip
    try:
        loaded = store.load(profile, force=options.force, allow_path=False)
    except ProfileError as exc:
        problems = "\n".join(str(p) for p in exc.problems)
        hint = _profile_dir_hint(profile, user_dirs) if store.find(profile) is None else ""
        raise RenderError(f"profile {profile!r} cannot be rendered:\n{problems}{hint}") from None

    gpus = options.gpus_per_node or cfg.server.tp_size
    if backend_note := placement.allreduce_mismatch(loaded, options.nodes, gpus):
        if not options.force:
            raise RenderError(backend_note + " (or pass --force to render it anyway)")
        notes.append(backend_note)
    fleet = placement.fleet_of(options)
    pod_user, identity_notes = placement.pod_identity(options, fleet)
    notes += identity_notes
    notes += placement.network_checks(options, fleet, loaded)
    notes += placement.placement_notes(
        options, fleet, loaded, decision.record, decision.fingerprint, gpus
    )
    pod_cfg = _pod_config(options, cfg, loaded, mode, gpus, adaptive)
    if options.web_config_secret:
        notes.append(
            f"--web-config-secret {options.web_config_secret}: /metrics follows its "
            f"{podmod.WEB_CONFIG_KEY} (TLS, basic auth); the {options.monitor} scrapes https: "
            "give it the tlsConfig and basicAuth of your Prometheus (its CA, client "
            "certificate and password Secrets)"
        )
    generation = (
        cfg.server.sglang_flags if cfg.server.sglang_flags != "auto"
        else generation_for(PINNED_VERSION)
    )  # fmt: skip
    _probe_argv(pod_cfg, loaded, mode, generation, adaptive)
    source = os.path.basename(cfg.source) if cfg.source else "the built-in defaults"
    config_text = podmod.daemon_config_text(pod_cfg, source)
    podmod.check_loads(config_text, options.nodes)

    shipped, user, snapshot, profile_checksum = _profile_sets(
        store, loaded, user_dirs, shipped_dir, notes
    )
    config_checksum = hashlib.sha256((config_text + (adaptive or "")).encode()).hexdigest()
    dashboards_dir = paths.template_dir("compose") / "grafana" / "dashboards"
    dashboards = {
        p.name: p.read_text(encoding="utf-8") for p in sorted(dashboards_dir.glob("*.json"))
    }
    if guards.quantity_bytes(options.shm_size) >= guards.quantity_bytes(options.memory):
        raise RenderError(
            f"--shm-size {options.shm_size} must be below --memory {options.memory}: the "
            "in-memory /dev/shm counts against the container's memory limit"
        )
    workload = "LeaderWorkerSet" if options.nodes > 1 else "Deployment"
    plan = manifests.Plan(
        o=options,
        fleet=fleet,
        pod_user=pod_user,
        profile=loaded.name,
        mode=mode,
        gpus=gpus,
        workload=workload,
        shipped=inputs.as_texts(shipped, shipped_dir),
        user=inputs.as_texts(user, ", ".join(user_dirs)),
        declared=inputs.as_texts(snapshot, loaded.name),
        config_text=config_text,
        adaptive_text=adaptive,
        dashboards=dashboards,
        profile_checksum=profile_checksum,
        config_checksum=config_checksum,
        decision_file=os.path.basename(options.from_decision) if options.from_decision else None,
        decision_sha256=decision.sha256,
        decision_fingerprint=(decision.fingerprint or {}).get("id"),
        startup_failures=math.ceil(
            max(options.startup_s, cfg.restart.readiness_timeout_s + 300) / podmod.PROBE_PERIOD_S
        ),
        grace_s=int(cfg.restart.stop_grace_s + cfg.restart.gpu_release_timeout_s + 30),
    )
    files = manifests.build(plan)
    notes += guards.size_guard(files, server_side=options.server_side)
    if workload == "LeaderWorkerSet":
        notes.append(
            f"the client Service is {plan.service_name}: the name {options.name} is the "
            "headless Service LWS's controller creates (delete a Service of that name left by "
            "an earlier single-node render before applying)"
        )
    return Bundle(
        files=files,
        plan=plan,
        notes=notes,
        layout=guards.layout(pod_cfg.server, mode),
        prerequisites=guards.prerequisites(options, workload),
    )


def write_bundle(output_dir: Path, bundle: Bundle) -> list[Path]:
    """Write the bundle's files (each replaced atomically); the paths written. A file an
    earlier render wrote that this one does not (the other workload's) is removed."""
    written = []
    for name, text in bundle.files.items():
        path = output_dir / name
        atomic_write_text(path, text, mode=0o644)
        written.append(path)
    for stale in (*manifests.FILES, *manifests.RETIRED_FILES):
        if stale not in bundle.files and (output_dir / stale).exists():
            (output_dir / stale).unlink()
    return written
