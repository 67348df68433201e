"""`specmon attach HOST [--json] [--pid PID]`: the LLM servers running on a host that specmon
did not launch (started by hand, by systemd, in a container), found from the host's /proc,
docker and nvidia-smi: pid, user, backend, port, start time, GPUs and where the log goes.

Headless and read-only: it starts, stops and signals nothing. `connect --attach` and `watch
--attach` watch one of them (docs/attach.md, "Watching it").
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

EPILOG = """\
examples:
  specmon attach gpu-box                the servers on gpu-box that specmon did not launch
  specmon attach gpu-box --json         one JSON object per server, then one for the host
  specmon attach gpu-box --pid 4242     the details of one of them

exit codes: 0 found or not, 1 host unreachable, 2 bad input or a --pid that is not a server
"""
"""The examples that end `specmon attach --help`."""

COLUMNS = ("PID", "USER", "BACKEND", "PORT", "STARTED", "GPUS", "LOG")


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import add_host_arguments

    add_host_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    parser.add_argument(
        "--pid", type=int, metavar="PID", help="details of one server (refused if not one)"
    )


def run(args: argparse.Namespace) -> int:
    from specmon.commands.printers import load_config_from, run_async, session_from_args
    from specmon.model.errors import UsageError
    from specmon.model.terminal_text import safe_text
    from specmon.session.foreign import survey_host

    if args.pid is not None and args.pid <= 0:
        raise UsageError(f"--pid {args.pid}: not a process id")
    config = load_config_from(args)
    session = session_from_args(args, config)

    async def main() -> Any:
        await session.start(streams=False)
        try:
            return await survey_host(session.helper, pid=args.pid, host=args.host)
        finally:
            await session.close()

    survey = run_async(main)
    if args.pid is not None:
        server = survey.server(args.pid)
        if server is None:
            raise UsageError(safe_text(survey.refusal(args.pid)))
        print_details(server, survey, as_json=args.json)
        return 0
    print_survey(survey, as_json=args.json)
    return 0


def started_text(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"


def print_survey(survey: Any, *, as_json: bool) -> None:
    """The servers as a table (or JSON lines), then one line each on docker, the journal
    and the GPUs. Every text from the host goes through safe_text."""
    from specmon.model.terminal_text import safe_text

    if as_json:
        for server in survey.servers:
            print(json.dumps(dict(server.to_dict(), host=survey.host)))
        print(json.dumps(survey.host_dict()))
        return
    if not survey.servers:
        print(safe_text(f"no servers found on {survey.host} that specmon did not launch"))
    else:
        rows = [COLUMNS] + [
            (
                str(s.pid) if s.pid is not None else "-",
                s.user or "-",
                s.backend,
                s.port_text(),
                started_text(s.started_at),
                s.gpus_text(),
                s.log.text(),
            )
            for s in survey.servers
        ]
        rows = [tuple(safe_text(cell) for cell in row) for row in rows]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            print("  ".join([*cells, row[-1]]).rstrip())
    for line in survey.host_lines():
        print(safe_text(line))


def print_details(server: Any, survey: Any, *, as_json: bool) -> None:
    """One server, field by field."""
    from specmon.model.terminal_text import safe_text

    if as_json:
        print(json.dumps(dict(server.to_dict(), host=survey.host)))
        return
    fields = [
        ("pid", f"{server.pid} (parent {server.ppid}, group {server.pgid})"),
        ("user", server.user or "-"),
        ("backend", server.backend),
        ("port", server.port_text()),
        ("listening", ", ".join(map(str, server.ports)) or "nothing"),
        ("started", started_text(server.started_at)),
        ("gpus", gpu_lines(server)),
        ("log", server.log.text()),
        ("follow", server.log.follow or "-"),
        ("unit", server.unit or "-"),
        ("container", container_text(server.container)),
        ("command", " ".join(server.argv)),
    ]
    for name, value in fields:
        print(safe_text(f"{name + ':':<11}{value}"))


def gpu_lines(server: Any) -> str:
    if server.gpus is None:
        return "unknown (no nvidia-smi)"
    if not server.gpus:
        return "none"
    return ", ".join(
        f"GPU {g.index if g.index is not None else g.uuid} {g.used_mb:.0f} MiB (pid {g.pid})"
        if g.used_mb is not None
        else f"GPU {g.index} (pid {g.pid})"
        for g in server.gpus
    )


def container_text(container: Any) -> str:
    if container is None:
        return "-"
    return f"{container.name or container.id[:12]} ({container.image}; {container.ports or 'no published port'})"
