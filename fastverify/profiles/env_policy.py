"""Which variables may reach the engine from where, and which files they may name: the one
rule the profile loader, `profile import-sitecustomize`, the daemon's `[server] env` and
`env_passthrough` checks and `verify` share.

A profile is an NCCL (and SGLang/FlashInfer) env file, nothing more (`profile_name_problem`):

- `NCCL_*` (nccl_vars.csv decides which exist), the `SGLANG_*` variables the pinned
  release's facts declare (fastverify/sglang/facts/*.json), FlashInfer's variables that
  fastverify knows (`fastverify.sglang.flashinfer_facts`), fastverify's own
  `FASTVERIFY_TUNER_TABLE` and the embedded sim's `FASTVERIFY_SIM_*` knobs (plain values
  only the stand-in reads); any other name is refused.
- SGLang variables that import Python code (`SGLANG_PLUGINS`, the external model
  packages, ...) are refused in a profile: they belong in the daemon's `[server] env`.
- Loader and interpreter variables (`LOADER_NAMES`, `LD_*`, `DYLD_*`) are refused
  everywhere an operator names engine variables (profiles, `[server] env`,
  `env_passthrough`). The engine still inherits PATH and LD_LIBRARY_PATH from
  fastverifyd's own environment (effective.BASE_NAMES): set those in the unit, not in
  files a switch reads.

Values are printable ASCII of at most `MAX_VALUE_BYTES` bytes (`value_problem`), checked at
validation, so that nothing is stopped for an environment the kernel would refuse (E2BIG).

Files (`trust_problem`): a variable that makes NCCL load a library or read more variables
(`PLUGIN_VARS`), or that names a directory of compiled code (`CODE_DIR_VARS`), must name
a file (directory) owned by root or by this process's uid that nobody else can write, in
directories nobody else can write (sticky directories such as /tmp excepted for a file
owned by root or us), or fastverify's own shipped tuner plugin. A bare plugin name
(`NCCL_NET_PLUGIN=ib`, `none`) is looked up by the dynamic loader in the system's
library path and is accepted. Profile files and their directory follow sshd's StrictModes
(`owner_problem`): owned by root or this uid, not writable by others (group-writable only
for group root or this process's group).
"""

from __future__ import annotations

import os
import re
import stat

MAX_VALUE_BYTES = 4096  # an NCCL or SGLang value is a word or a path; E2BIG is at 128 KiB
MAX_ENV_BYTES = 512 * 1024  # environment + argv of one exec (Linux refuses past ~2 MiB)

# Variables that make a dynamic loader, an interpreter or a shell run code of their choosing
LOADER_NAMES = frozenset({
    "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "SHELLOPTS",
    "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH", "GLIBC_TUNABLES", "GCONV_PATH",
    "NLSPATH", "LOCPATH", "HOSTALIASES", "RESOLV_HOST_CONF", "PYTHONPATH", "PYTHONHOME",
    "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONPLATLIBDIR", "PYTHONEXECUTABLE",
    "PYTHONBREAKPOINT", "PYTHONWARNINGS", "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYLIB",
    "RUBYOPT", "NODE_OPTIONS", "NODE_PATH", "CUDA_INJECTION64_PATH", "CUDA_INJECTION32_PATH",
    "NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH", "OPENSSL_CONF", "OPENSSL_ENGINES",
})  # fmt: skip
LOADER_PREFIXES = ("LD_", "DYLD_")

