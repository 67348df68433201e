"""The command-line arguments the host commands share; argparse only, so `--help` stays fast."""

from __future__ import annotations

import argparse

UNTIL_CHOICES = ("ready", "failed", "exit")
HOST_HELP = "[user@]host[:port], an ~/.ssh/config alias, a host from specmon.toml, or 'local'"
"""HOST in every subcommand's help: one wording (a command adds its own clause after it)."""


def add_host_arguments(parser: argparse.ArgumentParser) -> None:
    """HOST and the SSH knobs every host command takes (argparse only: no heavy imports)."""
    parser.add_argument(
        "host",
        metavar="HOST",
        help=HOST_HELP,
    )
    add_connection_arguments(parser)


def add_hosts_arguments(parser: argparse.ArgumentParser, *, every: bool = False) -> None:
    """HOST [HOST ...] (several hosts at once) and the SSH knobs; with ``every``, also
    ``--all`` (every host in specmon.toml) and HOST becomes optional."""
    parser.add_argument(
        "hosts",
        metavar="HOST",
        nargs="*",  # none is refused by the command (fleet_names): after reclaim_swallowed_host
        help=HOST_HELP + "; several hosts are connected in parallel",
    )
    if every:
        parser.add_argument(
            "--all", dest="all_hosts", action="store_true", help="every host in specmon.toml"
        )
    add_connection_arguments(parser)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """The SSH knobs alone, for commands that take several hosts (`export`, `serve`)."""
    group = parser.add_argument_group("connection")
    group.add_argument("--known-hosts", metavar="PATH", help="known_hosts file to verify against")
    group.add_argument(
        "--ssh-config", metavar="PATH", action="append", help="ssh config file (repeatable)"
    )
    group.add_argument(
        "-i", "--identity", metavar="PATH", action="append", help="private key file (repeatable)"
    )
    group.add_argument(
        "--state-dir", metavar="DIR", help="specmon's state dir on the host (default from config)"
    )
    group.add_argument(
        "--gpu-agent",
        choices=("nvml", "sim", "none"),
        help="GPU agent to run on the host (default: the profile's, else nvml)",
    )


def add_attach_argument(parser: argparse.ArgumentParser) -> None:
    """``--attach [auto|PID|unit:NAME|container:NAME]``: watch a server specmon did not launch
    (docs/attach.md, "Watching it"); alone it means ``auto``."""
    parser.add_argument(
        "--attach",
        nargs="?",
        const="auto",
        metavar="auto|PID|unit:NAME|container:NAME",
        help="watch a server specmon did not launch (alone: the only one on the host)",
    )


# The options whose value is optional (their dest), and the value they mean alone.
_OPTIONAL_TARGETS = (("attach", "auto"), ("take_over", ""))


def reclaim_swallowed_host(args: argparse.Namespace) -> None:
    """``--attach root@gpu1`` or ``--take-over root@gpu1``: argparse gives the next word to the
    option, whose value is optional, and then asked for a HOST or named the wrong thing. A value
    that is no attach target, where no host was named, is the host, and the option stands alone.
    A mistyped target (``pid:``, ``unit:``, ``container:``, digits) is left for the option's
    own error."""
    from specmon.model.attach_target import parse_attach_target

    for dest, alone in _OPTIONAL_TARGETS:
        value = getattr(args, dest, None)
        if not value or _looks_like_a_target(value):
            continue
        try:
            parse_attach_target(value)
        except ValueError:
            pass
        else:
            continue
        if "host" in vars(args) and args.host is None:
            args.host = value
        elif getattr(args, "hosts", None) == [] and not getattr(args, "all_hosts", False):
            args.hosts = [value]
        else:
            continue
        setattr(args, dest, alone)


def _looks_like_a_target(value: str) -> bool:
    text = value.strip()
    return text.isdigit() or text.partition(":")[0] in ("pid", "unit", "container")
