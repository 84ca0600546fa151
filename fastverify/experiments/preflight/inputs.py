"""The profiles and the environment a GPU experiment's ranks get (preflight, rehearse, the
tuner derivation): profiles by name (every one when none is named), each one's effective
environment plus the daemon configuration's extra variables, as the daemon gives the server."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastverify.experiments.preflight.hostcheck import PreflightError


def masked(env: Mapping[str, str]) -> dict[str, str]:
    """Values of secret-looking names replaced by "***" for reports (fastverify.redact, the
    one home of the secret rule)."""
    from fastverify.redact import mask_env

    return mask_env(env)


def daemon_extra_env(config_path: str | None = None) -> dict[str, str]:
    """The non-profile variables the daemon adds to the engine's environment, from its config
    (`[server] env_passthrough` names taken from this environment, then `[server] env`), so
    preflight ranks see what the server would. Missing default config file: nothing."""
    from fastverify import config as config_mod

    try:
        cfg = config_mod.load(Path(config_path) if config_path else None)
    except config_mod.ConfigError as exc:
        raise PreflightError(f"config: {exc}") from None
    extra = {n: os.environ[n] for n in cfg.server.env_passthrough if n in os.environ}
    extra.update(cfg.server.env)
    return extra


def profile_env(profile: Any, extra: Mapping[str, str]) -> dict[str, str]:
    from fastverify.profiles.effective import effective_env

    return effective_env(profile, extra=dict(extra) or None)


def load_profiles(names: Sequence[str]) -> list[Any]:
    """Profiles by name or path (every shipped/user profile when `names` is empty)."""
    from fastverify.profiles.model import ProfileError
    from fastverify.profiles.store import ProfileStore

    store = ProfileStore()
    if not names:
        profiles = store.list()
        if not profiles:
            raise PreflightError("no profiles found (shipped or user)")
        return profiles
    out = []
    for name in names:
        try:
            out.append(store.load(name, force=True))
        except ProfileError as exc:
            problems = "; ".join(str(p) for p in getattr(exc, "problems", [])) or str(exc)
            raise PreflightError(f"profile {name!r}: {problems}") from None
    return out
