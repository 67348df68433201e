"""Servers on a host that specmon did not launch, as ``specmon attach`` finds them.

The host's helper (``servers``) reports every process whose command line holds one of the
backends' words, with what /proc says of it; this module decides which of them are servers
(the backend whose ``command_matches`` or simulator module claims the command line), keeps
the top process of each (not its workers, not a wrapper shell), and says where its port and
log are. Everything here is the host's text: shown through ``safe_text``, carried escaped in
JSON, never used to size anything.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specmon.backends import all_backends, backend_for_command, get_backend
from specmon.backends.flag_grammar import parse_flags
from specmon.model.attach_target import AttachTarget
from specmon.model.errors import SpecmonError, UsageError
from specmon.model.secrets import redact_argv
from specmon.state.run_status import RunStatus

# A process whose program is one of these runs the server, it is not the server: its child
# (the server itself) is reported, with its own pid, fds and sockets.
WRAPPERS = frozenset(
    (
        "sh", "bash", "dash", "zsh", "ksh", "fish", "csh", "tcsh", "ash", "busybox",
        "sudo", "su", "runuser", "env", "nohup", "timeout", "nice", "ionice", "taskset",
        "numactl", "stdbuf", "setsid", "script", "tmux", "screen", "ssh", "docker",
        "podman", "kubectl", "srun", "mpirun", "tail", "less", "grep", "journalctl",
    )
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class LogSource:
    """Where a server's output goes and how to follow it."""

    kind: str  # "file" | "journal" | "docker" | "none"
    path: str | None = None  # the file (kind "file")
    size: int | None = None
    unit: str | None = None  # the systemd unit (kind "journal")
    container: str | None = None  # the container's name or id (kind "docker")
    follow: str | None = (
        None  # the command that follows it: tail -F, journalctl -fu, docker logs -f
    )
    detail: str = ""  # why "none", or a note (a deleted file, stderr elsewhere)

    def text(self) -> str:
        """One short phrase for a table cell."""
        if self.kind == "file":
            return f"{self.path}" + (f" ({self.detail})" if self.detail else "")
        if self.kind == "journal":
            return f"journal: {self.unit}"
        if self.kind == "docker":
            return f"docker: {self.container}"
        return f"nowhere readable ({self.detail})" if self.detail else "nowhere readable"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "size": self.size,
            "unit": self.unit,
            "container": self.container,
            "follow": self.follow,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class GpuUse:
    """One GPU a server's process holds memory on (nvidia-smi's compute apps)."""

    index: int | None
    uuid: str
    used_mb: float | None
    pid: int


@dataclass(frozen=True, slots=True)
class Container:
    """The docker container a server runs in (``docker ps``)."""

    id: str
    name: str
    image: str
    ports: str  # docker's own text: 0.0.0.0:30000->30000/tcp, ...
    command: str = ""  # docker's text of the container's command


@dataclass(frozen=True, slots=True)
class ForeignServer:
    """A server found on the host, started by someone or something other than specmon."""

    pid: int | None  # None: a container whose processes this user cannot see
    user: str | None
    backend: str
    argv: tuple[str, ...]  # secrets masked
    port: int | None
    port_source: (
        str  # "socket" (it listens there), "flag" (its --port), "default" (a guess), "docker"
    )
    ports: tuple[int, ...]  # every TCP port its process tree listens on
    started_at: float | None  # epoch seconds
    gpus: tuple[GpuUse, ...] | None  # None: unknown (no nvidia-smi)
    log: LogSource
    unit: str | None = None
    container: Container | None = None
    ppid: int | None = None
    pgid: int | None = None

    def port_text(self) -> str:
        if self.port is None:
            return "-"
        marks = {"flag": " (flag, not listening)", "default": " (default?)"}
        return f"{self.port}{marks.get(self.port_source, '')}"

    def gpus_text(self) -> str:
        if self.gpus is None:
            return "?"
        indexes = sorted({g.index for g in self.gpus if g.index is not None})
        return ",".join(map(str, indexes)) if indexes else "-" if not self.gpus else "yes"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "server",
            "pid": self.pid,
            "user": self.user,
            "backend": self.backend,
            "argv": list(self.argv),
            "port": self.port,
            "port_source": self.port_source,
            "ports": list(self.ports),
            "started_at": self.started_at,
            "gpus": None
            if self.gpus is None
            else [
                {"index": g.index, "uuid": g.uuid, "used_mb": g.used_mb, "pid": g.pid}
                for g in self.gpus
            ],
            "log": self.log.to_dict(),
            "unit": self.unit,
            "container": None
            if self.container is None
            else {
                "id": self.container.id,
                "name": self.container.name,
                "image": self.container.image,
                "ports": self.container.ports,
            },
            "ppid": self.ppid,
            "pgid": self.pgid,
        }


