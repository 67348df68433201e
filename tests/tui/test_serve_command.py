"""What each browser tab of `specmon serve` runs: the same console `specmon connect` opens."""

from __future__ import annotations

import shlex
import sys

from specmon.cli import build_parser
from specmon.commands.serve import console_command


def _tab_command(*argv: str) -> list[str]:
    args = build_parser().parse_args(["serve", *argv])
    return shlex.split(console_command(args))


def test_several_hosts_open_the_fleet_console_in_each_tab():
    assert _tab_command("gpu-a", "gpu-b", "--read-only") == [
        sys.executable,
        "-m",
        "specmon",
        "connect",
        "gpu-a",
        "gpu-b",
        "--console",
        "--read-only",
    ]


def test_no_host_serves_the_demo_and_one_host_its_console():
    assert _tab_command()[3:] == ["demo", "--console"]
    assert _tab_command("gpu-a", "--known-hosts", "/k")[3:] == [
        "connect",
        "gpu-a",
        "--known-hosts",
        "/k",
        "--console",
    ]
