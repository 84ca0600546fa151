"""The NCCL variables SGLang sets in its own environment, as a function of the launch args.

SGLang's schedulers (one per TP rank) are started with the `spawn` method after argument
resolution and `_set_envs_and_config`, so they hold these variables on top of the profile.
Rules of 0.5.23 (sources under `sglang/srt/`; tests/contract/ runs or reads each one):

1. `arg_groups/attention_hook.py` (`--enable-deterministic-inference`, TP > 1, CUDA):
   `NCCL_ALGO=allreduce:tree`, `NCCL_MIN_NCHANNELS` = `NCCL_MAX_NCHANNELS` =
   `$SGLANG_DETERMINISTIC_NCCL_NCHANNELS` (8): assigned, so they override a profile.
2. `arg_groups/moe_hook.py` (`--moe-a2a-backend deepep_v2`): `NCCL_CUMEM_ENABLE=1` if unset.
3. `arg_groups/parallel_hook.py` (max(TP, EP, DP) > 1 and a CUDA-graph phase may capture;
   on CUDA the prefill phase captures unless disabled): `NCCL_GRAPH_REGISTER=0` if unset;
   an explicit other value is kept and SGLang warns that graph replay can hang. Earlier
   releases (0.5.20 .. 0.5.22) set it only for narrower guards (`_graph_register_why`).
Each rule applies only where the release's wheel has it (`fastverify.sglang.facts`).
4. `entrypoints/engine.py` `_set_envs_and_config`: multi-node on an MNNVL fabric:
   `NCCL_CUMEM_ENABLE=1`, `NCCL_MNNVL_ENABLE=1` if unset (hardware-dependent: reported as
   possible); `NCCL_CUMEM_ENABLE` = int(symm-mem) when unset or `--enable-symm-mem`;
   `NCCL_NVLS_ENABLE` = int(nccl-nvls or symm-mem) when unset or either flag is given;
   `NCCL_GRAPH_MIXING_SUPPORT=0` with `--dcp-size` > 1 when unset or symm-mem.

Not modelled: the KV-shard symmetric scratch (`--enable-kv-cache-sharding` with
SGLANG_ENABLE_KV_SHARD_ZERO_SM_GATHER) that also turns NCCL_CUMEM_ENABLE to 1; it is
reported as possible when that flag is present.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from fastverify.sglang import facts as _facts
from fastverify.sglang.launch import LaunchArgs
from fastverify.sglang.versions import PINNED_VERSION

DETERMINISTIC_NCHANNELS_VAR = "SGLANG_DETERMINISTIC_NCCL_NCHANNELS"
DETERMINISTIC_NCHANNELS_DEFAULT = "8"
GRAPH_REGISTER_WARNING = "was set explicitly; graph replay of captured cross-rank"
# Every NCCL variable any rule may write (verification accepts nothing else from SGLang).
RULE_VARS = frozenset(
    {
        "NCCL_ALGO",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_CUMEM_ENABLE",
        "NCCL_GRAPH_REGISTER",
        "NCCL_MNNVL_ENABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_GRAPH_MIXING_SUPPORT",
    }
)


@dataclass
class EngineEnv:
    """What SGLang `version` does to the NCCL environment it was started with.

    `added`: variables it sets that the profile leaves unset; `overrides`: profile
    variables it replaces (name -> [profile value, SGLang value]); `conflicts`: profile
    values it keeps but warns about (name -> why); `possible`: variables it may add
    depending on hardware fastverify cannot see (name -> value); `why`: rule per name."""

    version: str
    added: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, list[str]] = field(default_factory=dict)
    conflicts: dict[str, str] = field(default_factory=dict)
    possible: dict[str, str] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)

    def final(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` as SGLang's schedulers hold it."""
        out = dict(env)
        out.update(self.added)
        out.update({k: v[1] for k, v in self.overrides.items()})
        return out

    def allowed_extra(self) -> dict[str, str]:
        """Variables a scheduler may hold beyond the profile: added + possible."""
        return {**self.possible, **self.added}

    def summary(self) -> str:
        """One line: `SGLang 0.5.23 will add NCCL_GRAPH_REGISTER=0 (...)`, or ''."""
        parts = []
        if self.added:
            parts.append("will add " + ", ".join(f"{k}={v}" for k, v in sorted(self.added.items())))
        if self.overrides:
            parts.append(
                "will override "
                + ", ".join(f"{k}={v[1]} (profile: {v[0]})" for k, v in self.overrides.items())
            )
        if self.conflicts:
            parts.append("warns about " + ", ".join(sorted(self.conflicts)))
        if self.possible:
            parts.append(
                "may add " + ", ".join(f"{k}={v}" for k, v in sorted(self.possible.items()))
            )
        return f"SGLang {self.version} " + "; ".join(parts) if parts else ""

    def lines(self) -> list[str]:
        """One line per variable with its reason: `SGLang 0.5.23 will add
        NCCL_GRAPH_REGISTER=0 (TP/EP/DP > 1 and a CUDA-graph phase may capture ...)`."""
        who = f"SGLang {self.version}"
        out = [
            f"{who} will add {k}={v} ({self.why.get(k, 'its own rule')})"
            for k, v in sorted(self.added.items())
        ]
        out += [
            f"{who} will override {k}={got} (profile: {want}; {self.why.get(k, 'its own rule')})"
            for k, (want, got) in sorted(self.overrides.items())
        ]
        out += [f"{who}: {msg}" for _, msg in sorted(self.conflicts.items())]
        out += [
            f"{who} may add {k}={v} ({self.why.get(k, 'hardware-dependent')})"
            for k, v in sorted(self.possible.items())
        ]
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary()
        return d


