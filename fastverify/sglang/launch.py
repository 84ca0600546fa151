"""`LaunchArgs`: the typed launch arguments of an SGLang server and their argv per flag
generation (see `versions`).

The daemon launches `python -m sglang.launch_server ARGS`: 0.5.23 recommends `sglang
serve` (and warns on the module form), but `serve` first guesses a backend from the model
path, while `sglang.launch_server` is exactly `prepare_server_args(argv)` +
`run_server` (which resolves the arguments), so the argv the daemon builds is the argv
`server check` validates. `LaunchArgs.from_argv` reads back the flags that change what
SGLang does to its NCCL environment (see `envrules`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fastverify.sglang.versions import FLAG_GENERATIONS

LAUNCH_MODULE = "sglang.launch_server"
DECODE_LOG_INTERVAL = 40
# the module form's deprecation notice (a UserWarning on stderr, not an error)
MODULE_FORM_WARNING = "'python -m sglang.launch_server' is still supported"

# CUDA-graph off, per generation: every phase the version can capture.
CUDA_GRAPH_OFF: dict[str, tuple[str, ...]] = {
    "new": (
        "--cuda-graph-backend-decode", "disabled",
        "--cuda-graph-backend-prefill", "disabled",
    ),
    "old": ("--disable-cuda-graph",),
}  # fmt: skip
# phases of the new generation, as `--cuda-graph-backend-<phase>` names them
CUDA_GRAPH_PHASES = ("decode", "prefill")
CUDA_GRAPH_BACKENDS = ("full", "breakable", "disabled")
LOAD_FORMATS_KNOWN = ("auto", "pt", "safetensors", "npcache", "dummy", "gguf", "layered")


class LaunchArgsError(ValueError):
    """The launch args cannot make an argv (message says what and what would be right)."""


@dataclass(frozen=True)
class Speculative:
    """EAGLE-3 (or another algorithm) drafting settings."""

    draft_model_path: str
    num_steps: int = 3
    eagle_topk: int = 1
    num_draft_tokens: int = 4
    algorithm: str = "EAGLE3"


@dataclass(frozen=True)
class LaunchArgs:
    """What fastverify asks of an SGLang server. `to_argv(generation)` spells it."""

    model_path: str
    tp_size: int = 1
    host: str = "127.0.0.1"
    port: int = 30000
    enable_metrics: bool = True
    decode_log_interval: int = DECODE_LOG_INTERVAL
    speculative: Speculative | None = None
    cuda_graph: bool = True
    custom_all_reduce: bool = True
    load_format: str | None = None
    # one server over several nodes: SGLang's --dist-init-addr (node 0's HOST:PORT),
    # --nnodes, --node-rank; tp_size is the total over all nodes
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str = ""
    extra_args: tuple[str, ...] = field(default=())

    def with_(self, **changes: Any) -> LaunchArgs:
        return replace(self, **changes)

    def to_argv(self, generation: str = "new") -> list[str]:
        """SGLang's argv (without interpreter and module) in the flag `generation`."""
        if generation not in FLAG_GENERATIONS:
            raise LaunchArgsError(f"flag generation {generation!r}: expected new or old")
        if not self.model_path:
            raise LaunchArgsError("model_path is empty (the model SGLang should load)")
        if self.tp_size < 1:
            raise LaunchArgsError(f"tp_size {self.tp_size}: expected 1 or more")
        argv = [
            "--model-path", self.model_path,
            "--tp-size", str(self.tp_size),
            "--host", self.host,
            "--port", str(self.port),
        ]  # fmt: skip
        if self.enable_metrics:
            argv.append("--enable-metrics")
        argv += ["--decode-log-interval", str(self.decode_log_interval)]
        if self.load_format is not None:
            argv += ["--load-format", self.load_format]
        spec = self.speculative
        if spec is not None:
            if not spec.draft_model_path:
                raise LaunchArgsError("speculative decoding needs a draft model path")
            argv += [
                "--speculative-algorithm", spec.algorithm,
                "--speculative-draft-model-path", spec.draft_model_path,
                "--speculative-num-steps", str(spec.num_steps),
                "--speculative-eagle-topk", str(spec.eagle_topk),
                "--speculative-num-draft-tokens", str(spec.num_draft_tokens),
            ]  # fmt: skip
        if not self.cuda_graph:
            argv += list(CUDA_GRAPH_OFF[generation])
        if not self.custom_all_reduce:
            argv.append("--disable-custom-all-reduce")
        if self.nnodes > 1:
            if not self.dist_init_addr:
                raise LaunchArgsError(
                    f"nnodes {self.nnodes} needs dist_init_addr (HOST:PORT of node 0)"
                )
            if not 0 <= self.node_rank < self.nnodes:
                raise LaunchArgsError(
                    f"node_rank {self.node_rank}: expected 0..{self.nnodes - 1} for "
                    f"nnodes {self.nnodes}"
                )
            if self.tp_size % self.nnodes:
                raise LaunchArgsError(
                    f"tp_size {self.tp_size} over {self.nnodes} nodes: expected a multiple "
                    "of nnodes (the same number of GPUs on every node)"
                )
            argv += [
                "--dist-init-addr", self.dist_init_addr,
                "--nnodes", str(self.nnodes),
                "--node-rank", str(self.node_rank),
            ]  # fmt: skip
        argv += list(self.extra_args)
        return argv

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> LaunchArgs:
        """Read back an argv this module (or a user's extra args) spelled. Unknown flags are
        kept in `extra_args`; `--flag=value` and `--flag value` both work."""
        pairs = _split(argv)
        known: dict[str, str | None] = {}
        extra: list[str] = []
        for flag, value, raw in pairs:
            if flag in _READ_BACK:
                known[flag] = value
            else:
                extra += raw
        spec = None
        if "--speculative-algorithm" in known:
            spec = Speculative(
                draft_model_path=known.get("--speculative-draft-model-path") or "",
                num_steps=_int(known.get("--speculative-num-steps"), 3),
                eagle_topk=_int(known.get("--speculative-eagle-topk"), 1),
                num_draft_tokens=_int(known.get("--speculative-num-draft-tokens"), 4),
                algorithm=known.get("--speculative-algorithm") or "EAGLE3",
            )
        per_phase = {f: v for f, v, _ in pairs if f.startswith("--cuda-graph-backend-")}
        graph_off = "--disable-cuda-graph" in known or (
            per_phase.get("--cuda-graph-backend-decode") == "disabled"
            and per_phase.get("--cuda-graph-backend-prefill") == "disabled"
        )
        if graph_off and "--disable-cuda-graph" not in known:
            extra = _drop(extra, CUDA_GRAPH_OFF["new"])
        return cls(
            model_path=known.get("--model-path") or "",
            tp_size=_int(known.get("--tp-size") or known.get("--tensor-parallel-size"), 1),
            host=known.get("--host") or "127.0.0.1",
            port=_int(known.get("--port"), 30000),
            enable_metrics="--enable-metrics" in known,
            decode_log_interval=_int(known.get("--decode-log-interval"), DECODE_LOG_INTERVAL),
            speculative=spec,
            cuda_graph=not graph_off,
            custom_all_reduce="--disable-custom-all-reduce" not in known,
            load_format=known.get("--load-format"),
            nnodes=_int(known.get("--nnodes"), 1),
            node_rank=_int(known.get("--node-rank"), 0),
            dist_init_addr=known.get("--dist-init-addr") or "",
            extra_args=tuple(extra),
        )

    @property
    def follower(self) -> bool:
        """A node of a multi-node server other than node 0: SGLang runs its schedulers and
        a health-only HTTP server there (no tokenizer, no ready line)."""
        return self.nnodes > 1 and self.node_rank >= 1

    def flag(self, *names: str) -> str | None:
        """The value of a flag among `extra_args` ("" for a bare switch, None if absent)."""
        for flag, value, _ in _split(self.extra_args):
            if flag in names:
                return "" if value is None else value
        return None

    def phases_off(self) -> dict[str, bool]:
        """Which CUDA-graph phases the argv disables explicitly (new generation names)."""
        off = {phase: not self.cuda_graph for phase in CUDA_GRAPH_PHASES}
        for phase in CUDA_GRAPH_PHASES:
            value = self.flag(f"--cuda-graph-backend-{phase}")
            if value is not None:
                off[phase] = value == "disabled"
            if self.flag(f"--disable-{phase}-cuda-graph") is not None:
                off[phase] = True
        return off


