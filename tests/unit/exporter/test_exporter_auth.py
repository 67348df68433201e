"""`specmon export` beyond loopback: refused without `--public` and credentials; with a bearer
token file or a basic-auth file every scrape must carry them, and a real Prometheus scrapes it
through `authorization: {credentials_file: ...}` and `basic_auth: {password_file: ...}`
while a job without them (or with a wrong token) is refused."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from support.hosts import free_port, kill_everything_under
from support.paths import REPO
from support.prom import run_prometheus

REPO_ROOT = REPO
UNROUTED = "192.0.2.1"  # TEST-NET-1: not loopback, never reached (nothing binds it here)


def secret_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def specmon(*argv: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "specmon", *argv, "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=state_dir.parent,  # no ./specmon.toml there (one is used only once trusted)
    )


def test_a_non_loopback_listener_needs_public_and_credentials(tmp_path: Path) -> None:
    """Before: `export --listen` took any address and served /metrics to anyone."""
    state = tmp_path / "state"
    good = secret_file(tmp_path / "token", "s3cret-token\n")
    shared = secret_file(tmp_path / "shared", "s3cret-token\n", 0o640)
    users = secret_file(tmp_path / "users", "prometheus\n")
    port = free_port()
    base = ["export", "local", "--gpu-agent", "none", "--duration", "3"]
    for argv, said in (
        ([*base, "--listen", f"{UNROUTED}:{port}"], "--public"),
        ([*base, "--listen", f"{UNROUTED}:{port}", "--public"], "--bearer-token-file"),
        ([*base, "--public", "--bearer-token-file", str(shared)], "chmod 600"),
        ([*base, "--public", "--bearer-token-file", str(tmp_path / "none")], "No such file"),
        ([*base, "--public", "--basic-auth-file", str(users)], "USER:PASSWORD"),
        (
            ["connect", "local", "--headless", "--export", f"{UNROUTED}:{port}"],
            "not a loopback address",
        ),
    ):
        result = specmon(*argv, state_dir=state)
        assert result.returncode == 2, (argv, result.stderr)
        assert said in result.stderr, (argv, result.stderr)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert "s3cret-token" not in result.stderr + result.stdout
    assert good.read_text() == "s3cret-token\n"


async def test_prometheus_scrapes_with_its_credentials_file_and_others_get_401(
    tmp_path: Path,
) -> None:
    token = "t0ken-" + os.urandom(8).hex()
    token_file = secret_file(tmp_path / "token", token + "\n")
    users_file = secret_file(tmp_path / "users", "# scrapers\nprometheus:pa55:word\n")
    password_file = secret_file(tmp_path / "password", "pa55:word")
    wrong_file = secret_file(tmp_path / "wrong", "not-the-token")
    state = tmp_path / "state"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    argv = [sys.executable, "-m", "specmon", "export", "local", "--state-dir", str(state)]
    argv += ["--gpu-agent", "none", "--listen", f"127.0.0.1:{port}", "--public"]
    argv += ["--bearer-token-file", str(token_file), "--basic-auth-file", str(users_file)]
    log = tmp_path / "export.log"
    with log.open("wb") as out:
        exporter = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path
        )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            bearer = {"Authorization": f"Bearer {token}"}
            deadline = time.monotonic() + 30
            text = ""
            while 'specmon_host_up{host="local"} 1.0' not in text:
                assert time.monotonic() < deadline and exporter.poll() is None, log.read_text()
                with contextlib.suppress(httpx.HTTPError):
                    text = (await client.get(url, headers=bearer)).text
                await asyncio.sleep(0.3)
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic !"}):
                refused = await client.get(url, headers=headers)
                assert refused.status_code == 401, headers
                assert "Bearer" in refused.headers["www-authenticate"]
            assert (await client.get(f"http://127.0.0.1:{port}/")).status_code == 401
            basic = await client.get(url, auth=("prometheus", "pa55:word"))
            assert basic.status_code == 200 and "specmon_host_up" in basic.text
            assert (await client.get(url, auth=("prometheus", "pa55"))).status_code == 401
            assert (await client.get(url, auth=("other", "pa55:word"))).status_code == 401
        target = f"'127.0.0.1:{port}'"
        jobs = (
            f"  - job_name: basic\n    basic_auth:\n      username: prometheus\n"
            f"      password_file: {password_file}\n"
            f"    static_configs:\n      - targets: [{target}]\n"
            f"  - job_name: anonymous\n    static_configs:\n      - targets: [{target}]\n"
            f"  - job_name: wrong\n    authorization:\n      credentials_file: {wrong_file}\n"
            f"    static_configs:\n      - targets: [{target}]\n"
        )
        settings = f"    authorization:\n      credentials_file: {token_file}\n"
        with run_prometheus(
            tmp_path / "prom", [f"127.0.0.1:{port}"], job_settings=settings, extra_jobs=jobs
        ) as prom:
            for job, up in (("specmon", 1), ("basic", 1), ("anonymous", 0), ("wrong", 0)):
                found = await asyncio.to_thread(prom.wait_query, f'up{{job="{job}"}} == {up}')
                assert found, job
            hosts = await asyncio.to_thread(prom.wait_query, 'specmon_host_up{job="specmon"}')
            assert float(hosts[0]["value"][1]) == 1.0
            assert not await asyncio.to_thread(prom.query, 'specmon_host_up{job="anonymous"}')
    finally:
        exporter.send_signal(signal.SIGTERM)
        try:
            exporter.wait(timeout=15)
        except subprocess.TimeoutExpired:
            exporter.kill()
        kill_everything_under(state)
    output = log.read_text()
    assert "a bearer token and basic auth" in output
    assert token not in output and "pa55" not in output