@dataclass(frozen=True, slots=True)
class HostSurvey:
    """What ``attach`` found on one host: its servers and what it could and could not search."""

    host: str
    servers: tuple[ForeignServer, ...]
    docker_present: bool
    docker_error: str | None
    containers: int  # containers docker ps listed
    journal_present: bool
    systemd: bool
    gpus_known: bool
    gpu_error: str | None
    specmon_runs: tuple[str, ...]  # this state dir's runs, found and left out
    truncated: bool  # the scan hit a bound: some processes were not looked at
    asked: Mapping[str, Any] | None = None  # the helper's word on ``--pid``
    candidates: tuple[Mapping[str, Any], ...] = ()  # every candidate as the helper sent it

    def host_lines(self) -> list[str]:
        """What was searched, one line each: docker, the journal, the GPUs."""
        host = self.host
        if not self.docker_present:
            docker = f"docker: not installed on {host}: containers not searched"
        elif self.docker_error:
            docker = f"docker: `docker ps` failed on {host} ({self.docker_error}): containers not searched"
        else:
            docker = f"docker: {self.containers} container(s) running on {host}"
        if not self.journal_present:
            journal = (
                f"journal: journalctl not installed on {host}: systemd units' logs not readable"
            )
        elif not self.systemd:
            journal = f"journal: journalctl present on {host}, but systemd is not running"
        else:
            journal = f"journal: journalctl present on {host}"
        if self.gpus_known:
            gpus = f"gpus: from nvidia-smi on {host}"
        elif self.gpu_error:
            gpus = f"gpus: nvidia-smi failed on {host} ({self.gpu_error}): GPUs unknown"
        else:
            gpus = f"gpus: nvidia-smi not installed on {host}: GPUs unknown"
        lines = [docker, journal, gpus]
        if self.specmon_runs:
            lines.append(
                f"specmon: {len(self.specmon_runs)} run(s) of this state dir left out "
                f"({', '.join(self.specmon_runs)}; see specmon status)"
            )
        if self.truncated:
            lines.append("scan: a bound was reached, some processes were not looked at")
        return lines

    def host_dict(self) -> dict[str, Any]:
        return {
            "kind": "host",
            "host": self.host,
            "docker": {
                "present": self.docker_present,
                "error": self.docker_error,
                "containers": self.containers,
            },
            "journal": {"present": self.journal_present, "systemd": self.systemd},
            "gpus": {"known": self.gpus_known, "error": self.gpu_error},
            "specmon_runs": list(self.specmon_runs),
            "truncated": self.truncated,
            "text": self.host_lines(),
        }

    def server(self, pid: int) -> ForeignServer | None:
        return next((s for s in self.servers if s.pid == pid), None)

    def refusal(self, pid: int) -> str:
        """Why ``pid`` is not a server to attach to, in one line."""
        asked = self.asked or {}
        if not asked.get("exists"):
            return f"no process {pid} on {self.host}"
        for candidate in self.candidates:
            if candidate.get("pid") == pid and candidate.get("specmon_run"):
                return (
                    f"pid {pid} on {self.host} is specmon's own run {candidate['specmon_run']} "
                    "(see specmon status)"
                )
        for parent in asked.get("ancestors") or ():
            if self.server(parent) is not None:
                return f"pid {pid} on {self.host} is a worker of server pid {parent}; use --pid {parent}"
        words = " ".join(str(w) for w in (asked.get("argv") or ()))[:120]
        what = f" ({' '.join(redact_argv(words.split()))})" if words else ""
        return f"pid {pid} on {self.host} is not a server specmon knows{what}"


