"""`fastverifyctl render kubernetes` as the deployment tests drive it, and its manifests read
back: objects by kind and name, pod templates, ConfigMap volumes as the kubelet lays them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support import host_dirs

REPO = Path(__file__).resolve().parents[2]


def ctl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = host_dirs.clean_env(("FASTVERIFY_",))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "fastverify.ctl", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


def render(out: Path, *args: str) -> dict[str, Any]:
    r = ctl("render", "kubernetes", "--output-dir", str(out), "--image", "fastverify:test",
            "--json", *args)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def docs(out: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(out.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return found


def configmap(objs: list[dict[str, Any]], role: str) -> dict[str, Any]:
    """The ConfigMap labelled fastverify/configmap=ROLE (config, profiles-user, ...)."""
    hits = [d for d in by_kind(objs, "ConfigMap")
            if d["metadata"]["labels"].get("fastverify/configmap") == role]  # fmt: skip
    assert len(hits) == 1, hits
    return hits[0]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in objs if d["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [d for d in by_kind(objs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(hits) == 1, [d["metadata"]["name"] for d in by_kind(objs, kind)]
    return hits[0]


def pod_templates(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for d in by_kind(objs, "Deployment"):
        out["server"] = d["spec"]["template"]
    for d in by_kind(objs, "LeaderWorkerSet"):
        lwt = d["spec"]["leaderWorkerTemplate"]
        out["leader"] = lwt["leaderTemplate"]
        out["worker"] = lwt["workerTemplate"]
    return out


# A values file as a Helm user writes one: every scheduling key the render takes.


def kubelet_volume(root: Path, data: dict[str, str]) -> Path:
    """A ConfigMap volume as the kubelet writes it: the files in `..<timestamp>/`, a
    `..data` link to that directory and one link per key through `..data`."""
    stamp = root / "..2026_12_01_07_00_00.000000001"
    stamp.mkdir(parents=True)
    for key, text in data.items():
        (stamp / key).write_text(text, encoding="utf-8")
        os.symlink(f"..data/{key}", root / key)
    os.symlink(stamp.name, root / "..data")
    return root
