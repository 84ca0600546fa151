"""`fastverifyctl render systemd|compose|kubernetes`: write this host's unit or compose files,
or a fleet's Kubernetes manifests.

jinja2 is imported only here (through fastverify.render), never on the CLI's common path.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from fastverify.cli.groups import SuggestingGroup
from fastverify.durable import atomic_write_text


def _emit(text: str, output: str) -> None:
    if output == "-":
        sys.stdout.write(text)
        return
    path = Path(output)
    atomic_write_text(path, text, mode=0o644)
    click.echo(f"wrote {path}", err=True)


@click.group(cls=SuggestingGroup)
def render() -> None:
    """Render systemd units, the compose stack, or Kubernetes manifests."""


@render.command("systemd")
@click.option(
    "--mode",
    type=click.Choice(["host", "container"]),
    default="host",
    show_default=True,
    help="host: fastverifyd under systemd; container: the compose stack under systemd.",
)
@click.option(
    "--output", "-o", default="-", show_default=True, help="File to write, or - for stdout."
)
@click.option(
    "--fastverifyd",
    default="/opt/fastverify/bin/fastverifyd",
    show_default=True,
    help="host mode: the daemon's executable.",
)
@click.option(
    "--config", "config_file", default="/etc/fastverify/fastverifyd.toml", show_default=True
)
@click.option(
    "--env-file",
    default="/etc/fastverify/fastverify.env",
    show_default=True,
    help="Optional environment file (EnvironmentFile=-...).",
)
@click.option(
    "--daemon-arg", "extra_args", multiple=True, help="Extra fastverifyd argument (repeatable)."
)
@click.option("--user", default="", help="host mode: run as this user (default root).")
@click.option("--group", default="", help="host mode: with --user, its group.")
@click.option("--watchdog-sec", "watchdog_s", type=int, default=30, show_default=True)
@click.option(
    "--timeout-start-sec",
    "timeout_start_s",
    type=int,
    default=900,
    show_default=True,
    help="Start timeout floor; the daemon extends it while a model loads.",
)
@click.option("--timeout-stop-sec", "timeout_stop_s", type=int, default=120, show_default=True)
@click.option("--restart-sec", "restart_s", type=int, default=5, show_default=True)
@click.option("--start-limit-burst", type=int, default=5, show_default=True)
@click.option(
    "--start-limit-interval-sec", "start_limit_interval_s", type=int, default=600, show_default=True
)
@click.option(
    "--compose-cmd",
    default="/usr/bin/docker compose",
    show_default=True,
    help="container mode: the Compose command (absolute path first).",
)
@click.option(
    "--compose-dir",
    default="/etc/fastverify/compose",
    show_default=True,
    help="container mode: where docker-compose.yml and its .env live.",
)
@click.option("--docs-path", default="/usr/share/doc/fastverify/deployment.md", show_default=True)
def systemd_cmd(mode: str, output: str, **options: object) -> None:
    """Render the systemd unit (fastverifyd.service or fastverify.service)."""
    from fastverify import render as lib

    options["extra_args"] = tuple(options["extra_args"])  # type: ignore[arg-type]
    try:
        text = lib.render_unit(mode, lib.UnitOptions(**options))  # type: ignore[arg-type]
    except lib.RenderError as exc:
        raise click.UsageError(str(exc)) from None
    _emit(text, output)


@render.command("compose")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write docker-compose.yml, prometheus.yml, grafana/ and .env here; "
    "without it, print the .env.",
)
@click.option("--image", default=None, help="Image tag (default: fastverify:<version>).")
@click.option("--env-file", default="/etc/fastverify/fastverify.env", show_default=True)
@click.option(
    "--config", "config_file", default="/etc/fastverify/fastverifyd.toml", show_default=True
)
@click.option("--model-dir", default="/models", show_default=True)
@click.option("--hf-cache", default="/var/cache/fastverify/huggingface", show_default=True)
@click.option("--state-dir", default="/var/lib/fastverify", show_default=True)
@click.option(
    "--profile-dir",
    default="/etc/fastverify/profiles",
    show_default=True,
    help="Host directory of operator profiles (mounted read-only).",
)
@click.option("--socket-dir", default="/run/fastverify", show_default=True)
@click.option("--sglang-port", type=int, default=30000, show_default=True)
@click.option("--exporter-port", type=int, default=9464, show_default=True)
@click.option("--prometheus-port", type=int, default=9090, show_default=True)
@click.option("--grafana-port", type=int, default=3000, show_default=True)
@click.option(
    "--grafana-bind",
    default="127.0.0.1",
    show_default=True,
    help="Address Grafana is published on (0.0.0.0 to reach it from other hosts).",
)
def compose_cmd(output_dir: str | None, **options: object) -> None:
    """Render the compose stack's .env (and with --output-dir, the whole stack)."""
    from fastverify import render as lib

    try:
        if options["image"] is None:
            options["image"] = lib.default_image()
        opts = lib.ComposeOptions(**options)  # type: ignore[arg-type]
        if output_dir is None:
            _emit(lib.render_compose_env(opts), "-")
            return
        for path in lib.write_compose_bundle(Path(output_dir), opts):
            click.echo(f"wrote {path}", err=True)
    except lib.RenderError as exc:
        raise click.UsageError(str(exc)) from None


