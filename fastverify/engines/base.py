"""What every engine adapter provides: argv for a (server config, mode, profile requires),
a way to check that argv before anything running is stopped, and its identity.

The supervisor only talks to engines through this interface (see docs/reference/CONTRACTS.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastverify.engines.allreduce_host import AllreduceHost
    from fastverify.sglang.envrules import EngineEnv
    from fastverify.sglang.facts import SGLangFacts

from fastverify.config import ServerConfig

# `requires:` keys a profile may use, and the values each understands.
KNOWN_REQUIRES: dict[str, tuple[str, ...]] = {
    "cuda-graph": ("on", "off"),
    "custom-all-reduce": ("on", "off"),
}


class EngineArgError(ValueError):
    """The argv cannot be built (missing model path, unknown `requires:`...); message says why."""


@dataclass(frozen=True)
class ArgvCheck:
    """Verdict of an engine's own argument parser: ok True/False, or None = cannot check here."""

    ok: bool | None
    message: str
    # per step (import, parse, resolve): {"step", "ok", "message"}; SGLang's version; the
    # NCCL variables its resolution set; the CUDA-graph backend per phase it resolved
    steps: tuple[dict[str, Any], ...] = ()
    version: str | None = None
    env_added: dict[str, str] = field(default_factory=dict)
    cuda_graph: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"ok": self.ok, "message": self.message}
        if self.steps:
            out["steps"] = list(self.steps)
        if self.version:
            out["version"] = self.version
        if self.env_added:
            out["env_added"] = dict(self.env_added)
        if self.cuda_graph is not None:
            out["cuda_graph"] = self.cuda_graph
        return out


def check_requires(requires: Mapping[str, str]) -> None:
    for key, value in requires.items():
        if key not in KNOWN_REQUIRES:
            raise EngineArgError(
                f"profile requires {key}={value}: unknown requirement "
                f"(known: {', '.join(sorted(KNOWN_REQUIRES))})"
            )
        if value not in KNOWN_REQUIRES[key]:
            raise EngineArgError(
                f"profile requires {key}={value}: expected one of {', '.join(KNOWN_REQUIRES[key])}"
            )


class Engine(ABC):
    """An engine adapter. `name` ("sglang" | "sim"), `simulated` (True for the sim)."""

    name: str = ""
    simulated: bool = False
    # NCCL variables the engine sets itself for its worker processes; verification accepts
    # them in workers when the profile does not set them (and reports them).
    engine_owned_nccl: frozenset[str] = frozenset()

    @abstractmethod
    def build_argv(self, server: ServerConfig, mode: str, requires: Mapping[str, str]) -> list[str]:
        """The full argv (interpreter first) to launch the server for `mode` (baseline|eagle3)."""

    @abstractmethod
    def check_argv(self, argv: list[str]) -> ArgvCheck:
        """Ask the engine's own parser whether `argv` is valid (None verdict: cannot check)."""

    def engine_env(self, argv: list[str], env: Mapping[str, str]) -> EngineEnv | None:
        """The NCCL variables the engine adds to / overrides in its workers for this argv
        and start environment (None: the engine has no such rules)."""
        return None

    def extra_env(self) -> dict[str, str]:
        """Variables the engine needs beyond the clean base (e.g. the sim's PYTHONPATH)."""
        return {}

    def health_path(self) -> str:
        return "/health"

    def allreduce_host(self, argv: list[str]) -> AllreduceHost:
        """What decides the TP all-reduce backend where this engine's server runs
        (fastverify.engines.allreduce_host): this machine's GPUs, the model's config.json,
        FlashInfer in the server's interpreter. Asked once per argv and kept."""
        cache = self.__dict__.setdefault("_allreduce_hosts", {})
        key = tuple(argv)
        if key not in cache:
            from fastverify.engines.host_probe import probe_host

            cache[key] = probe_host(self, argv)
        return cache[key]

    def gpu_bytes(self) -> int | None:
        """One GPU's memory where this engine's server runs (nvidia-smi's memory.total of
        GPU 0), None without a reading: what a standby switch must fit in."""
        if "_gpu_bytes" not in self.__dict__:  # a GPU's size does not change: asked once
            from fastverify.engines.host_probe import gpu_memory_and_sm

            mib, _ = gpu_memory_and_sm(timeout=5.0)
            self.__dict__["_gpu_bytes"] = None if mib is None else mib << 20
        got: int | None = self.__dict__["_gpu_bytes"]
        return got

    def simulated_weight_bytes(self, ranks: int) -> int | None:
        """The model's weights that simulated GPUs hold over `ranks` ranks (the sim's stand-in
        for NVML, for memory a part shares between engines); None on a real host, where NVML
        or SGLang's own lines tell it."""
        return None

    def topology(self) -> Any:
        """The GPU links where this engine's server runs, for the profile checks that need
        them (LL128 without NVLink): a fastverify.profiles.validate.Topology, or None for
        this machine's own (nvidia-smi, read when a check first needs it)."""
        return None

    def pcie_report(self) -> Any:
        """The PCIe path between the GPUs where this engine's server runs
        (fastverify.host.pcie.PcieReport: ACS redirect, IOMMU), read once and kept; None
        when the engine's host is simulated."""
        if "_pcie_report" not in self.__dict__:
            from fastverify.host.pcie import collect

            self.__dict__["_pcie_report"] = collect()
        return self.__dict__["_pcie_report"]

    def sglang_version(self) -> str:
        """The SGLang version the engine's server runs (or plays, for the sim)."""
        from fastverify.sglang.versions import PINNED_VERSION

        return PINNED_VERSION

    def facts(self) -> SGLangFacts:
        """The one facts object for this engine's SGLang (`fastverify.sglang.facts.resolve`:
        raises VersionTooOld below the range; the newest facts, flagged, above it)."""
        from fastverify.sglang.facts import resolve

        version = self.sglang_version()
        cached = getattr(self, "_facts_cache", None)
        if cached is None or cached.version != version:
            cached = resolve(version)
            self._facts_cache = cached
        return cached

    def companion_argv(
        self, module: str, server_argv: list[str], flags: Callable[[list[str]], list[str]]
    ) -> list[str]:
        """The command line of SGLang's program `python -m module` (a daemon SGLang runs
        beside its server) for a server started with `server_argv`: the same interpreter,
        and `flags(server's flags)`, those of the server's flags that program takes."""
        argv = server_argv
        args = argv[argv.index("-m") + 2 :] if "-m" in argv else argv[1:]
        return [argv[0], "-m", module, *flags(args)]

    def follower(self, argv: list[str]) -> bool:
        """Does `argv` start a follower node of a multi-node server (ready when its health
        check answers: it prints no ready line)? Engines without multi-node: never."""
        return False
