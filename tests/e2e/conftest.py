"""The end-to-end modules' shared fixture: one test sshd per module (throw-away keys, on
127.0.0.1), its connections dropped and the daemon stopped when the module ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.sshd import SshdServer, start_sshd, stop_sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdServer]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.drop_connections()
        stop_sshd(server.proc)