@render.command("kubernetes")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    required=True,
    help="Write the manifests here (one file per kind; `kubectl apply -f DIR`).",
)
@click.option(
    "--profile",
    default=None,
    help="Profile every pod serves (default: the decision's, else default_profile).",
)
@click.option(
    "--mode",
    type=click.Choice(["baseline", "eagle3", "adaptive"]),
    default=None,
    help="Decoding mode (default: the decision's, else server.mode; adaptive comes with "
    "--from-decision, whose record carries the speculation plan it serves).",
)
@click.option(
    "--nodes",
    type=int,
    default=1,
    show_default=True,
    help="Pods per server: > 1 is one model over several nodes (LeaderWorkerSet).",
)
@click.option(
    "--replicas",
    type=int,
    default=1,
    show_default=True,
    help="Servers (pods, or LeaderWorkerSet groups).",
)
@click.option("--namespace", default="fastverify", show_default=True)
@click.option("--name", default="fastverify", show_default=True, help="Prefix of every object.")
@click.option(
    "--image",
    default=None,
    help="Image the cluster pulls (required), e.g. registry.example.com/fastverify:0.1.0.",
)
@click.option(
    "--from-decision",
    type=click.Path(dir_okay=False),
    default=None,
    help="tune's decision record: its decision.profile and decision.mode.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Daemon configuration to start from (default: the image's).",
)
@click.option(
    "--profile-dir",
    "profile_dirs",
    multiple=True,
    help="Operator profile directory (repeatable; default: the config's profile_dirs).",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(1, 64),
    default=None,
    help="GPUs per pod (default: the config's tp_size; SGLang's TP = nodes x this).",
)
@click.option("--gpu-resource", default="nvidia.com/gpu", show_default=True)
@click.option("--cpu", default="32", show_default=True, help="CPU request = limit per pod.")
@click.option(
    "--memory",
    default="480Gi",
    show_default=True,
    help="Memory request = limit per pod (includes /dev/shm).",
)
@click.option("--shm-size", default="64Gi", show_default=True, help="In-memory /dev/shm size.")
@click.option(
    "--model-pvc",
    default=None,
    help="An existing claim with the models, mounted at /models (default: render <name>-models).",
)
@click.option("--model-size", default="2Ti", show_default=True, help="Rendered model PVC size.")
@click.option("--model-storage-class", default=None, help="Rendered model PVC's StorageClass.")
@click.option(
    "--model-access-mode",
    type=click.Choice(["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]),
    default=None,
    help="Rendered model PVC's access mode (default: ReadOnlyMany for > 1 pod, else RWO).",
)
@click.option("--model-host-path", default=None, help="Host directory instead of a PVC.")
@click.option(
    "--model-path",
    default=None,
    help="The model in the pod, under the model volume /models (absolute, or relative to "
    "it; default: the config's server.model_path).",
)
@click.option(
    "--draft-model-path",
    default=None,
    help="The EAGLE-3 drafter under /models (default: the config's server.draft_model_path).",
)
@click.option(
    "--cache-pvc",
    default=None,
    help="PVC for the NCCL/FlashInfer/Triton caches (default: an emptyDir per pod).",
)
@click.option(
    "--run-as-user",
    type=click.IntRange(1),
    default=None,
    help="Non-root user (and group) the pod runs as (default 1000; RDMA pods: root with only "
    "IPC_LOCK, as ibverbs needs).",
)
@click.option(
    "--run-as-root",
    is_flag=True,
    help="Run as the image's user (root) when the engine image needs it.",
)
@click.option(
    "--startup-seconds",
    "startup_s",
    type=int,
    default=2400,
    show_default=True,
    help="Startup probe window (>= 1800: a 30-minute load plus verification).",
)
@click.option(
    "--progress-deadline-seconds",
    "progress_deadline_s",
    type=click.IntRange(60),
    default=None,
    help="Deployment progressDeadlineSeconds (default: startup + 1200).",
)
@click.option(
    "--prometheus-url",
    default="http://prometheus-operated.monitoring.svc:9090",
    show_default=True,
    help="Prometheus for the Grafana datasource ConfigMap.",
)
@click.option("--hf-token-secret", default=None, help="Secret whose key HF_TOKEN the pod gets.")
@click.option(
    "--web-config-secret",
    default=None,
    help="Secret with web-config.yml (exporter-toolkit: TLS, bcrypt basic auth) and the files "
    "it names, mounted for the daemon's /metrics (which the monitor then scrapes over https).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Accept what is refused without it: LL128, PCIe-IPC where it cannot serve, a "
    "decision tune did not apply.",
)
@click.option(
    "--values",
    "values_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML values: tolerations, nodeSelector, affinity, runtimeClassName, "
    "priorityClassName, imagePullSecrets, podLabels, podAnnotations, exclusiveTopology, "
    "hostNetwork, rdmaResources, rdmaDevices, monitorLabels (flags add to it).",
)
@click.option("--toleration", "tolerations", multiple=True, help="KEY[=VALUE]:EFFECT (repeatable).")
@click.option("--node-selector", multiple=True, help="Node label KEY=VALUE (repeatable).")
@click.option("--runtime-class", default=None, help="runtimeClassName (e.g. nvidia).")
@click.option("--priority-class", default=None, help="priorityClassName.")
@click.option("--image-pull-secret", "image_pull_secrets", multiple=True, help="(repeatable)")
@click.option("--label", "labels", multiple=True, help="Pod label KEY=VALUE (repeatable).")
@click.option("--annotation", "annotations", multiple=True, help="Pod annotation KEY=VALUE.")
@click.option(
    "--exclusive-topology",
    default=None,
    help="LWS: one group per domain of this node label (e.g. a rack or network block label).",
)
@click.option("--host-network", is_flag=True, help="Pods on the nodes' network (RDMA NICs).")
@click.option(
    "--rdma",
    multiple=True,
    help="RDMA device-plugin resource NAME[=COUNT] per pod, e.g. rdma/ib=1 (repeatable).",
)
@click.option("--rdma-devices", is_flag=True, help="Mount the host's /dev/infiniband (privileged).")
@click.option(
    "--allow-tcp",
    is_flag=True,
    help="Render --nodes > 1 without RDMA: NCCL over TCP sockets between the nodes.",
)
@click.option(
    "--monitor",
    type=click.Choice(["podmonitor", "servicemonitor", "none"]),
    default="podmonitor",
    show_default=True,
    help="Prometheus Operator object that scrapes the exporters.",
)
@click.option(
    "--monitor-label",
    "monitor_labels",
    multiple=True,
    help="Label KEY=VALUE the Prometheus selects monitors by (repeatable; default "
    "release=kube-prometheus-stack).",
)
@click.option(
    "--grafana-namespace",
    default="monitoring",
    show_default=True,
    help="Namespace of Grafana (its sidecar finds datasources only there).",
)
@click.option(
    "--no-grafana",
    "grafana",
    flag_value=False,
    default=True,
    help="Do not render the dashboards and datasource ConfigMaps (no Grafana sidecar).",
)
@click.option(
    "--no-namespace",
    "create_namespace",
    flag_value=False,
    default=True,
    help="Do not render the Namespace object (it is managed elsewhere).",
)
@click.option(
    "--server-side",
    is_flag=True,
    help="You apply with `kubectl apply --server-side`: objects over 256 KiB are fine.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.pass_context
def kubernetes_cmd(ctx: click.Context, output_dir: str, as_json: bool, **options: object) -> None:
    """Render the fleet's Kubernetes manifests (docs/kubernetes.md).

    Exit codes: 0 written, 2 bad options, profile, decision record or configuration."""
    from fastverify import render as base
    from fastverify import render_kubernetes as lib
    from fastverify.cli.output import EXIT_USAGE, emit_json, fail

    options["image"] = options["image"] or ""
    options["profile_dirs"] = tuple(options["profile_dirs"]) or None  # type: ignore[arg-type]
    options["monitor_labels"] = tuple(options["monitor_labels"]) or None  # type: ignore[arg-type]
    try:
        bundle = lib.render(lib.KubeOptions(**options))  # type: ignore[arg-type]
        written = lib.write_bundle(Path(output_dir), bundle)
    except base.RenderError as exc:
        fail(f"error: {exc}", EXIT_USAGE)
    except OSError as exc:
        fail(f"error: cannot write {output_dir}: {exc.strerror or exc}", EXIT_USAGE)
    notes = bundle.notes + _failed_here(ctx, bundle.profile, bundle.mode)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if as_json:
        emit_json(
            {
                "files": [str(p) for p in written],
                "profile": bundle.profile,
                "mode": bundle.mode,
                "workload": bundle.workload,
                "gpus_per_node": bundle.gpus_per_node,
                "tp_size": bundle.tp_size,
                "profile_checksum": bundle.profile_checksum,
                "config_checksum": bundle.config_checksum,
                "notes": notes,
                "layout": bundle.layout,
                "prerequisites": bundle.prerequisites,
            }
        )
        return
    for path in written:
        click.echo(f"wrote {path}", err=True)
    click.echo("the model volume must hold: " + "; ".join(bundle.layout))
    needs = f" (needs: {'; '.join(bundle.prerequisites)})" if bundle.prerequisites else ""
    click.echo(
        f"{bundle.workload}: {bundle.profile}/{bundle.mode}, {bundle.gpus_per_node} GPUs per pod"
        f" (SGLang TP {bundle.tp_size}); next: kubectl apply"
        f"{' --server-side' if options['server_side'] else ''} --dry-run=server -f {output_dir}"
        f"{needs}"
    )


def _failed_here(ctx: click.Context, profile: str, mode: str) -> list[str]:
    """Notes for a profile/mode this host's daemon saw fail to start (CUDA-graph capture,
    NCCL, OOM, ...): the fleet's pods on the same hardware would fail the same way. Nothing
    when no daemon answers here."""
    from fastverify.cli.daemon_call import client_for
    from fastverify.client import DaemonUnavailable

    try:
        history = client_for(ctx, timeout=2.0).get("/v1/history")
    except (DaemonUnavailable, OSError, ValueError, RuntimeError):
        return []
    failed = [
        r
        for r in history
        if isinstance(r, dict)
        and (r.get("profile"), r.get("mode")) == (profile, mode)
        and r.get("result") in ("rolled_back", "failed")
        and r.get("reason") not in (None, "cancelled")
    ]
    if not failed:
        return []
    last = failed[-1]
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(last.get("started_at") or 0))
    weights = " on dummy weights (a trial)" if last.get("weights") == "dummy" else ""
    return [
        f"{profile}/{mode} failed on this host's daemon {len(failed)} time(s), last at "
        f"{when}{weights}: {last.get('reason')} ({last.get('message') or ''}); pods on the "
        "same GPUs and SGLang fail the same way (fastverifyctl history)"
    ]
