# ruff: noqa: E501
"""The program `server check` runs in the server's interpreter (stdlib + sglang only):
SGLang's own parser (`prepare_server_args`), then its own resolution
(`ServerArgs.resolve_once()`, what `launch_server.run_server` does before anything
starts), reporting each step as ok / rejected / could-not-run-here with the reason, the
CUDA-graph phases as SGLang resolved them and the NCCL variables resolution set.

Before 0.5.19 there is no `resolve_once()`: `prepare_server_args` is the parser
(`ServerArgs.add_cli_args` + `parse_args`) followed by `ServerArgs.from_cli_args`, whose
`__post_init__` resolves at once (and needs an accelerator and the model's config). The
check runs those two halves as its two steps, so a machine without a GPU says "could not
run here" for resolution instead of rejecting a good argv.

Run as `python -c SOURCE ARGV...`; prints one JSON object on its last stdout line.
"""

from __future__ import annotations

SOURCE = r"""
import contextlib, io, json, os, sys, traceback
out = {"steps": [], "env_added": {}, "cuda_graph": None, "version": None}

def step(name, ok, message):
    out["steps"].append({"step": name, "ok": ok, "message": message})

def done():
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    sys.exit(0)

try:
    import importlib.metadata as md
    out["version"] = md.version("sglang")
except Exception:
    pass
try:
    with contextlib.redirect_stderr(io.StringIO()):
        from sglang.srt import server_args as sa
        prepare_server_args = sa.prepare_server_args
except BaseException as exc:
    step("import", None, "cannot import sglang.srt.server_args: %s: %s"
         % (type(exc).__name__, exc))
    done()
ServerArgs = getattr(sa, "ServerArgs", None)
# before 0.5.19: no resolve_once(), ServerArgs.__post_init__ resolves at construction
at_parse = (ServerArgs is not None and not hasattr(ServerArgs, "resolve_once")
            and hasattr(ServerArgs, "add_cli_args") and hasattr(ServerArgs, "from_cli_args"))
err = io.StringIO()
try:
    with contextlib.redirect_stderr(err):
        if at_parse:
            import argparse
            parser = argparse.ArgumentParser()
            ServerArgs.add_cli_args(parser)
            raw = parser.parse_args(sys.argv[1:])
        else:
            args = prepare_server_args(sys.argv[1:])
except SystemExit as exc:
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    step("parse", False, lines[-1] if lines else "parser exited with %s" % exc.code)
    done()
except BaseException as exc:
    step("parse", False, "%s: %s" % (type(exc).__name__, exc))
    done()
names = raw if at_parse else args
step("parse", True, "%s accepted it (model_path=%s, tp_size=%s)"
     % ("the parser" if at_parse else "prepare_server_args", getattr(names, "model_path", "?"),
        getattr(names, "tp_size", getattr(names, "tensor_parallel_size", "?"))))
what = "ServerArgs.__post_init__" if at_parse else "resolve_once()"
if not at_parse and not hasattr(args, "resolve_once"):
    step("resolve", None, "this SGLang has no ServerArgs.resolve_once(); parsing is all "
         "that can be checked")
    done()
before = dict(os.environ)
try:
    if at_parse:
        args = ServerArgs.from_cli_args(raw)
    else:
        args.resolve_once()
except BaseException as exc:
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for fr in reversed(frames):
        if "/sglang/" in fr.filename.replace("\\", "/"):
            rel = fr.filename.replace("\\", "/").split("/sglang/", 1)[1]
            where = "%s (sglang/%s:%d)" % (fr.name, rel, fr.lineno)
            if "/arg_groups/" in fr.filename.replace("\\", "/") or (
                    at_parse and rel == "srt/server_args.py"):
                break
    text = "%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
    if isinstance(exc, (ValueError, AssertionError, TypeError)) and not isinstance(exc, ImportError):
        step("resolve", False, "%s refused it in %s: %s" % (what, where or "?", text))
    else:
        step("resolve", None, "%s could not run here: %s failed with %s"
             % (what, where or "an import", text))
    done()
step("resolve", True, "%s accepted it" % what)
out["env_added"] = {k: v for k, v in os.environ.items()
                    if k.startswith("NCCL_") and before.get(k) != v}
try:
    if at_parse and hasattr(args, "disable_cuda_graph"):  # one switch: decode graphs only
        out["cuda_graph"] = {"decode": "disabled" if args.disable_cuda_graph else "enabled"}
    elif at_parse:
        out["cuda_graph"] = {ph: getattr(args, "cuda_graph_backend_" + ph, None)
                             for ph in ("decode", "prefill")}
    else:
        cfg = args.resolved_dict().get("cuda_graph_config") or {}
        out["cuda_graph"] = {ph: (cfg.get(ph) or {}).get("backend")
                             for ph in ("decode", "prefill")}
except Exception as exc:
    out["cuda_graph"] = {"error": "%s: %s" % (type(exc).__name__, exc)}
done()
"""
