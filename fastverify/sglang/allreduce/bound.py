"""SGLang's PCIe-IPC workspace bound: the decode batch sizes the graphs capture
(`memory_hook`, `cuda_graph_hook`, clamped to the request pool) and the widest decode
reduction they give (`base_runner._widest_decode_rows`), rows x hidden."""

from __future__ import annotations

from fastverify.sglang.allreduce.args import ServerArgs


def default_decode_max_bs(gpu_mem_mib: int | None, tp_size: int) -> int:
    """`memory_hook.handle_gpu_memory_settings`: the decode graphs' max_bs by GPU memory
    (MiB, None: unknown) and TP size, when --cuda-graph-max-bs-decode is not given."""
    if gpu_mem_mib is None:
        return 160
    small_tp = tp_size < 4
    for limit_gib, few, many in ((20, 8, 8), (35, 48, 160), (60, 32, 160), (90, 256, 512),
                                 (160, 256, 512)):  # fmt: skip
        if gpu_mem_mib < limit_gib * 1024:
            return few if small_tp else many
    return 512


def decode_batch_sizes(args: ServerArgs, gpu_mem_mib: int | None = None) -> list[int]:
    """The decode batch list SGLang resolves (`cuda_graph_config[decode].bs`), built whether
    or not a decode graph is captured: `--cuda-graph-bs-decode` as given, else
    `cuda_graph_hook.generate_decode_cuda_graph_batch_sizes` up to max_bs (a default max_bs
    is first capped at --max-running-requests)."""
    if args.decode_bs:
        return list(args.decode_bs)
    max_bs = args.decode_max_bs
    if max_bs is None:
        max_bs = default_decode_max_bs(gpu_mem_mib, args.tp_size)
        if args.max_running_requests is not None and max_bs > args.max_running_requests:
            max_bs = args.max_running_requests
    if args.disable_cuda_graph_padding:
        bs = list(range(1, max_bs + 1))
    elif not args.speculative:
        bs = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16),
              *range(512, max_bs + 1, 32)]  # fmt: skip
    else:
        bs = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8),
              *range(272, max_bs + 1, 16)]  # fmt: skip
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


def capture_batch_sizes(
    args: ServerArgs, request_pool: int | None, gpu_mem_mib: int | None = None
) -> list[int]:
    """`base_cuda_graph_runner.get_batch_sizes_to_capture` (alignment 1: no attention DP):
    the decode list clamped to the request pool (`req_to_token_pool.size`; None: not known
    before the load, no clamp)."""
    bs = decode_batch_sizes(args, gpu_mem_mib)
    if request_pool is not None:
        if max(bs) > request_pool:
            bs = [*bs, request_pool]
        bs = [b for b in bs if b <= request_pool]
    return sorted(set(bs))


def widest_decode_rows(
    args: ServerArgs, request_pool: int | None = None, gpu_mem_mib: int | None = None
) -> int:
    """`base_runner._widest_decode_rows`: max(captured decode batch) x tokens per request
    (the draft tokens of a speculative verify, else 1): the rows PCIe-IPC's workspace holds."""
    return max(capture_batch_sizes(args, request_pool, gpu_mem_mib)) * max(1, args.draft_tokens)


def pcie_ipc_rows(
    args: ServerArgs, request_pool: int | None = None, gpu_mem_mib: int | None = None
) -> tuple[int, str]:
    """(rows of the widest decode reduction by SGLang's rule, a short note)."""
    rows = widest_decode_rows(args, request_pool, gpu_mem_mib)
    tokens = max(1, args.draft_tokens)
    return rows, f"decode max_bs {rows // tokens} x {tokens} draft tokens"


def rows_rule(
    args: ServerArgs, request_pool: int | None = None, gpu_mem_mib: int | None = None
) -> str:
    """Where the rows come from, in SGLang's terms (for `profile show --effective`, doctor)."""
    if args.decode_bs:
        src = f"--cuda-graph-bs-decode {' '.join(map(str, args.decode_bs))}"
    elif args.decode_max_bs is not None:
        src = f"{args.decode_max_bs_from or '--cuda-graph-max-bs-decode'} {args.decode_max_bs}"
    elif gpu_mem_mib is None:
        src = "SGLang's default max_bs when the GPU memory is unknown (160)"
    else:
        src = (
            f"SGLang's default max_bs for {gpu_mem_mib // 1024} GiB GPUs at TP {args.tp_size} "
            f"({default_decode_max_bs(gpu_mem_mib, args.tp_size)})"
        )
    pool = (
        f"capped at the request pool ({request_pool})"
        if request_pool is not None
        else "at most: SGLang caps it at the request pool it sizes at load"
    )
    graph = "" if args.decode_graph else "; the same without a decode CUDA graph"
    return (
        f"largest decode batch ({src}; {pool}) x draft tokens per request x hidden{graph} "
        "(base_runner._widest_decode_rows)"
    )
