"""Render the deployment files for one host: systemd units (host or container mode) and the
compose stack's `.env`, from the jinja2 templates under systemd/ and compose/.

Templates come from `fastverify.paths.template_dir` (packaged copy, else the checkout).
Rendering is pure: options in, text out; writing files is the caller's job. The options are
declared once, as the fields of `UnitOptions` and `ComposeOptions` (fastverify.flags).
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fastverify import paths
from fastverify.durable import atomic_write_text
from fastverify.flags import option

if TYPE_CHECKING:
    import jinja2

MODES = ("host", "container")
UNIT_TEMPLATES = {"host": "fastverifyd.service.j2", "container": "fastverify-compose.service.j2"}
UNIT_NAMES = {"host": "fastverifyd.service", "container": "fastverify.service"}
COMPOSE_FILES = ("docker-compose.yml", "prometheus.yml", "fastverify-rules.yml")
# the compose file's default env_file (beside it) and the text a new one starts with
BUNDLE_ENV_FILE = "fastverify.env"
ENV_FILE_TEMPLATE = ("systemd", "fastverify.env")


@dataclass(frozen=True)
class UnitOptions:
    """Everything a unit template needs; defaults are the production layout. Each field but
    `project` is an option of `render systemd` (fastverify.flags), in this order."""

    fastverifyd: str = option(
        "/opt/fastverify/bin/fastverifyd", "host mode: the daemon's executable.", show_default=True
    )
    config_file: str = option("/etc/fastverify/fastverifyd.toml", name="--config",
                              show_default=True)  # fmt: skip
    env_file: str = option("/etc/fastverify/fastverify.env",
                           "Optional environment file (EnvironmentFile=-...).",
                           show_default=True)  # fmt: skip
    extra_args: tuple[str, ...] = option(
        (), "Extra fastverifyd argument (repeatable).", name="--daemon-arg", multiple=True
    )
    # "" = root (GPU device nodes, process groups of the engine)
    user: str = option("", "host mode: run as this user (default root).")
    group: str = option("", "host mode: with --user, its group.")
    watchdog_s: int = option(30, name="--watchdog-sec", show_default=True)
    timeout_start_s: int = option(900, "Start timeout floor; the daemon extends it while a "
                                  "model loads.", name="--timeout-start-sec",
                                  show_default=True)  # fmt: skip
    timeout_stop_s: int = option(120, name="--timeout-stop-sec", show_default=True)
    restart_s: int = option(5, name="--restart-sec", show_default=True)
    start_limit_burst: int = option(5, show_default=True)
    start_limit_interval_s: int = option(600, name="--start-limit-interval-sec",
                                         show_default=True)  # fmt: skip
    compose_cmd: str = option("/usr/bin/docker compose",
                              "container mode: the Compose command (absolute path first).",
                              show_default=True)  # fmt: skip
    compose_dir: str = option("/etc/fastverify/compose",
                              "container mode: where docker-compose.yml and its .env live.",
                              show_default=True)  # fmt: skip
    docs_path: str = option("/usr/share/doc/fastverify/deployment.md", show_default=True)
    project: str = "fastverify"

    @property
    def compose_file(self) -> str:
        return f"{self.compose_dir}/docker-compose.yml"


def default_image() -> str:
    """`fastverify:<installed version>`, the tag deploy.sh builds."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"fastverify:{version('fastverify')}"
    except PackageNotFoundError:
        return "fastverify:latest"


@dataclass(frozen=True)
class ComposeOptions:
    """Host-specific values of the compose stack, written to its `.env`. Each field but
    `extra` is an option of `render compose` (fastverify.flags), in this order."""

    image: str = option(None, "Image tag (default: fastverify:<version>).", factory=default_image)
    env_file: str = option("", "The fastverify container's environment file (HF_TOKEN, ...); "
                           f"default: {BUNDLE_ENV_FILE} beside docker-compose.yml, written "
                           "(comments only) where there is none, so the stack starts without "
                           "one, as the unit does.")  # fmt: skip
    config_file: str = option("/etc/fastverify/fastverifyd.toml", name="--config",
                              show_default=True)  # fmt: skip
    model_dir: str = option("/models", show_default=True)
    hf_cache: str = option("/var/cache/fastverify/huggingface", show_default=True)
    state_dir: str = option("/var/lib/fastverify", show_default=True)
    profile_dir: str = option("/etc/fastverify/profiles",
                              "Host directory of operator profiles (mounted read-only).",
                              show_default=True)  # fmt: skip
    socket_dir: str = option("/run/fastverify", show_default=True)
    sglang_port: int = option(30000, show_default=True)
    exporter_port: int = option(9464, show_default=True)
    prometheus_port: int = option(9090, show_default=True)
    grafana_port: int = option(3000, show_default=True)
    grafana_bind: str = option("127.0.0.1", "Address Grafana is published on (0.0.0.0 to "
                               "reach it from other hosts).", show_default=True)  # fmt: skip
    extra: dict[str, str] = field(default_factory=dict)


