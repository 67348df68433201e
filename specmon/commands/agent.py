"""`specmon agent`: run the NVML GPU agent on this machine, to check a host by hand.

Writes the same JSON lines the console reads over SSH: a header, then one tick per sample.
"""

from __future__ import annotations

import argparse

from specmon.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.agent import add_agent_arguments  # standard library only: cheap to import

    add_agent_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from specmon import agent

    try:
        agent.check_agent_options(args)
    except agent.AgentUsage as exc:
        raise UsageError(f"specmon agent: {exc}") from None
    return agent.run_agent(args)
