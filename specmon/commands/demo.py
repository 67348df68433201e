"""`specmon demo`: the built-in simulated EAGLE-3 host, through the same host-session code a
real host uses (the local transport), in a private state dir; nothing is left running after."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmon.launch.trust import UntrustedConfigError
    from specmon.session.host import HostSession


MAX_DEMO_HOSTS = 8
"""A playground fleet: each simulated host is a server process on this machine."""

EPILOG = """\
examples:
  specmon demo                            the simulated host and the console
  specmon demo --hosts 3                  a fleet of three simulated hosts
  specmon demo --headless --until ready   the events as text, until the server is ready
"""
"""The examples that end `specmon demo --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--headless", action="store_true", help="print events instead of the UI")
    parser.add_argument("--json", action="store_true", help="headless: JSON lines")
    parser.add_argument("--log", action="store_true", help="headless: include server log lines")
    parser.add_argument(
        "--until", choices=("ready", "failed", "exit"), help="headless: stop at this point"
    )
    parser.add_argument("--duration", type=float, metavar="S", help="headless: stop after S s")
    parser.add_argument(
        "--console",
        action="store_true",
        help="open the console even without a terminal (what `specmon serve` runs)",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="console: hide and refuse relaunch, stop, sweeps"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        metavar="X",
        help="simulated start-up speed (0.02 loads in ~20 s; default from the profile)",
    )
    parser.add_argument("--profile", default="demo", help="profile to run (default: demo)")
    parser.add_argument(
        "--hosts",
        type=int,
        default=1,
        metavar="N",
        help=f"N simulated hosts (1 to {MAX_DEMO_HOSTS}), each with its own state dir and "
        "port, in the fleet console (default 1)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import os
    import shutil
    import sys

    from specmon.commands.printers import watch_fleet_headless, watch_headless
    from specmon.model.errors import UsageError
    from specmon.session.tempdirs import owned_tempdir

    if args.time_scale is not None:
        if not 0 < args.time_scale <= 100:
            raise UsageError(f"--time-scale {args.time_scale}: expected a number in (0, 100]")
        os.environ["SPECMON_SIM_TIME_SCALE"] = repr(args.time_scale)
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    if not 1 <= args.hosts <= MAX_DEMO_HOSTS:
        raise UsageError(f"--hosts {args.hosts}: expected 1 to {MAX_DEMO_HOSTS}")
    config, ignored = _demo_config(args)
    if args.profile not in config.profiles and ignored is not None:
        raise ignored  # the profile may be the ignored file's: say how to trust it
    config.profile(args.profile)  # one "unknown profile, did you mean" before any host
    if ignored is not None:
        print(
            f"specmon demo: ignoring {ignored.shown}: it {ignored.reason} (found in the working "
            f"directory); to use it, review it, then run: {ignored.trust_command}",
            file=sys.stderr,
        )
    run_console = None
    headless = args.headless or not (args.console or (sys.stdin.isatty() and sys.stdout.isatty()))
    if not headless:
        try:
            from specmon.tui.app import run_console
        except ImportError:
            print(
                "specmon: the console UI is not available; showing the event stream",
                file=sys.stderr,
            )
            headless = True

    # Each simulated host: its own state dir (stale ones, kill -9, removed first) and port.
    state_dirs = [str(owned_tempdir("specmon-demo-")) for _ in range(args.hosts)]
    names = ["demo"] if args.hosts == 1 else [f"demo-{i + 1}" for i in range(args.hosts)]
    sessions = [
        (name, _demo_session(config, args.profile, state_dir, label=name))
        for name, state_dir in zip(names, state_dirs, strict=True)
    ]
    try:
        if headless:
            if len(sessions) > 1:
                return watch_fleet_headless(sessions, args)
            return watch_headless(sessions[0][1], args)
        assert run_console is not None
        if len(sessions) > 1:
            from specmon.tui.fleet_app import run_fleet_console

            return run_fleet_console(sessions, config, read_only=args.read_only)
        return run_console(sessions[0][1], config, read_only=args.read_only)
    finally:
        try:
            for state_dir in state_dirs:
                asyncio.run(_stop_leftovers(config, args.profile, state_dir))
        finally:
            for state_dir in state_dirs:
                shutil.rmtree(state_dir, ignore_errors=True)


def _demo_config(args: argparse.Namespace) -> tuple[Any, UntrustedConfigError | None]:
    """The config, and the untrusted ./specmon.toml passed over, if any: the demo needs no
    trust step, so such a file is ignored rather than refused, and its profiles, which could
    run anything, are never read."""
    from specmon.commands.printers import load_config_from
    from specmon.launch.config import load_config
    from specmon.launch.trust import UntrustedConfigError

    try:
        return load_config_from(args), None
    except UntrustedConfigError as exc:
        return load_config(getattr(args, "config", None), skip_untrusted=True), exc


def _demo_session(
    config: Any, profile_name: str, state_dir: str, *, label: str = "demo"
) -> HostSession:
    import dataclasses
    import socket

    from specmon.session import SessionOptions, with_ui_rates
    from specmon.session.demo import DemoSession
    from specmon.session.local import LocalTransport

    # A free port, so a second demo or a busy 30000 is no problem: set on the profile itself,
    # so relaunches and sweeps from the console use it too.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    profile = dataclasses.replace(config.profiles[profile_name], port=free_port)
    profiles = {**config.profiles, profile_name: profile}
    options = with_ui_rates(
        SessionOptions(
            state_dir=state_dir,
            gpu_agent=profile.gpu_agent,
            stop_grace_s=profile.stop_grace_s,
            gpu_release_timeout_s=15.0,
            backoff_max_s=2.0,
        ),
        config,
    )
    session = DemoSession(
        LocalTransport(label),
        profiles=profiles,
        options=options,
        stop_server_on_close=True,
        autolaunch=profile_name,
    )
    return session


async def _stop_leftovers(config: Any, profile_name: str, state_dir: str) -> None:
    """Whatever ended the demo (quit, Ctrl-C, an error), stop every run it started."""
    import asyncio
    import contextlib

    from specmon.model.errors import SpecmonError

    session = _demo_session(config, profile_name, state_dir)
    session.autolaunch = None
    with contextlib.suppress(SpecmonError, OSError, asyncio.TimeoutError):
        await session.start(streams=False)
        await session.stop_all_runs()
    await session.close()
