"""SGLang's weight cache as each release declares it: the cache daemon's command line for a
server's, where its socket and ready files go, what a ready file says, and the lines a
client start writes (a hit, a fallback, a refusal).

Everything here is derived from the release's facts (its `weight_cache` section, read from
its wheel by scripts/sglang_facts.py): `of(facts)` is None for a release without the cache
(before 0.5.17). Two command-line styles exist: 0.5.17 and 0.5.18's daemon has its own
parser (`--model-path --tp-size --dtype ...`); from 0.5.19 it takes a few flags of its own
(`--gpu-id --tp-rank --timeout --force ...`) and hands the rest to SGLang's server parser,
so the cache sees the same configuration as the server. The paths are keyed by global rank
in /tmp (0.5.17, 0.5.18), then by the GPU's UUID through SGLANG_WEIGHT_CACHE_*_TEMPLATE.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastverify.sglang.launch import without_flags

MODE_FLAG = "--weight-cache-mode"
SOCKET_FLAG = "--weight-cache-socket"
TIMEOUT_FLAG = "--weight-cache-timeout"
CLIENT = "client"
# a server's flags the cache daemon is never given: the draft (it exports none), the cache's
# own client flags, and where the HTTP server listens
_NOT_FOR_THE_CACHE = ("--speculative-", "--weight-cache-", "--host", "--port", "--enable-metrics")


@dataclass(frozen=True)
class ReadyFile:
    """A ready file: the daemon's pid and the fingerprint it serves (CacheConfig as a dict)."""

    pid: int | None
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LoaderEvent:
    """One line of a client start: `kind` (fetched, loaded, fallback, socket_missing,
    refused, mismatch, daemon_died, mapped, or engine_config/daemon_config: the two lines
    under a mismatch) and the values the template interpolates, in order."""

    kind: str
    values: tuple[str, ...]


class CacheFacts:
    """The weight cache of one SGLang release (see the module docstring)."""

    def __init__(self, version: str, data: Mapping[str, Any]) -> None:
        self.version = version
        self.data = data
        self._patterns: list[tuple[str, re.Pattern[str]]] | None = None

    @property
    def module(self) -> str:
        return str(self.data["module"])

    @property
    def daemon_flags(self) -> tuple[str, ...]:
        return tuple(self.data["daemon_flags"])

    @property
    def takes_server_args(self) -> bool:
        return bool(self.data["daemon_takes_server_args"])

    @property
    def refusal(self) -> str | None:
        """SGLang's own refusal of the cache together with speculative decoding."""
        r = self.data.get("speculative_refusal")
        return str(r["template"]) if r else None

    @property
    def path_key(self) -> str:
        """What keys a rank's socket and ready file: "global_rank" or "device_uuid"."""
        return str(self.data["paths"]["key"])

    def template(self, kind: str, env: Mapping[str, str] | None = None) -> str:
        """The socket ("socket") or ready ("ready") path template, as this release reads it:
        the environment variable's value where the release has one and it is set."""
        p = self.data["paths"][kind]
        var = p.get("env")
        if var and env is not None and env.get(var):
            return str(env[var])
        return str(p["template"])

    def template_vars(self) -> dict[str, str]:
        """kind -> the environment variable that moves the path (empty: fixed paths)."""
        return {
            k: self.data["paths"][k]["env"]
            for k in ("socket", "ready")
            if self.data["paths"][k]["env"]
        }

    def ready_glob(self, env: Mapping[str, str] | None = None) -> str:
        """A glob matching every rank's ready file."""
        return self.template("ready", env).replace("{" + self.path_key + "}", "*")

    def ready_path(self, key: str | int, env: Mapping[str, str] | None = None) -> str:
        return self.template("ready", env).format(**{self.path_key: key})

    def socket_path(self, key: str | int, env: Mapping[str, str] | None = None) -> str:
        return self.template("socket", env).format(**{self.path_key: key})

    @property
    def fingerprint_fields(self) -> tuple[str, ...]:
        return tuple(self.data["cache_config"])

    @property
    def accounts_cached_weights(self) -> bool:
        """Does the server add the cache's weights back into --mem-fraction-static's base
        (`account_preloaded_weights`, from 0.5.19)? Before, a client sizes its KV pool from
        the memory left beside the cache, so its headroom shrinks by the cache's share."""
        return bool(self.data["accounts_cached_weights"])

    @property
    def dies_with_parent(self) -> bool:
        return bool(self.data["dies_with_parent"])

    @property
    def quant_allowlist(self) -> tuple[str, ...] | None:
        q = self.data.get("quant_allowlist")
        return tuple(q) if q is not None else None

    def line_templates(self, kind: str) -> list[str]:
        found = self.data["loader_lines"].get(kind) or self.data["daemon_lines"].get(kind) or []
        return [str(r["template"]) for r in found]

    def raises(self, kind: str) -> bool:
        """Is the loader's `kind` line an exception (the server fails) rather than a log line?"""
        return any(r["how"] == "raise" for r in self.data["loader_lines"].get(kind) or [])

    # ------------------------------------------------------------------ the daemon's argv
    def daemon_args(self, server_args: Sequence[str]) -> list[str]:
        """The cache daemon's arguments for a server's launch arguments (those after
        `-m sglang.launch_server`): from 0.5.19 the server's own flags (the daemon resolves
        them with SGLang's parser: same model, parallelism, dtype and quantization), before
        it only the flags its parser has; never the draft, the cache flags or the listen
        address. Every local rank is launched (no --gpu-id)."""
        out: list[str] = []
        for flag, values in _flag_groups(server_args):
            name = flag.partition("=")[0]
            if any(
                name == p or (p.endswith("-") and name.startswith(p)) for p in _NOT_FOR_THE_CACHE
            ):
                continue
            if not self.takes_server_args and name not in self.daemon_flags:
                continue
            out += [flag, *values]
        return out

    # ------------------------------------------------------------------ lines
    def patterns(self) -> list[tuple[str, re.Pattern[str]]]:
        """(kind, regex) for each line of the loader's templates (a multi-line message is one
        pattern per line: `mismatch`, then `engine_config`, `daemon_config`)."""
        if self._patterns is None:
            out: list[tuple[str, re.Pattern[str]]] = []
            for kind, found in self.data["loader_lines"].items():
                for r in found:
                    for i, piece in enumerate(str(r["template"]).split("\n")):
                        sub = kind if i == 0 else _sub_kind(piece)
                        if sub:
                            out.append((sub, pattern(piece.strip())))
            self._patterns = out
        return self._patterns

    def loader_event(self, line: str) -> LoaderEvent | None:
        """The client-start event of one server log line, None for any other line."""
        if "[IpcModelLoader]" not in line and "config: " not in line:
            return None
        for kind, rx in self.patterns():
            m = rx.search(line)
            if m:
                return LoaderEvent(kind, tuple(m.groups()))
        return None


