"""How NCCL 2.28.9 loads a tuner plugin, for the sim: the same dlopen, the same lines.

At communicator init NCCL (src/plugin/tuner.cc `ncclTunerPluginLoad`, src/plugin/
plugin_open.cc `openPluginLib`, src/plugin/tuner/tuner_vN.cc) does, and prints at INFO:

1. `NCCL_TUNER_PLUGIN set by environment to NAME` (subsystems ENV|TUNING) when the
   variable is set; `none` stops there.
2. dlopen(NAME or "libnccl-tuner.so", RTLD_NOW|RTLD_LOCAL). On failure: when dlerror
   names the file and says "No such file or directory", NAME joins the not-found list,
   else `TUNER/Plugin: NAME: <dlerror>`. A bare NAME (no '/', not lib*.so) is retried as
   `libnccl-tuner-NAME.so`. Then `TUNER/Plugin: Could not find: NAME...` for the list
   (the tuner has no fallback text), and the load fails silently (no net plugin here).
3. dlsym `ncclTunerPlugin_v5`, then v4, v3, v2: `TUNER/Plugin: Using <name> (vN)` for
   the first found; none: `External tuner plugin PATH is unsupported`; else
   `Successfully loaded external tuner plugin PATH` (PATH: the link map's l_name).
4. the plugin's init(nRanks, nNodes, logger) per communicator; fastverify's plugin logs
   `fastverify tuner: N of M rows from TABLE apply (...)` through NCCL's logger.

`tuner_load_lines(env, nranks)` does the same in this process (ctypes, which is dlopen and
dlsym; the real plugin's own init writes its own line) and returns `(level, text)` pairs,
level "INFO" or "WARN", for NCCL's subsystems INIT/ENV/TUNING. Compare the real output in
tests/fixtures/nccl-2.28.9-tuner/. The sim reads no choice from the plugin: its cost model
is unchanged by a tuner (docs/guides/sim.md).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Mapping

ABI_VERSIONS = (5, 4, 3, 2)  # NCCL 2.28's order (tuner.cc)
_DEFAULT_LIB = "libnccl-tuner.so"
_PREFIX = "libnccl-tuner"
_RTLD_DI_LINKMAP = 2
_WARN, _INFO = 2, 3  # ncclDebugLogLevel

# ncclDebugLogger_t is variadic; fastverify's plugin always logs ("%s", msg). Another
# plugin's format is printed as its format string (its arguments are not read).
_LOGGER = ctypes.CFUNCTYPE(
    None, ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
    ctypes.c_void_p,
)  # fmt: skip
_PP = ctypes.POINTER(ctypes.c_void_p)
_SZ = ctypes.c_size_t


class _V5Head(ctypes.Structure):  # ncclTuner_v5_t: name, init, getCollInfo, finalize
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("init", ctypes.CFUNCTYPE(
            ctypes.c_int, _PP, ctypes.c_uint64, _SZ, _SZ, _LOGGER, ctypes.c_void_p,
            ctypes.c_void_p)),
        ("getCollInfo", ctypes.c_void_p),
        ("finalize", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)),
    ]  # fmt: skip


class _V2Head(ctypes.Structure):  # ncclTuner_v2_t..v4_t: name, init, getCollInfo, destroy
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("init", ctypes.CFUNCTYPE(ctypes.c_int, _SZ, _SZ, _LOGGER, _PP)),
        ("getCollInfo", ctypes.c_void_p),
        ("destroy", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)),
    ]  # fmt: skip


class _LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p)]


def _open(name: str) -> tuple[ctypes.CDLL | None, str]:
    """dlopen(name, RTLD_NOW|RTLD_LOCAL) -> (handle, dlerror text)."""
    try:
        return ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_LOCAL), ""
    except OSError as exc:
        return None, str(exc)


def _lib_path(lib: ctypes.CDLL, name: str) -> str:
    """The loaded file's path as the dynamic loader's link map has it (NCCL's getLibPath)."""
    try:
        dlinfo = ctypes.CDLL(None).dlinfo
        lm = ctypes.POINTER(_LinkMap)()
        if dlinfo(ctypes.c_void_p(lib._handle), _RTLD_DI_LINKMAP, ctypes.byref(lm)) == 0:
            return (lm.contents.l_name or name.encode()).decode()
    except (AttributeError, OSError, ValueError):
        pass
    return name


def _open_plugin(name: str | None) -> tuple[ctypes.CDLL | None, str, list[tuple[str, str]]]:
    """openPluginLib: (library, the name that opened, lines)."""
    lines: list[tuple[str, str]] = []
    not_found: list[str] = []
    tries = [name or _DEFAULT_LIB]
    if name and "/" not in name and not (name.startswith("lib") and name.endswith(".so")):
        tries.append(f"{_PREFIX}-{name}.so")
    for candidate in tries:
        lib, err = _open(candidate)
        if lib is not None:
            return lib, candidate, lines
        if candidate in err and "No such file or directory" in err:
            not_found.append(candidate)
        else:
            lines.append(("INFO", f"TUNER/Plugin: {candidate}: {err}"))
    if not_found:
        names = "".join(f" {n}" for n in not_found)
        lines.append(("INFO", f"TUNER/Plugin: Could not find:{names}"))
    return None, "", lines


def _run_init(lib: ctypes.CDLL, version: int, nranks: int, lines: list[tuple[str, str]]) -> None:
    """Call the plugin's init as NCCL does per communicator, collecting what it logs."""

    def logger(level, flags, file, line, fmt, arg):
        text = (fmt or b"").decode(errors="replace")
        if fmt == b"%s" and arg:
            text = ctypes.string_at(arg).decode(errors="replace")
        if level in (_WARN, _INFO):
            lines.append(("WARN" if level == _WARN else "INFO", text))

    cb = _LOGGER(logger)
    ctx = ctypes.c_void_p()
    if version == 5:
        s5 = _V5Head.in_dll(lib, "ncclTunerPlugin_v5")
        if not s5.init:
            return
        if s5.init(ctypes.byref(ctx), 0x5EE0FA57, nranks, 1, cb, None, None) == 0 and s5.finalize:
            s5.finalize(ctx)
        return
    s = _V2Head.in_dll(lib, f"ncclTunerPlugin_v{version}")
    if s.init and s.init(nranks, 1, cb, ctypes.byref(ctx)) == 0 and s.destroy:
        s.destroy(ctx)


def tuner_load_lines(env: Mapping[str, str], nranks: int) -> list[tuple[str, str]]:
    """NCCL's tuner-load lines for one rank's communicator init (see module docstring)."""
    lines: list[tuple[str, str]] = []
    name = env.get("NCCL_TUNER_PLUGIN")
    if name is not None:
        lines.append(("INFO", f"NCCL_TUNER_PLUGIN set by environment to {name}"))
        if name.lower() == "none":
            return lines
    lib, opened, open_lines = _open_plugin(name)
    lines += open_lines
    if lib is None:
        return lines
    path = _lib_path(lib, opened)
    for version in ABI_VERSIONS:
        symbol = f"ncclTunerPlugin_v{version}"
        if not hasattr(lib, symbol):
            continue
        plugin_name = ctypes.c_char_p.in_dll(lib, symbol).value or b""
        lines.append(("INFO", f"TUNER/Plugin: Using {plugin_name.decode()} (v{version})"))
        lines.append(("INFO", f"Successfully loaded external tuner plugin {path}"))
        _run_init(lib, version, nranks, lines)
        return lines
    lines.append(("INFO", f"External tuner plugin {path} is unsupported"))
    return lines


def nccl_lines(
    env: Mapping[str, str], rank: int, nranks: int, pre: str, on: Callable[[str], bool]
) -> list[str]:
    """`tuner_load_lines` as one rank's NCCL debug lines: `pre` is the rank's INFO prefix,
    `on(SUBSYS)` whether NCCL_DEBUG_SUBSYS enables a subsystem (WARN lines always print)."""
    if env.get("NCCL_DEBUG", "").strip().upper() not in ("INFO", "TRACE", "WARN"):
        return []  # nothing of it would be printed
    warn = pre.replace(" NCCL INFO ", " NCCL WARN ")
    out: list[str] = []
    for level, text in tuner_load_lines(env, nranks):
        if level == "WARN":
            out.append(warn + text)
        elif text.startswith("NCCL_TUNER_PLUGIN set by environment"):
            if on("ENV") or on("TUNING"):
                out.append(pre + text)
        elif on("INIT") or on("TUNING"):
            out.append(pre + text)
    return out
