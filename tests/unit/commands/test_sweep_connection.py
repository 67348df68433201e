"""Both sweep commands open their host session as every other command does: `--state-dir`,
`--gpu-agent` and the SSH knobs were missing (a sweep could not use a non-default key or keep
its runs where `launch --state-dir` put them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.cli import build_parser
from specmon.commands.sweep_session import sweep_session
from specmon.launch.config import BUILTIN_CONFIG_TOML, parse_config_text


@pytest.mark.parametrize(
    "command",
    [
        ["sweep", "local", "--profile", "demo", "--grid", "speculative-num-steps=1,2"],
        ["nccl-sweep", "local", "--profile", "demo", "--grid", "NCCL_ALGO=Ring,Tree"],
    ],
)
async def test_a_sweep_session_takes_the_state_dir_gpu_agent_and_ssh_knobs(
    command: list[str], tmp_path: Path
) -> None:
    key = tmp_path / "id_ed25519"
    args = build_parser().parse_args(
        [
            *command,
            "--state-dir", str(tmp_path / "state"),
            "--gpu-agent", "none",
            "--identity", str(key),
            "--known-hosts", str(tmp_path / "known_hosts"),
            "--ledger", str(tmp_path / "ledger.sqlite3"),
        ]
    )  # fmt: skip
    assert args.identity == [str(key)] and args.known_hosts == str(tmp_path / "known_hosts")
    config = parse_config_text(BUILTIN_CONFIG_TOML, None, environ={})
    async with sweep_session(args, config) as (session, ledger):
        assert session.options.state_dir == str(tmp_path / "state")
        assert session.agent_kind == "none"
        assert Path(ledger.path) == tmp_path / "ledger.sqlite3"