def program_name(argv: Sequence[str]) -> str:
    return argv[0].rsplit("/", 1)[-1] if argv else ""


def classify(argv: Sequence[str]) -> str | None:
    """The backend a process's command line runs (None: not a server, or a wrapper of one)."""
    if not argv or program_name(argv) in WRAPPERS:
        return None
    try:
        return backend_for_command(argv)
    except SpecmonError:  # a known server without its backend in this build
        return None


def flag_port(argv: Sequence[str]) -> int | None:
    """The value of the command line's last ``--port`` flag (spec-style parsing), if a port."""
    items, _ = parse_flags(argv)  # the program words are not flags: skipped
    port = None
    for item in items:
        if item.name == "port" and item.value is not None and item.value.isdigit():
            value = int(item.value)
            port = value if 0 < value < 65536 else port
    return port


def choose_port(
    argv: Sequence[str], backend: str, own: Sequence[int], tree: Sequence[int]
) -> tuple[int | None, str]:
    """(the port a server serves on, how that is known): a listening socket of its own
    process (its ``--port`` among them first, else the backend's default, else the lowest),
    else one of its tree's; else its ``--port`` flag (not listening yet: SGLang binds after
    loading); else the backend's default port, a guess."""
    flagged = flag_port(argv)
    default = get_backend(backend).default_port
    for ports in (own, tree):
        if ports:
            for wanted in (flagged, default):
                if wanted in ports:
                    return wanted, "socket"
            return min(ports), "socket"
    if flagged is not None:
        return flagged, "flag"
    return default, "default"


def log_source(
    stdout: Mapping[str, Any], stderr: Mapping[str, Any], cgroup: Mapping[str, Any],
    container: Container | None,
) -> LogSource:  # fmt: skip
    """Where the output goes: a regular file behind fd 1 or 2 (``nohup ... > server.log``),
    a docker container's log, a systemd unit's journal, or nowhere this user can read."""
    files = [fd for fd in (stdout, stderr) if fd.get("kind") == "file" and fd.get("path")]
    if files:
        first = files[0]
        notes = []
        if first.get("deleted"):
            notes.append("deleted")
        if len(files) == 2 and files[1].get("path") != first.get("path"):
            notes.append(f"stderr: {files[1]['path']}")
        elif len(files) == 1 and first is stdout:
            notes.append(f"stderr: {describe_fd(stderr)}")
        elif len(files) == 1:
            notes.append(f"stdout: {describe_fd(stdout)}")
        path = str(first["path"])
        return LogSource(
            kind="file",
            path=path,
            size=first.get("size"),
            follow=f"tail -F {shlex.quote(path)}",
            detail="; ".join(notes),
        )
    if container is not None:
        name = container.name or container.id[:12]
        return LogSource(
            kind="docker", container=name, follow=f"docker logs -f {shlex.quote(name)}"
        )
    unit = cgroup.get("unit")
    if unit and {stdout.get("kind"), stderr.get("kind")} & {"socket", "unreadable"}:
        user = "--user " if cgroup.get("user_unit") else ""
        return LogSource(
            kind="journal", unit=str(unit), follow=f"journalctl {user}-fu {shlex.quote(str(unit))}"
        )
    return LogSource(kind="none", detail=f"stdout: {describe_fd(stdout)}")


def describe_fd(fd: Mapping[str, Any]) -> str:
    kind = fd.get("kind")
    return {
        "pipe": "a pipe",
        "socket": "a socket",
        "null": "/dev/null",
        "tty": f"a terminal ({fd.get('path')})",
        "unreadable": "not readable by this user",
        "file": f"{fd.get('path')}",
    }.get(str(kind), f"{fd.get('path') or kind}")


_PUBLISHED = re.compile(r"(?:[\d.]+|\[?[0-9a-f:]*\]?):(\d+)->(\d+)/tcp")


def published_ports(text: str) -> dict[int, int]:
    """docker's Ports text as {container port: host port}."""
    return {int(inner): int(outer) for outer, inner in _PUBLISHED.findall(text)}


