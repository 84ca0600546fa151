"""What a Kubernetes render reads: tune's decision record, the daemon configuration, the
profile directories (byte for byte, with the tuner tables user profiles name) and the
declared profile's `# extends:` chain as the daemon's store resolves it."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastverify import paths
from fastverify.deploy.kubernetes.options import KubeOptions
from fastverify.render import RenderError

KEY_RE = re.compile(r"[-._a-zA-Z0-9]+")  # a ConfigMap data key


def read_decision(path: str) -> tuple[str, str, dict[str, Any]]:
    """`decision.profile` and `decision.mode` of tune's decision record (and the decision)."""
    from fastverify.config import MODES

    expected = (
        'expected tune\'s decision record: {"decision": {"profile": "ring-ll", '
        '"mode": "baseline"|"eagle3"|"adaptive", ...}, "stages": [...]}'
    )
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        why = exc.strerror or exc
        raise RenderError(f"{path}: cannot read the decision record ({why})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RenderError(f"{path}: not JSON ({exc}; {expected})") from None
    decision = data.get("decision") if isinstance(data, dict) else None
    if not isinstance(decision, dict):
        raise RenderError(f'{path}: no "decision" object ({expected})')
    profile, mode = decision.get("profile"), decision.get("mode")
    if not isinstance(profile, str) or not profile:
        raise RenderError(f"{path}: decision.profile is missing or not a string ({expected})")
    if mode not in MODES:
        raise RenderError(
            f"{path}: decision.mode is {json.dumps(mode)} (expected one of {', '.join(MODES)})"
        )
    return profile, mode, decision


def simulated_decision(
    path: str, decision: dict[str, Any], force: bool, fingerprint: Any = None
) -> list[str]:
    """A decision the sim engine made is no fleet's decision: refused unless `force`, then a
    note. The engine is the decision's stamp, else the host fingerprint's engine fact (a
    record of a tune, or a reuse, from before decisions carried a stamp); a record that says
    neither gets a note."""
    eng = decision.get("engine")
    if not isinstance(eng, dict):
        facts = fingerprint.get("facts") if isinstance(fingerprint, dict) else None
        fact = facts.get("engine") if isinstance(facts, dict) else None
        if isinstance(fact, dict) and "simulated" in fact:
            version = facts.get("sglang") if isinstance(facts, dict) else None
            eng = {"kind": fact.get("name"), "simulated": fact.get("simulated"),
                   "version": version}  # fmt: skip
    if not isinstance(eng, dict):
        return [
            f"{path}: the decision records no engine (a tune before decisions carried one): "
            "it may come from the sim; check where it was made"
        ]
    if not eng.get("simulated"):
        return []
    what = (
        f"{path}: tune decided {decision.get('profile')}/{decision.get('mode')} on the "
        f"{eng.get('kind')} engine (simulated, playing SGLang {eng.get('version')}): its "
        "figures come from a cost model, not from hardware"
    )
    if not force:
        raise RenderError(
            f"{what}. Run tune on a GPU host with the real engine (fastverifyd --engine "
            "sglang), or render it anyway with --force"
        )
    return [f"{what}; rendering it because of --force"]


def load_config(options: KubeOptions) -> Any:
    from fastverify import config as configmod

    path = Path(options.config_file) if options.config_file else image_config()
    try:
        return configmod.load(path)
    except configmod.ConfigError as exc:
        raise RenderError(str(exc)) from None


def image_config() -> Path:
    """The configuration the image ships (compose/fastverifyd.container.toml)."""
    return paths.template_dir("compose") / "fastverifyd.container.toml"


def profile_files(directory: str, *, user: bool) -> dict[str, bytes]:
    """`NAME.env` files of one profile directory, byte for byte (symbolic links only inside
    it, as the daemon reads them), plus the tuner tables user profiles name beside them."""
    from fastverify.profiles import envfile
    from fastverify.profiles.store import SUFFIX, name_problem

    root = Path(directory)
    out: dict[str, bytes] = {}
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return out
    except OSError as exc:
        why = exc.strerror or exc
        raise RenderError(f"{root}: cannot list the profile directory ({why})") from None
    for name in names:
        if not name.endswith(SUFFIX) or name_problem(name[: -len(SUFFIX)]) is not None:
            continue
        path = root / name
        try:
            out[name] = envfile.read_checked(path, root)
        except (envfile.UnsafeFile, OSError) as exc:
            raise RenderError(f"{path}: {exc}") from None
        if user:
            table = tuner_table(out[name])
            if table and "/" not in table and KEY_RE.fullmatch(table) and (root / table).is_file():
                out[table] = envfile.read_checked(root / table, root)
    return out


def tuner_table(content: bytes) -> str | None:
    for line in content.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "FASTVERIFY_TUNER_TABLE":
            return value.strip()
    return None


def extends_chain(store: Any, name: str) -> list[Any]:
    """The profile and every profile its `# extends:` chain names, as the store resolves
    them (a base of the profile's own name is the next file of that name down the search
    path); a missing base ends it (the store has refused such a profile already)."""
    from fastverify.profiles import envfile
    from fastverify.profiles.store import SUFFIX, Entry

    search = [(paths.normalize(d), src) for d, src in store.search_path()]
    out: list[Any] = []
    entry = store.find(name)
    while entry is not None and len(out) <= 32:
        out.append(entry)
        meta = envfile.parse_file(entry.file, entry.root_dir).meta
        if "extends" not in meta:
            break
        base = meta["extends"][1]
        if base != entry.name:
            entry = store.find(base)
            continue
        dirs = [d for d, _ in search]
        after = search[dirs.index(entry.root_dir) + 1 :] if entry.root_dir in dirs else []
        entry = next(
            (
                Entry(base, os.path.join(d, base + SUFFIX), src, root=d)
                for d, src in after
                if os.path.isfile(os.path.join(d, base + SUFFIX))
            ),
            None,
        )
    return out


def as_texts(files: Mapping[str, bytes], where: str) -> dict[str, str]:
    """ConfigMap `data` values are text: every file must be UTF-8 (profiles are)."""
    out = {}
    for key, content in files.items():
        try:
            out[key] = content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RenderError(
                f"{where}: {key}: byte {exc.start} is not UTF-8 (a profile is plain text; "
                "fix or remove the file)"
            ) from None
    return out


def checksum(parts: Mapping[str, bytes]) -> str:
    h = hashlib.sha256()
    for key in sorted(parts):
        h.update(key.encode() + b"\0" + hashlib.sha256(parts[key]).digest())
    return h.hexdigest()