# fastverify's own profile variable (the tuner table; fastverify.profiles.tuner)
OWN_VARS = frozenset({"FASTVERIFY_TUNER_TABLE"})
# the embedded sim's own knobs (the stand-in for SGLang reads them; SGLang never does)
SIM_PREFIX = "FASTVERIFY_SIM_"
# SGLang variables that import code (srt/environ.py; plugins and external packages)
SGLANG_CODE_VARS = frozenset({
    "SGLANG_PLUGINS", "SGLANG_EXTERNAL_MODEL_PACKAGE", "SGLANG_EXTERNAL_MM_PROCESSOR_PACKAGE",
    "SGLANG_HTTP_SERVER_APP_PATH", "SGLANG_TEST_SCRIPTED_RUNTIME_SYS_PATH_ENTRY",
})  # fmt: skip
# NCCL variables naming a library NCCL dlopens, or a file of more NCCL variables
PLUGIN_VARS = frozenset({
    "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN",
    "NCCL_GIN_PLUGIN", "NCCL_RMA_PLUGIN", "NCCL_CONF_FILE",
})  # fmt: skip
_BARE_PLUGIN = r"[A-Za-z0-9][A-Za-z0-9._-]*"  # compiled by `re` when a profile names a plugin
# Directories whose compiled libraries the engine loads (JIT caches)
CODE_DIR_VARS = frozenset({
    "SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR", "SGLANG_DG_CACHE_DIR",
    "SGLANG_CUTE_AOT_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_AUTOTUNE_DIR",
})  # fmt: skip


def flashinfer_vars() -> frozenset[str]:
    from fastverify.sglang import flashinfer_facts as fi

    return frozenset({fi.WORKSPACE_BASE_VAR, fi.AUTOTUNE_DIR_VAR, fi.DISABLE_JIT_VAR})


def is_loader_var(name: str) -> bool:
    return name in LOADER_NAMES or name.startswith(LOADER_PREFIXES)


def loader_problem(name: str, where: str) -> str | None:
    """Why `name` may not be set through `where` (`[server] env`, `env_passthrough`), or None."""
    if not is_loader_var(name):
        return None
    if name in ("PATH", "LD_LIBRARY_PATH"):
        return (
            f"{name} is refused in {where}: it decides which programs and libraries the engine "
            "runs (the engine inherits fastverifyd's own; set it in the unit's Environment=)"
        )
    return (
        f"{name} is refused in {where}: a loader/interpreter variable makes the engine run "
        "code of its choosing (remove it; install code into the engine's environment instead)"
    )


def profile_name_problem(name: str) -> str | None:
    """Why a profile may not set `name` (None: it may). NCCL_* and SGLANG_* names get their
    own checks (spelling, removal) in validate.py; this says only whether the family and
    the name may be in a profile at all."""
    if name.startswith(("NCCL_", SIM_PREFIX)) or name in OWN_VARS:
        return None
    if is_loader_var(name):
        return (
            f"{name} is not an NCCL, SGLang or FlashInfer variable: a loader/interpreter "
            "variable would make the engine run code of its choosing (remove it; a profile "
            "holds only NCCL_*, SGLANG_* and FLASHINFER_* tuning)"
        )
    if name in SGLANG_CODE_VARS:
        return (
            f"{name} makes SGLang import Python code, which a profile may not do "
            "(set it in the daemon's [server] env if you mean it)"
        )
    if name.startswith("SGLANG_"):
        return None  # declared or not: validate.py / sglang_vars decide
    if name in flashinfer_vars():
        return None
    if name.startswith("FLASHINFER_"):
        known = ", ".join(sorted(flashinfer_vars()))
        return f"{name} is not a FlashInfer variable fastverify knows (known: {known})"
    return (
        f"{name} is not an NCCL, SGLang or FlashInfer variable (a profile holds only "
        "NCCL_*, SGLANG_* and FLASHINFER_* tuning; put other engine settings in the "
        "daemon's [server] env)"
    )


def value_problem(value: str) -> str | None:
    """Why `value` cannot be an engine variable's value (None: fine)."""
    size = _size(value)
    if size > MAX_VALUE_BYTES:
        return f"value is {size} bytes long (at most {MAX_VALUE_BYTES}; shorten it)"
    for ch in value:
        if not (0x20 <= ord(ch) < 0x7F):
            return f"value holds {ch!r}, not printable ASCII (write plain ASCII)"
    return None


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def environment_problem(env: dict[str, str], argv: list[str]) -> str | None:
    """Why the kernel would refuse to exec `argv` with `env` (E2BIG), or None."""
    for k, v in env.items():
        if _size(v) > MAX_VALUE_BYTES:
            return f"{k}'s value is {_size(v)} bytes long (at most {MAX_VALUE_BYTES})"
    total = sum(_size(k) + _size(v) + 2 for k, v in env.items()) + sum(_size(a) + 1 for a in argv)
    if total > MAX_ENV_BYTES:
        return f"the engine's environment and argv are {total} bytes (at most {MAX_ENV_BYTES})"
    return None