def _gpus(helper_gpus: Iterable[Mapping[str, Any]], known: bool) -> tuple[GpuUse, ...] | None:
    if not known:
        return None
    return tuple(
        GpuUse(
            index=g.get("index") if isinstance(g.get("index"), int) else None,
            uuid=str(g.get("uuid") or ""),
            used_mb=g.get("used_mb") if isinstance(g.get("used_mb"), (int, float)) else None,
            pid=int(g.get("pid") or 0),
        )
        for g in helper_gpus
    )


def _containers(rows: Iterable[Mapping[str, Any]]) -> list[Container]:
    return [
        Container(
            id=str(r.get("id") or ""),
            name=str(r.get("name") or ""),
            image=str(r.get("image") or ""),
            ports=str(r.get("ports") or ""),
            command=str(r.get("command") or ""),
        )
        for r in rows
    ]


def survey_from_helper(host: str, reply: Mapping[str, Any]) -> HostSurvey:
    """The helper's ``servers`` reply as the servers found: each candidate's command line
    classified, the top process of each server kept, specmon's own runs left out, and the
    containers whose processes were not visible added from ``docker ps``."""
    docker = reply.get("docker") or {}
    gpus_info = reply.get("gpus") or {}
    journal = reply.get("journal") or {}
    gpus_known = bool(gpus_info.get("present")) and not gpus_info.get("error")
    containers = _containers(docker.get("rows") or [])
    candidates = [c for c in reply.get("candidates") or [] if isinstance(c, Mapping)]
    backend_of = {
        int(c["pid"]): classify([str(w) for w in c.get("argv") or []]) for c in candidates
    }
    servers: list[ForeignServer] = []
    specmon_runs: list[str] = []
    seen_containers: set[str] = set()
    for c in candidates:
        pid = int(c["pid"])
        backend = backend_of[pid]
        if backend is None:
            continue
        if any(backend_of.get(p) for p in c.get("candidate_ancestors") or ()):
            continue  # a worker of a server already listed
        if c.get("specmon_run"):
            if str(c["specmon_run"]) not in specmon_runs:
                specmon_runs.append(str(c["specmon_run"]))
            continue
        cgroup = c.get("cgroup") or {}
        container = None
        if cgroup.get("container"):
            cid = str(cgroup["container"])
            container = next((k for k in containers if k.id and k.id.startswith(cid)), None)
            if container is None:
                container = Container(id=cid, name="", image="", ports="")
            seen_containers.add(container.id)
        argv = [str(w) for w in c.get("argv") or []]
        listening = [x for x in c.get("listening") or [] if isinstance(x, Mapping)]
        own = sorted({int(x["port"]) for x in listening if x.get("pid") == pid})
        tree = sorted({int(x["port"]) for x in listening})
        port, source = choose_port(argv, backend, own, tree)
        if container is not None and container.ports and port is not None:
            published = published_ports(container.ports).get(port)
            if published is not None:
                port, source = published, "docker"
        servers.append(
            ForeignServer(
                pid=pid,
                user=c.get("user") or (f"uid {c['uid']}" if c.get("uid") is not None else None),
                backend=backend,
                argv=redact_argv(argv),
                port=port,
                port_source=source,
                ports=tuple(tree),
                started_at=c.get("started_at"),
                gpus=_gpus(c.get("gpus") or [], gpus_known),
                log=log_source(c.get("stdout") or {}, c.get("stderr") or {}, cgroup, container),
                unit=cgroup.get("unit"),
                container=container,
                ppid=c.get("ppid"),
                pgid=c.get("pgid"),
            )
        )
    for container in containers:
        if container.id in seen_containers:
            continue
        server = container_server(container)
        if server is not None:
            servers.append(server)
    return HostSurvey(
        host=host,
        servers=tuple(servers),
        docker_present=bool(docker.get("present")),
        docker_error=docker.get("error"),
        containers=len(containers),
        journal_present=bool(journal.get("present")),
        systemd=bool(journal.get("systemd")),
        gpus_known=gpus_known,
        gpu_error=gpus_info.get("error"),
        specmon_runs=tuple(specmon_runs),
        truncated=bool(reply.get("truncated")),
        asked=reply.get("asked"),
        candidates=tuple(candidates),
    )


