"""`specmon adopt HOST [--pid PID] --profile NAME [--dry-run] [--replace]`: a server that specmon
did not launch (found as `specmon attach` finds it) written as a launch profile into the
config file in use, from its command line and the environment variables a profile may set.

Secrets never leave the host: the host masks every secret variable's value as "***" before it
answers, and the written profile keeps "***" with a comment; launching it is refused until
the user fills them in. The profile is checked by the config parser, as any profile, before
the file changes; `--dry-run` prints it and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

EPILOG = """\
examples:
  specmon adopt gpu-box --profile prod --dry-run     print the profile of gpu-box's only server
  specmon adopt gpu-box --pid 4242 --profile prod    write it into the config file in use
  specmon adopt gpu-box --profile prod --replace     overwrite the profile prod

exit codes: 0 written (or printed), 1 host unreachable, 2 bad input, a --pid that is not a
server, no server or several (name one with --pid), a name taken, or a profile that does not
validate (nothing is written)
"""
"""The examples that end `specmon adopt --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    from specmon.commands.arguments import add_host_arguments

    add_host_arguments(parser)
    parser.add_argument(
        "--pid", type=int, metavar="PID", help="the server to adopt (default: the only one)"
    )
    parser.add_argument(
        "--profile", "-p", required=True, metavar="NAME", help="the new profile's name"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the profile's TOML and write nothing"
    )
    parser.add_argument("--replace", action="store_true", help="overwrite a profile of this name")


def run(args: argparse.Namespace) -> int:
    from specmon.backends import get_backend
    from specmon.commands.printers import load_config_from, run_async, session_from_args
    from specmon.launch import adopt
    from specmon.model.errors import UsageError
    from specmon.model.terminal_text import safe_text
    from specmon.session.foreign import absolute_program, read_environ, survey_host

    if args.pid is not None and args.pid <= 0:
        raise UsageError(f"--pid {args.pid}: not a process id")
    adopt.profile_name_problem(args.profile)
    config = load_config_from(args)  # the file in use, trusted as any command needs it
    target = adopt.config_target(getattr(args, "config", None))
    session = session_from_args(args, config)

    async def main() -> tuple[Any, Any, dict[str, str], bool, str | None]:
        await session.start(streams=False)
        try:
            survey = await survey_host(session.helper, pid=args.pid, host=args.host)
            server = chosen_server(survey, args.pid)
            env, truncated, cwd = await read_environ(session.helper, server.pid)
            return survey, server, env, truncated, cwd
        finally:
            await session.close()

    survey, server, env, truncated, cwd = run_async(main)
    if server.container is not None:
        name = server.container.name or server.container.id[:12]
        print(
            safe_text(
                f"note: pid {server.pid} runs in container {name}; the profile runs its "
                "command on the host itself"
            ),
            file=sys.stderr,
        )
    backend = get_backend(server.backend)
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(server.started_at or time.time()))
    description = f"adopted from pid {server.pid} on {survey.host} (started {started})"
    try:
        argv = absolute_program(tuple(server.argv), cwd)
        table = adopt.adopted_table(backend, argv, env, description=description)
    except UsageError as exc:
        raise UsageError(safe_text(f"pid {server.pid} on {survey.host}: {exc}")) from None
    prepared = adopt.prepare(target, args.profile, table, replace=args.replace)
    label = str(target.path)
    if truncated:
        print("note: the server's environment was cut at 1 MiB on the host", file=sys.stderr)
    if args.dry_run:
        sys.stdout.write(safe_text(prepared.fragment))
        where = "would be written to" if target.exists else "would create"
        print(safe_text(f"# {where} {label} (--dry-run: nothing written)"), file=sys.stderr)
        return 0
    adopt.write_config(target, prepared.text, prepared.original)
    made = "" if target.exists else " (created)"
    print(safe_text(f"wrote profile {args.profile} in {label}{made}"))
    for key, _, _ in prepared.profile.unfilled:
        print(safe_text(f"fill in {key} (it is *** until you do; launching it is refused)"))
    return 0


def chosen_server(survey: Any, pid: int | None) -> Any:
    """The server ``--pid`` names (refused as `attach --pid` refuses), else the only server
    on the host that has a pid; none or several is a one-line refusal, and so is a command
    line the host did not read whole."""
    from specmon.model.errors import UsageError
    from specmon.model.terminal_text import safe_text

    if pid is not None:
        server = survey.server(pid)
        if server is None:
            raise UsageError(safe_text(survey.refusal(pid)))
        return whole_command(survey, server)
    servers = [s for s in survey.servers if s.pid is not None]
    if not servers:
        hidden = len(survey.servers)
        more = f" ({hidden} in containers whose processes are not visible)" if hidden else ""
        raise UsageError(safe_text(f"no server on {survey.host} that specmon did not launch{more}"))
    if len(servers) > 1:
        pids = ", ".join(str(s.pid) for s in servers)
        raise UsageError(
            safe_text(f"{len(servers)} servers on {survey.host} (pids {pids}): name one with --pid")
        )
    return whole_command(survey, servers[0])


def whole_command(survey: Any, server: Any) -> Any:
    """``server``, unless the host read only part of its command line (a profile of part of
    it would launch something else)."""
    from specmon.model.errors import UsageError
    from specmon.model.terminal_text import safe_text
    from specmon.session.foreign import argv_cut_refusal

    cut = argv_cut_refusal(survey, server)
    if cut is not None:
        raise UsageError(safe_text(cut))
    return server
