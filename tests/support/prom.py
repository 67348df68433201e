"""A real Prometheus server (Debian's `prometheus`) on loopback for tests, scraping given
targets every second, with helpers to query its HTTP API; and `specmon export` as a real
process for it to scrape."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.hosts import free_port
from support.paths import REPO

# The shipped config, named: a ./specmon.toml is used only once trusted (docs/config.md).
SHIPPED_CONFIG = ("--config", str(REPO / "specmon.toml"))


def require_binary(name: str, package: str) -> str:
    """The binary's path, or skip the test saying which Debian package provides it."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(
            f"{name} is not installed (Debian package {package!r}: apt-get install {package})"
        )
    return path


@dataclass
class Prometheus:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        response = httpx.get(
            f"http://127.0.0.1:{self.port}/api/v1/query", params={"query": promql}, timeout=5
        )
        response.raise_for_status()
        data = response.json()
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def wait_query(
        self, promql: str, *, count: int = 1, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Poll until ``promql`` returns at least ``count`` series; fail with the log tail."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                result = self.query(promql)
                if len(result) >= count:
                    return result
            time.sleep(0.5)
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise AssertionError(f"{promql!r}: {len(result)} series after {timeout}s: {result}\n{tail}")


@contextlib.contextmanager
def run_prometheus(
    workdir: Path, targets: list[str], *, extra_jobs: str = "", job_settings: str = ""
) -> Iterator[Prometheus]:
    """``job_settings``: YAML lines added to the `specmon` job (indented 4, e.g. its
    ``authorization``); ``extra_jobs``: further jobs (list items indented 2)."""
    binary = require_binary("prometheus", "prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    listed = ", ".join(f"'{t}'" for t in targets)
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: specmon\n"
        f"    static_configs:\n      - targets: [{listed}]\n{job_settings}{extra_jobs}"
    )
    port = free_port()
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield Prometheus(proc, port, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def start_exporter(state_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """`specmon export local` on loopback ``port``, following the runs under ``state_dir``
    (with the simulated GPU agent); its output in ``log``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env["PYTHONPATH"] = str(REPO)
    argv = [sys.executable, "-m", "specmon", *SHIPPED_CONFIG, "export", "local"]
    argv += ["--state-dir", str(state_dir)]
    argv += ["--gpu-agent", "sim", "--listen", f"127.0.0.1:{port}"]
    with log.open("wb") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop_exporter(exporter: subprocess.Popen[bytes] | None) -> None:
    if exporter is None:
        return
    exporter.terminate()
    try:
        exporter.wait(timeout=15)
    except subprocess.TimeoutExpired:
        exporter.kill()
        exporter.wait(timeout=10)
