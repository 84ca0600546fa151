"""The rendered pod's identity runs the image the suite builds.

`render kubernetes` gives the pod a non-root uid/gid with fsGroup, a read-only root
filesystem, every capability dropped, HOME/USER/LOGNAME, and emptyDirs for every path it
writes. Here the real image (built from the Dockerfile on a Debian base without SGLang,
conftest.py) runs under the suite's own dockerd with exactly that: `--user UID:GID
--group-add FSGROUP`, `--read-only`, `--cap-drop ALL`, `no-new-privileges` (what
allowPrivilegeEscalation: false sets), the container's env, ConfigMap volumes as the
kubelet writes them (read-only, `..data` links), emptyDirs as the kubelet makes them (world
-writable directories) and /dev/shm of the rendered size; its entrypoint with the rendered
args (plus `--engine auto`: no SGLang in this image, so the sim serves). The daemon must
reach READY on its health listener, and inside the pod the user is non-root, the root
filesystem refuses writes, getpass works without a passwd entry and the caches are
writable.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.containers import Docker, run
from tests.support.kube import ctl, docs, kubelet_volume, one

pytestmark = [pytest.mark.container, pytest.mark.slow]


def in_netns(pid: int, url: str) -> tuple[int, str]:
    code = (
        "import sys, urllib.request, urllib.error\n"
        f"try:\n r = urllib.request.urlopen({url!r}, timeout=5)\n"
        " print(r.status, r.read().decode())\n"
        "except urllib.error.HTTPError as e: print(e.code, e.read().decode())\n"
        "except OSError as e: print(0, e)\n"
    )
    out = run(["nsenter", f"--net=/proc/{pid}/ns/net", sys.executable, "-c", code], timeout=30)
    status, _, body = out.stdout.strip().partition(" ")
    return int(status), body


def docker_args(pod: dict[str, Any], objs: list[dict[str, Any]], host: Path) -> list[str]:
    """`docker run` flags for the rendered pod spec: identity, env, volumes."""
    spec = pod["spec"]
    (c,) = spec["containers"]
    psc, csc = spec["securityContext"], c["securityContext"]
    args = ["--user", f"{psc['runAsUser']}:{psc['runAsGroup']}", "--group-add",
            str(psc["fsGroup"])]  # fmt: skip
    if csc.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    assert csc["capabilities"]["drop"] == ["ALL"]
    args += ["--cap-drop", "ALL"]
    args += [f"--cap-add={cap}" for cap in csc["capabilities"].get("add", [])]
    if csc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    for e in c["env"]:
        value = e.get("value", f"{e['name'].lower()}-of-this-test")  # fieldRef: any value
        args += ["--env", f"{e['name']}={value}"]
    configmaps = {d["metadata"]["name"]: d for d in objs if d["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for m in c["volumeMounts"]:
        v = volumes[m["name"]]
        src = host / m["name"]
        if "configMap" in v:
            kubelet_volume(src, configmaps[v["configMap"]["name"]].get("data") or {})
            os.chown(src, 0, psc["fsGroup"])
        elif "emptyDir" in v and v["emptyDir"].get("medium") == "Memory":
            args += ["--shm-size", str(int(v["emptyDir"]["sizeLimit"].rstrip("Mi")) * 2**20)]
            continue
        elif "emptyDir" in v:
            src.mkdir()
            src.chmod(0o777)  # the kubelet's emptyDir
        elif "persistentVolumeClaim" in v:
            (src / "model").mkdir(parents=True)
        else:
            raise AssertionError(f"volume kind not modelled here: {v}")
        ro = ",readonly" if m.get("readOnly") else ""
        args += ["--mount", f"type=bind,source={src},destination={m['mountPath']}{ro}"]
    return args


def test_rendered_identity_runs_the_image(
    dockerd: Docker, fastverify_image: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    r = ctl("render", "kubernetes", "--output-dir", str(out), "--image", fastverify_image,
            "--gpus-per-node", "2", "--shm-size", "256Mi", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    objs = docs(out)
    pod = one(objs, "Deployment")["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    host = tmp_path / "volumes"
    host.mkdir()
    name = f"fastverify-identity-{os.getpid()}"
    dockerd(
        "run", "--detach", "--name", name, "--network", "none",
        *docker_args(pod, objs, host),
        fastverify_image, *c["args"], "--engine", "auto", "--sim-load-seconds", "1",
    )  # fmt: skip
    try:
        pid = int(dockerd("inspect", "-f", "{{.State.Pid}}", name).stdout)
        port = next(p["containerPort"] for p in c["ports"] if p["name"] == "health")
        deadline = time.monotonic() + 180
        while (got := in_netns(pid, f"http://127.0.0.1:{port}/readyz"))[0] != 200:
            state = dockerd("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
            assert state == "running" and time.monotonic() < deadline, (
                got, dockerd("logs", "--tail", "60", name, check=False).stderr[-4000:]
            )  # fmt: skip
            time.sleep(0.5)
        probe = (
            "import getpass, json, os, pathlib, tempfile\n"
            "def writable(p):\n"
            "    try:\n"
            "        f = pathlib.Path(p) / '.probe'; f.write_text('x'); f.unlink(); return True\n"
            "    except OSError: return False\n"
            "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'groups': os.getgroups(),"
            " 'user': getpass.getuser(), 'root_writable': writable('/'),"
            " 'etc_writable': writable('/etc'), 'home': os.environ['HOME'],"
            " 'home_writable': writable(os.environ['HOME']),"
            " 'tmp_writable': writable(tempfile.gettempdir())}))\n"
        )
        got = json.loads(dockerd("exec", name, "/opt/fastverify/bin/python", "-c", probe).stdout)
        sc = pod["spec"]["securityContext"]
        assert got["uid"] == sc["runAsUser"] != 0 and got["gid"] == sc["runAsGroup"]
        assert sc["fsGroup"] in got["groups"]
        assert got["user"] == "fastverify"  # LOGNAME/USER: no passwd entry for the uid
        assert not got["root_writable"] and not got["etc_writable"]  # read-only root
        assert got["home_writable"] and got["tmp_writable"]
        # the caches the pod configuration points SGLang/FlashInfer at are writable and used
        toml = (host / "config" / "fastverifyd.toml").read_text()
        for var in ("SGLANG_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_AUTOTUNE_DIR"):
            line = next(x for x in toml.splitlines() if x.startswith(f"{var} = "))
            path = json.loads(line.split(" = ", 1)[1])
            check = dockerd(
                "exec", name, "/bin/sh", "-c", f'mkdir -p "{path}" && touch "{path}/.w" && echo ok'
            )
            assert check.stdout.strip() == "ok", (var, path, check.stderr)
        # the engine's own state and logs landed on the emptyDirs, owned by the pod's uid
        state = host / "state"
        assert any(state.iterdir()), "the daemon wrote nothing to its state dir"
        assert all(p.stat().st_uid == sc["runAsUser"] for p in state.rglob("*"))
        # kubectl exec: the CLI in the pod reaches the daemon's socket as the same user
        st = json.loads(
            dockerd("exec", name, "/opt/fastverify/bin/fastverifyctl", "status", "--json").stdout
        )
        assert st["state"] == "READY" and st["engine"]["simulated"] is True
        assert st["declarative"]["profile"] == st["profile"]
    finally:
        logs = dockerd("logs", "--tail", "40", name, check=False)
        print(logs.stdout[-3000:], logs.stderr[-3000:])
        dockerd("rm", "--force", name, check=False)
