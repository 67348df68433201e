"""`specmon agent`: run the NVML GPU agent on this machine, to check a host by hand.

Writes the same JSON lines the console reads over SSH: a header, then one tick per sample.
"""

from __future__ import annotations

import argparse

from specmon.model.errors import UsageError

EPILOG = """\
examples:
  specmon agent --once                  one GPU sample as a JSON line
  specmon agent --rate 4 --duration 10  4 samples a second for 10 s
  specmon agent --source nvidia-smi --count 3   read nvidia-smi instead of NVML
"""
"""The examples that end `specmon agent --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.remote.agent import add_agent_arguments  # standard library only: cheap to import

    add_agent_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from specmon.remote import agent

    try:
        agent.check_agent_options(args)
    except agent.AgentUsage as exc:
        raise UsageError(f"specmon agent: {exc}") from None
    return agent.run_agent(args)
