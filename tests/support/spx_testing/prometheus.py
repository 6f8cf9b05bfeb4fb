"""A real Prometheus (Debian ``prometheus`` 2.42) on loopback, with the chart's rule file loaded, scraping one
metrics endpoint every second as job ``spx-operator`` (the tests of tests/observability)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from spx_testing.cluster import free_port
from spx_testing.obslib import RULES, require_binary

SCRAPE = 1  # seconds: scrape and rule evaluation interval


class Prometheus:
    def __init__(self, workdir: Path, metrics_port: int) -> None:
        """Start Prometheus in ``workdir`` scraping ``127.0.0.1:metrics_port``; ready when this returns."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {
                "scrape_interval": f"{SCRAPE}s",
                "evaluation_interval": f"{SCRAPE}s",
                "scrape_timeout": f"{SCRAPE}s",
            },
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": "spx-operator", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                require_binary("prometheus"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as rsp:
                    if rsp.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise AssertionError("prometheus did not become ready in 60 s")

    def api(self, path: str, **params: Any) -> Any:
        url = f"{self.url}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(url, timeout=30) as rsp:
            body = json.loads(rsp.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data["resultType"])
        return data["result"]  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