def container_server(container: Container) -> ForeignServer | None:
    """A running container whose command (or, failing that, image) runs a server, when none of
    its processes was seen (another user's, a rootless docker's): its name, published port and
    logs; no pid."""
    text = container.command.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    backend = classify(words)
    if backend is None:
        image = container.image.lower()
        backend = next(
            (b.name for b in all_backends() if any(w in image for w in b.process_words)), None
        )
    if backend is None:
        return None
    published = published_ports(container.ports)
    inner = flag_port(words) or get_backend(backend).default_port
    port = published.get(inner) or (min(published.values()) if published else None)
    return ForeignServer(
        pid=None,
        user=None,
        backend=backend,
        argv=redact_argv(words),
        port=port,
        port_source="docker",
        ports=tuple(sorted(set(published.values()))),
        started_at=None,
        gpus=None,
        log=LogSource(
            kind="docker",
            container=container.name or container.id[:12],
            follow=f"docker logs -f {shlex.quote(container.name or container.id[:12])}",
        ),
        container=container,
    )


def choose_server(survey: HostSurvey, target: AttachTarget) -> ForeignServer:
    """The server ``target`` names among those ``survey`` found, or UsageError in one line:
    ``auto`` wants exactly one (several are listed by pid, none is said so); a pid must be a
    server (the survey's own refusal says what it is instead); a unit or container must run
    one."""
    host = survey.host
    servers = list(survey.servers)
    if target.kind == "auto":
        if len(servers) == 1:
            return servers[0]
        if not servers:
            raise UsageError(
                f"--attach auto: no server on {host} that specmon did not launch "
                f"(`specmon attach {host}` says what was searched)"
            )
        named = ", ".join(server_name(s) for s in servers)
        raise UsageError(
            f"--attach auto: {len(servers)} servers on {host} that specmon did not launch "
            f"({named}); choose one with --attach PID"
        )
    if target.kind == "pid":
        assert target.pid is not None
        server = survey.server(target.pid)
        if server is None:
            raise UsageError(survey.refusal(target.pid))
        return server
    name = target.name or ""
    if target.kind == "unit":
        units = {name, f"{name}.service"}
        found = [s for s in servers if s.unit in units]
    else:
        found = [
            s
            for s in servers
            if s.container is not None
            and (s.container.name == name or (len(name) >= 4 and s.container.id.startswith(name)))
        ]
    if not found:
        raise UsageError(
            f"--attach {target.text()}: no server on {host} runs in {target.kind} {name}"
        )
    return found[0]


def server_name(server: ForeignServer) -> str:
    """How a one-line message names a server: its pid, else its container."""
    if server.pid is not None:
        return f"pid {server.pid}"
    container = server.container
    return f"container {container.name or container.id[:12]}" if container else "?"


def foreign_run_id(server: ForeignServer) -> str:
    """The id the console's events carry for a server that has no run of specmon's:
    ``pid-4242`` (or ``container-NAME``), in a run id's characters."""
    if server.pid is not None:
        return f"pid-{server.pid}"
    container = server.container
    raw = (container.name or container.id[:12]) if container else "unknown"
    return "container-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in raw.lower())


def foreign_run_status(server: ForeignServer) -> RunStatus:
    """The server as the session follows a run: no profile, no run dir, its owner the user
    who runs it; the log size is where a replay of its file ends."""
    return RunStatus(
        run_id=foreign_run_id(server),
        profile=None,
        argv=tuple(server.argv),
        env={},
        pid=server.pid,
        pgid=server.pgid,
        started_at=server.started_at,
        alive=True,
        port=server.port,
        log_size=server.log.size or 0 if server.log.kind == "file" else 0,
        owner=server.user,
        backend=server.backend,
    )


TAKE_OVER_WAY = "A take-over relaunch under specmon (with the probe) is the way to replace it."
# The console's: its relaunch key is the take-over (docs/attach.md, "Taking it over").
TAKE_OVER_KEY_WAY = (
    "Press r for a take-over relaunch: it stops the process, then launches a profile under "
    "specmon (with the probe)."
)