class RenderError(ValueError):
    """Bad render options, phrased for the operator."""


def _environment(kind: str) -> jinja2.Environment:
    import jinja2  # only a render pays for it: the CLI builds `render`'s options from here

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.template_dir(kind))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _check_unit(options: UnitOptions) -> None:
    for name in ("fastverifyd", "config_file", "env_file", "compose_dir"):
        value = getattr(options, name)
        if not value.startswith("/"):
            raise RenderError(f"{name} must be an absolute path (systemd requires it): {value!r}")
        if any(ch.isspace() for ch in value):
            raise RenderError(f"{name} must not contain whitespace: {value!r}")
    if not options.compose_cmd.startswith("/"):
        raise RenderError(f"compose_cmd must start with an absolute path: {options.compose_cmd!r}")
    if options.watchdog_s < 3:
        raise RenderError(f"watchdog must be at least 3 s (got {options.watchdog_s})")
    if options.user and not options.group:
        raise RenderError("--user needs --group (the control socket's group)")


def render_unit(mode: str, options: UnitOptions | None = None) -> str:
    """The systemd unit text for `mode` ("host" or "container")."""
    if mode not in MODES:
        raise RenderError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    options = options or UnitOptions()
    _check_unit(options)
    context = asdict(options) | {
        "compose_file": options.compose_file,
        "unit_name": UNIT_NAMES[mode],
    }
    return _environment("systemd").get_template(UNIT_TEMPLATES[mode]).render(**context)


def render_compose_env(options: ComposeOptions | None = None) -> str:
    """The compose stack's `.env` (Compose interpolation variables) for this host."""
    options = options or ComposeOptions()
    values = {
        "COMPOSE_PROJECT_NAME": "fastverify",
        "FASTVERIFY_IMAGE": options.image,
        # none: the compose file's default, ./fastverify.env (write_compose_bundle)
        **({"FASTVERIFY_ENV_FILE": options.env_file} if options.env_file else {}),
        "FASTVERIFY_CONFIG_FILE": options.config_file,
        "FASTVERIFY_MODEL_DIR": options.model_dir,
        "FASTVERIFY_HF_CACHE": options.hf_cache,
        "FASTVERIFY_STATE_DIR": options.state_dir,
        "FASTVERIFY_PROFILE_DIR": options.profile_dir,
        "FASTVERIFY_SOCKET_DIR": options.socket_dir,
        "FASTVERIFY_SGLANG_PORT": str(options.sglang_port),
        "FASTVERIFY_EXPORTER_PORT": str(options.exporter_port),
        "FASTVERIFY_PROMETHEUS_PORT": str(options.prometheus_port),
        "FASTVERIFY_GRAFANA_PORT": str(options.grafana_port),
        "FASTVERIFY_GRAFANA_BIND": options.grafana_bind,
    } | dict(options.extra)
    for key, value in values.items():
        if any(ch in value for ch in "\n\"'$\\") or value != value.strip():
            raise RenderError(f"{key}: value {value!r} has characters .env files cannot carry")
    return _environment("compose").get_template("dotenv.j2").render(values=values)


def write_compose_bundle(output_dir: Path, options: ComposeOptions | None = None) -> list[Path]:
    """Write docker-compose.yml, prometheus.yml, grafana/ and a rendered .env to output_dir.

    Returns the paths written. Existing files are replaced (callers keep backups), but for
    the bundle's own env file (without `env_file`): written only where there is none, as it
    may hold the operator's secrets."""
    options = options or ComposeOptions()
    source = paths.template_dir("compose")
    output_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in COMPOSE_FILES:
        shutil.copyfile(source / name, output_dir / name)
        written.append(output_dir / name)
    for path in sorted((source / "grafana").rglob("*")):
        if path.is_file():
            target = output_dir / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            written.append(target)
    env_path = output_dir / ".env"
    atomic_write_text(env_path, render_compose_env(options), mode=0o644)
    written.append(env_path)
    own = output_dir / BUNDLE_ENV_FILE
    if not options.env_file and not own.exists():
        kind, name = ENV_FILE_TEMPLATE
        text = (paths.template_dir(kind) / name).read_text(encoding="utf-8")
        atomic_write_text(own, text, mode=0o640)
        written.append(own)
    return written
