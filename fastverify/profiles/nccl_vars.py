"""The table of known NCCL environment variables: kind, allowed values, first NCCL version.

Names were checked against NVIDIA/nccl sources (`NCCL_PARAM(...)`, `DEFINE_NCCL_PARAM`,
`ncclGetEnv("...")` in src/ and plugins/, release 2.30.7) and the NCCL user guide's
"Environment Variables" page. `since` is the first release whose documentation or
source has the variable (best effort for undocumented internals). Kinds:

- `switch`: exactly 0 or 1 (NCCL reads other text as 0, silently)
- `int`: a plain decimal integer in [lo, hi] (NCCL parses with strtoll base 0, so
  `010` is octal 8 and `16M` is 16; both refused)
- `bytes`: a positive plain decimal integer of bytes
- `nthreads`: a multiple of 32 in 64..512
- `enum`: one of `choices` (case-insensitive when `ci`)
- `algo`, `proto`: NCCL's list grammar (see validate.py)
- `level`: a topology path level word (LOC, NVL, PIX, PXB, PHB, SYS) or a legacy digit
- `subsys`: comma list of debug subsystems, optional leading `^`
- `string`, `path`: free text (the env-file subset still applies)

`status` is "" (current), "deprecated" (still read; a warning with the replacement)
or "removed" (NCCL ignores it; an error with the replacement).
"""

from __future__ import annotations

from fastverify.profiles.model import Record

# Collectives NCCL accepts as per-collective prefixes in NCCL_ALGO/NCCL_PROTO (ncclFuncStr).
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
LEVEL_WORDS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
LEVEL_DIGITS = {"0": "LOC", "1": "PIX", "2": "PXB", "3": "PHB", "4": "SYS", "5": "SYS"}
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
DEBUG_SUBSYS = (
    "INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL",
    "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "DESTROY", "ALL",
)  # fmt: skip

# NCCL_VERSION is set by NVIDIA's CUDA images as metadata; never a tuning knob.
METADATA_ONLY = {"NCCL_VERSION"}


class NcclVar(Record):
    """One NCCL variable: its value kind and bounds, first version, status."""

    _fields = (
        "name",
        "kind",
        "since",
        "lo",
        "hi",
        "choices",
        "ci",
        "status",
        "replacement",
        "note",
    )
    name: str
    kind: str
    since: str
    lo: int | None
    hi: int | None
    choices: tuple[str, ...]
    ci: bool
    status: str
    replacement: str
    note: str

    def __init__(
        self,
        name: str,
        kind: str,
        since: str,
        lo: int | None = None,
        hi: int | None = None,
        choices: tuple[str, ...] = (),
        ci: bool = False,
        status: str = "",
        replacement: str = "",
        note: str = "",
    ):
        self._set(
            name=name,
            kind=kind,
            since=since,
            lo=lo,
            hi=hi,
            choices=choices,
            ci=ci,
            status=status,
            replacement=replacement,
            note=note,
        )

    def describe_values(self) -> str:
        """Human text for what a valid value looks like (used in error messages)."""
        k = self.kind
        if k == "switch":
            return "0 or 1"
        if k == "int":
            if self.lo is not None and self.hi is not None:
                return f"an integer {self.lo}..{self.hi}"
            if self.lo is not None:
                return f"an integer >= {self.lo}"
            return "a plain integer"
        if k == "bytes":
            return "a plain number of bytes, e.g. 4194304"
        if k == "nthreads":
            return "a multiple of 32 in 64..512"
        if k == "enum":
            return "one of " + ", ".join(self.choices)
        if k == "algo":
            return "comma list of " + ", ".join(ALGORITHMS)
        if k == "proto":
            return "comma list of " + ", ".join(PROTOCOLS)
        if k == "level":
            return "one of " + ", ".join(LEVEL_WORDS)
        if k == "subsys":
            return "comma list of " + ", ".join(DEBUG_SUBSYS)
        return "text"


Spec = tuple[str, str, str, dict[str, object]]  # name, kind, since, the other fields


