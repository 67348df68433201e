"""``--attach HOST`` and ``--take-over HOST``: the option's value is optional, so argparse gave
it the host and then asked for a HOST (watch), for "at least one host" (connect) or for the
HOST to launch on (launch). A value that is no attach target, with no host named, is the host."""

from __future__ import annotations

import pytest

from specmon.cli import build_parser
from specmon.commands.arguments import reclaim_swallowed_host


def parsed(*argv: str):
    args = build_parser().parse_args(list(argv))
    reclaim_swallowed_host(args)
    return args


@pytest.mark.parametrize("command", ["watch", "connect"])
def test_attach_before_the_host_leaves_the_host_a_host(command):
    args = parsed(command, "--attach", "root@gpu-box")
    assert args.hosts == ["root@gpu-box"] and args.attach == "auto"


def test_take_over_before_the_host_takes_the_profiles_target():
    args = parsed("launch", "--take-over", "root@gpu-box", "-p", "demo")
    assert args.host == "root@gpu-box" and args.take_over == ""


@pytest.mark.parametrize(
    ("argv", "hosts", "attach"),
    [
        (("watch", "h1", "--attach", "4242"), ["h1"], "4242"),
        (("watch", "--attach", "unit:sglang", "h1"), ["h1"], "unit:sglang"),
        (("watch", "--attach", "h1"), ["h1"], "auto"),
        (("watch", "h1", "--attach", "h2"), ["h1"], "h2"),  # a host named: the option's error
        (("watch", "--attach", "pid:x", "h1"), ["h1"], "pid:x"),  # a mistyped target stays
        (("connect", "--all", "--attach", "h2"), [], "h2"),
    ],
)
def test_a_target_or_a_named_host_is_left_as_given(argv, hosts, attach):
    args = parsed(*argv)
    assert (args.hosts, args.attach) == (hosts, attach)


def test_a_mistyped_take_over_target_is_not_made_a_host():
    args = parsed("launch", "--take-over", "1234x", "-p", "demo")
    assert args.host == "1234x"  # not digits only: no target, so a host
    args = parsed("launch", "--take-over", "container:", "-p", "demo")
    assert args.host is None and args.take_over == "container:"


def test_watch_without_a_host_is_one_line_naming_the_host(capsys, monkeypatch, tmp_path):
    from specmon.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECMON_CONFIG_DIR", str(tmp_path / "config"))

    assert main(["watch", "--duration", "1"]) == 2
    assert capsys.readouterr().err == (
        "specmon: name at least one HOST (e.g. root@gpu-box, or local)\n"
    )
