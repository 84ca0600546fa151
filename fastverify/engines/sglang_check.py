# ruff: noqa: E501
"""The program `server check` runs in the server's interpreter (stdlib + sglang only):
SGLang's own parser (`prepare_server_args`), then its own resolution
(`ServerArgs.resolve_once()`, what `launch_server.run_server` does before anything
starts), reporting each step as ok / rejected / could-not-run-here with the reason, the
CUDA-graph phases as SGLang resolved them and the NCCL variables resolution set.

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
        from sglang.srt.server_args import prepare_server_args
except BaseException as exc:
    step("import", None, "cannot import sglang.srt.server_args: %s: %s"
         % (type(exc).__name__, exc))
    done()
err = io.StringIO()
try:
    with contextlib.redirect_stderr(err):
        args = prepare_server_args(sys.argv[1:])
except SystemExit as exc:
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    step("parse", False, lines[-1] if lines else "parser exited with %s" % exc.code)
    done()
except BaseException as exc:
    step("parse", False, "%s: %s" % (type(exc).__name__, exc))
    done()
step("parse", True, "prepare_server_args accepted it (model_path=%s, tp_size=%s)"
     % (getattr(args, "model_path", "?"), getattr(args, "tp_size", "?")))
resolve = getattr(args, "resolve_once", None)
if resolve is None:
    step("resolve", None, "this SGLang has no ServerArgs.resolve_once(); parsing is all "
         "that can be checked")
    done()
before = dict(os.environ)
try:
    resolve()
except BaseException as exc:
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for fr in reversed(frames):
        if "/sglang/" in fr.filename.replace("\\", "/"):
            rel = fr.filename.replace("\\", "/").split("/sglang/", 1)[1]
            where = "%s (sglang/%s:%d)" % (fr.name, rel, fr.lineno)
            if "/arg_groups/" in fr.filename.replace("\\", "/"):
                break
    text = "%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
    if isinstance(exc, (ValueError, AssertionError, TypeError)) and not isinstance(exc, ImportError):
        step("resolve", False, "resolve_once() refused it in %s: %s" % (where or "?", text))
    else:
        step("resolve", None, "resolve_once() could not run here: %s failed with %s"
             % (where or "an import", text))
    done()
step("resolve", True, "resolve_once() accepted it")
out["env_added"] = {k: v for k, v in os.environ.items()
                    if k.startswith("NCCL_") and before.get(k) != v}
try:
    cfg = args.resolved_dict().get("cuda_graph_config") or {}
    out["cuda_graph"] = {ph: (cfg.get(ph) or {}).get("backend") for ph in ("decode", "prefill")}
except Exception as exc:
    out["cuda_graph"] = {"error": "%s: %s" % (type(exc).__name__, exc)}
done()
"""
