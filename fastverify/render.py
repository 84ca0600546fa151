"""Render the deployment files for one host: systemd units (host or container mode) and the
compose stack's `.env`, from the jinja2 templates under systemd/ and compose/.

Templates come from `fastverify.paths.template_dir` (packaged copy, else the checkout).
Rendering is pure: options in, text out; writing files is the caller's job.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jinja2

from fastverify import paths

MODES = ("host", "container")
UNIT_TEMPLATES = {"host": "fastverifyd.service.j2", "container": "fastverify-compose.service.j2"}
UNIT_NAMES = {"host": "fastverifyd.service", "container": "fastverify.service"}
COMPOSE_FILES = ("docker-compose.yml", "prometheus.yml", "fastverify-rules.yml")


@dataclass(frozen=True)
class UnitOptions:
    """Everything a unit template needs; defaults are the production layout."""

    fastverifyd: str = "/opt/fastverify/bin/fastverifyd"
    config_file: str = "/etc/fastverify/fastverifyd.toml"
    env_file: str = "/etc/fastverify/fastverify.env"
    extra_args: tuple[str, ...] = ()
    docs_path: str = "/usr/share/doc/fastverify/deployment.md"
    user: str = ""  # "" = root (GPU device nodes, process groups of the engine)
    group: str = ""
    watchdog_s: int = 30
    timeout_start_s: int = 900
    timeout_stop_s: int = 120
    restart_s: int = 5
    start_limit_interval_s: int = 600
    start_limit_burst: int = 5
    compose_cmd: str = "/usr/bin/docker compose"
    compose_dir: str = "/etc/fastverify/compose"
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
    """Host-specific values of the compose stack, written to its `.env`."""

    image: str = field(default_factory=default_image)
    env_file: str = "/etc/fastverify/fastverify.env"
    config_file: str = "/etc/fastverify/fastverifyd.toml"
    model_dir: str = "/models"
    hf_cache: str = "/var/cache/fastverify/huggingface"
    state_dir: str = "/var/lib/fastverify"
    profile_dir: str = "/etc/fastverify/profiles"
    socket_dir: str = "/run/fastverify"
    sglang_port: int = 30000
    exporter_port: int = 9464
    prometheus_port: int = 9090
    grafana_port: int = 3000
    grafana_bind: str = "127.0.0.1"
    extra: dict[str, str] = field(default_factory=dict)


class RenderError(ValueError):
    """Bad render options, phrased for the operator."""


def _environment(kind: str) -> jinja2.Environment:
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
        "FASTVERIFY_ENV_FILE": options.env_file,
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

    Returns the paths written. Existing files are replaced (callers keep backups)."""
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
    env_path.write_text(render_compose_env(options), encoding="utf-8")
    written.append(env_path)
    return written
