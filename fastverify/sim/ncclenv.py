"""How NCCL would read the sim's own environment: NCCL_ALGO/PROTO grammar, numeric params, P2P.

This module owns the *interpretation* of NCCL_* variables for the simulation (which
algorithm and protocol an all-reduce resolves to, how many channels, whether GPUs talk
peer-to-peer), following NCCL 2.28's rules closely enough to be useful:

- NCCL_ALGO / NCCL_PROTO: case-insensitive comma lists; a leading `^` excludes; from
  2.24 per-collective sections `ring;allreduce:tree,ring` (a section without `coll:`
  is the default for every collective), read with the profiles' strict grammar
  (`fastverify.profiles.validate.parse_list_spec`: a section without `coll:` only first,
  `^` only at the start, no empty items). Unknown tokens or a malformed list make
  communicator init fail (NCCL 2.24+ behaviour), reported in `NcclSettings.errors`.
- Numeric params parse like NCCL's `strtoll`: non-numeric text becomes 0 silently.
- P2P between GPUs of the simulated box (8 PCIe GPUs spread over two CPU sockets, so
  the worst GPU pair is path type SYS) is used only when NCCL_P2P_DISABLE is not 1 and
  NCCL_P2P_LEVEL allows SYS; NCCL's default level (PXB) does not, so transport falls
  back to shared memory through the host (SHM), or to the socket network transport when
  NCCL_SHM_DISABLE=1 too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

ALGOS = ("ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat")
PROTOS = ("ll", "ll128", "simple")
PROTO_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
# Algorithms an all-reduce can use on one node of PCIe GPUs without NVSwitch or a network.
USABLE_ALGOS = ("ring", "tree")

# NCCL_P2P_LEVEL words and the legacy integers (0=LOC, 1=PIX, 2=PXB, 3=PHB, 4=SYS).
P2P_LEVELS = {"LOC": 0, "NVL": 1, "PIX": 1, "PXB": 2, "PHB": 3, "SYS": 4}
DEFAULT_P2P_LEVEL = P2P_LEVELS["PXB"]
TOPOLOGY_PATH_LEVEL = P2P_LEVELS["SYS"]  # worst GPU pair of the simulated box

DEFAULT_NCHANNELS = 16  # what NCCL's topology search finds on the simulated box
DEFAULT_NTHREADS = 512
DEFAULT_BUFFSIZE = 4 * 1024 * 1024

# NCCL parameters read as integers (their "set by environment" line ends with a period).
INT_PARAMS = frozenset(
    {
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NRINGS",
        "NCCL_MIN_NRINGS",
        "NCCL_MAX_CTAS",
        "NCCL_MIN_CTAS",
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_GRAPH_MIXING_SUPPORT",
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_P2P_LL_THRESHOLD",
        "NCCL_LL128_BUFFSIZE",
        "NCCL_LL_BUFFSIZE",
        "NCCL_CHECK_POINTERS",
        "NCCL_NET_GDR_READ",
        "NCCL_IGNORE_CPU_AFFINITY",
        "NCCL_CROSS_NIC",
        "NCCL_NCHANNELS_PER_NET_PEER",
        "NCCL_NVB_DISABLE",
        "NCCL_PXN_DISABLE",
        "NCCL_RUNTIME_CONNECT",
        "NCCL_WORK_FIFO_BYTES",
    }
)
# NCCL parameters read as strings and echoed without a trailing period.
STR_PARAMS = frozenset(
    {
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_P2P_LEVEL",
        "NCCL_SOCKET_IFNAME",
        "NCCL_NET",
        "NCCL_TUNER_PLUGIN",
        "NCCL_PROFILER_PLUGIN",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_LAUNCH_MODE",
    }
)


def nccl_int(value: str) -> int:
    """Parse like NCCL's strtoll(value, NULL, 0): leading integer (0x.. ok), else 0."""
    text = value.strip()
    sign = 1
    if text and text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    base, digits = 10, "0123456789"
    if text[:2].lower() == "0x":
        base, digits, text = 16, "0123456789abcdefABCDEF", text[2:]
    elif text[:1] == "0" and len(text) > 1:
        base, digits = 8, "01234567"
    prefix = ""
    for ch in text:
        if ch not in digits:
            break
        prefix += ch
    return sign * int(prefix, base) if prefix else 0


def _parse_list(
    value: str, known: tuple[str, ...], coll: str = "AllReduce"
) -> tuple[set[str], list[str]]:
    """Return (allowed tokens for `coll`, errors) for an NCCL_ALGO/NCCL_PROTO value, read
    with the profiles' strict grammar (`profiles.validate.parse_list_spec`, NCCL's
    parseList): anything NCCL refuses is an error and allows nothing."""
    from fastverify.profiles import nccl_vars, validate

    elems = nccl_vars.PROTOCOLS if known == PROTOS else nccl_vars.ALGORITHMS
    try:
        spec = validate.parse_list_spec(value, elems)
    except validate.ListSpecError as exc:
        words = {e.lower() for e in elems} | {c.lower() for c in nccl_vars.COLLECTIVES}
        bad = [w for w in (x.strip().lower() for x in re.split(r"[;:,^]", value)) if w]
        bad = [w for w in bad if w not in words]
        return set(), bad or [str(exc)]
    table = spec.get(coll)
    if table is None:  # the value names other collectives only
        return set(known), []
    return {e.lower() for e, on in table.items() if on}, []


