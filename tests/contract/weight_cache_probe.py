"""Run in an SGLang interpreter (stdin: JSON request, stdout: one JSON line): the release's
own weight-cache code (srt/weight_cache/protocol.py, daemon.py) on what fastverify and its sim
produce - the paths for a key, a ready file in the sim's format, the refusal of a live rank,
the daemon's parser on fastverifyd's command line, CacheConfig on the sim's fingerprint.
CPU only: nothing is loaded, no GPU is asked."""

import json
import os
import sys

req = json.load(sys.stdin)
os.environ.update(req["env"])
from sglang.srt.weight_cache import protocol  # noqa: E402

out = {"fields": list(protocol.CacheConfig.__struct_fields__)}
key = req["key"] if req["key_kind"] == "device_uuid" else int(req["key"])
ready, sock = protocol.get_ready_path(key), protocol.get_socket_path(key)
out["paths"] = {"ready": ready, "socket": sock}
os.makedirs(os.path.dirname(ready), exist_ok=True)
with open(ready, "w") as f:
    f.write(req["ready_text"])
out["ready_pid"] = protocol._read_ready_pid(ready)
try:
    protocol.cleanup_stale_daemon_files(key)
    out["live_refusal"] = None
except RuntimeError as exc:
    out["live_refusal"] = str(exc)
with open(ready, "w") as f:
    f.write(req["dead_ready_text"])
protocol.cleanup_stale_daemon_files(key)
out["stale_removed"] = not os.path.exists(ready)
out["config_roundtrip"] = protocol.CacheConfig.from_dict(req["fingerprint"]).to_dict()

import argparse  # noqa: E402

daemon_args = req["daemon_args"]
if req["takes_server_args"]:
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.weight_cache.daemon import WeightCacheDaemonArgs

    p = argparse.ArgumentParser(add_help=False)
    WeightCacheDaemonArgs.add_cli_args(p)
    ns, rest = p.parse_known_args(daemon_args)
    sa = prepare_server_args(rest)
    out["daemon"] = {
        "gpu_id": ns.gpu_id,
        "tp_rank": ns.tp_rank,
        "model_path": sa.model_path,
        "tp_size": sa.tp_size,
        "dtype": sa.dtype,
    }
else:  # the release's own parser is in daemon.py's __main__ (the module itself does not
    # import over the shared newer stack): that block, up to parse_args, from the source
    import ast
    import importlib.util

    origin = importlib.util.find_spec("sglang.srt.weight_cache.daemon").origin
    with open(origin) as fh:
        tree = ast.parse(fh.read())
    main = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    body = []
    for stmt in main.body:
        body.append(stmt)
        if "parse_args" in ast.unparse(stmt):
            break
    scope = {"argparse": argparse}
    sys.argv = ["daemon", *daemon_args]
    exec(compile(ast.Module(body=body, type_ignores=[]), origin, "exec"), scope)
    a = scope["args"]
    out["daemon"] = {
        "gpu_id": a.gpu_id,
        "tp_rank": a.tp_rank,
        "model_path": a.model_path,
        "tp_size": a.tp_size,
        "dtype": a.dtype,
    }
if req.get("refusal_argv"):  # the resolution hook that refuses the cache with speculation
    from sglang.srt.arg_groups import model_path_hook
    from sglang.srt.server_args import prepare_server_args

    try:
        model_path_hook.handle_load_format(prepare_server_args(req["refusal_argv"]))
        out["refusal"] = None
    except ValueError as exc:
        out["refusal"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