def _v(name: str, kind: str, since: str, **kw: object) -> Spec:
    """A table row, made into an NcclVar when first looked up: `profile list` looks up a few
    dozen names, not the ~300 of the table (start-up time)."""
    return ("NCCL_" + name, kind, since, kw)


_CH = {"lo": 1, "hi": 64}  # channel / CTA counts
_NN = {"lo": 0}  # non-negative integers
_POS = {"lo": 1}

_TABLE: list[Spec] = [
    # --- algorithm / protocol selection and tuning
    _v("ALGO", "algo", "2.5", note="per-collective syntax since 2.24"),
    _v("PROTO", "proto", "2.5", note="per-collective syntax since 2.24"),
    _v("NTHREADS", "nthreads", "2.0"),
    _v("LL128_NTHREADS", "nthreads", "2.5"),
    _v("BUFFSIZE", "bytes", "2.0", note="default 4194304"),
    _v("LL_BUFFSIZE", "bytes", "2.5"),
    _v("LL128_BUFFSIZE", "bytes", "2.5"),
    _v("MIN_NCHANNELS", "int", "2.5", **_CH),
    _v("MAX_NCHANNELS", "int", "2.5", **_CH),
    _v("MIN_NRINGS", "int", "2.0", **_CH, status="deprecated", replacement="NCCL_MIN_NCHANNELS"),
    _v("MAX_NRINGS", "int", "2.0", **_CH, status="deprecated", replacement="NCCL_MAX_NCHANNELS"),
    _v("MIN_CTAS", "int", "2.17", **_CH),
    _v("MAX_CTAS", "int", "2.17", **_CH),
    _v("MIN_P2P_NCHANNELS", "int", "2.12", **_CH),
    _v("MAX_P2P_NCHANNELS", "int", "2.12", **_CH),
    _v("NCHANNELS_PER_NET_PEER", "int", "2.12", **_CH),
    _v("UNPACK_DOUBLE_NCHANNELS", "switch", "2.19"),
    _v("CGA_CLUSTER_SIZE", "int", "2.16", lo=0, hi=8),
    _v("CTA_POLICY", "string", "2.27"),
    _v("THREAD_THRESHOLDS", "string", "2.2"),
    _v("CHUNK_SIZE", "bytes", "2.6"),
    _v("P2P_NET_CHUNKSIZE", "bytes", "2.14"),
    _v("P2P_PCI_CHUNKSIZE", "bytes", "2.14"),
    _v("P2P_NVL_CHUNKSIZE", "bytes", "2.14"),
    _v("P2P_LL_THRESHOLD", "bytes", "2.14"),
    _v("NVLS_CHUNKSIZE", "bytes", "2.19"),
    _v("NVLSTREE_MAX_CHUNKSIZE", "bytes", "2.19"),
    _v("SYM_CE_THRESHOLD", "bytes", "2.28"),
    _v("PAT_ENABLE", "enum", "2.23", choices=("0", "1", "2")),
    _v("LL_THRESHOLD", "int", "2.0", status="removed", replacement="NCCL_PROTO"),
    _v("TREE_THRESHOLD", "int", "2.4", status="removed", replacement="NCCL_ALGO"),
    _v("SINGLE_RING_THRESHOLD", "int", "2.1", status="removed", replacement="NCCL_MAX_NCHANNELS"),
    _v("RINGS", "string", "2.0", status="removed", replacement="NCCL_TOPO_FILE"),
    _v("TUNER_PLUGIN", "string", "2.19"),
    _v("TUNER_CONFIG_FILE", "path", "2.19", note="read by NCCL's example tuner plugin"),
    # --- transports and topology
    _v("P2P_DISABLE", "switch", "2.0"),
    _v("P2P_LEVEL", "level", "2.3.4"),
    _v("P2P_DIRECT_DISABLE", "switch", "2.7"),
    _v("P2P_READ_ENABLE", "switch", "2.7"),
    _v("P2P_USE_CUDA_MEMCPY", "switch", "2.12"),
    _v("P2P_PXN_LEVEL", "enum", "2.12", choices=("0", "1", "2")),
    _v("PXN_DISABLE", "switch", "2.12"),
    _v("PXN_C2C", "switch", "2.25"),
    _v("P2P_EPOCH_ENABLE", "switch", "2.28"),
    _v("P2P_SCHEDULE_GROUP_SIZE", "int", "2.28", **_POS),
    _v("P2P_MAX_PEERS", "int", "2.28", **_POS),
    _v("P2P_PER_CHANNEL_NET_BW", "int", "2.28", **_POS),
    _v("IGNORE_DISABLED_P2P", "switch", "2.14"),
    _v("SHM_DISABLE", "switch", "2.0"),
    _v("SHM_LOCALITY", "enum", "2.18", choices=("1", "2")),
    _v("SHM_USE_CUDA_MEMCPY", "switch", "2.9", note="not in 2.30 sources"),
    _v("SHM_MEMCPY_MODE", "enum", "2.9", choices=("1", "2", "3"), note="not in 2.30 sources"),
    _v("NVB_DISABLE", "switch", "2.11"),
    _v("NVB_PRECONNECT", "switch", "2.11"),
    _v("NVLS_ENABLE", "enum", "2.17", choices=("0", "1", "2")),
    _v("NVLS_NCHANNELS", "int", "2.17", **_CH),
    _v("MNNVL_ENABLE", "enum", "2.21", choices=("0", "1", "2")),
    _v("MNNVL_UUID", "string", "2.21"),
    _v("MNNVL_CLIQUE_ID", "int", "2.21"),
    _v("MNNVL_CROSS_CLIQUE", "switch", "2.29"),
    _v("MNNVL_RAIL_PER_HOST", "switch", "2.29"),
    _v("MNNVL_SCATTER_NETS_ENABLE", "switch", "2.29"),
    _v("MULTI_RANK_GPU_ENABLE", "switch", "2.30"),
    _v("TOPO_FILE", "path", "2.6"),
    _v("TOPO_DUMP_FILE", "path", "2.6"),
    _v("TOPO_DUMP_FILE_RANK", "int", "2.6", **_NN),
    _v("TOPO_SPLIT_MLOPART", "switch", "2.29"),
    _v("GRAPH_FILE", "path", "2.6"),
    _v("GRAPH_DUMP_FILE", "path", "2.6"),
    _v("GRAPH_DUMP_FILE_RANK", "int", "2.6", **_NN),
    _v("GRAPH_HELPER_DISABLE", "switch", "2.27"),
    _v("IGNORE_CPU_AFFINITY", "switch", "2.4.6"),
    _v("CROSS_NIC", "enum", "2.6", choices=("0", "1", "2")),
    _v("COLLNET_ENABLE", "switch", "2.6"),
    _v("COLLNET_NODE_THRESHOLD", "int", "2.9", **_POS),
    _v("IGNORE_COLLNET_MISMATCH", "switch", "2.27"),
    _v("NET_GDR_LEVEL", "level", "2.3.4"),
    _v("NET_GDR_READ", "switch", "2.4.2"),
    _v("NET_GDR_C2C", "switch", "2.25"),
    _v("NET_GDR_MLOPART", "switch", "2.29"),
    _v("IB_GDR_LEVEL", "level", "2.1", status="deprecated", replacement="NCCL_NET_GDR_LEVEL"),
    _v("GDR_FLUSH_DISABLE", "switch", "2.5"),
    _v("GDRCOPY_ENABLE", "switch", "2.12"),
    _v("GDRCOPY_FLUSH_ENABLE", "switch", "2.12"),
    _v("GDRCOPY_SYNC_ENABLE", "switch", "2.12"),
    _v("GDRCOPY_FIFO_ENABLE", "switch", "2.12"),
    _v("DMABUF_ENABLE", "switch", "2.13"),
    _v("LL128_C2C", "switch", "2.25"),
    # --- network
    _v("NET", "string", "2.10"),
    _v("NET_PLUGIN", "string", "2.11"),
    _v("NET_SHARED_BUFFERS", "switch", "2.8"),
    _v("NET_SHARED_COMMS", "switch", "2.12"),
    _v("NET_DISABLE_INTRA", "switch", "2.12"),
    _v("NET_FORCE_FLUSH", "switch", "2.18"),
    _v("NET_OVERHEAD", "int", "2.12", **_NN),
    _v("NET_OPTIONAL_RECV_COMPLETION", "switch", "2.19"),
    _v("NET_FORCE_MERGE", "string", "2.19"),
    _v("NET_MERGE_LEVEL", "level", "2.19"),
    _v("NET_MERGE_POLICY", "string", "2.28"),
    _v("NETDEVS_POLICY", "string", "2.28"),
    _v("NET_PLUGIN_REF_COUNT", "int", "2.28", **_NN),
    _v("OOB_NET_ENABLE", "switch", "2.23"),
    _v("OOB_NET_IFNAME", "string", "2.23"),
    _v("ALLOC_P2P_NET_LL_BUFFERS", "switch", "2.14"),
    _v("SOCKET_IFNAME", "string", "2.0"),
    _v("SOCKET_FAMILY", "enum", "2.4", choices=("AF_INET", "AF_INET6")),
    _v("SOCKET_NTHREADS", "int", "2.4.8", lo=1, hi=16),
    _v("NSOCKS_PERTHREAD", "int", "2.4.8", lo=1, hi=64),
    _v("SOCKET_RETRY_CNT", "int", "2.22", **_NN),
    _v("SOCKET_RETRY_SLEEP_MSEC", "int", "2.22", **_NN),
    _v("SOCKET_POLL_TIMEOUT_MSEC", "int", "2.28", **_NN),
    _v("SOCKET_INLINE", "bytes", "2.23"),
    _v("SOCKET_MIN_TASKSIZE", "bytes", "2.23"),
    _v("SOCKET_SNDBUF", "int", "2.28"),
    _v("SOCKET_RCVBUF", "int", "2.28"),
    _v("SOCKET_MAGIC", "string", "2.28"),
    _v("COMM_ID", "string", "2.0"),
    _v("HOSTID", "string", "2.12"),
    _v("UID_STAGGER_RATE", "int", "2.24", **_NN),
    _v("UID_STAGGER_THRESHOLD", "int", "2.24", **_NN),
    _v("IB_DISABLE", "switch", "2.0"),
    _v("IB_HCA", "string", "2.1.15"),
    _v("IB_TIMEOUT", "int", "2.1.15", lo=1, hi=31),
    _v("IB_RETRY_CNT", "int", "2.1.15", lo=0, hi=7),
    _v("IB_GID_INDEX", "int", "2.1.4", lo=-1),
    _v("IB_ADDR_FAMILY", "enum", "2.21", choices=("AF_INET", "AF_INET6")),
    _v("IB_ADDR_RANGE", "string", "2.21"),
    _v("IB_ROCE_VERSION_NUM", "enum", "2.21", choices=("1", "2")),
    _v("IB_SL", "int", "2.1.4", lo=0, hi=15),
    _v("IB_TC", "int", "2.1.15", lo=0, hi=255),
    _v("IB_FIFO_TC", "int", "2.23", lo=0, hi=255),
    _v("IB_AR_THRESHOLD", "bytes", "2.6"),
    _v("IB_QPS_PER_CONNECTION", "int", "2.10", lo=1, hi=128),
    _v("IB_SPLIT_DATA_ON_QPS", "switch", "2.18"),
    _v("IB_PCI_RELAXED_ORDERING", "enum", "2.12", choices=("0", "1", "2")),
    _v("IB_ADAPTIVE_ROUTING", "switch", "2.16"),
    _v("IB_ECE_ENABLE", "switch", "2.23"),
    _v("IB_MERGE_VFS", "switch", "2.19"),
    _v("IB_MERGE_NICS", "switch", "2.20"),
    _v("IB_USE_INLINE", "switch", "2.12"),
    _v("IB_PKEY", "int", "2.12", **_NN),
    _v("IB_RETURN_ASYNC_EVENTS", "switch", "2.23"),
    _v("IB_OOO_RQ", "switch", "2.27"),
    _v("IB_DATA_DIRECT", "switch", "2.27"),
    _v("IB_DEVICE_PCI_ORDER", "switch", "2.29"),
    _v("IB_QUERY_PORT_SPEED", "switch", "2.29"),
    _v("IB_WARN_RAIL_LOCAL", "switch", "2.24"),
    _v("IB_MQP_RETRY_ALL", "switch", "2.28"),
    _v("IB_MQP_RETRY_CNT", "int", "2.28", **_NN),
    _v("IB_MQP_RETRY_SLEEP_MSEC", "int", "2.28", **_NN),
    _v("IB_PREPOST_RECEIVE_WORK_REQUESTS", "switch", "2.29"),
    _v("IB_RECEIVER_SIDE_MATCHING_SCHEME", "int", "2.29", **_NN),
    _v("IB_ROUTABLE_FLID_GID_INDEX", "int", "2.24", **_NN),
    _v("IB_SUBNET_AWARE_ROUTING", "switch", "2.29"),
    _v("IB_SUBNET_PREFIX_LEN", "int", "2.29", lo=0, hi=128),
    _v("IB_RESILIENCY_PORT_FAILOVER", "switch", "2.29"),
    _v("IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS", "int", "2.29", **_NN),
    _v("IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY", "int", "2.29", **_NN),
    _v("IB_RESILIENCY_PORT_RECOVERY", "switch", "2.29"),
    _v("IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT", "int", "2.29", **_NN),
    _v("IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL", "int", "2.29", **_NN),
    _v("IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE", "int", "2.29", **_NN),
    _v("IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE", "int", "2.29", **_NN),
    _v("IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT", "int", "2.29", **_NN),
    _v("IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX", "int", "2.29", **_NN),
    _v("IB_RESILIENCY_PORT_RECOVERY_START_DELAY", "int", "2.29", **_NN),
    _v("IGNORE_NET_MISMATCH", "switch", "2.27"),
    _v("IB_CUDA_SUPPORT", "switch", "2.1", status="removed", replacement="NCCL_NET_GDR_LEVEL"),
    _v("IBVERBS_LIB", "path", "2.28"),
    # --- runtime behaviour, memory, launch
    _v("LAUNCH_MODE", "enum", "2.1", choices=("PARALLEL", "GROUP"), ci=True),
    _v("LAUNCH_ORDER_IMPLICIT", "switch", "2.26"),
    _v("LAUNCH_RACE_FATAL", "switch", "2.28"),
    _v("CHECK_POINTERS", "switch", "2.2.12"),
    _v("CHECK_MODE", "string", "2.29"),
    _v("CHECKS_DISABLE", "switch", "2.0", status="removed", replacement="NCCL_CHECK_POINTERS"),
    _v("COMM_BLOCKING", "switch", "2.14"),
    _v("COMM_SPLIT_SHARE_RESOURCES", "switch", "2.18"),
    _v("COMM_SHRINK_SHARE_RESOURCES", "switch", "2.27"),
    _v("RUNTIME_CONNECT", "switch", "2.22"),
    _v("CONNECT_ROUND_MAX_PEERS", "int", "2.27", **_POS),
    _v("REPORT_CONNECT_PROGRESS", "switch", "2.27"),
    _v("CUMEM_ENABLE", "switch", "2.18"),
    _v("CUMEM_HOST_ENABLE", "switch", "2.23"),
    _v("GRAPH_MIXING_SUPPORT", "switch", "2.13"),
    _v("GRAPH_REGISTER", "switch", "2.11"),
    _v("GRAPH_STREAM_ORDERING", "switch", "2.29"),
    _v("LOCAL_REGISTER", "switch", "2.19"),
    _v("LEGACY_CUDA_REGISTER", "switch", "2.19"),
    _v("MULTI_SEGMENT_REGISTER", "switch", "2.24"),
    _v("ELASTIC_BUFFER_REGISTER", "switch", "2.29"),
    _v("SINGLE_PROC_MEM_REG_ENABLE", "switch", "2.27"),
    _v("DISABLE_MEM_MANAGER", "switch", "2.29"),
    _v("SHADOW_MEMPOOL_MAX_SIZE", "bytes", "2.29"),
    _v("WORK_FIFO_DEPTH", "int", "2.12", status="removed", replacement="NCCL_WORK_FIFO_BYTES"),
    _v("WORK_FIFO_BYTES", "bytes", "2.19"),
    _v("WORK_ARGS_BYTES", "bytes", "2.22"),
    _v("PROXY_APPEND_BATCH_SIZE", "int", "2.12", **_POS),
    _v("PROGRESS_APPENDOP_FREQ", "int", "2.12", **_POS),
    _v("PROXY_DUMP_SIGNAL", "int", "2.13"),
    _v("PROXY_CPUSET", "string", "2.27"),
    _v("CREATE_THREAD_CONTEXT", "switch", "2.14", note="not in 2.30 sources"),
    _v("SET_STACK_SIZE", "switch", "2.9"),
    _v("SET_CPU_STACK_SIZE", "switch", "2.19"),
    _v("SET_THREAD_NAME", "switch", "2.12"),
    _v("MEM_SYNC_DOMAIN", "int", "2.17", **_NN),
    _v("L1_SHARED_MEMORY_CARVEOUT", "int", "2.17", lo=0, hi=100),
    _v("GROUP_CUDA_STREAM", "switch", "2.10"),
    _v("NVTX_DISABLE", "switch", "2.19"),
    _v("IPC_USE_ABSTRACT_SOCKET", "switch", "2.28"),
    _v("ALLGATHERV_ENABLE", "switch", "2.27"),
    _v("LSA_TEAM_SIZE", "int", "2.28", **_NN),
    _v("NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "switch", "2.28"),
    _v("MLOPART_RDMA_ENABLE", "switch", "2.29"),
    _v("ENABLE_VERSION_CHECK", "switch", "2.29"),
    _v("DEV_API_JIT", "switch", "2.29"),
    _v("SYM_KERNEL", "string", "2.27"),
    _v("SYM_CTAS", "int", "2.27", **_NN),
    _v("SYM_TMA_ENABLE", "switch", "2.28"),
    _v("SYM_NOWIN_ENABLE", "switch", "2.28"),
    _v("SYM_GIN_KERNELS_ENABLE", "switch", "2.28"),
    _v("SYM_REUSE_SYSMEM_HANDLES", "switch", "2.29"),
    _v("SYM_RS_GIN_CHUNK_SIZE", "int", "2.29"),
    _v("WIN_ENABLE", "switch", "2.27"),
    _v("WIN_STRIDE", "int", "2.27"),
    _v("GIN_ENABLE", "switch", "2.28"),
    _v("GIN_TYPE", "int", "2.28"),
    _v("GIN_PLUGIN", "string", "2.28"),
    _v("GIN_NCONNECTIONS", "int", "2.28", **_POS),
    _v("GIN_ERROR_QUERY_SEC", "int", "2.28", **_NN),
    _v("GIN_PROXY_QUEUE_SIZE", "int", "2.28"),
    _v("GIN_IB_TC", "int", "2.28", lo=-1, hi=255),
    _v("GIN_CONNECTION_RAIL", "string", "2.29"),
    _v("GIN_PLUGIN_REF_COUNT", "int", "2.28", **_NN),
    _v("GIN_GDAKI_MAX_DEST_RD_ATOMIC", "int", "2.28"),
    _v("GIN_GDAKI_MAX_QP_RD_ATOMIC", "int", "2.28"),
    _v("GIN_GDAKI_NIC_HANDLER", "int", "2.28", **_NN),
    _v("GIN_GDAKI_QP_DEPTH", "int", "2.28", **_POS),
    _v("GDAKI_USE_RELIABLE_DB", "switch", "2.28"),
    _v("RMA_PLUGIN_REF_COUNT", "int", "2.29", **_NN),
    _v("RMA_PROXY_DUMP_SIGNAL", "int", "2.29"),
    _v("RMA_PROXY_QUEUE_SIZE", "int", "2.29"),
    _v("RMA_DISABLE", "switch", "2.29"),
    _v("RMA_PLUGIN", "string", "2.29"),
    _v("NUM_RMA_CTX", "int", "2.29", **_POS),
    _v("RAS_ENABLE", "switch", "2.24"),
    _v("RAS_ADDR", "string", "2.24"),
    _v("RAS_TIMEOUT_FACTOR", "int", "2.24", **_POS),
    # --- configuration sources and plugins
    _v("CONF_FILE", "path", "2.4"),
    _v("ENV_PLUGIN", "string", "2.28"),
    _v("NO_CACHE", "string", "2.29"),
    _v("PARAM_DUMP_ALL", "switch", "2.29"),
    _v("PROFILER_PLUGIN", "string", "2.23"),
    _v("PROFILE_EVENT_MASK", "int", "2.23", **_NN),
    _v("PROFILE_DUMP_FILE", "path", "2.23"),
    _v("PROFILER_CE_TIMING", "switch", "2.29"),
    _v("PROFILER_CE_POLLER_INTERVAL_MICROSECONDS", "int", "2.29", **_NN),
    _v("PROFILE_CE_BATCH_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_CE_COLL_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_CE_SYNC_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_COLL_API_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_COLL_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_GROUP_API_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_GROUP_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_KERNEL_LAUNCH_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_P2P_API_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_P2P_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_PROXY_CTRL_POOL_SIZE", "int", "2.23", **_POS),
    _v("PROFILE_PROXY_DETACH_POOL_SIZE", "int", "2.23", **_POS),
    _v("INSPECTOR_ENABLE", "switch", "2.28"),
    _v("INSPECTOR_ENABLE_P2P", "switch", "2.29"),
    _v("INSPECTOR_DUMP_DIR", "path", "2.28"),
    _v("INSPECTOR_DUMP_THREAD_ENABLE", "switch", "2.28"),
    _v("INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "int", "2.28", **_NN),
    _v("INSPECTOR_DUMP_MIN_SIZE_BYTES", "int", "2.28", **_NN),
    _v("INSPECTOR_DUMP_VERBOSE", "switch", "2.28"),
    _v("INSPECTOR_DUMP_COLL_RING_SIZE", "int", "2.29", **_POS),
    _v("INSPECTOR_DUMP_P2P_RING_SIZE", "int", "2.29", **_POS),
    _v("INSPECTOR_COLL_POOL_SIZE", "int", "2.29", **_POS),
    _v("INSPECTOR_COMM_POOL_SIZE", "int", "2.29", **_POS),
    _v("INSPECTOR_P2P_POOL_SIZE", "int", "2.29", **_POS),
    _v("INSPECTOR_POOL_GROW", "switch", "2.29"),
    _v("INSPECTOR_PROM_DUMP", "switch", "2.29"),
    _v("INSPECTOR_REQUIRE_KERNEL_TIMING", "switch", "2.29"),
    # --- debug output
    _v("DEBUG", "enum", "2.0", choices=DEBUG_LEVELS, ci=True),
    _v("DEBUG_SUBSYS", "subsys", "2.3.4"),
    _v("DEBUG_FILE", "path", "2.2.12", note="%h host, %p pid"),
    _v("DEBUG_TIMESTAMP_FORMAT", "string", "2.26"),
    _v("DEBUG_TIMESTAMP_LEVELS", "string", "2.26"),
    _v("WARN_ENABLE_DEBUG_INFO", "switch", "2.26"),
]

_SPECS: dict[str, Spec] = {spec[0]: spec for spec in _TABLE}
_MADE: dict[str, NcclVar] = {}


def lookup(name: str) -> NcclVar | None:
    """The table entry for `name`, or None when NCCL does not know it."""
    var = _MADE.get(name)
    if var is None and name in _SPECS:
        n, kind, since, kw = _SPECS[name]
        var = _MADE[name] = NcclVar(n, kind, since, **kw)  # type: ignore[arg-type]
    return var


def __getattr__(name: str) -> dict[str, NcclVar]:
    """`KNOWN`: name -> NcclVar for the whole table, made on first use (PEP 562)."""
    if name == "KNOWN":
        return {n: lookup(n) for n in _SPECS}  # type: ignore[misc]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def suggest(name: str) -> list[str]:
    """Known names close to a misspelt one (for `NCCL_ALGOS` -> `NCCL_ALGO`)."""
    import difflib

    return difflib.get_close_matches(name, list(_SPECS), n=3, cutoff=0.75)