@dataclass(frozen=True)
class NcclSettings:
    """What NCCL would use for the TP all-reduce, read from one environment."""

    algos: frozenset[str]  # all-reduce algorithms allowed and usable here
    protos: frozenset[str]  # protocols allowed (LL128 only when asked for explicitly)
    max_nchannels: int
    min_nchannels: int
    nthreads: int
    buffsize: int
    p2p: bool
    shm: bool  # host shared memory usable (NCCL_SHM_DISABLE != 1)
    algo_forced: bool
    proto_forced: bool
    errors: tuple[str, ...] = field(default=())

    @property
    def transport(self) -> str:
        """How neighbouring GPUs exchange data: "p2p", "shm" (through host memory) or
        "net" (NCCL's socket transport, when P2P and SHM are both unavailable)."""
        if self.p2p:
            return "p2p"
        return "shm" if self.shm else "net"

    @property
    def tree_only(self) -> bool:
        """True when every all-reduce must use Tree (NCCL_ALGO resolves to Tree)."""
        return self.algos == frozenset({"tree"})


def resolve(env: Mapping[str, str]) -> NcclSettings:
    """Interpret the NCCL_* variables of `env` for the simulated 8-GPU PCIe box."""
    errors: list[str] = []
    algos: set[str] = set(USABLE_ALGOS)
    algo_forced = False
    if env.get("NCCL_ALGO", "").strip():
        allowed, bad = _parse_list(env["NCCL_ALGO"], ALGOS)
        if bad:
            errors.append(f"Invalid NCCL_ALGO token(s) {', '.join(bad)} in {env['NCCL_ALGO']!r}")
        algos = allowed & set(USABLE_ALGOS)
        algo_forced = True
        if not algos and not bad:
            errors.append(
                f"NCCL_ALGO={env['NCCL_ALGO']!r} leaves no algorithm usable for AllReduce "
                "on this topology (Ring and Tree excluded)"
            )
    protos: set[str] = {"ll", "simple"}  # LL128 is not enabled over PCIe unless forced
    proto_forced = False
    if env.get("NCCL_PROTO", "").strip():
        allowed, bad = _parse_list(env["NCCL_PROTO"], PROTOS)
        if bad:
            errors.append(f"Invalid NCCL_PROTO token(s) {', '.join(bad)} in {env['NCCL_PROTO']!r}")
        protos = allowed
        proto_forced = True
        if not protos and not bad:
            errors.append(f"NCCL_PROTO={env['NCCL_PROTO']!r} excludes every protocol")

    def num(name: str, default: int, alias: str | None = None) -> int:
        raw = env.get(name)
        if raw is None and alias:
            raw = env.get(alias)
        if raw is None or not raw.strip():
            return default
        return nccl_int(raw)

    max_ch = num("NCCL_MAX_NCHANNELS", DEFAULT_NCHANNELS, "NCCL_MAX_NRINGS")
    max_ch = DEFAULT_NCHANNELS if max_ch <= 0 else min(max_ch, 64)
    min_ch = num("NCCL_MIN_NCHANNELS", 1, "NCCL_MIN_NRINGS")
    min_ch = max(1, min(min_ch, 64))
    nthreads = num("NCCL_NTHREADS", DEFAULT_NTHREADS)
    if nthreads < 64 or nthreads > 512 or nthreads % 32:
        nthreads = DEFAULT_NTHREADS  # NCCL falls back to its default for invalid values
    buffsize = num("NCCL_BUFFSIZE", DEFAULT_BUFFSIZE)
    if buffsize <= 0:
        buffsize = DEFAULT_BUFFSIZE

    p2p_level = DEFAULT_P2P_LEVEL
    raw_level = env.get("NCCL_P2P_LEVEL", "").strip()
    if raw_level:
        if raw_level in P2P_LEVELS:
            p2p_level = P2P_LEVELS[raw_level]
        elif raw_level.isdigit():
            p2p_level = int(raw_level)
        # unknown strings are silently ignored, as NCCL does
    p2p_disabled = num("NCCL_P2P_DISABLE", 0) == 1
    p2p = not p2p_disabled and p2p_level >= TOPOLOGY_PATH_LEVEL
    shm = num("NCCL_SHM_DISABLE", 0) != 1

    return NcclSettings(
        algos=frozenset(algos),
        protos=frozenset(protos),
        max_nchannels=max(max_ch, min_ch),
        min_nchannels=min_ch,
        nthreads=nthreads,
        buffsize=buffsize,
        p2p=p2p,
        shm=shm,
        algo_forced=algo_forced,
        proto_forced=proto_forced,
        errors=tuple(errors),
    )