def strip_flags(argv: list[str]) -> list[str]:
    """`argv` without the weight-cache flags (fastverifyd adds them: argvs are compared
    without)."""
    return without_flags(argv, (MODE_FLAG, SOCKET_FLAG, TIMEOUT_FLAG))


def client_argv(argv: list[str]) -> list[str]:
    return [*strip_flags(argv), MODE_FLAG, CLIENT]


def _sub_kind(piece: str) -> str | None:
    head = piece.strip().partition(":")[0].lower().replace(" ", "_")
    return head if head in ("engine_config", "daemon_config") else None


SECTION = "weight_cache"  # its section of a release's facts (scripts/sglang_facts.py)


def of(facts: Any) -> CacheFacts | None:
    """The weight cache of `facts` (an SGLangFacts), None for a release without one."""
    data = facts.section(SECTION)
    return CacheFacts(facts.version, data) if data else None


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def pattern(template: str) -> re.Pattern[str]:
    """A regex for a line SGLang formats from `template` (`{expr}` / `{expr:.2f}` pieces are
    groups: numbers for a float format, else the shortest text; the last one to the end);
    the template's end is the line's end (the line's head is SGLang's prefix)."""
    parts = _PLACEHOLDER.split(template)
    rx = ""
    for i, part in enumerate(parts):
        if i % 2 == 0:
            rx += re.escape(part)
        elif ":" in part and re.fullmatch(r"[\d.,]*f", part.rpartition(":")[2]):
            rx += r"(-?[\d.]+)"
        else:
            rx += "(.*)" if i == len(parts) - 2 and not parts[-1] else "(.*?)"
    return re.compile(rx + (r"\s*$" if parts[-1] else ""))


def placeholders(template: str) -> list[str]:
    """The interpolated expressions of a template, in order (the groups of `pattern`)."""
    return _PLACEHOLDER.findall(template)


def load_weight_end(facts: Any, line: str) -> tuple[float | None, float | None] | None:
    """(elapsed seconds, GB the weights took) of SGLang's `Load weight end. ...` line, as the
    release formats it (its facts' `load_weight_end`); None for any other line."""
    if "Load weight end. " not in line:
        return None
    for fmt in facts.log_formats.get("load_weight_end") or []:
        tmpl = fmt["pieces"][0]
        m = pattern(tmpl).search(line)
        if m is None:
            continue
        got: dict[str, float] = {}
        for expr, value in zip(placeholders(tmpl), m.groups(), strict=True):
            key = expr.partition(":")[0]
            if key.endswith(("weight_load_time", "weight_load_mem_usage")):
                with contextlib.suppress(ValueError):
                    got[key.rpartition(".")[2]] = float(value)
        return got.get("weight_load_time"), got.get("weight_load_mem_usage")
    return None


def _flag_groups(args: Sequence[str]) -> list[tuple[str, list[str]]]:
    """`--flag v1 v2 --switch` -> [("--flag", ["v1", "v2"]), ("--switch", [])]."""
    out: list[tuple[str, list[str]]] = []
    for tok in args:
        if tok.startswith("--") or not out:
            out.append((tok, []))
        else:
            out[-1][1].append(tok)
    return out


def parse_ready(text: str) -> ReadyFile:
    """A ready file (`pid=N`, `config={...}`, as the daemon's serve() writes it)."""
    pid: int | None = None
    config: dict[str, Any] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "pid":
            try:
                pid = int(value.strip())
            except ValueError:
                pid = None
        elif key == "config":
            try:
                parsed = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                parsed = None
            if isinstance(parsed, dict):
                config = parsed
    return ReadyFile(pid, config)


def parse_config(text: str) -> dict[str, Any]:
    """The dict of an `Engine config: {...}` / `Daemon config: {...}` line ({} if none)."""
    start = text.find("{")
    if start < 0:
        return {}
    try:
        parsed = ast.literal_eval(text[start:].strip())
    except (ValueError, SyntaxError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def differences(engine: Mapping[str, Any], daemon: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """field -> (the server's value, the cache's value) where the fingerprints differ."""
    keys = list(dict.fromkeys([*engine, *daemon]))
    return {k: (engine.get(k), daemon.get(k)) for k in keys if engine.get(k) != daemon.get(k)}


def describe_differences(diff: Mapping[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{k}: server {a!r}, cache {b!r}" for k, (a, b) in diff.items()) or "no field"
