"""Every command that takes ``--profile`` refuses a misspelt one in the same line
(launch.config.profile_named: the closest profile and the known ones), before any host is
touched: no session opened, no state dir or ledger written, no demo host started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specmon.cli import main

COMMANDS = {
    "sweep": ["sweep", "box", "--profile", "dmeo", "--grid", "speculative-num-steps=1,2"],
    "nccl-sweep": ["nccl-sweep", "box", "--profile", "dmeo", "--grid", "NCCL_PROTO=LL"],
    "launch": ["launch", "box", "--profile", "dmeo"],
    "demo": ["demo", "--headless", "--profile", "dmeo"],
}


def _host_touched(*_: Any, **__: Any) -> Any:
    raise AssertionError("a host was touched before the profile was checked")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_misspelt_profile_is_refused_before_the_host_is_touched(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import specmon.session
    import specmon.session.multinode
    import specmon.session.tempdirs

    monkeypatch.setattr(specmon.session, "open_session", _host_touched)
    monkeypatch.setattr(specmon.session.multinode, "open_nodes", _host_touched)
    monkeypatch.setattr(specmon.session.tempdirs, "owned_tempdir", _host_touched)
    state, ledger = tmp_path / "box-state", tmp_path / "ledger.sqlite3"
    config = tmp_path / "specmon.toml"
    config.write_text(f'[hosts.box]\ntransport = "local"\nstate_dir = "{state}"\n')
    argv = [*COMMANDS[command], "--config", str(config)]
    if command.endswith("sweep"):
        argv += ["--ledger", str(ledger)]

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert f"{config}: unknown profile 'dmeo'; did you mean 'demo'?; known: " in err
    assert "demo" in err.split("known: ")[1]
    assert not state.exists() and not ledger.exists()
