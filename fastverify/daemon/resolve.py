"""Request validation before anything running is touched: profile, argv, the engine's parser.

`RequestError(status, message, **extra)` is every refusal the API answers with an HTTP error.
`Resolver(cfg, engine, profiles)` loads a profile and builds its argv (`resolve`), asks the
engine's own argument parser about an argv once per distinct argv (`check_argv`, cached),
and applies the one defaulting rule for a request's profile and mode (`defaults`).
Messages from the engine's parser are masked (fastverify.redact): an argparse error quoting
`--api-key sk-...` comes back with `***`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastverify.config import ADAPTIVE_CONFIG_NAME, MODES, Config, ServerConfig
from fastverify.engines.base import ArgvCheck, EngineArgError
from fastverify.redact import mask_text, secret_values

if TYPE_CHECKING:
    from fastverify.engines.base import Engine
    from fastverify.profiles.model import Profile
    from fastverify.profiles.store import ProfileStore

ZERO_STEPS_CONFIG_NAME = "adaptive-zero-steps-trial.json"  # spec costs' steps-0 trial

# SGLang's truthy spellings of a boolean environment variable (srt/environ.py EnvBool)
TRUTHY = ("1", "true", "yes", "y", "on")


def _long_flags(argv: list[str]) -> list[str]:
    """The SGLang long flags of a launch argv (after `-m MODULE`; the sim's own left out)."""
    args = argv[argv.index("-m") + 2 :] if "-m" in argv else argv[1:]
    return [t.partition("=")[0] for t in args if t.startswith("--") and not t.startswith("--sim-")]


@contextlib.contextmanager
def _state_dir_writes(path: Path) -> Iterator[None]:
    """A file the resolved argv needs in the state dir: one that cannot be written refuses
    the request (507) before anything is stopped, as the controller's own check does."""
    try:
        yield
    except OSError as exc:
        raise RequestError(
            507,
            f"cannot write {path}: {exc.strerror or exc}; refused, nothing was stopped or changed",
            reason="state_dir_unwritable",
        ) from None


class RequestError(Exception):
    """A request the API answers with an HTTP error: `status`, `body`."""

    def __init__(self, status: int, message: str, **extra: Any):
        self.status = status
        self.body = {"error": message, **extra}
        self.reason: str = extra.get("reason") or "invalid_request"
        super().__init__(message)


def check_trial_steps(steps: int | None, mode: str, load_format: str | None) -> None:
    """RequestError(422) unless `steps` (None: no override) is a timing trial's EAGLE-3 step
    count: mode eagle3 (k = 0, no drafting, is mode baseline), dummy weights (a serving
    engine runs the configured [server.eagle3] num_steps), and 1..64 like that key."""
    if steps is None:
        return
    from fastverify.config import TRIAL_LOAD_FORMAT, validate_fields

    zero = mode == "adaptive" and steps == 0  # SGLang's steps-0 pass, as adaptive runs it
    if mode != "eagle3" and not zero:
        raise RequestError(
            422,
            f"eagle3_steps {steps} needs mode eagle3, not {mode} (0 steps: mode adaptive, "
            "SGLang's steps-0 pass; no drafter at all: mode baseline)",
            reason="invalid_steps",
        )
    if load_format != TRIAL_LOAD_FORMAT:
        raise RequestError(
            422,
            f"eagle3_steps overrides the draft steps of a timing trial only: add load_format "
            f"{TRIAL_LOAD_FORMAT!r} (a serving engine runs [server.eagle3] num_steps)",
            reason="invalid_steps",
        )
    problems = [] if zero else validate_fields({"server.eagle3.num_steps": steps})
    if problems:
        why = problems[0].message.partition(": ")[2]
        raise RequestError(
            422, f"eagle3_steps (like server.eagle3.num_steps): {why}", reason="invalid_steps"
        )


class Resolver:
    def __init__(self, cfg: Config, engine: Engine, profiles: ProfileStore | None = None) -> None:
        if profiles is None:
            from fastverify.profiles.store import ProfileStore

            # the engine's host decides the topology checks (LL128): the sim's, not this machine's
            profiles = ProfileStore(user_dirs=cfg.profile_dirs, topology=engine.topology())
        self.cfg = cfg
        self.engine = engine
        self.profiles = profiles
        self._argv_checks: dict[tuple[str, ...], ArgvCheck] = {}

    def reconfigure(self, cfg: Config, engine: Engine) -> None:
        from fastverify.profiles.store import ProfileStore

        self.cfg = cfg
        if engine.name == self.engine.name:
            self.engine = engine
        self.profiles = ProfileStore(user_dirs=cfg.profile_dirs, topology=self.engine.topology())
        self._argv_checks.clear()

    def defaults(
        self, name: str | None, mode: str | None, active: dict[str, str | None]
    ) -> tuple[str, str]:
        """A request's (profile, mode): as given, else the active one, else the defaults."""
        return (
            name or active.get("profile") or self.cfg.daemon.default_profile,
            mode or active.get("mode") or self.cfg.server.mode,
        )

    def resolve(
        self,
        name: str,
        mode: str,
        force: bool = False,
        load_format: str | None = None,
        eagle3_steps: int | None = None,
    ) -> tuple[Profile, list[str]]:
        """Load the profile and build the argv; RequestError(422) when invalid.
        `load_format` (SGLang --load-format, "dummy" = trial) overrides the config's;
        `eagle3_steps` (a timing trial's step count, `check_trial_steps`) the configured
        EAGLE-3 steps, for this argv only."""
        from fastverify.profiles.model import ProfileError

        if mode not in MODES:
            raise RequestError(
                422, f"mode {mode!r}: expected one of {', '.join(MODES)}", reason="invalid_mode"
            )
        check_trial_steps(eagle3_steps, mode, load_format)
        try:
            profile = self.profiles.load(name, force=force, allow_path=False)
        except ProfileError as exc:
            problems = [str(p) for p in exc.problems]
            raise RequestError(
                422,
                f"invalid profile {name!r}: {problems[0] if problems else exc}",
                problems=problems,
                reason="invalid_profile",
            ) from None
        try:
            server = self.cfg.server
            if load_format is not None:
                server = dataclasses.replace(server, load_format=load_format)
            if eagle3_steps is not None:
                server = dataclasses.replace(server, steps_override=eagle3_steps)
            if mode == "adaptive":
                # the release must have it before its plan is looked for
                self.require_features(name, mode, {}, [])
                server = (
                    self._zero_steps_server(server)
                    if eagle3_steps == 0
                    else self._adaptive_server(server)
                )
            server = self._request_metrics(server, mode)
            argv = self.engine.build_argv(server, mode, profile.requires)
        except EngineArgError as exc:
            raise RequestError(
                422,
                f"cannot build the server argv for {name}/{mode}: {mask_text(str(exc))}",
                reason="config_error",
            ) from None
        self.require_features(name, mode, getattr(profile, "env", {}) or {}, argv)
        return profile, argv

    def require_direct_p2p(self, profile: Profile) -> None:
        """RequestError(422) for a profile that uses PCIe P2P on a host whose ACS redirects
        the GPUs' peer traffic (fastverify.host.pcie): its first all-reduce would hang after
        the load, so nothing running is stopped for it (a client's switch; a forced one
        skips it)."""
        from fastverify.host.pcie import p2p_users

        report = self.engine.pcie_report()
        if report is None or report.status != "redirect":
            return
        env = getattr(profile, "env", {}) or {}
        users = p2p_users(env, getattr(profile, "requires", {}) or {})
        if users:
            raise RequestError(
                422,
                f"{report.message()}; profile {profile.name} uses {'; '.join(users)}, so "
                f"the switch is refused and nothing was stopped. Instead {report.fix()} "
                "(--force starts it anyway)",
                reason="p2p_redirected",
            )

    def adaptive_config_path(self) -> Path:
        """The adaptive config mode adaptive serves: the configured one, else the plan
        `fastverifyctl spec plan` stored in the state dir."""
        configured = self.cfg.server.adaptive_config
        return Path(configured) if configured else Path(self.cfg.state_dir) / ADAPTIVE_CONFIG_NAME

    def _request_metrics(self, server: ServerConfig, mode: str) -> ServerConfig:
        """A speculative server with real weights writes SGLang's per-request metrics into the
        state dir (`--export-metrics-to-file`, when its release has the flag): the exporter's
        live acceptance and plan-stale check read the histograms there."""
        from fastverify.config import REQUEST_METRICS_DIR, SPEC_MODES, TRIAL_LOAD_FORMAT

        flag = "--export-metrics-to-file"
        if mode not in SPEC_MODES or server.load_format == TRIAL_LOAD_FORMAT:
            return server
        if flag in server.extra_args:
            return server
        try:
            if not self.engine.facts().has_flag(flag):
                return server
        except Exception:  # no facts for this release: leave the argv as configured
            return server
        path = Path(self.cfg.state_dir) / REQUEST_METRICS_DIR
        with _state_dir_writes(path):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        extra = (flag, f"{flag}-dir", str(path))
        return dataclasses.replace(server, extra_args=(*extra, *server.extra_args))

    def _zero_steps_server(self, server: ServerConfig) -> ServerConfig:
        """The steps-0 timing trial: adaptive with candidates [0] at every batch size (a
        config of its own in the state dir; the plan's is never touched)."""
        from fastverify.durable import atomic_write_json

        path = Path(self.cfg.state_dir) / ZERO_STEPS_CONFIG_NAME
        with _state_dir_writes(path):
            atomic_write_json(path, {"1": {"candidate_steps": [0]}})
        return dataclasses.replace(server, adaptive_config=str(path))

    def _adaptive_server(self, server: ServerConfig) -> ServerConfig:
        path = self.adaptive_config_path()
        if not path.exists():
            raise RequestError(
                422,
                f"mode adaptive serves a speculation plan, and there is none at {path}: run "
                "fastverifyctl spec plan (it needs an accept curve from a real-weights "
                "EAGLE-3 bench: fastverifyctl mode set eagle3, then fastverifyctl bench)",
                reason="no_adaptive_plan",
            )
        return dataclasses.replace(server, adaptive_config=str(path))

    def require_features(self, name: str, mode: str, env: Any, argv: list[str]) -> None:
        """RequestError(422, "SGLang X.Y.Z has no ...") when the server's SGLang lacks what
        the profile, mode or argv needs (its facts), before anything running is touched."""
        from fastverify.sglang.facts import FeatureMissing, VersionTooOld

        try:
            facts = self.engine.facts()
        except VersionTooOld as exc:
            raise RequestError(422, str(exc), reason="sglang_unsupported") from None
        try:
            if str(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")).lower() in TRUTHY:
                facts.require("pcie_ipc_allreduce", f"profile {name}")
            if mode == "adaptive" or "--speculative-adaptive" in argv:
                facts.require("adaptive_speculation", f"mode {mode} ({name}/{mode})")
            if facts.supported:
                for flag in _long_flags(argv):
                    if not facts.has_flag(flag) and not any(
                        f.startswith(flag) for f in facts.flags
                    ):
                        facts.require_flag(flag, f"the server argv for {name}/{mode}")
        except FeatureMissing as exc:
            raise RequestError(422, str(exc), reason="sglang_feature_missing") from None

    def check_argv(self, argv: list[str]) -> ArgvCheck:
        """The engine parser's verdict on `argv` (message masked), cached per argv."""
        key = tuple(argv)
        hit = self._argv_checks.get(key)
        if hit is None:
            raw = self.engine.check_argv(argv)
            hit = ArgvCheck(raw.ok, mask_text(raw.message, secret_values({}, argv)))
            if hit.ok is not None:
                self._argv_checks[key] = hit
        return hit
