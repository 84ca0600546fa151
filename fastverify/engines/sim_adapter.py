"""The `sim` engine adapter: `python -m fastverify.sim` with SGLang's own argv
(the same flags the sglang adapter builds, pinned flag generation unless configured)
plus the sim-only `--sim-load-seconds`.

The sim is a stand-in for demos and tests (see fastverify/sim); `simulated`
is True and `status` says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from fastverify.config import ServerConfig
from fastverify.engines.allreduce_host import AllreduceHost
from fastverify.engines.base import ArgvCheck, Engine
from fastverify.engines.sglang import _strip_module, server_args
from fastverify.profiles.validate import Topology
from fastverify.sglang.envrules import EngineEnv, engine_env
from fastverify.sglang.launch import LaunchArgs
from fastverify.sglang.versions import PINNED_VERSION

SIM_MODEL = "sim/kimi-k2.5-61L-moe"
SIM_DRAFT = "sim/kimi-k2.5-eagle3"


class SimEngine(Engine):
    name = "sim"
    simulated = True

    def __init__(
        self, python: str = "", load_seconds: float = 3.0, sglang_version: str = PINNED_VERSION
    ):
        self.python = python or sys.executable
        self.load_seconds = load_seconds
        self.played_version = sglang_version or PINNED_VERSION

    def sglang_version(self) -> str:
        """The SGLang release the sim plays (`--sim-sglang-version`)."""
        return self.played_version

    def build_argv(self, server: ServerConfig, mode: str, requires: Mapping[str, str]) -> list[str]:
        if server.sglang_flags in ("new", "old"):
            generation = server.sglang_flags
        else:
            generation = self.facts().flag_generation
        argv = [self.python, "-m", "fastverify.sim"]
        argv += server_args(
            server,
            mode,
            requires,
            generation,
            server.model_path or SIM_MODEL,
            server.draft_model_path or SIM_DRAFT,
        )
        argv += ["--sim-load-seconds", f"{self.load_seconds:g}"]
        override = server.steps_override
        other_steps = mode == "adaptive" or (
            mode == "eagle3" and override is not None and override != server.eagle3.num_steps
        )
        if other_steps and "--sim-accept-steps" not in server.extra_args:
            # --sim-accept-length (in extra_args) keeps its meaning: the acceptance at the
            # configured EAGLE-3 steps, whatever step count adaptive (or a timing trial's
            # steps override) launches at
            argv += ["--sim-accept-steps", str(server.eagle3.num_steps)]
        if self.played_version != PINNED_VERSION:
            argv += ["--sim-sglang-version", self.played_version]
        return argv

    def companion_argv(
        self, module: str, server_argv: list[str], flags: Callable[[list[str]], list[str]]
    ) -> list[str]:
        """The sim's program in place of SGLang's `module` (`sglang.srt.X` is
        `fastverify.sim.X`, with that module's command line in the played release) with the
        server's flags it takes (the sim's own set aside), plus the sim's load time and
        played release."""
        args, skip = [], False
        for tok in _strip_module(server_argv):
            if tok.startswith("--sim-"):
                skip = "=" not in tok
                continue
            if skip and not tok.startswith("--"):
                continue
            skip = False
            args.append(tok)
        return [
            self.python, "-m", "fastverify.sim." + module.removeprefix("sglang.srt."),
            *flags(args), "--sim-load-seconds", f"{self.load_seconds:g}",
            "--sim-sglang-version", self.played_version,
        ]  # fmt: skip

    def check_argv(self, argv: list[str]) -> ArgvCheck:
        """Run the sim's own parser (in-process: it is part of this package and light)."""
        import contextlib
        import io

        try:
            from fastverify.sim.cli_args import parse
        except ImportError as exc:
            return ArgvCheck(None, f"the sim's parser is not importable: {exc}")
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parse(_strip_module(argv))
        except SystemExit:
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            return ArgvCheck(False, f"rejected by the sim's parser: {lines[-1] if lines else '?'}")
        return ArgvCheck(True, "accepted by the sim's parser (SGLang-compatible argv)")

    def engine_env(self, argv: list[str], env: Mapping[str, str]) -> EngineEnv:
        """The sim follows the SGLang it plays: its main process applies the same rules
        before its workers start (fastverify.sim.engine.apply_engine_env)."""
        return engine_env(LaunchArgs.from_argv(_strip_module(argv)), env, self.played_version)

    def allreduce_host(self, argv: list[str]) -> AllreduceHost:
        """The sim's simulated host (not this machine's GPUs): PCIe-only with P2P, the
        simulated FlashInfer of `--sim-flashinfer`, the cost model's hidden size and its
        decode graphs up to bs 32 (fastverify.sim.allreduce_sim)."""
        from fastverify.sim import allreduce_sim, costmodel

        fi_ok, fi_why = allreduce_sim.flashinfer_offer(argv)
        return AllreduceHost(
            engine=self.name,
            view="the sim engine's simulated host",
            host=allreduce_sim.HOST_TEXT,
            has_nvlink=False,
            p2p=True,
            flashinfer_pcie_ipc=fi_ok,
            flashinfer_why=fi_why,
            hidden=costmodel.HIDDEN,
            gpu_sm=int(flashinfer_jit_arch()),
            decode_max_bs=allreduce_sim.SIM_DECODE_MAX_BS,
            request_pool=allreduce_sim.SIM_REQUEST_POOL,
            simulated=True,
        )

    def gpu_bytes(self) -> int:
        """The sim's simulated GPU (its start-up lines' memory figures add up to it)."""
        from fastverify.sim.costtable import GPU_GB

        return int(GPU_GB * (1 << 30))

    def simulated_weight_bytes(self, ranks: int) -> int:
        """Each rank holds its "Load weight end ... mem usage" (the sim's weights)."""
        from fastverify.sim.costtable import WEIGHTS_GB

        return int(WEIGHTS_GB * (1 << 30)) * ranks

    def topology(self) -> Topology:
        """The sim's simulated host: PCIe-only, no NVLink (what `doctor` shows of it)."""
        from fastverify.sim import allreduce_sim

        return Topology(has_nvlink=False, source=allreduce_sim.HOST_TEXT)

    def pcie_report(self) -> None:
        """The sim's host is simulated: there is no PCIe path to read."""
        return None

    def extra_env(self) -> dict[str, str]:
        # The sim is part of this package: make it importable from a source checkout too.
        root = str(Path(__file__).resolve().parent.parent.parent)
        return {"PYTHONPATH": root}


def flashinfer_jit_arch() -> str:
    from fastverify.sim.flashinfer_jit import SIM_ARCH

    return SIM_ARCH
