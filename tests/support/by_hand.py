"""Servers started the way an operator does, with no specmon involved: ``nohup COMMAND > LOG
2>&1 &`` from a plain shell (what `specmon attach` finds and `--attach` watches)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from support.paths import REPO

WAIT_S = 30.0
SIM_ENV = {"SPECMON_SIM_TIME_SCALE": "0.003", "SPECMON_SIM_SHARDS": "4"}


@dataclass
class Started:
    pid: int
    pgid: int  # the shell's group, which the server stays in (no job control in sh -c)
    port: int
    log: Path


def start_by_hand(
    tmp_path: Path,
    name: str,
    command: str,
    port: int,
    env: dict[str, str] | None = None,
    *,
    base_env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Started:
    """``nohup COMMAND > LOG 2>&1 &`` from a plain shell, as an operator would; the shell
    prints the server's pid and exits. The shell's environment is ``base_env`` plus ``env``;
    without ``base_env``, this one with the simulator's fast settings and this checkout on
    PYTHONPATH (a real server is given its own, with no SPECMON_ settings). ``cwd``: the
    shell's working directory (default this one)."""
    log = tmp_path / f"{name}.log"
    if base_env is None:
        base_env = {**os.environ, **SIM_ENV, "PYTHONPATH": str(REPO)}
    shell = subprocess.run(
        ["sh", "-c", f"nohup {command} > {log} 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        timeout=10,
        start_new_session=True,
        env={**base_env, **(env or {})},
        check=True,
        cwd=cwd,
    )
    pid = int(shell.stdout.strip())
    return Started(pid=pid, pgid=os.getpgid(pid), port=port, log=log)


def wait_listening(port: int, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on port {port} within {timeout}s")


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"