def engine_env(
    args: LaunchArgs,
    env: Mapping[str, str],
    version: str = PINNED_VERSION,
) -> EngineEnv:
    """Apply SGLang `version`'s rules to `env` (the environment the server starts with)."""
    out = EngineEnv(version=version)
    cur = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    profile = dict(cur)

    def assign(name: str, value: str, why: str) -> None:
        cur[name] = value
        out.why[name] = why

    def setdefault(name: str, value: str, why: str) -> None:
        if name not in cur:
            assign(name, value, why)

    sets = _sets_for(version)
    tp = args.tp_size
    # each rule applies where the release's wheel has it (its facts' env.nccl_added)
    if (
        sets("NCCL_MAX_NCHANNELS")
        and args.flag("--enable-deterministic-inference") is not None
        and tp > 1
    ):
        n = env.get(DETERMINISTIC_NCHANNELS_VAR, DETERMINISTIC_NCHANNELS_DEFAULT)
        why = "deterministic inference with TP > 1 (attention_hook)"
        assign("NCCL_ALGO", "allreduce:tree", why)
        assign("NCCL_MIN_NCHANNELS", n, why)
        assign("NCCL_MAX_NCHANNELS", n, why)
    if sets("NCCL_CUMEM_ENABLE", "moe_hook") and args.flag("--moe-a2a-backend") == "deepep_v2":
        setdefault("NCCL_CUMEM_ENABLE", "1", "DeepEP v2 all-to-all needs cuMem (moe_hook)")
    ep = _int(args.flag("--ep-size", "--expert-parallel-size", "--ep"), 1)
    dp = _int(args.flag("--dp-size", "--data-parallel-size"), 1)
    register_why = _graph_register_why(version, args, env, tp, ep, dp)
    if register_why is not None:
        if "NCCL_GRAPH_REGISTER" not in cur:
            assign("NCCL_GRAPH_REGISTER", "0", register_why)
        elif cur["NCCL_GRAPH_REGISTER"] != "0":
            out.conflicts["NCCL_GRAPH_REGISTER"] = (
                f"SGLang {version} keeps NCCL_GRAPH_REGISTER={cur['NCCL_GRAPH_REGISTER']} "
                "but warns that graph replay of captured cross-rank collectives can hang "
                "with registered buffers; it sets 0 when the variable is unset"
            )
    # the typed field (from_argv reads --nnodes into it), else a raw flag among extra_args
    nnodes = max(args.nnodes, _int(args.flag("--nnodes"), 1))
    symm = args.flag("--enable-symm-mem") is not None
    nvls = args.flag("--enable-nccl-nvls") is not None
    if sets("NCCL_MNNVL_ENABLE") and nnodes > 1:
        for name in ("NCCL_CUMEM_ENABLE", "NCCL_MNNVL_ENABLE"):
            if name not in cur:
                out.possible[name] = "1"
                out.why[name] = "multi-node on an MNNVL fabric (engine.py)"
    if not unguarded(version, "NCCL_CUMEM_ENABLE"):
        if "NCCL_CUMEM_ENABLE" not in cur or symm:
            assign("NCCL_CUMEM_ENABLE", str(int(symm)), "unset, or --enable-symm-mem (engine.py)")
            if args.flag("--enable-kv-cache-sharding") is not None and not symm:
                out.possible["NCCL_CUMEM_ENABLE"] = "1"
        if "NCCL_NVLS_ENABLE" not in cur or nvls or symm:
            assign(
                "NCCL_NVLS_ENABLE",
                str(int(nvls or symm)),
                "unset, or --enable-nccl-nvls / --enable-symm-mem (engine.py)",
            )
    else:  # 0.5.1 .. 0.5.3: assigned whatever the environment held (a profile's value too)
        assign("NCCL_CUMEM_ENABLE", str(int(symm)), "always, = --enable-symm-mem (engine.py)")
        if not symm:
            assign("NCCL_NVLS_ENABLE", str(int(nvls)), "always, = --enable-nccl-nvls (engine.py)")
    if (
        sets("NCCL_GRAPH_MIXING_SUPPORT")
        and ("NCCL_GRAPH_MIXING_SUPPORT" not in cur or symm)
        and _int(args.flag("--dcp-size"), 1) > 1
    ):
        assign("NCCL_GRAPH_MIXING_SUPPORT", "0", "--dcp-size > 1 (engine.py)")
    for name, value in cur.items():
        if name not in profile:
            out.added[name] = value
        elif profile[name] != value:
            out.overrides[name] = [profile[name], value]
    out.why = {k: v for k, v in out.why.items() if k in out.added or k in out.overrides
               or k in out.possible or k in out.conflicts}  # fmt: skip
    return out


