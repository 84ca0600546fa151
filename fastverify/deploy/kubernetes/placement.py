"""Where and how the pods of a Kubernetes render run: the fleet's scheduling, network and
monitoring settings (values.py), the multi-node network NCCL needs, the pinning a decision
measured on one host asks for (and the hardware it names), the pod's user and
capabilities, and whether the profile's all-reduce backend can serve in these pods."""

from __future__ import annotations

from typing import Any

from fastverify.deploy.kubernetes import values as kv
from fastverify.deploy.kubernetes.options import KubeOptions
from fastverify.render import RenderError


def fleet_of(options: KubeOptions) -> Any:
    """Scheduling, network and monitoring settings from the values file and the flags."""
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


def network_checks(options: KubeOptions, fleet: Any, profile: Any) -> list[str]:
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
                "(--rdma NAME[=COUNT] or --rdma-devices; docs/guides/kubernetes.md), or accept TCP "
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


def placement_notes(
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
        return hardware_mismatch(fleet, decision_fingerprint, gpus, pinned=True)
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
    return [unpinned, *hardware_mismatch(fleet, decision_fingerprint, gpus, pinned=False)]


GFD_PRODUCT = "nvidia.com/gpu.product"  # GPU feature discovery's node labels
GFD_COUNT = "nvidia.com/gpu.count"


def gfd_product(model: str | None) -> str | None:
    """GPU feature discovery's `nvidia.com/gpu.product` value for an nvidia-smi GPU name
    (spaces become dashes: "NVIDIA H200" -> "NVIDIA-H200")."""
    return "-".join(model.split()) if model else None


def hardware_mismatch(
    fleet: Any, fingerprint: dict[str, Any] | None, gpus: int | None, pinned: bool
) -> list[str]:
    """A decision's host fingerprint against the pods: the GPU count it was measured with,
    and (`pinned`) the nodeSelector's GPU model and count (GPU feature discovery's labels),
    said when the selector names others or none."""
    facts = (fingerprint or {}).get("facts") or {}
    if not facts or fingerprint is None:
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


def allreduce_mismatch(loaded: Any, nodes: int, gpus: int) -> str | None:
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
