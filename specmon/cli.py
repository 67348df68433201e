"""The `specmon` command line. Stays light: subcommands import their heavy parts when run."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from specmon import __version__
from specmon.model.errors import SpecmonError, UsageError

# (name, module under specmon.commands, one-line help). Each module offers
# `configure(parser)` (argparse only, no heavy imports), `run(args) -> int` and `EPILOG`,
# the examples (and exit codes) that end its --help.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("demo", "demo", "run the built-in simulated EAGLE-3 host and open the console"),
    ("connect", "connect", "open the console on a GPU host over SSH"),
    ("parse", "parse", "parse a server log into events"),
    ("launch", "launch", "launch a server profile on a host (headless)"),
    ("stop", "stop", "stop the server run on a host (headless)"),
    ("status", "status", "show the runs on a host (headless)"),
    ("diff", "diff", "every recorded difference between two runs on a host (headless)"),
    ("watch", "watch", "stream a host's events as text or JSON lines (headless)"),
    ("attach", "attach", "list the servers on a host that specmon did not launch (headless)"),
    ("adopt", "adopt", "write a server that specmon did not launch as a profile (headless)"),
    ("agent", "agent", "run the NVML GPU agent on this machine"),
    ("bench", "bench", "benchmark a ready server with the fixed prompt set"),
    ("sweep", "sweep", "relaunch, benchmark and record a grid of settings"),
    ("nccl-sweep", "nccl_sweep", "run a collective benchmark once per NCCL setting, recorded"),
    ("ledger", "ledger", "list, show, export and plot recorded experiments"),
    ("advise", "advise", "predict the best draft step count from the running server (headless)"),
    ("export", "export", "serve hosts' metrics to Prometheus (headless)"),
    ("serve", "serve", "serve the console as a web page"),
    (
        "trust",
        "trust",
        "trust ./specmon.toml (a config in the working directory is used only then)",
    ),
)


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line, exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


def _add_global_options(parser: argparse.ArgumentParser, *, default: object) -> None:
    """The options of specmon itself, which work before or after the subcommand."""
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=default,
        help="config file (default: ./specmon.toml once trusted, then the user config dir)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="specmon",
        description="A terminal console for speculative-decoding LLM servers on GPU hosts.",
    )
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    _add_global_options(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    for name, module, help_text in COMMANDS:
        if importlib.util.find_spec(f"specmon.commands.{module}") is None:
            continue  # a subcommand still being built is simply not offered
        command = importlib.import_module(f"specmon.commands.{module}")
        command_parser = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=getattr(command, "EPILOG", None),  # examples, kept as written
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(command_parser)
        # After the subcommand too (`specmon status h1 --config X`); SUPPRESS keeps a value
        # given before the subcommand when none is given after it.
        _add_global_options(command_parser, default=argparse.SUPPRESS)
        for action in command_parser._actions:  # and after an action (`ledger list`)
            if isinstance(action, argparse._SubParsersAction):
                for action_parser in action.choices.values():
                    _add_global_options(action_parser, default=argparse.SUPPRESS)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return 2
        from specmon.commands.arguments import reclaim_swallowed_host

        reclaim_swallowed_host(args)
        return int(importlib.import_module(f"specmon.commands.{args._module}").run(args) or 0)
    except SpecmonError as exc:
        print(
            f"specmon: {exc}" if not str(exc).startswith("specmon") else str(exc), file=sys.stderr
        )
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
