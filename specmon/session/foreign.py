"""Finding the servers on a host that specmon did not launch (``specmon attach``): one call of
the helper's ``servers``, which scans the host's /proc, docker and nvidia-smi once, then the
reply made into typed records (specmon/state/foreign.py); and the arguments of the helper's
``follow-foreign``, which follows one's log (``--attach``, HostSession)."""

from __future__ import annotations

import json
import posixpath
from typing import Any

from specmon.backends.registry import process_words
from specmon.launch.config import Profile
from specmon.model.errors import UsageError
from specmon.model.terminal_text import safe_text
from specmon.session.helper_client import HelperClient, RemoteCallError
from specmon.state.foreign import (
    ForeignServer,
    HostSurvey,
    TakeOverPlan,
    survey_from_helper,
    take_over_nodes_refusal,
    take_over_problem,
)

SURVEY_TIMEOUT_S = 60.0  # a scan of /proc plus docker ps and nvidia-smi (5 s each at most)


async def survey_host(
    helper: HelperClient, *, pid: int | None = None, host: str | None = None
) -> HostSurvey:
    """The servers on the helper's host, whoever started them. The words that mark a candidate
    go on stdin, not in the command line, so the helper's own command (and the shell that runs
    it) never matches them. ``pid``: the helper also says whether that process exists, its
    command and its parents (for a clear refusal). ``host``: how messages name the host (as
    the operator typed it; default the transport's label)."""
    request: dict[str, object] = {"words": list(process_words())}
    if pid is not None:
        request["pid"] = pid
    reply = await helper.call(
        ["servers"], input=json.dumps(request).encode(), timeout=SURVEY_TIMEOUT_S
    )
    return survey_from_helper(host or helper.host_label, reply)


async def read_environ(helper: HelperClient, pid: int) -> tuple[dict[str, str], bool, str | None]:
    """(the variables of process ``pid``'s environment that a profile may set, whether the
    host cut the environment short, its working directory where readable). The host reads /proc/PID/environ and sends back only the
    allowed names (the launch rules' exact names and prefixes) with every secret value
    (``*TOKEN*``... and ``[security] secret_env``) already ``***``, so no secret crosses the
    wire; the names are checked again here and any secret still masked."""
    from specmon.launch.spec import allowed_env_rules, env_name_problem
    from specmon.model.secrets import redact_env, secret_env_patterns

    names, prefixes = allowed_env_rules()
    request = {
        "pid": pid,
        "names": list(names),
        "prefixes": list(prefixes),
        "secret_env": list(secret_env_patterns()),
    }
    reply = await helper.call(["environ"], input=json.dumps(request).encode())
    raw = reply.get("env")
    env = {
        str(name): str(value)
        for name, value in (raw.items() if isinstance(raw, dict) else ())
        if env_name_problem(str(name)) is None
    }
    cwd = reply.get("cwd")
    return redact_env(env), bool(reply.get("truncated")), cwd if isinstance(cwd, str) else None


def argv_cut_refusal(survey: HostSurvey, server: ForeignServer) -> str | None:
    """Why ``server`` cannot become a profile when the host read only part of its command
    line (a profile of part of it would launch something else); None when it read it whole."""
    for candidate in survey.candidates:
        if candidate.get("pid") == server.pid and candidate.get("argv_truncated"):
            return (
                f"pid {server.pid} on {survey.host}: its command line is longer than the host "
                "reads (16 KiB); write this profile by hand"
            )
    return None


async def running_profile(helper: HelperClient, pid: int, name: str, *, host: str) -> Profile:
    """Process ``pid`` (a server specmon did not launch) as the launch profile ``name``, read
    as `specmon adopt` reads it (its argv, its working directory, the environment names a
    profile may set, every secret already ``***``) and kept in memory only: what the
    console's take-over form starts from. Its secret placeholders are not marked unfilled:
    the form refuses a ``***`` until the operator types the value. A UsageError in one line
    when the process is gone or its command line was cut."""
    import dataclasses

    from specmon.backends import get_backend
    from specmon.launch.adopt import adopted_table, render_fragment
    from specmon.launch.config import parse_config_text

    survey = await survey_host(helper, pid=pid, host=host)
    server = survey.server(pid)
    if server is None:
        raise UsageError(safe_text(survey.refusal(pid)))
    cut = argv_cut_refusal(survey, server)
    if cut is not None:
        raise UsageError(safe_text(cut))
    env, _truncated, cwd = await read_environ(helper, pid)
    argv = absolute_program(tuple(server.argv), cwd)
    table = adopted_table(
        get_backend(server.backend), argv, env, description=f"pid {pid} on {host}, as it runs"
    )
    profile = parse_config_text(render_fragment(name, table), None, environ={}).profiles[name]
    return dataclasses.replace(profile, unfilled=())