def foreign_refusal(what: str, host: str, action: str, way: str = TAKE_OVER_WAY) -> str:
    """Why ``action`` (stop, relaunch, launch) is refused while a console watches a server
    specmon did not launch: one line naming the way that does work (``way``)."""
    return (
        f"{what} on {host} is not specmon's run (attached: specmon only watches it); "
        f"specmon will not {action} it. {way}"
    )


def take_over_nodes_refusal(profile: str) -> str:
    """A take-over replaces the server on one host: a profile spanning nodes is refused."""
    return (
        f"profile {profile} spans nodes: a take-over replaces a server on one host; choose a "
        "one-host profile"
    )


def start_ticks_of(survey: HostSurvey, pid: int) -> int | None:
    """The start ticks the host read for candidate ``pid``: with the pid, what names the one
    process a take-over may signal (a reused pid has other ticks)."""
    for candidate in survey.candidates:
        if candidate.get("pid") == pid and isinstance(candidate.get("start_ticks"), int):
            return int(candidate["start_ticks"])
    return None


def supervisor_command(server: ForeignServer) -> tuple[str, str] | None:
    """(``docker`` | ``systemd``, the command that stops ``server`` through its supervisor)
    for a server in a container or a systemd unit; None for one started by hand. Killing such
    a server behind its supervisor's back would see it restarted (or its unit failed)."""
    if server.container is not None:
        return "docker", f"docker stop {server.container.name or server.container.id[:12]}"
    if server.unit:
        user = "--user " if "--user" in (server.log.follow or "").split() else ""
        return "systemd", f"systemctl {user}stop {server.unit}"
    return None


def take_over_problem(server: ForeignServer, host: str, take_over: str | None) -> str | None:
    """Why a take-over of ``server`` is refused before anything is signalled (one line), or
    None: a container whose processes this user cannot see, or a supervised server whose
    profile does not say to run its supervisor's stop command (``take_over``)."""
    supervised = supervisor_command(server)
    if server.pid is None:
        command = supervised[1] if supervised else "its supervisor's stop command"
        return (
            f"{server_name(server)} on {host}: its processes are not visible to this user; "
            f"stop it with `{command}`, then launch"
        )
    if supervised is not None and take_over != supervised[0]:
        kind, command = supervised
        where = f"container {server.container.name}" if server.container else f"unit {server.unit}"
        return (
            f"pid {server.pid} on {host} runs in {where}: specmon will not kill it behind "
            f'{kind}\'s back; stop it with `{command}` (or set take_over = "{kind}" in the '
            "profile)"
        )
    return None


def take_over_lines(server: ForeignServer, host: str, profile: str) -> list[str]:
    """What a take-over will do, for the confirmation: the process (pid, user, backend, its
    command with secrets as ***), how it is stopped, and what is launched in its place."""
    supervised = supervisor_command(server)
    how = (
        f"by `{supervised[1]}` (the profile's take_over)"
        if supervised
        else "SIGTERM, the grace, then SIGKILL"
    )
    return [
        f"take over pid {server.pid} on {host} (user {server.user or '?'}, {server.backend}, "
        f"port {server.port_text()}):",
        f"  {' '.join(server.argv)}",
        f"stop it ({how}), then launch profile {profile} as a specmon run",
    ]


@dataclass(frozen=True, slots=True)
class TakeOverPlan:
    """A take-over the host has checked, nothing signalled yet: ``server`` on ``host``, named
    by its pid and start ``ticks`` (a reused pid is refused when it is stopped), is to be
    stopped and ``profile`` launched in its place. What a confirmation shows is ``lines()``;
    what it confirms is carried to the stop unchanged."""

    server: ForeignServer
    ticks: int
    host: str
    profile: str

    @property
    def run_id(self) -> str:
        """The id its stop's events carry (``pid-4242``), as the attached server's."""
        return foreign_run_id(self.server)

    def lines(self) -> list[str]:
        return take_over_lines(self.server, self.host, self.profile)