_SWITCHES = {"--enable-metrics", "--disable-cuda-graph", "--disable-custom-all-reduce"}
_READ_BACK = _SWITCHES | {
    "--model-path", "--tp-size", "--tensor-parallel-size", "--host", "--port",
    "--decode-log-interval", "--load-format", "--speculative-algorithm",
    "--speculative-draft-model-path", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--nnodes", "--node-rank", "--dist-init-addr",
}  # fmt: skip


def without_flags(
    argv: Sequence[str], valued: Collection[str], switches: Collection[str] = ()
) -> list[str]:
    """`argv` without the flags in `valued` and their values (`--flag value` or
    `--flag=value`), and without the switches in `switches` (no value)."""
    out: list[str] = []
    skip = False
    for tok in argv:
        if skip:
            skip = False
            continue
        flag = tok.partition("=")[0]
        if flag in valued:
            skip = "=" not in tok
            continue
        if flag not in switches:
            out.append(tok)
    return out


def _drop(tokens: list[str], pairs: tuple[str, ...]) -> list[str]:
    """`tokens` without the flag/value pairs in `pairs` (either spelling)."""
    drop = {f"{pairs[i]}={pairs[i + 1]}" for i in range(0, len(pairs), 2)}
    out: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in drop:
            i += 1
            continue
        if i + 1 < len(tokens) and f"{tok}={tokens[i + 1]}" in drop:
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


def _split(argv: Sequence[str]) -> list[tuple[str, str | None, list[str]]]:
    """[(flag, value or None, the raw tokens)] for `--flag value`, `--flag=value`, `--switch`."""
    out: list[tuple[str, str | None, list[str]]] = []
    i = 0
    items = list(argv)
    while i < len(items):
        tok = items[i]
        if tok.startswith("--") and "=" in tok:
            flag, _, value = tok.partition("=")
            out.append((flag, value, [tok]))
            i += 1
        elif tok.startswith("--"):
            nxt = items[i + 1] if i + 1 < len(items) else None
            if tok in _SWITCHES or nxt is None or nxt.startswith("--"):
                out.append((tok, None, [tok]))
                i += 1
            else:
                out.append((tok, nxt, [tok, nxt]))
                i += 2
        else:
            out.append(("", tok, [tok]))
            i += 1
    return out


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default