def absolute_program(argv: tuple[str, ...], cwd: str | None) -> tuple[str, ...]:
    """``argv`` with a program named by a relative path (``.venv/bin/python``, run from the
    server's own directory) made absolute against the server's working directory ``cwd``, so
    a profile built from it runs the same program from wherever specmon launches it. A bare
    name (``python3``, found on PATH) and an absolute path are kept; without ``cwd`` the
    argv is kept as it is."""
    if not argv or cwd is None or not cwd.startswith("/"):
        return argv
    program = argv[0]
    if "/" not in program or program.startswith("/"):
        return argv
    return (posixpath.normpath(posixpath.join(cwd, program)), *argv[1:])


def follow_foreign_args(
    server: ForeignServer, *, offset: int, inode: int, interval: float
) -> list[str]:
    """The helper's ``follow-foreign`` arguments for ``server``'s log: its file by path (from
    ``offset``; ``inode``, the file read before a reconnect, tells a rotation meanwhile), its
    unit's journal or its container's docker logs (from the server's start), and its pid,
    whose end (or reuse) ends the follow. Values go as ``--name=value``: a path or name that
    begins with '-' is never taken for an option."""
    log = server.log
    args = [
        f"--pid={server.pid or 0}",
        f"--offset={offset}",
        f"--inode={inode}",
        f"--interval={interval}",
    ]
    since = [f"--since={server.started_at:.0f}"] if server.started_at else []
    if log.kind == "file" and log.path:
        args.append(f"--path={log.path}")
    elif log.kind == "journal" and log.unit:
        args += [f"--unit={log.unit}", *since]
        if "--user" in (log.follow or "").split():  # a user unit (foreign.log_source)
            args.append("--user-unit")
    elif log.kind == "docker" and log.container:
        args += [f"--container={log.container}", *since]
    return args


SUPERVISOR_STOP_S = 60.0  # the helper's bound on `docker stop` / `systemctl stop`


async def stop_foreign(
    helper: HelperClient,
    pid: int,
    ticks: int,
    *,
    grace: float,
    kill_wait: float,
    supervisor: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """The helper's ``stop-foreign`` for a take-over: the process ``pid`` whose start ticks
    are ``ticks`` (a reused pid is refused), stopped with SIGTERM, ``grace``, SIGKILL, or by
    its supervisor's command when ``supervisor`` (the profile's ``take_over``) names it. Its
    reply: {"steps": [{"step", "seconds", "detail"}], "user", ...}; ``dry_run``: only the
    checks (permission, supervisor), nothing signalled. RemoteCallError in one line else."""
    args = [
        "stop-foreign",
        f"--pid={pid}",
        f"--ticks={ticks}",
        f"--grace={grace}",
        f"--kill-wait={kill_wait}",
        f"--supervisor={supervisor or ''}",
    ]
    if dry_run:
        args.append("--dry-run")
    timeout = grace + kill_wait + SUPERVISOR_STOP_S + helper.call_timeout_s
    return await helper.call(args, timeout=timeout)


async def check_take_over(
    helper: HelperClient,
    server: ForeignServer,
    ticks: int | None,
    *,
    host: str,
    profile_name: str,
    profile: Profile,
) -> TakeOverPlan:
    """A take-over of ``server`` (started at ``ticks``) by ``profile``, checked on the host
    with nothing signalled (``launch --take-over`` and the console's relaunch form share it):
    UsageError in one line for a profile spanning nodes, a container or unit the profile does
    not let specmon stop, an unreadable start time, and the helper's own refusals (another
    user's process, a pid gone or reused since ``ticks``)."""
    if profile.nodes:
        raise UsageError(take_over_nodes_refusal(profile_name))
    problem = take_over_problem(server, host, profile.take_over)
    if problem is not None:
        raise UsageError(safe_text(problem))
    if server.pid is None or ticks is None:
        raise UsageError(safe_text(f"pid {server.pid} on {host}: its start time is not readable"))
    try:
        await stop_foreign(
            helper,
            server.pid,
            ticks,
            grace=0.0,
            kill_wait=0.0,
            supervisor=profile.take_over,
            dry_run=True,
        )
    except RemoteCallError as exc:  # the host's refusal: permission, supervisor, reused pid
        raise UsageError(safe_text(str(exc))) from None
    return TakeOverPlan(server=server, ticks=ticks, host=host, profile=profile_name)
