"""Real process groups for the tests of the helper's `stop`: a python child that leads its
own session and group, and a fixture that kills and reaps every one a test started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

# Says it is ready, then sleeps: SIGTERM ends it.
POLITE = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The process groups a test starts; killed and reaped at the end whatever happened."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def start_group(
    procs: list[subprocess.Popen[bytes]], code: str, ready: bool = True
) -> subprocess.Popen[bytes]:
    """A python child leading its own session and process group, once it has said ready."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    procs.append(proc)
    assert proc.stdout is not None
    if ready:
        assert proc.stdout.readline() == b"ready\n"
    return proc
