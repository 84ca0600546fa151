"""Shared helpers for tests/hardening (faults, concurrency, bad input, security).

Knobs (environment):
  FASTVERIFY_FULL=1          long variants (100+ kill -9 iterations, more hypothesis examples)
  FASTVERIFY_KILL9_ITERS=N   override the number of kill -9 iterations
  FASTVERIFY_SEED=N          seed of the random kill points (default 20261129)
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]

SHIPPED = REPO / "profiles"
FULL = os.environ.get("FASTVERIFY_FULL", "") not in ("", "0")
SEED = int(os.environ.get("FASTVERIFY_SEED", "20261129"))


def engine_port(d: Any) -> int:
    return int(d.server_url.rsplit(":", 1)[1])


def strict_journal(state_dir: Path) -> list[dict[str, Any]]:
    """Every line of journal.jsonl parsed as a JSON object (AssertionError naming the line)."""
    path = state_dir / "journal.jsonl"
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise AssertionError(
                f"{path}:{n}: unparsable journal line {line[:200]!r}: {exc}"
            ) from None
        assert isinstance(rec, dict), f"{path}:{n}: not an object: {line[:200]!r}"
        out.append(rec)
    return out


def read_profile_env(name: str, dirs: list[Path] | None = None) -> dict[str, str]:
    """NCCL env a profile file defines, read independently of fastverify.profiles: KEY=VALUE
    lines, `# extends: base` resolved (base first), user dirs searched before shipped."""
    for d in [*(dirs or []), SHIPPED]:
        path = d / f"{name}.env"
        if path.exists():
            break
    else:
        raise FileNotFoundError(name)
    env: dict[str, str] = {}
    own: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("# extends:"):
            env.update(read_profile_env(line.split(":", 1)[1].strip(), dirs))
        elif line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            own[k] = v
    env.update(own)
    return env


def nccl_env(pid: int) -> dict[str, str]:
    env = psutil.Process(pid).environ()
    return {k: v for k, v in env.items() if k.startswith("NCCL_")}


def held_env(st: dict, pid: int, profile_env: dict[str, str]) -> dict[str, str]:
    """What process `pid` of the serving engine must hold: the profile exactly in the server;
    in its TP workers also what the pinned SGLang adds by its own rules (the sim applies them
    before starting its workers, as SGLang does before spawning schedulers; status names
    them; tests/contract checks those rules against the real package)."""
    if pid == st["engine"]["pid"]:
        return dict(profile_env)
    return {**profile_env, **((st["engine"].get("engine_env") or {}).get("added") or {})}


def group_pids(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.Error, ProcessLookupError):
            continue
    return out


def mount_tmpfs(where: Path, size: str) -> bool:
    """Mount a small tmpfs at `where` (root only); False when that is not possible here."""
    if os.geteuid() != 0:
        return False
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    return r.returncode == 0


def remount(where: Path, opts: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{opts}", str(where)], check=True)


def umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
