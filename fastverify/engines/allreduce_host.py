"""An engine's all-reduce capabilities: the one source of truth for which TP all-reduce
backends the engine a daemon serves could use, and the rule that sizes them.

`AllreduceHost` is what an engine adapter knows about the host its server runs on
(`Engine.allreduce_host(argv)`): the GPU links, FlashInfer's `pcie_ipc_comm`, the model's
hidden size and the inputs of SGLang's decode batch list (GPU memory, an engine's own
decode max_bs). `capabilities(host, argv)` is what the daemon reports in `/v1/status`
(`engine.capabilities`): the backends possible, each with why, and what each profile kind
would be served with at which sizes (`rules`: `fastverify.sglang.allreduce.dispatch` for
an environment without and with `SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1`). `doctor`, `status`,
`tune`'s inventory and `profile show --effective` describe the daemon's engine from it
(`host_from_caps` + `dispatch_for`); without a daemon they build a host for this machine
and say whose view it is (`view`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from fastverify.sglang import allreduce

ENABLED_ENV = {allreduce.ENABLE_VAR: "1"}


@dataclass(frozen=True)
class AllreduceHost:
    """What decides the TP all-reduce backend on the host an engine's server runs on."""

    engine: str
    view: str  # whose view: "the daemon's engine (sim)", "this machine (no daemon)", ...
    host: str  # the links, in words
    has_nvlink: bool | None = None  # None: unknown
    p2p: bool | None = True
    flashinfer_pcie_ipc: bool | None = None  # None: not checked
    flashinfer_why: str = "not checked"
    hidden: int | None = None  # the model's hidden size (None: unknown here)
    gpu_mem_mib: int | None = None  # per GPU (SGLang's default decode max_bs follows it)
    gpu_sm: int | None = None  # compute capability x10 (90: H100/H200)
    decode_max_bs: int | None = None  # the engine's own decode max_bs (None: SGLang's rule)
    request_pool: int | None = None  # SGLang's request pool when known (else sized at load)
    simulated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def server_args(host: AllreduceHost, argv: Sequence[str]) -> allreduce.ServerArgs:
    """The server args of `argv` with what the engine itself fixes (the sim's decode max_bs)."""
    args = allreduce.ServerArgs.from_argv(list(argv))
    if args.decode_max_bs is None and not args.decode_bs and host.decode_max_bs is not None:
        args = replace(args, decode_max_bs=host.decode_max_bs,
                       decode_max_bs_from=f"the {host.engine} engine's decode max_bs")  # fmt: skip
    return args


def dispatch_for(
    host: AllreduceHost, env: Mapping[str, str], argv: Sequence[str]
) -> allreduce.Dispatch:
    """SGLang's dispatch for a server of `argv` under `env` on this host, with sizes."""
    args = server_args(host, argv)
    return allreduce.dispatch(
        env=env,
        args=args,
        has_nvlink=host.has_nvlink,
        p2p=host.p2p,
        hidden=host.hidden,
        flashinfer_pcie_ipc=host.flashinfer_pcie_ipc,
        request_pool=host.request_pool,
        gpu_mem_mib=host.gpu_mem_mib,
        gpu_sm=host.gpu_sm,
    )


def possible_backends(host: AllreduceHost, tp_size: int) -> list[dict[str, Any]]:
    """The TP all-reduce backends SGLang 0.5.23 could use on this host, each with why
    (`possible` None: cannot tell here)."""
    if tp_size < 2:
        why = f"TP {tp_size}: no all-reduce"
        return [
            {"backend": b, "possible": False, "why": why}
            for b in (allreduce.NCCL, allreduce.CUSTOM, allreduce.PCIE_IPC)
        ]
    nvl = host.has_nvlink
    can = allreduce.possible_backends(
        tp_size, nvl, p2p=host.p2p, flashinfer_pcie_ipc=host.flashinfer_pcie_ipc
    )
    unknown = f"cannot tell: {host.host}"
    if allreduce.CUSTOM not in can:
        text = allreduce.CUSTOM_PCIE_TEXT.rstrip(".")
        custom: tuple[bool | None, str] = (
            False,
            f"SGLang's custom all-reduce {text} (TP {tp_size})",
        )
    elif nvl is None:
        custom = (None, unknown)
    else:
        custom = (True, "full NVLink" if nvl else "2 GPUs over PCIe with P2P")
    if tp_size not in allreduce.PCIE_IPC_WORLD_SIZES:
        sizes = "/".join(map(str, allreduce.PCIE_IPC_WORLD_SIZES))
        ipc: tuple[bool | None, str] = (False, f"FlashInfer PCIe-IPC serves {sizes} ranks")
    elif host.flashinfer_pcie_ipc is False:
        ipc = (False, host.flashinfer_why)
    elif host.flashinfer_pcie_ipc is None or nvl is None:
        ipc = (None, unknown if nvl is None else host.flashinfer_why)
    else:
        ipc = (
            True,
            f"{allreduce.ENABLE_VAR}=1 (the pcie-ipc profile): decode/verify-sized reductions"
            + (", after SGLang's custom all-reduce (NVLink host)" if nvl else "")
            + f"; {host.flashinfer_why}",
        )
    return [
        {"backend": allreduce.NCCL, "possible": True, "why": "always (pynccl inside CUDA graphs)"},
        {"backend": allreduce.CUSTOM, "possible": custom[0], "why": custom[1]},
        {"backend": allreduce.PCIE_IPC, "possible": ipc[0], "why": ipc[1]},
    ]


def capabilities(host: AllreduceHost, argv: Sequence[str]) -> dict[str, Any]:
    """`engine.capabilities` in /v1/status: the host, the backends possible for the server's
    argv, and what an environment without / with the PCIe-IPC variable is served with."""
    args = server_args(host, argv)
    rules = {
        allreduce.NCCL: dispatch_for(host, {}, argv).to_dict(),
        allreduce.PCIE_IPC: dispatch_for(host, ENABLED_ENV, argv).to_dict(),
    }
    return {
        "host": host.to_dict(),
        "tp_size": args.tp_size,
        "possible_backends": possible_backends(host, args.tp_size),
        "rules": rules,
        "rows_rule": allreduce.rows_rule(args, host.request_pool, host.gpu_mem_mib),
    }


def host_from_caps(caps: Mapping[str, Any]) -> AllreduceHost:
    """The host of a daemon's `engine.capabilities` (the inverse of `to_dict`)."""
    fields = AllreduceHost.__dataclass_fields__
    return AllreduceHost(**{k: v for k, v in caps["host"].items() if k in fields})


def with_tp(argv: Sequence[str], tp_size: int | None) -> list[str]:
    """`argv` with its --tp-size replaced (None: unchanged)."""
    out = list(argv)
    if tp_size is None:
        return out
    for i, a in enumerate(out):
        if a == "--tp-size" and i + 1 < len(out):
            out[i + 1] = str(tp_size)
            return out
        if a.startswith("--tp-size="):
            out[i] = f"--tp-size={tp_size}"
            return out
    return [*out, "--tp-size", str(tp_size)]