def _facts_for(version: str) -> Any:
    try:
        return _facts.resolve(version)
    except _facts.VersionTooOld:
        return _facts.resolve(_facts.oldest())


def _graph_register_why(
    version: str, args: LaunchArgs, env: Mapping[str, str], tp: int, ep: int, dp: int
) -> str | None:
    """Why SGLang `version` sets NCCL_GRAPH_REGISTER=0 for this argv, None when it does not.
    The guards differ per release (facts `features.graph_register_triggers`, read from
    arg_groups/parallel_hook.py): 0.5.23 any multi-rank capture; 0.5.20 .. 0.5.22 only the
    TP LM-head all-to-all (explicit, or its default on a decode-only PD node with pure DP
    attention, overrides.py `_tp_lm_head_all_to_all_default`) and, from 0.5.22, a pausable
    graph pool (`--enable-memory-saver` with SGLANG_MEMORY_SAVER_CUDA_GRAPH)."""
    triggers = _facts_for(version).features.get("graph_register_triggers") or []
    captures = not all(args.phases_off().values())
    if "any_capture" in triggers and max(tp, ep, dp) > 1 and captures:
        return "TP/EP/DP > 1 and a CUDA-graph phase may capture collectives (parallel_hook)"
    if "tp_lm_head_all_to_all" in triggers:
        explicit = args.flag("--enable-tp-lm-head-all-to-all")
        opted_out = args.flag("--no-enable-tp-lm-head-all-to-all") is not None
        default_on = (
            args.flag("--disaggregation-mode") == "decode"
            and args.flag("--enable-dp-attention") is not None
            and dp > 1
            and tp == dp
            and args.flag("--enable-dp-lm-head") is None
        )
        if not opted_out and (explicit is not None or default_on):
            return "the TP LM-head all-to-all is captured in decode graphs (parallel_hook)"
    if (
        "pausable_graph_pool" in triggers
        and args.flag("--enable-memory-saver") is not None
        and env.get("SGLANG_MEMORY_SAVER_CUDA_GRAPH", "").lower() in ("1", "true", "yes", "on")
    ):
        return "CUDA graphs in a pausable torch_memory_saver pool (parallel_hook)"
    return None


def unguarded(version: str, name: str) -> bool:
    """Does SGLang `version`'s engine.py assign `name` whatever the environment held
    (facts: an `engine.py ... set` site, not `set-if-unset`)?"""
    sites = _facts_for(version).env["nccl_added"].get(name) or []
    return any("entrypoints/engine.py" in s and s.endswith(" set") for s in sites)


def _sets_for(version: str) -> Any:
    """`sets(NAME[, where])`: does SGLang `version` write NAME (in a file named `where`)?
    From the release's facts (`env.nccl_added`, read from its wheel); a version below the
    range is judged by the oldest release's."""
    added = _facts_for(version).env["nccl_added"]

    def sets(name: str, where: str | None = None) -> bool:
        sites = added.get(name) or []
        return bool(sites) and (where is None or any(where in s for s in sites))

    return sets


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default