def _shipped_plugins() -> set[str]:
    from fastverify.tuner import plugin

    out: set[str] = set()
    for p in plugin.candidates():
        if p.is_file():
            out.add(os.path.realpath(p))
    return out


def _uids() -> tuple[int, ...]:
    return (0, os.geteuid())


def _gids() -> tuple[int, ...]:
    return (0, os.getegid())


def mode_problem(st: os.stat_result, what: str, *, sticky_ok: bool = False) -> str | None:
    """Why a file or directory with stat `st` is not trusted (owner, writers), or None."""
    if st.st_uid not in _uids():
        return (
            f"{what} is owned by uid {st.st_uid}, not root or fastverify's uid {os.geteuid()} "
            f"(chown root {what})"
        )
    if sticky_ok and st.st_mode & stat.S_ISVTX:
        return None
    if st.st_mode & stat.S_IWOTH:
        return f"{what} is writable by others (chmod o-w {what})"
    if st.st_mode & stat.S_IWGRP and st.st_gid not in _gids():
        return f"{what} is writable by group {st.st_gid} (chmod g-w {what})"
    return None


def owner_problem(path: str, st: os.stat_result | None = None) -> str | None:
    """sshd's StrictModes for a profile (or tuner table) file and its directory."""
    try:
        st = st or os.stat(path)
        problem = mode_problem(st, path)
        if problem:
            return problem
        parent = os.path.dirname(os.path.realpath(path)) or "."
        return mode_problem(os.stat(parent), parent, sticky_ok=True)
    except OSError as exc:
        return f"cannot check {path}: {exc.strerror or exc}"


def _chain_problem(real: str) -> str | None:
    """The directories above `real` (resolved), up to /, must be trusted too."""
    d = os.path.dirname(real)
    while True:
        try:
            problem = mode_problem(os.stat(d), d, sticky_ok=True)
        except OSError as exc:
            return f"cannot check {d}: {exc.strerror or exc}"
        if problem:
            return problem
        if d in ("/", ""):
            return None
        d = os.path.dirname(d)


def trust_problem(name: str, value: str) -> str | None:
    """Why the file or directory `value` of `name` may not be used (None: fine, or `name`
    names no code). See the module docstring."""
    if name in PLUGIN_VARS:
        if name != "NCCL_CONF_FILE" and re.fullmatch(_BARE_PLUGIN, value):
            return None  # a name the loader finds in the system's library path
        if not os.path.isabs(value):
            return (
                f"{value!r} is neither a plugin name nor an absolute path "
                "(write /path/to/libnccl-....so, or a bare name such as ib)"
            )
        real = os.path.realpath(value)
        if name == "NCCL_TUNER_PLUGIN" and real in _shipped_plugins():
            return None
        try:
            st = os.stat(real)
        except OSError as exc:
            return f"{value}: {exc.strerror or exc} (name an installed, root-owned file)"
        if not stat.S_ISREG(st.st_mode):
            return f"{value} is not a regular file"
        return mode_problem(st, value) or _chain_problem(real)
    if name in CODE_DIR_VARS:
        if not os.path.isabs(value):
            return f"{value!r} is not an absolute path (write /var/cache/...)"
        real = os.path.realpath(value)
        while not os.path.exists(real):  # created at first use: its nearest parent decides
            real = os.path.dirname(real)
        try:
            problem = mode_problem(os.stat(real), real)
        except OSError as exc:
            return f"cannot check {real}: {exc.strerror or exc}"
        return problem or _chain_problem(real)
    return None
