"""A real Prometheus server for tests: started on a free loopback port with a temp config and
TSDB, scraping given targets every second; queried over its HTTP API. No Debian service is
touched: the binary runs as our child in its own session and is stopped by its pid.

    from tests.support.prom import Prometheus

    with Prometheus(tmp_path, targets=["127.0.0.1:9464"]) as prom:   # waits for /-/ready
        prom.wait_for("fastverify_up == 1", timeout=15)             # until the query has data
        v = prom.value("fastverify_allreduce_per_verify")           # one series -> float
        rows = prom.query("fastverify_profile_info")   # [{"metric": {...}, "value": [t, "1"]}]
        rows = prom.query_range("rate(x[5s])", start, end, step=1)  # [{"metric", "values"}]

`Prometheus(tmp_path, targets, *, scrape_interval="1s", job="fastverify", binary=None,
rule_files=(), extra_scrape_configs=())`: `binary` defaults to $PROMETHEUS_BIN, else
`prometheus` on PATH, else /usr/bin/prometheus; `available()` says whether one exists (tests
skip with a clear reason when it does not: the Debian package `prometheus` is listed in
scripts/debian-packages.txt). `.url`, `.port`, `.log_path`, `.targets_health()` (scrape
health per target), `.stop()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.support.net import free_port


def find_binary() -> str | None:
    env = os.environ.get("PROMETHEUS_BIN")
    if env and Path(env).is_file():
        return env
    found = shutil.which("prometheus")
    if found:
        return found
    return "/usr/bin/prometheus" if Path("/usr/bin/prometheus").is_file() else None


def available() -> bool:
    return find_binary() is not None


class PromError(RuntimeError):
    """Prometheus did not start, or a query failed."""


class Prometheus:
    def __init__(
        self,
        tmp_path: Path,
        targets: Sequence[str],
        *,
        scrape_interval: str = "1s",
        job: str = "fastverify",
        binary: str | None = None,
        rule_files: Iterable[str | Path] = (),
        extra_scrape_configs: Iterable[str] = (),
    ) -> None:
        self.dir = Path(tmp_path) / "prometheus"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.binary = binary or find_binary()
        if self.binary is None:
            raise PromError("prometheus binary not found (apt-get install prometheus)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.dir / "prometheus.log"
        self.config_path = self.dir / "prometheus.yml"
        rules = "".join(f"  - {json.dumps(str(r))}\n" for r in rule_files)
        extra = "".join(extra_scrape_configs)
        self.config_path.write_text(
            "global:\n"
            f"  scrape_interval: {scrape_interval}\n"
            f"  evaluation_interval: {scrape_interval}\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + "scrape_configs:\n"
            f"  - job_name: {json.dumps(job)}\n"
            f"    scrape_interval: {scrape_interval}\n"
            f"    scrape_timeout: {scrape_interval}\n"
            f"    static_configs:\n"
            f"      - targets: {json.dumps(list(targets))}\n" + extra
        )
        self.proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 30.0) -> Prometheus:
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PromError(f"prometheus exited with {self.proc.returncode}: {self.log()}")
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r,
            ):
                if r.status == 200:
                    return self
            time.sleep(0.1)
        self.stop()
        raise PromError(f"prometheus not ready after {timeout}s: {self.log()}")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    # ------------------------------------------------------------- queries
    def _api(self, path: str, params: dict[str, Any]) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise PromError(f"{path} {params}: HTTP {exc.code}: {exc.read()[:300]!r}") from None
        if body.get("status") != "success":
            raise PromError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query -> result vector (`[{"metric": {...}, "value": [ts, "v"]}]`)."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._api("query", params)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict]:
        return self._api(
            "query_range",
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step},
        )["result"]

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The single series' value (None when empty; PromError when several series)."""
        rows = self.query(expr, at)
        if not rows:
            return None
        if len(rows) > 1:
            raise PromError(f"{expr}: {len(rows)} series, expected one: {rows}")
        return float(rows[0]["value"][1])

    def wait_for(
        self,
        expr: str,
        predicate: Callable[[list[dict[str, Any]]], bool] = bool,
        timeout: float = 20.0,
    ) -> list[dict[str, Any]]:
        """Poll `expr` until `predicate(result)` holds; returns the result."""
        deadline = time.monotonic() + timeout
        rows: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            rows = self.query(expr)
            if predicate(rows):
                return rows
            time.sleep(0.25)
        raise PromError(f"timed out after {timeout}s waiting on {expr!r}; last result {rows}; "
                        f"targets {self.targets_health()}")  # fmt: skip

    def targets_health(self) -> list[dict[str, Any]]:
        data = self._api("targets", {})
        return [
            {"url": t.get("scrapeUrl"), "health": t.get("health"), "error": t.get("lastError")}
            for t in data.get("activeTargets", [])
        ]
