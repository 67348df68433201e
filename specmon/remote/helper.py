"""specmon's supervisor on the host: one stdlib-only script, uploaded on connect and run with
the host's python3 (3.8+) through host_bootstrap.py, which checks the state dir and this
file's digest first. Every subcommand prints JSON; nothing here imports specmon.

Subcommands (``python3 specmon_helper.py CMD --state-dir DIR ...``):
  hello       make the state dir (0700 if it creates it); print this file's sha256, python, host, user
  launch      start a server detached (own session and process group) under a monitor that
              records its exit; spec JSON on stdin: {"argv", "env", "profile", "port", "meta"}
              ("record_env", "record_argv": the env and argv as run.json keeps them,
              secrets masked by specmon)
  status      list runs with liveness (pid + process start time, so a reused pid is not alive)
  stop        SIGTERM the run's process group, wait, SIGKILL, confirm the group is empty;
              prints one JSON line per step; stop.json records who stopped it, why, and when
              the SIGKILL went (a later launch adds which run replaced it)
  hold-lock   take the host's flock and hold it until stdin closes (so a dropped console never
              leaves a stale lock); prints {"ok": true} or who holds it and since when
  follow      stream a run's log and probe file from byte offsets as framed JSON lines, then
              its exit; the ready time as a client notes it in meta.json (each change); ends
              when stdin closes
  annotate    merge keys into a run's meta.json (e.g. the ready time, for later ETAs); with
              --unless-set KEY, nothing when meta.json already has KEY
  supervise   run a child (the GPU agent) in its own process group, writing straight to this
              stdout, and kill the group when stdin closes or the child exits; a write to
              stdin reaches the child as SIGUSR1 (the agent reads its GPUs at once)
  listener    who listens on a run's port: whether every listening socket there belongs to a
              process of the run's session, and the others named (pid, user, command)
  hold-sweep  take the host's sweep lease (one sweep at a time) and hold it until stdin
              closes; a JSON line on stdin adds to the lease's record (the sweep's id)
  watch-runs  tell the live runs, then every new run as soon as its record is written
  servers     the LLM servers on this host, whoever started them (the words that mark one on
              stdin): pid, user, start time, listening ports, stdout/stderr, systemd unit or
              container, GPUs; whether docker, journalctl and nvidia-smi are there
  environ     the environment of one process this user may read (stdin: {"pid", "names",
              "prefixes", "secret_env"}): only the variables named or prefixed so, and the
              value of every one whose name looks secret as "***" (masked here, never sent)
  follow-foreign  follow the log of a server specmon did not launch (a regular file by path,
              rotation and truncation told; a unit's journal; a container's docker logs) as
              follow does a run's, and tell when its process ends; ends when stdin closes
  stop-foreign  a take-over's stop of a server specmon did not launch (--pid, --ticks: a
              reused pid is refused): only a process this user may signal, not one in a
              container or unit unless --supervisor names the stop command to run; SIGTERM
              (its group if it leads one, else its process tree), grace, SIGKILL, all gone
  model-configs  the config.json of the draft and target models (stdin: {"models": {ROLE:
              PATH}, "env"}): a directory or a Hugging Face cache id, read (regular files,
              size-bounded, never executed), parsed, and hashed with the chat template
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pwd
import select
import signal
import socket
import subprocess
import sys
import time
import zlib
from stat import S_ISDIR, S_ISREG

RUN_ID_CHARS = set("0123456789abcdefghijklmnopqrstuvwxyz-_")
# A follow chunk at least this long (a reattach's replay, a burst) goes zlib-compressed: log
# lines shrink about 7x, which over SSH costs less than encrypting and sending them plain.
COMPRESS_FROM = 64 * 1024


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def state_dir(path):
    """The state dir, made private when this creates it. A directory that exists already
    (a shared /tmp-like one, a home) keeps its mode: only specmon's own entries in it are
    created private, and one of them owned by someone else is refused. The console runs this
    helper through its bootstrap (host_bootstrap.py), which has checked the whole tree
    before this runs; these checks hold for a helper run by hand."""
    raw = os.path.expanduser(path or "").strip()
    if not raw or os.path.normpath(os.path.abspath(raw)) in ("/", "//"):
        raise SystemExit(fail(f"state dir {path!r} refused: never the root or an empty path"))
    path = os.path.abspath(raw)
    os.makedirs(path, mode=0o700, exist_ok=True)  # the mode applies only if it is created
    own_dir(os.path.join(path, "runs"))
    return path


def own_dir(path):
    """A private directory of this user at path, created if missing, never re-moded."""
    try:
        os.mkdir(path, 0o700)
        return
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SystemExit(
            fail(
                f"{path} exists but is not a directory of this user that only it can write; "
                "choose another state dir"
            )
        )


def run_dir(state, run_id):
    if not run_id or set(run_id) - RUN_ID_CHARS:
        raise SystemExit(fail(f"bad run id {run_id!r}"))
    return os.path.join(state, "runs", run_id)


def fail(message):
    emit({"ok": False, "error": message})
    return 3


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path, data):
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


RESERVE_BYTES = (
    64 * 1024
)  # room for run.json / exit.json, taken before the server can fill the disk


def reserve_record(path):
    """Take the disk space of a record (``path``.reserve, blanks) while there is some, so the
    run's record is written even after its server's log has filled the disk."""
    with open(f"{path}.reserve", "wb") as f:
        f.write(b" " * RESERVE_BYTES)
        f.flush()
        os.fsync(f.fileno())


def write_record(path, data):
    """Write ``data`` into its reserved space (in place, so no new block is needed; JSON
    ignores the trailing blanks), then give it its name; without a reservation, or if the
    record does not fit, as write_json does."""
    reserved = f"{path}.reserve"
    text = json.dumps(data).encode()
    if len(text) <= RESERVE_BYTES and os.path.exists(reserved):
        with open(reserved, "r+b") as f:
            f.write(text + b" " * (RESERVE_BYTES - len(text)))
            f.flush()
            os.fsync(f.fileno())
        for attempt in range(20):  # a full directory block can free up (bounded retry)
            try:
                os.replace(reserved, path)
                return
            except OSError as exc:
                if exc.errno != errno.ENOSPC or attempt == 19:
                    raise
                time.sleep(0.5)
    write_json(path, data)


def read_record(path):
    """A run's record (run.json, exit.json); one written in place whose rename failed counts
    too (a blank reservation reads as None)."""
    return read_json(path) or read_json(f"{path}.reserve")


def proc_start_ticks(pid):
    """The process start time in clock ticks since boot (/proc/PID/stat field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[0]


def live_process_stats():
    """(pid, the fields of /proc/PID/stat after the command) of every process but zombies
    (they hold no resources): fields[2] is the process group, fields[3] the session."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z":
            yield int(name), fields


def group_members(pgid):
    """Pids whose process group is pgid (zombies excluded)."""
    return [pid for pid, fields in live_process_stats() if int(fields[2]) == pgid]


def leader_alive(run):
    pid = run.get("pid")
    if not pid:
        return False
    ticks = proc_start_ticks(pid)
    if ticks is None or ticks != run.get("start_ticks"):
        return False
    return proc_state(pid) not in (None, "Z")


def group_left(run):
    """The live processes of the run's group once its leader is gone (a crashed launcher's
    scheduler and workers still holding GPUs). Trusted only while the run's monitor lives:
    it stays until the group is empty, so a pgid reused after a reboot is never counted."""
    monitor = run.get("monitor_pid")
    if not run.get("pgid") or not monitor or proc_start_ticks(monitor) != run.get("monitor_ticks"):
        return []
    return group_members(run["pgid"])


def run_alive(run, exit_info=None):
    """A run lives while its leader lives, or while any process of its group is left."""
    return leader_alive(run) or bool(group_left(run))


# --- who listens on a port ------------------------------------------------------------------

TCP_LISTEN = "0A"  # the state column of /proc/net/tcp{,6} for a listening socket
COMMAND_CHARS = 200  # how much of a foreign listener's command line a refusal quotes


def listening_sockets(port):
    """The listening TCP sockets on ``port`` in this network namespace, IPv4 and IPv6:
    [{"inode", "uid", "address"}] from /proc/net/tcp and /proc/net/tcp6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != TCP_LISTEN:
                continue
            address, _, port_hex = fields[1].rpartition(":")
            if int(port_hex, 16) != port:
                continue
            found.append({"inode": int(fields[9]), "uid": int(fields[7]), "address": address})
    return found


def socket_owners(inodes, pids):
    """{inode: pid} for the sockets among ``inodes`` that one of ``pids`` holds open (its
    /proc/PID/fd links read "socket:[INODE]"); a process of another user cannot be read and
    is left out."""
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    owners = {}
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            inode = wanted.get(target)
            if inode is not None:
                owners.setdefault(inode, pid)
        if len(owners) == len(wanted):
            break
    return owners


def all_pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def printable(text):
    """``text`` with every character outside printable ASCII as "?" (a command line is the
    listener's to choose; it must not reach a terminal as escape bytes)."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)


def describe_listener(sock, pid, servers=None):
    """One listener as a refusal names it: pid, user and command where readable; a server
    (its command holds one of ``servers``' words, {word: backend}, the console's) as that backend's."""
    try:
        user = pwd.getpwuid(sock["uid"]).pw_name
    except KeyError:
        user = f"uid {sock['uid']}"
    info = {"uid": sock["uid"], "user": user, "pid": pid, "command": None}
    if pid is not None:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
            command = " ".join(w.decode(errors="replace") for w in words if w)
            info["command"] = printable(command)[:COMMAND_CHARS]
        except OSError:
            pass
    lowered = (info["command"] or "").lower()
    ordered = sorted((servers or {}).items(), key=lambda item: -len(item[0]))  # the longest first
    backend = next((b for w, b in ordered if str(w).lower() in lowered), None)
    info["backend"] = backend
    if pid is None:
        info["text"] = f"a process of user {user} (its pid is not readable by this user)"
    elif backend:
        info["text"] = f"a {backend} server, pid {pid} (user {user}: {info['command']})"
    else:
        info["text"] = f"pid {pid} (user {user}" + (
            f": {info['command']})" if info["command"] else ")"
        )
    return info


def port_listeners(port, servers=None):
    """Every listener on ``port``, named (a full scan of /proc: only before a launch)."""
    sockets = listening_sockets(port)
    if not sockets:
        return []
    owners = socket_owners([s["inode"] for s in sockets], all_pids())
    return [describe_listener(s, owners.get(s["inode"]), servers) for s in sockets]


def session_members(sid):
    """Pids whose session or process group is ``sid`` (the run's leader started both)."""
    return [pid for pid, fields in live_process_stats() if sid in (int(fields[2]), int(fields[3]))]


def run_listener(run):
    """Whether the run serves its port: its leader alive and every listening socket on the
    port held by a process of its session. The run's own processes are looked at first (a
    cheap scan); /proc as a whole only to name a listener that is not the run's."""
    port = run.get("port")
    leader = leader_alive(run)
    sockets = listening_sockets(int(port)) if port else []
    reply = {"port": port, "leader_alive": leader, "listening": bool(sockets), "foreign": []}
    if not sockets or not run.get("pgid"):
        reply["ours"] = False
        return reply
    inodes = [s["inode"] for s in sockets]
    ours = socket_owners(inodes, session_members(run["pgid"])) if leader else {}
    others = [s for s in sockets if s["inode"] not in ours]
    if others:
        owners = socket_owners([s["inode"] for s in others], all_pids())
        reply["foreign"] = [describe_listener(s, owners.get(s["inode"])) for s in others]
    reply["ours"] = leader and not others
    return reply


def cmd_listener(args):
    state = state_dir(args.state_dir)
    rdir = run_dir(state, args.run_id)
    run = read_record(os.path.join(rdir, "run.json"))
    if run is None:
        return fail(f"no run {args.run_id}")
    emit(dict(run_listener(run), ok=True))
    return 0


# --- servers: LLM servers on this host that specmon did not launch --------------------------
#
# One bounded scan of /proc. Every text here is the host's (a command line, a path, a cgroup,
# a container's name): read with a byte cap, never used to size anything, and returned as JSON
# for the console to judge. The words that mark a candidate come from the console on stdin
# (its backends'), so this file names no server and no command line carries them.

SCAN_MAX_PROCESSES = 100000  # /proc entries looked at, at most
CANDIDATES_MAX = 256  # processes whose command line holds a word, at most
CMDLINE_BYTES = 16384  # of each process's /proc/PID/cmdline
ARGV_WORDS = 512  # words of a candidate's command line returned
SMALL_FILE_BYTES = 8192  # /proc/PID/cgroup, /proc/PID/stat
TREE_MAX = 4096  # processes of one candidate's tree
FDS_MAX = 65536  # file descriptors of one process looked at for listening sockets
ANCESTRY_MAX = 64  # parents walked up from a process
TABLE_BYTES = 32 * 1024 * 1024  # of /proc/net/tcp{,6}
TOOL_BYTES = 4 * 1024 * 1024  # of a tool's output (docker ps, nvidia-smi)
TOOL_TIMEOUT_S = 5.0
FIELD_CHARS = 2000  # of one field of a tool's output row
WORDS_MAX = 64  # words the console may send
SHELLS = frozenset(("sh", "bash", "dash", "zsh", "ksh", "fish", "csh", "tcsh", "ash", "busybox"))


def read_capped(path, limit):
    """At most ``limit`` bytes of a file (b"" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return b""


def parse_stat(text):
    """/proc/PID/stat as {state, ppid, pgid, sid, start_ticks, comm}, or None. The command
    name is in parentheses and may hold anything, so the fields are read after its last ')'."""
    close = text.rfind(")")
    if close < 0:
        return None
    fields = text[close + 2 :].split()
    if len(fields) < 20:
        return None
    try:
        return {
            "state": fields[0],
            "ppid": int(fields[1]),
            "pgid": int(fields[2]),
            "sid": int(fields[3]),
            "start_ticks": int(fields[19]),
            "comm": text[text.find("(") + 1 : close][:64],
        }
    except ValueError:
        return None


def boot_time(text):
    """The boot time (epoch seconds) from /proc/stat's ``btime`` line, or None."""
    for line in text.splitlines():
        if line.startswith("btime "):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def start_epoch(start_ticks, btime, hz):
    """A process's start time in epoch seconds from its start ticks since boot."""
    if start_ticks is None or btime is None or not hz:
        return None
    return round(btime + start_ticks / float(hz), 2)


def split_cmdline(data, limit_words=ARGV_WORDS):
    """A NUL-separated command line as words (at most ``limit_words``)."""
    words = data.split(b"\0")
    while words and words[-1] == b"":  # a rewritten title is padded with NULs
        words.pop()
    return [w.decode("utf-8", errors="replace") for w in words[:limit_words]]


def parse_cgroup(text):
    """/proc/PID/cgroup as {"path", "unit", "user_unit", "container"}: the systemd service it
    runs in (``*.service``, the last one of its path; a user manager's own unit counts as a user
    unit) and a container id (``docker-<id>.scope``, ``/docker/<id>``, ``cri-containerd-<id>``,
    ``libpod-<id>``)."""
    path = ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" or parts[1] == "name=systemd" or not path:
            path = parts[2]
        if parts[0] == "0":
            break
    unit = None
    user_unit = False
    container = None
    pieces = [p for p in path.split("/") if p]
    for i, piece in enumerate(pieces):
        for prefix in ("docker-", "cri-containerd-", "libpod-", "crio-"):
            if piece.startswith(prefix) and piece.endswith(".scope"):
                container = piece[len(prefix) : -len(".scope")]
        if i > 0 and pieces[i - 1] in ("docker", "libpod") and is_hex_id(piece):
            container = piece
    if container is not None and not is_hex_id(container):
        container = None
    for i, piece in enumerate(pieces):
        if piece.endswith(".service"):
            if piece.startswith("user@"):
                user_unit = True
                continue
            unit = piece
            user_unit = any(p.startswith("user@") and p.endswith(".service") for p in pieces[:i])
    if container is not None:
        unit = None  # a container's scope sits under docker.service's slice, not in it
    return {
        "path": path[:FIELD_CHARS],
        "unit": unit,
        "user_unit": user_unit and unit is not None,
        "container": container,
    }


def is_hex_id(text):
    return 12 <= len(text) <= 64 and all(c in "0123456789abcdef" for c in text)


def fd_target(target, stat_result=None):
    """What a process's fd 1 or 2 points at, from its /proc/PID/fd link (None: unreadable):
    {"kind": file|pipe|socket|null|tty|other|unreadable, "path", "size", "deleted"}."""
    if target is None:
        return {"kind": "unreadable", "path": None}
    if target.startswith("pipe:"):
        return {"kind": "pipe", "path": None}
    if target.startswith("socket:"):
        return {"kind": "socket", "path": None}
    if target == "/dev/null":
        return {"kind": "null", "path": target}
    if target.startswith(("/dev/pts/", "/dev/tty", "/dev/console")):
        return {"kind": "tty", "path": target}
    deleted = target.endswith(" (deleted)")
    path = target[: -len(" (deleted)")] if deleted else target
    if stat_result is not None and S_ISREG(stat_result.st_mode) and path.startswith("/"):
        return {
            "kind": "file",
            "path": path[:FIELD_CHARS],
            "size": stat_result.st_size,
            "deleted": deleted,
        }
    return {"kind": "other", "path": target[:FIELD_CHARS]}


def read_fd(pid, fd):
    """fd_target of one of a process's descriptors (its link, and a stat of what it opens)."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return fd_target(None)
    try:
        info = os.stat(f"/proc/{pid}/fd/{fd}")
    except OSError:
        info = None
    return fd_target(target, info)


def listen_table(data):
    """{socket inode: (port, address)} of the LISTEN rows of /proc/net/tcp or tcp6 text."""
    found = {}
    for row in data.splitlines()[1:]:
        fields = row.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        address, _, port_hex = fields[1].rpartition(":")
        try:
            found[int(fields[9])] = (int(port_hex, 16), address)
        except ValueError:
            continue
    return found


def netns_listeners(pid, cache):
    """The listening sockets of the network namespace ``pid`` lives in, cached per namespace:
    a container's own (read through /proc/PID/net), else this helper's (a process whose
    namespace link cannot be read is taken to share it)."""
    try:
        ns = os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        ns = cache.get("_own", "self")
    if ns not in cache:
        base = "/proc/net" if ns == cache.get("_own", "self") else f"/proc/{pid}/net"
        table = {}
        for name in ("tcp", "tcp6"):
            text = read_capped(f"{base}/{name}", TABLE_BYTES).decode(errors="replace")
            table.update(listen_table(text))
        cache[ns] = table
    return cache[ns]


def socket_inodes(pid):
    """The socket inodes among a process's first FDS_MAX descriptors."""
    inodes = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for name in names[:FDS_MAX]:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            with contextlib.suppress(ValueError):
                inodes.append(int(target[8:-1]))
    return inodes


def run_tool(argv, timeout=TOOL_TIMEOUT_S, limit=TOOL_BYTES):
    """(exit code or None on timeout, at most ``limit`` bytes of stdout, stderr's last line)."""
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as exc:
        return None, b"", str(exc)
    out, err = b"", b""
    deadline = time.time() + timeout
    open_fds = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err"}
    while open_fds and time.time() < deadline:
        ready, _, _ = select.select(list(open_fds), [], [], max(0.0, deadline - time.time()))
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                del open_fds[fd]
            elif open_fds[fd] == "out":
                out += chunk[: max(0, limit - len(out))]
            else:
                err = (err + chunk)[-4096:]
    code = None
    try:
        code = proc.wait(timeout=max(0.1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    lines = err.decode(errors="replace").strip().splitlines()
    return code, out, printable(lines[-1])[:FIELD_CHARS] if lines else ""


def parse_docker_rows(text):
    """`docker ps --format '{{json .}}'` lines as {id, name, image, ports, command, status}."""
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        rows.append(
            {
                key: str(row.get(field) or "")[:FIELD_CHARS]
                for key, field in (
                    ("id", "ID"),
                    ("name", "Names"),
                    ("image", "Image"),
                    ("ports", "Ports"),
                    ("command", "Command"),
                    ("status", "Status"),
                )
            }
        )
        if len(rows) >= 1000:
            break
    return rows


def parse_compute_apps(apps_text, gpus_text):
    """nvidia-smi's compute apps (``pid, gpu_uuid, used_memory``) as {pid: [{index, uuid,
    used_mb}]}, the GPU index from its ``index, uuid`` rows."""
    index_of = {}
    for line in gpus_text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            index_of[parts[1]] = int(parts[0])
    by_pid = {}
    for line in apps_text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        try:
            used = float(parts[2])
        except ValueError:
            used = None
        by_pid.setdefault(int(parts[0]), []).append(
            {"index": index_of.get(parts[1]), "uuid": parts[1][:80], "used_mb": used}
        )
    return by_pid


def host_tools():
    """docker, journalctl and nvidia-smi on this host: whether each is on PATH, and what
    docker ps and nvidia-smi say (each bounded by a timeout)."""
    import shutil

    tools = {}
    docker = shutil.which("docker")
    tools["docker"] = {"present": docker is not None, "rows": [], "error": None}
    if docker:
        code, out, err = run_tool([docker, "ps", "--no-trunc", "--format", "{{json .}}"])
        if code == 0:
            tools["docker"]["rows"] = parse_docker_rows(out.decode(errors="replace"))
        else:
            tools["docker"]["error"] = err or ("timed out" if code is None else f"exit {code}")
    tools["journal"] = {
        "present": shutil.which("journalctl") is not None,
        "systemd": os.path.isdir("/run/systemd/system"),
    }
    smi = shutil.which("nvidia-smi")
    gpus = {"present": smi is not None, "by_pid": {}, "error": None}
    if smi:
        code, apps, err = run_tool(
            [smi, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]
        )
        code2, rows, err2 = run_tool([smi, "--query-gpu=index,uuid", "--format=csv,noheader"])
        if code == 0 and code2 == 0:
            gpus["by_pid"] = parse_compute_apps(
                apps.decode(errors="replace"), rows.decode(errors="replace")
            )
        else:
            gpus["error"] = (err or err2) or "nvidia-smi failed"
    tools["gpus"] = gpus
    return tools


def scan_processes(limit=SCAN_MAX_PROCESSES):
    """{pid: stat fields} of every process but zombies, at most ``limit``; and whether the
    scan stopped at the limit."""
    found = {}
    names = [n for n in os.listdir("/proc") if n.isdigit()]
    for name in names[:limit]:
        stat = parse_stat(
            read_capped(f"/proc/{name}/stat", SMALL_FILE_BYTES).decode(errors="replace")
        )
        if stat is not None and stat["state"] != "Z":
            found[int(name)] = stat
    return found, len(names) > limit


def tree_of(pid, children):
    """``pid`` and its descendants (at most TREE_MAX), parents first."""
    tree, frontier = [pid], [pid]
    while frontier and len(tree) < TREE_MAX:
        parent = frontier.pop(0)
        for child in children.get(parent, ()):
            if len(tree) >= TREE_MAX:
                break
            tree.append(child)
            frontier.append(child)
    return tree


def ancestors_of(pid, procs):
    """The parents of ``pid`` up to init (at most ANCESTRY_MAX)."""
    out = []
    current = procs.get(pid, {}).get("ppid")
    while current and current in procs and len(out) < ANCESTRY_MAX and current not in out:
        out.append(current)
        current = procs[current]["ppid"]
    return out


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def describe_candidate(pid, procs, children, ctx):
    """One candidate process as the console reads it."""
    stat = procs[pid]
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        uid = None
    raw = read_capped(f"/proc/{pid}/cmdline", CMDLINE_BYTES)
    tree = tree_of(pid, children)
    listeners = []
    seen_ports = set()
    for member in tree:
        table = netns_listeners(member, ctx["netns"])
        if not table:
            continue
        for inode in socket_inodes(member):
            hit = table.get(inode)
            if hit is not None and hit[0] not in seen_ports:
                seen_ports.add(hit[0])
                listeners.append({"port": hit[0], "pid": member, "address": hit[1]})
    gpus = []
    for member in tree:
        for use in ctx["gpus"].get(member, ()):
            gpus.append(dict(use, pid=member))
    cgroup = parse_cgroup(
        read_capped(f"/proc/{pid}/cgroup", SMALL_FILE_BYTES).decode(errors="replace")
    )
    return {
        "pid": pid,
        "ppid": stat["ppid"],
        "pgid": stat["pgid"],
        "sid": stat["sid"],
        "uid": uid,
        "user": user_name(uid) if uid is not None else None,
        "comm": stat["comm"],
        "argv": split_cmdline(raw),
        "argv_truncated": len(raw) >= CMDLINE_BYTES,
        "start_ticks": stat["start_ticks"],
        "started_at": start_epoch(stat["start_ticks"], ctx["btime"], ctx["hz"]),
        "listening": listeners,
        "tree_size": len(tree),
        "gpus": gpus,
        "stdout": read_fd(pid, 1),
        "stderr": read_fd(pid, 2),
        "cgroup": cgroup,
        "candidate_ancestors": [p for p in ancestors_of(pid, procs) if p in ctx["candidates"]],
        "specmon_run": ctx["runs_by_pgid"].get(stat["pgid"]),
    }


def cmd_servers(args):
    """Processes whose command line holds one of the console's words (stdin: {"words":
    [...], "pid": N}), each with its user, start time, listening ports (its whole process
    tree's), stdout/stderr, cgroup (systemd unit, container) and GPUs; the host's docker,
    journalctl and nvidia-smi; which candidates are runs of this state dir."""
    state = state_dir(args.state_dir)
    try:
        request = json.loads(sys.stdin.read(65536) or "{}")
    except ValueError:
        request = {}
    if not isinstance(request, dict):
        request = {}
    words = [
        str(w).lower()[:200] for w in (request.get("words") or [])[:WORDS_MAX] if str(w).strip()
    ]
    if not words:
        return fail("servers: no words to look for")
    procs, truncated = scan_processes()
    children = {}
    for pid, stat in procs.items():
        children.setdefault(stat["ppid"], []).append(pid)
    me = os.getpid()
    mine = {me, *ancestors_of(me, procs)}
    candidates = []
    for pid in sorted(procs):
        if pid in mine:
            continue
        text = read_capped(f"/proc/{pid}/cmdline", CMDLINE_BYTES).replace(b"\0", b" ")
        lowered = text.decode("utf-8", errors="replace").lower()
        if any(w in lowered for w in words):
            candidates.append(pid)
            if len(candidates) >= CANDIDATES_MAX:
                break
    tools = host_tools()
    runs_by_pgid = {}
    with contextlib.suppress(OSError):
        for run in list_runs(state, 200):
            if run.get("alive") and run.get("pgid"):
                runs_by_pgid[int(run["pgid"])] = run["run_id"]
    try:
        hz = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        hz = 100
    ctx = {
        "btime": boot_time(read_capped("/proc/stat", 1024 * 1024).decode(errors="replace")),
        "hz": hz,
        "netns": {},
        "gpus": tools["gpus"]["by_pid"],
        "candidates": set(candidates),
        "runs_by_pgid": runs_by_pgid,
    }
    with contextlib.suppress(OSError):
        ctx["netns"]["_own"] = os.readlink("/proc/self/ns/net")
    found = [describe_candidate(pid, procs, children, ctx) for pid in candidates if pid in procs]
    reply = {
        "ok": True,
        "now": time.time(),
        "host": socket.gethostname(),
        "candidates": found,
        "scanned": len(procs),
        "truncated": truncated or len(candidates) >= CANDIDATES_MAX,
        "docker": {k: v for k, v in tools["docker"].items()},
        "journal": tools["journal"],
        "gpus": {"present": tools["gpus"]["present"], "error": tools["gpus"]["error"]},
    }
    asked = request.get("pid")
    if isinstance(asked, int) and asked > 0:
        exists = asked in procs or os.path.exists(f"/proc/{asked}")
        reply["asked"] = {
            "pid": asked,
            "exists": exists,
            "argv": split_cmdline(read_capped(f"/proc/{asked}/cmdline", CMDLINE_BYTES), 64)
            if exists
            else [],
            "ancestors": ancestors_of(asked, procs),
            "mine": asked in mine,
        }
    emit(reply)
    return 0


# --- environ ---------------------------------------------------------------------------------

ENVIRON_BYTES = 1024 * 1024  # of /proc/PID/environ
ENVIRON_NAMES_MAX = 256  # names, prefixes or patterns the console may send, of each
# Names whose values are secrets, whatever the console sends (kept equal to
# specmon.model.secrets.BUILTIN_SECRET_ENV: a test checks): the console adds the config's own
# ``[security] secret_env`` patterns.
SECRET_ENV = ("*TOKEN*", "*KEY*", "*SECRET*", "*PASSWORD*")
SECRET_MASK = "***"


def environ_texts(request, key):
    """A list of short texts from the console's request (at most ENVIRON_NAMES_MAX)."""
    values = request.get(key) or []
    if not isinstance(values, list):
        return []
    return [str(v)[:200] for v in values[:ENVIRON_NAMES_MAX] if str(v)]


def filter_environ(data, names, prefixes, secret_patterns):
    """The NUL-separated ``NAME=value`` words of /proc/PID/environ as {name: value}: only the
    names in ``names`` or starting with one of ``prefixes``, and a secret name's value as
    "***" (an empty one stays empty). The first of a name given twice wins, as getenv reads."""
    from fnmatch import fnmatchcase

    patterns = [p.upper() for p in (*SECRET_ENV, *secret_patterns)]
    wanted = set(names)
    prefixes = tuple(prefixes)
    out = {}
    for word in data.split(b"\0"):
        name, equals, value = word.partition(b"=")
        if not equals or not name:
            continue
        name = name.decode("utf-8", errors="replace")
        if name in out or not (name in wanted or (prefixes and name.startswith(prefixes))):
            continue
        secret = any(fnmatchcase(name.upper(), p) for p in patterns)
        out[name] = SECRET_MASK if secret and value else value.decode("utf-8", errors="replace")
    return out


def cmd_environ(args):
    """The allowed variables of one process's environment (stdin: {"pid": N, "names": [...],
    "prefixes": [...], "secret_env": [...]}), secret values masked before they leave."""
    state_dir(args.state_dir)
    try:
        request = json.loads(sys.stdin.read(65536) or "{}")
    except ValueError:
        request = {}
    if not isinstance(request, dict):
        request = {}
    pid = request.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return fail("environ: no pid")
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(ENVIRON_BYTES)
    except FileNotFoundError:
        return fail(f"environ: no process {pid}")
    except PermissionError:
        return fail(f"environ: the environment of pid {pid} is not readable by this user")
    truncated = len(data) >= ENVIRON_BYTES
    if truncated:
        data = data[: data.rfind(b"\0") + 1]  # not the word cut in two
    env = filter_environ(
        data,
        environ_texts(request, "names"),
        environ_texts(request, "prefixes"),
        environ_texts(request, "secret_env"),
    )
    try:  # a program named by a relative path (".venv/bin/python") is relative to this
        cwd = printable(os.readlink(f"/proc/{pid}/cwd"))[:4096]
    except OSError:
        cwd = None
    emit({"ok": True, "pid": pid, "env": env, "truncated": truncated, "cwd": cwd})
    return 0


# --- model-configs: the draft's and target's config.json, read and hashed -------------------
#
# Nothing is executed and nothing imported from a checkpoint: config.json and the tokenizer's
# chat template are read as bytes (regular files only, size-bounded), parsed as JSON, hashed.
# A model id is looked up in the Hugging Face cache the server reads (HF_HUB_CACHE, HF_HOME/hub,
# ~/.cache/huggingface/hub), at the revision refs/main names; a cache file is a symlink into
# the repository's blobs/ and is never followed out of that repository's directory.

MODEL_CONFIG_BYTES = 1024 * 1024  # of one config.json
TOKENIZER_CONFIG_BYTES = 8 * 1024 * 1024  # of tokenizer_config.json (added tokens make it long)
MODELS_MAX = 8  # models one request may name
MODEL_PATH_CHARS = 4096


def hf_hub_dir(env):
    """The Hugging Face hub cache a process with ``env`` reads (as huggingface_hub decides)."""
    env = env or {}
    if env.get("HF_HUB_CACHE"):
        return os.path.expanduser(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return os.path.join(os.path.expanduser(env["HF_HOME"]), "hub")
    xdg = env.get("XDG_CACHE_HOME")
    base = os.path.expanduser(xdg) if xdg else os.path.expanduser("~/.cache")
    return os.path.join(base, "huggingface", "hub")


def resolve_model(path, env):
    """(directory, source, revision, confine_root) for a model path, or raise ValueError: a
    directory that exists is local; an ``org/name`` id is looked up in the HF cache."""
    expanded = os.path.expanduser(path)
    if os.path.isdir(expanded):
        return os.path.abspath(expanded), "local", None, None
    parts = path.split("/")
    if path.startswith(("/", ".", "~")) or len(parts) != 2 or not all(parts):
        raise ValueError(f"{path}: no such directory")
    hub = hf_hub_dir(env)
    repo = os.path.join(hub, "models--" + "--".join(parts))
    if not os.path.isdir(repo):
        raise ValueError(f"{path}: not a directory and not in the Hugging Face cache {hub}")
    try:
        revision = read_capped(os.path.join(repo, "refs", "main"), 256).decode().strip()
    except (OSError, UnicodeDecodeError):
        revision = ""
    if not revision or not revision.isalnum():
        raise ValueError(f"{path}: the cache {repo} has no readable refs/main")
    snapshot = os.path.join(repo, "snapshots", revision)
    if not os.path.isdir(snapshot):
        raise ValueError(f"{path}: the cache has no snapshot {revision}")
    return snapshot, "hf_cache", revision, os.path.realpath(repo)


def read_model_file(directory, name, limit, confine_root):
    """The bytes of a regular file of a model directory (None when absent); ValueError when it
    is not a regular file, is larger than ``limit``, or (a cache file) resolves outside the
    cache repository."""
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        return None
    real = os.path.realpath(path)
    if confine_root is not None and not real.startswith(confine_root + os.sep):
        raise ValueError(f"{name} links outside the cache repository")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"{name}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not S_ISREG(info.st_mode):
            raise ValueError(f"{name} is not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{name} is {info.st_size} bytes, more than {limit}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{name} is more than {limit} bytes")
    return data


def parse_json_bytes(name, data):
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name} is not JSON: {str(exc).splitlines()[0][:200]}") from None


def chat_template_digest(directory, confine_root):
    """sha256 of the tokenizer's chat template: chat_template.jinja's bytes, else
    tokenizer_config.json's ``chat_template`` (a string's UTF-8, a list as canonical JSON);
    None when the model has neither."""
    data = read_model_file(directory, "chat_template.jinja", TOKENIZER_CONFIG_BYTES, confine_root)
    if data is not None:
        return hashlib.sha256(data).hexdigest()
    data = read_model_file(directory, "tokenizer_config.json", TOKENIZER_CONFIG_BYTES, confine_root)
    if data is None:
        return None
    template = parse_json_bytes("tokenizer_config.json", data)
    template = template.get("chat_template") if isinstance(template, dict) else None
    if template is None:
        return None
    if not isinstance(template, str):
        template = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def model_config(path, env):
    """One model's config.json, parsed, with its fingerprints; "error" (one line) instead of
    the config when it cannot be read."""
    out = {"path": path, "source": None, "dir": None, "revision": None, "config": None}
    out.update(config_sha256=None, chat_template_sha256=None, error=None)
    try:
        directory, source, revision, confine = resolve_model(path, env)
        out.update(source=source, dir=directory, revision=revision)
        data = read_model_file(directory, "config.json", MODEL_CONFIG_BYTES, confine)
        if data is None:
            raise ValueError(f"{path}: no config.json in {directory}")
        out["config_sha256"] = hashlib.sha256(data).hexdigest()
        config = parse_json_bytes("config.json", data)
        if not isinstance(config, dict):
            raise ValueError("config.json is not a JSON object")
        out["config"] = config
        out["chat_template_sha256"] = chat_template_digest(directory, confine)
    except ValueError as exc:
        out["error"] = printable(str(exc))[:500]
    except OSError as exc:
        out["error"] = printable(f"{path}: {exc}")[:500]
    return out


def cmd_model_configs(args):
    """The config.json of each model named on stdin ({"models": {"draft": PATH, "target":
    PATH}, "env": {"HF_HOME": ...}}: the server's cache variables) as model_config reads it."""
    state_dir(args.state_dir)
    try:
        request = json.loads(sys.stdin.read(65536) or "{}")
    except ValueError:
        request = {}
    models = request.get("models") if isinstance(request, dict) else None
    if not isinstance(models, dict) or not models:
        return fail("model-configs: no models")
    env = request.get("env")
    env = {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}
    out = {}
    for role, path in list(models.items())[:MODELS_MAX]:
        if isinstance(path, str) and path and len(path) <= MODEL_PATH_CHARS:
            out[str(role)[:64]] = model_config(path, env)
    emit({"ok": True, "models": out})
    return 0


# --- stop-foreign: a take-over's stop of a server specmon did not launch ---------------------
#
# The pid alone is never trusted: the console names the process it showed the user by pid and
# start ticks, and a pid whose ticks differ (recycled) is refused before any signal. Only a
# process this user may signal is signalled; one in a container or a systemd unit is left to
# its supervisor (docker, systemd would restart it, or its group belongs to them).

SUPERVISOR_TIMEOUT_S = 60.0  # `docker stop` / `systemctl stop`, at most


def proc_uids(pid):
    """(real, effective, saved) uids of a process from /proc/PID/status, or None."""
    for line in read_capped(f"/proc/{pid}/status", 65536).decode(errors="replace").splitlines():
        if line.startswith("Uid:"):
            try:
                return tuple(int(x) for x in line.split()[1:4])
            except ValueError:
                return None
    return None


def may_signal(caller_uids, target_uids):
    """Whether a caller (real, effective uid) may signal a process (real, effective, saved
    uids), as kill(2) decides for a caller without CAP_KILL: root may; else the caller's
    real or effective uid must be the target's real or saved uid."""
    real, effective = caller_uids[0], caller_uids[1]
    if effective == 0:
        return True
    return bool({real, effective} & {target_uids[0], target_uids[2]})


def supervisor_of(cgroup):
    """("docker", container id) or ("systemd", unit, user unit) when a process's cgroup says
    a supervisor runs it; None for a process started by hand."""
    if cgroup.get("container"):
        return {"kind": "docker", "name": cgroup["container"]}
    if cgroup.get("unit"):
        return {"kind": "systemd", "name": cgroup["unit"], "user": bool(cgroup.get("user_unit"))}
    return None


def supervisor_argv(supervisor):
    """The command that stops a supervised server the way its supervisor wants."""
    if supervisor["kind"] == "docker":
        return ["docker", "stop", supervisor["name"]]
    user = ["--user"] if supervisor.get("user") else []
    return ["systemctl", *user, "stop", "--", supervisor["name"]]


def process_tree(pid):
    """{pid: start ticks} of ``pid`` and its descendants now (at most TREE_MAX)."""
    procs, _ = scan_processes()
    children = {}
    for child, stat in procs.items():
        children.setdefault(stat["ppid"], []).append(child)
    if pid not in procs:
        return {}
    return {member: procs[member]["start_ticks"] for member in tree_of(pid, children)}


def still_running(members):
    """The pids of ``members`` ({pid: start ticks}) that are still those processes, alive."""
    return [
        pid
        for pid, ticks in members.items()
        if proc_start_ticks(pid) == ticks and proc_state(pid) not in (None, "Z")
    ]


def signal_members(members, sig):
    """``sig`` to each of ``members`` that is still the same process."""
    for pid in still_running(members):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_members_gone(members, deadline):
    while time.time() < deadline:
        if not still_running(members):
            return True
        time.sleep(0.05)
    return not still_running(members)


def foreign_target(pid, ticks):
    """The checks before a take-over's stop: {"ok": False, "error"} naming why not, or the
    process's facts (uid, user, pgid, supervisor, whether this user may signal it)."""
    stat = parse_stat(read_capped(f"/proc/{pid}/stat", SMALL_FILE_BYTES).decode(errors="replace"))
    if stat is None or stat["state"] == "Z":
        return {"ok": False, "error": f"no process {pid} on {socket.gethostname()}"}
    if stat["start_ticks"] != ticks:
        return {
            "ok": False,
            "error": f"pid {pid} on {socket.gethostname()} is no longer the process chosen "
            "(its start time changed: the pid was reused); nothing signalled",
        }
    uids = proc_uids(pid)
    uid = uids[0] if uids else None
    user = user_name(uid) if uid is not None else None
    cgroup = parse_cgroup(
        read_capped(f"/proc/{pid}/cgroup", SMALL_FILE_BYTES).decode(errors="replace")
    )
    allowed = uids is not None and may_signal((os.getuid(), os.geteuid()), uids)
    return {
        "ok": True,
        "pid": pid,
        "uid": uid,
        "user": user or (f"uid {uid}" if uid is not None else "?"),
        "pgid": stat["pgid"],
        "own_group": stat["pgid"] == pid,
        "supervisor": supervisor_of(cgroup),
        "may_signal": allowed,
    }


def cmd_stop_foreign(args):
    """Stop a server specmon did not launch for a take-over: refuse a recycled pid, a process
    this user may not signal, one in a container or unit (unless ``--supervisor`` says the
    profile wants its supervisor's stop command run); else SIGTERM (its process group when it
    leads its own group, else its process tree: a ``nohup`` server shares the group of the
    shell that started it, which may hold other jobs), the grace, SIGKILL, and confirm every
    process of it gone. One JSON line per step, then {"ok", "steps"}."""
    state_dir(args.state_dir)
    host = socket.gethostname()
    target = foreign_target(args.pid, args.ticks)
    if not target["ok"]:
        return fail(target["error"])
    supervisor = target["supervisor"]
    if supervisor is not None:
        command = " ".join(supervisor_argv(supervisor))
        if args.supervisor != supervisor["kind"]:
            what = "container" if supervisor["kind"] == "docker" else "systemd unit"
            return fail(
                f"pid {args.pid} on {host} runs in {what} {supervisor['name']}: specmon will "
                f"not kill it behind {supervisor['kind']}'s back; stop it with `{command}` "
                f'(or set take_over = "{supervisor["kind"]}" in the profile)'
            )
    elif not target["may_signal"]:
        return fail(
            f"no permission to signal pid {args.pid} (user {target['user']}) on {host}; "
            "nothing signalled"
        )
    if args.dry_run:
        emit(dict(target, group="own" if target["own_group"] else "tree"))
        return 0
    start = time.time()
    steps = []

    def step(name, detail=None):
        entry = {"step": name, "seconds": round(time.time() - start, 3), "detail": detail}
        steps.append(entry)
        emit(entry)

    members = process_tree(args.pid)
    if supervisor is not None:
        argv = supervisor_argv(supervisor)
        code, _, err = run_tool(argv, timeout=args.grace + SUPERVISOR_TIMEOUT_S, limit=65536)
        step(
            "supervisor",
            f"`{' '.join(argv)}`: " + ("timed out" if code is None else f"exit {code}"),
        )
        if code != 0:
            return fail(f"`{' '.join(argv)}` on {host} failed ({err or code}); not launching")
        gone = wait_members_gone(members, time.time() + args.kill_wait)
    else:
        if target["own_group"]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(args.pid, signal.SIGTERM)
            signal_members(members, signal.SIGTERM)  # a child that left the group too
            step("sigterm", f"process group {args.pid} ({len(members)} processes)")
        else:
            signal_members(members, signal.SIGTERM)
            step(
                "sigterm",
                f"its process tree ({len(members)} processes; its group {target['pgid']} "
                "is not its own)",
            )
        gone = wait_members_gone(members, time.time() + args.grace)
        if gone:
            step("exited", "after SIGTERM")
        else:
            members.update(process_tree(args.pid))  # children started during the grace
            if target["own_group"]:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(args.pid, signal.SIGKILL)
            signal_members(members, signal.SIGKILL)
            step("sigkill", f"grace {args.grace:.1f}s ran out")
            gone = wait_members_gone(members, time.time() + args.kill_wait)
    left = still_running(members)
    if target["own_group"]:
        left = sorted(set(left) | set(group_members(args.pid)))
    step("group_gone", "no process left" if not left else f"left: {left}")
    emit({"ok": not left, "left": left, "steps": steps, "user": target["user"]})
    return 0 if not left else 3


# --- launch ---------------------------------------------------------------------------------


def _with_port(argv, port):
    """``argv`` with its ``--port auto`` (or ``--port=auto``) given ``port``."""
    out = list(argv)
    for i, word in enumerate(out):
        if word == "--port=auto":
            out[i] = f"--port={port}"
        elif word == "auto" and i > 0 and out[i - 1] == "--port":
            out[i] = str(port)
    return out


def cmd_launch(args):
    state = state_dir(args.state_dir)
    spec = json.load(sys.stdin)
    argv = [str(a) for a in spec["argv"]]
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
    env.update({str(k): str(v) for k, v in (spec.get("extra_env") or {}).items()})
    # The nodes of one multi-node server share the run id their console chose.
    run_id = spec.get("run_id") or (
        time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-%04x" % (os.getpid() & 0xFFFF)
    )
    rdir = run_dir(state, run_id)
    if spec.get("port") == "auto":
        # The profile's port = "auto": a port free here now, written into the server's argv
        # (as `--port auto` or `--port=auto`) and its run record.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            spec["port"] = sock.getsockname()[1]
        argv = _with_port(argv, spec["port"])
        if spec.get("record_argv"):
            spec["record_argv"] = _with_port([str(a) for a in spec["record_argv"]], spec["port"])
    if spec.get("port_must_be_free") and spec.get("port"):
        # A server that cannot bind its port dies, and whatever holds the port would answer
        # for it: refused before anything starts, naming the listener.
        words = spec.get("server_words") if isinstance(spec.get("server_words"), dict) else {}
        taken = port_listeners(int(spec["port"]), words)
        if taken:
            names = "; ".join(t["text"] for t in taken)
            servers = [t["pid"] for t in taken if t.get("backend") and t.get("pid")]
            way = f", or take it over: --take-over {servers[0]}" if servers else ""
            return fail(
                f"port {spec['port']} on {socket.gethostname()} is already in use by {names}; "
                f"not launching (stop it, give the profile another port{way})"
            )
    os.makedirs(rdir, mode=0o700)
    for key, value in (spec.get("run_env") or {}).items():
        env[str(key)] = str(value).replace("{run_dir}", rdir)
    for key, value in (spec.get("prepend_path") or {}).items():
        first = str(value).replace("{run_dir}", rdir)
        env[str(key)] = first + (os.pathsep + env[key] if env.get(key) else "")
    for rel, content_b64 in (spec.get("files") or {}).items():
        target = os.path.join(rdir, rel)
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        with open(target, "wb") as f:
            f.write(base64.b64decode(content_b64))
    log_path = os.path.join(rdir, "server.log")
    open(log_path, "ab").close()
    for record in ("run.json", "exit.json"):
        reserve_record(os.path.join(rdir, record))
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # intermediate: new session, fork the monitor, exit so it is reparented
        os.close(read_fd)
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        monitor(argv, env, rdir, log_path, write_fd, spec)
        os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    data = b""
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(read_fd)
    result = json.loads(data.decode() or '{"ok": false, "error": "monitor died"}')
    result["run_id"] = run_id
    result["run_dir"] = rdir
    if result.get("ok"):
        note_replaced(state, spec.get("replaces") or [], run_id, spec)
    emit(result)
    return 0 if result.get("ok") else 3


def note_replaced(state, replaced, run_id, spec):
    """Add to the stop record of each run this launch replaced (stopped for it) which run
    replaced it: `status` then tells a replacement, not a bare stop."""
    for old in replaced:
        if not old or set(str(old)) - RUN_ID_CHARS:
            continue
        path = os.path.join(state, "runs", str(old), "stop.json")
        record = read_json(path)
        if record is None:
            continue  # not stopped by specmon: its end is its own
        record.update(
            replaced_by=run_id,
            replaced_by_profile=spec.get("profile"),
            replaced_by_owner=(spec.get("meta") or {}).get("owner"),
            replaced_at=time.time(),
        )
        with contextlib.suppress(OSError):
            write_json(path, record)


def monitor(argv, env, rdir, log_path, report_fd, spec):
    """Starts the server in its own process group and records how it ended."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    log = open(log_path, "ab", buffering=0)  # noqa: SIM115 (held for the server's life)
    started = time.time()
    try:
        child = subprocess.Popen(
            argv,
            env=env,
            cwd=rdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        os.write(
            report_fd,
            json.dumps({"ok": False, "error": f"cannot start {argv[0]}: {exc}"}).encode(),
        )
        os.close(report_fd)
        write_record(
            os.path.join(rdir, "exit.json"),
            {"code": 127, "signal": None, "ended_at": time.time(), "error": str(exc)},
        )
        return
    run = {
        "run_id": os.path.basename(rdir),
        "argv": spec.get("record_argv") or argv,
        "env": spec.get("record_env", spec.get("env")) or {},
        "profile": spec.get("profile"),
        "port": spec.get("port"),
        "meta": spec.get("meta") or {},
        "pid": child.pid,
        "pgid": child.pid,
        "start_ticks": proc_start_ticks(child.pid),
        "monitor_pid": os.getpid(),
        "monitor_ticks": proc_start_ticks(os.getpid()),
        "started_at": started,
        "log": log_path,
        "user": env.get("USER") or env.get("LOGNAME"),
        "host": socket.gethostname(),
    }
    write_record(os.path.join(rdir, "run.json"), run)
    report = dict(run, ok=True)
    os.write(report_fd, json.dumps(report).encode())
    os.close(report_fd)
    code = wait_tethered(child, spec.get("tether"), rdir)
    ended = {"ended_at": time.time()}
    if code < 0:
        ended.update(code=None, signal=-code)
    else:
        ended.update(code=code, signal=None)
    write_record(os.path.join(rdir, "exit.json"), ended)
    # Stay while processes of the group live on (the run is alive until they are gone, and
    # this monitor's life is what makes their pgid trustworthy).
    while group_members(child.pid):
        time.sleep(0.5)


def wait_tethered(child, tether, rdir):
    """Wait for the server; with a tether (the demo's console process), stop the server's group
    if the console dies without cleaning up (killed, terminal closed), so nothing is left."""
    if not tether:
        return child.wait()
    while True:
        try:
            return child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if proc_start_ticks(int(tether["pid"])) == tether.get("ticks"):
            continue
        record = {
            "by": tether.get("owner") or "",
            "command": "its console ended",
            "reason": "stop",
            "at": time.time(),
            "grace": float(tether.get("grace", 10)),
        }
        for sig, wait in ((signal.SIGTERM, float(tether.get("grace", 10))), (signal.SIGKILL, 10)):
            if sig == signal.SIGKILL:
                record["sigkill_at"] = time.time()
            with contextlib.suppress(OSError):
                write_json(os.path.join(rdir, "stop.json"), record)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                return child.wait(timeout=wait)
        return child.wait()


# --- status ---------------------------------------------------------------------------------


def describe(state, run_id):
    rdir = os.path.join(state, "runs", run_id)
    run = read_record(os.path.join(rdir, "run.json"))
    if run is None:
        return None
    exit_info = read_record(os.path.join(rdir, "exit.json"))
    meta = read_json(os.path.join(rdir, "meta.json")) or {}
    stop = read_json(os.path.join(rdir, "stop.json"))
    try:
        log_size = os.path.getsize(os.path.join(rdir, "server.log"))
    except OSError:
        log_size = 0
    leader = leader_alive(run)
    left = [] if leader else group_left(run)
    return dict(
        run,
        alive=leader or bool(left),
        group_left=len(left),
        exit=exit_info,
        stop=stop,
        annotations=meta,
        log_size=log_size,
        run_dir=rdir,
    )


def cmd_status(args):
    state = state_dir(args.state_dir)
    emit({"ok": True, "runs": list_runs(state, args.limit), "now": time.time()})
    return 0


# --- stop -----------------------------------------------------------------------------------


def wait_group_gone(pgid, deadline):
    while time.time() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.05)
    return not group_members(pgid)


def cmd_stop(args):
    state = state_dir(args.state_dir)
    rdir = run_dir(state, args.run_id)
    run = read_record(os.path.join(rdir, "run.json"))
    if run is None or not run.get("pgid"):
        return fail(f"run {args.run_id} has no record of a process group this helper started")
    pgid = run["pgid"]
    exit_info = read_record(os.path.join(rdir, "exit.json"))
    if not run_alive(run, exit_info):
        emit({"step": "group_gone", "seconds": 0.0, "detail": "already stopped"})
        emit({"ok": True, "already": True})
        return 0
    start = time.time()
    # Who stopped the run and why, written before the signal: the monitor's exit record then
    # tells the leader's own end, and this one that specmon asked for it.
    stop_path = os.path.join(rdir, "stop.json")
    stop_record = {
        "by": args.by,
        "command": args.command,
        "reason": args.reason,
        "at": start,
        "grace": args.grace,
    }
    write_json(stop_path, stop_record)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    emit({"step": "sigterm", "seconds": round(time.time() - start, 3)})
    gone = wait_group_gone(pgid, time.time() + args.grace)
    if gone:
        emit(
            {"step": "exited", "seconds": round(time.time() - start, 3), "detail": "after SIGTERM"}
        )
    else:
        kill_at = time.time()
        # Recorded first: a leader that ends after this instant was killed, not stopped.
        write_json(stop_path, dict(stop_record, sigkill_at=kill_at))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        emit(
            {
                "step": "sigkill",
                "seconds": round(kill_at - start, 3),
                "detail": f"grace {args.grace:.1f}s ran out",
            }
        )
        gone = wait_group_gone(pgid, time.time() + args.kill_wait)
    left = group_members(pgid)
    emit(
        {
            "step": "group_gone",
            "seconds": round(time.time() - start, 3),
            "detail": "no process left" if not left else f"left: {left}",
        }
    )
    emit({"ok": not left, "left": left})
    return 0 if not left else 3


# --- lock -----------------------------------------------------------------------------------


def open_own_lock(path):
    """The lock file, opened without following a link and refused unless it is a regular
    file of this user with one link that group and others cannot write: in a shared state dir
    anyone may have put a ``lock`` there first (a link to a file of ours would be truncated)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EACCES, errno.EPERM):
            raise
        info = os.lstat(path)
        raise SystemExit(fail(untrusted(path, info, "not a regular file of this user"))) from None
    info = os.fstat(fd)
    if (
        not S_ISREG(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_nlink != 1
        or info.st_mode & 0o022
    ):
        os.close(fd)
        raise SystemExit(
            fail(untrusted(path, info, "not a regular file of this user that only it can write"))
        )
    return fd


def untrusted(path, info, why):
    """One line naming the path, its owner and its mode."""
    try:
        import pwd

        owner = pwd.getpwuid(info.st_uid).pw_name
    except (ImportError, KeyError):
        owner = str(info.st_uid)
    return (
        f"refused {path} (owner {owner}, mode {info.st_mode & 0o7777:04o}): {why}; "
        "remove it or choose another state dir"
    )


def cmd_hold_lock(args):
    return hold_flock(args, "lock", {"owner": args.owner})


def cmd_hold_sweep(args):
    """The host's sweep lease: a sweep relaunches the server point after point, so a second
    sweep on the host would replace the first's server under it."""
    return hold_flock(args, "sweep.lock", {"owner": args.owner, "sweep": args.sweep})


def hold_flock(args, name, record):
    """Take the flock of ``name`` in the state dir and hold it until stdin closes (or the
    connection drops), its record (who, since when, the holder's pid) in the file; a JSON
    object on a line of stdin is merged into the record. Busy: who holds it."""
    state = state_dir(args.state_dir)
    path = os.path.join(state, name)
    fd = open_own_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        holder = {}
        with contextlib.suppress(ValueError):
            holder = json.loads(os.pread(fd, 65536, 0).decode() or "{}")
        emit(
            dict(
                {k: v for k, v in holder.items() if k != "ok"},
                ok=False,
                owner=holder.get("owner"),
                since=holder.get("since"),
                pid=holder.get("pid"),
            )
        )
        return 4
    record = dict(record, since=time.time(), pid=os.getpid())

    def write_record_now():
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)

    write_record_now()
    emit({"ok": True})
    # Held until the console closes stdin or its connection drops (EOF): flock dies with us.
    deadline = time.time() + args.max_hold
    pending = b""
    while time.time() < deadline:
        ready, _, _ = select.select([sys.stdin], [], [], 1.0)
        if not ready:
            continue
        data = os.read(sys.stdin.fileno(), 4096)
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            with contextlib.suppress(ValueError):
                update = json.loads(line.decode(errors="replace"))
                if isinstance(update, dict):
                    record.update({k: v for k, v in update.items() if k not in ("since", "pid")})
                    write_record_now()
    os.ftruncate(fd, 0)
    return 0


# --- follow ---------------------------------------------------------------------------------


def read_from(path, offset, limit):
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except OSError:
        return b""


def stdin_closed(timeout):
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(ready) and not os.read(sys.stdin.fileno(), 4096)


class ReadyNotes:
    """The ready time some client noted in a run's meta.json, told on each change: a client
    that read the ready line only in a replay (it came before the launcher's note) learns
    the load time from the launcher's note when it lands."""

    def __init__(self, path):
        self.path = path
        self.told = None

    def changed(self):
        meta = read_json(self.path)
        if not isinstance(meta, dict) or meta.get("ready_at") is None:
            return None
        ready = {"ready_at": meta["ready_at"], "ready_late": bool(meta.get("ready_late"))}
        if ready == self.told:
            return None
        self.told = ready
        return ready


def cmd_follow(args):
    state = state_dir(args.state_dir)
    rdir = run_dir(state, args.run_id)
    run = read_record(os.path.join(rdir, "run.json")) or {}
    log_path = os.path.join(rdir, "server.log")
    probe_path = os.path.join(rdir, "probe.jsonl")
    offsets = {"log": args.log_offset, "probe": args.probe_offset}
    paths = {"log": log_path, "probe": probe_path}
    last_beat = time.time()
    dead_since = None
    stop_path = os.path.join(rdir, "stop.json")
    stop_told = False
    notes = ReadyNotes(os.path.join(rdir, "meta.json"))
    while True:
        if not stop_told and os.path.exists(stop_path):
            # A stop by any client: the follower hears of it before the server's last lines.
            stop_told = True
            emit({"t": "stopping", "stop": read_json(stop_path)})
        ready = notes.changed()
        if ready is not None:
            emit(dict(ready, t="ready"))
        sent = False
        for stream in ("log", "probe"):
            data = read_from(paths[stream], offsets[stream], 256 * 1024)
            if data:
                if len(data) >= COMPRESS_FROM:
                    body = {"z": base64.b64encode(zlib.compress(data, 1)).decode()}
                else:
                    body = {"b": base64.b64encode(data).decode()}
                emit(dict(body, t=stream, o=offsets[stream]))
                offsets[stream] += len(data)
                sent = True
        if sent:
            last_beat = time.time()
            continue
        exit_info = read_record(os.path.join(rdir, "exit.json"))
        if exit_info is None and not run_alive(run, None):
            # The monitor writes exit.json right after the leader ends; give it a moment, and
            # report an unknown exit if it never comes (monitor killed, host rebooted).
            dead_since = dead_since or time.time()
            if time.time() - dead_since > 2.0:
                exit_info = {"code": None, "signal": None, "unknown": True}
        if exit_info is not None:
            # Drain what the server wrote before it ended, then report the exit once.
            if not any(read_from(paths[s], offsets[s], 1) for s in paths):
                stop = read_json(stop_path)
                emit({"t": "exit", "exit": exit_info, "stop": stop, "offsets": offsets})
                return 0
            continue
        if time.time() - last_beat >= 1.0:
            emit({"t": "beat", "offsets": offsets, "alive": run_alive(run, None) if run else False})
            last_beat = time.time()
        if stdin_closed(args.interval):
            return 0


# --- follow-foreign: the log of a server specmon did not launch ------------------------------

FOREIGN_CHUNK = 256 * 1024  # bytes read and sent at once, as follow's


def journal_argv(unit, user_unit=False, since=None):
    """journalctl following a systemd unit's output as the server wrote it, from ``since``
    (epoch seconds: the server's start, so its loading phases are replayed) or its last
    10,000 lines. ``--unit=NAME`` in one word: a name is never taken for an option."""
    argv = ["journalctl", "--user"] if user_unit else ["journalctl"]
    argv += ["--unit=" + unit, "--follow", "--output=cat", "--no-pager"]
    argv += [f"--since=@{int(since)}"] if since else ["--lines=10000"]
    return argv


def docker_argv(container, since=None):
    """docker following a container's output (stdout and stderr), from ``since`` (epoch
    seconds) or the container's start. ``--`` before the name: never an option."""
    argv = ["docker", "logs", "--follow"]
    argv += [f"--since={int(since)}"] if since else []
    return [*argv, "--", container]


def open_regular(path):
    """(fd, stat) of ``path`` opened for reading if it is a regular file; ValueError naming
    what it is otherwise (a FIFO, a device or a directory is never opened for reading: stat
    first, then fstat of what was opened, in case the path changed between the two)."""
    if not S_ISREG(os.stat(path).st_mode):
        raise ValueError("not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    st = os.fstat(fd)
    if not S_ISREG(st.st_mode):
        os.close(fd)
        raise ValueError("not a regular file")
    return fd, st


def emit_chunk(offset, data):
    if len(data) >= COMPRESS_FROM:
        body = {"z": base64.b64encode(zlib.compress(data, 1)).decode()}
    else:
        body = {"b": base64.b64encode(data).decode()}
    emit(dict(body, t="log", o=offset))


class FileTail:
    """A regular file followed by path from a byte offset. The path naming another file now
    (logrotate's rename + create) is a rotation: the old file is read to its end, then the new
    one from 0; a size below the offset (truncation, ``> log`` again) restarts at 0. Both are
    told ({"t": "reset", "why": ...}) so the reader starts its lines over."""

    def __init__(self, path, pid, offset, inode):
        self.path, self.fd, self.ino, self.offset = path, None, None, offset
        self.by_fd = False  # opened through /proc/PID/fd: the path is gone (deleted)
        try:
            self.fd, st = open_regular(path)
        except (OSError, ValueError) as exc:
            missing = isinstance(exc, FileNotFoundError)
            self.fd, st = self.open_deleted(pid, path) if missing else None, None
            if self.fd is None:
                emit({"t": "nolog", "why": f"{path}: {getattr(exc, 'strerror', None) or exc}"})
                return
            st = os.fstat(self.fd)
            self.by_fd = True
        self.ino = (st.st_dev, st.st_ino)
        if inode and inode != st.st_ino:
            self.reset("rotated")
        elif st.st_size < self.offset:
            self.reset("truncated")
        emit({"t": "source", "kind": "file", "inode": st.st_ino, "size": st.st_size})

    @staticmethod
    def open_deleted(pid, path):
        """The server's own stdout or stderr when its path is gone (the file was deleted while
        it writes to it: the link reads "PATH (deleted)"), read through /proc; a regular file
        still. Any other descriptor of the process is not this log, and is not read."""
        for fd in (1, 2):
            link = f"/proc/{pid}/fd/{fd}"
            with contextlib.suppress(OSError, ValueError):
                if pid and os.readlink(link) == path + " (deleted)":
                    return open_regular(link)[0]
        return None

    def reset(self, why):
        self.offset = 0
        emit({"t": "reset", "why": why, "inode": self.ino[1] if self.ino else None})

    def poll(self):
        """Send what is new; True when something was sent."""
        if self.fd is None:
            return False
        if os.fstat(self.fd).st_size < self.offset:
            self.reset("truncated")
        data = os.pread(self.fd, FOREIGN_CHUNK, self.offset)
        if data:
            emit_chunk(self.offset, data)
            self.offset += len(data)
            return True
        if self.by_fd:
            return False
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # between a rotation's rename and create: the old file still counts
        if (st.st_dev, st.st_ino) == self.ino or not S_ISREG(st.st_mode):
            return False
        try:
            fd, st = open_regular(self.path)
        except (OSError, ValueError):
            return False
        os.close(self.fd)
        self.fd, self.ino = fd, (st.st_dev, st.st_ino)
        self.reset("rotated")
        return True

    def close(self):
        if self.fd is not None:
            os.close(self.fd)


class StreamTail:
    """The output of a tool that follows a log (journalctl, docker logs), counted in bytes
    from its start: a reconnect restarts the tool and skips the ``offset`` bytes already sent
    (the journal and docker give the same history again)."""

    def __init__(self, argv, offset):
        self.skip, self.offset, self.ended = offset, offset, None
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, preexec_fn=die_with_parent(),
            )  # fmt: skip
        except OSError as exc:
            self.proc = None
            self.ended = f"{argv[0]}: {exc.strerror or exc}"
            emit({"t": "nolog", "why": self.ended})
            return
        emit({"t": "source", "kind": "stream", "argv": argv})

    def poll(self):
        if self.proc is None or self.ended:
            return False
        pipe = self.proc.stdout
        ready, _, _ = select.select([pipe], [], [], 0)
        if not ready:
            return False
        data = os.read(pipe.fileno(), FOREIGN_CHUNK)
        if not data:
            code = self.proc.wait()
            self.ended = f"{self.proc.args[0]} ended (code {code})"
            emit({"t": "nolog", "why": self.ended})
            return False
        if self.skip:
            dropped = min(self.skip, len(data))
            self.skip -= dropped
            data = data[dropped:]
            if not data:
                return True
        emit_chunk(self.offset, data)
        self.offset += len(data)
        return True

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def cmd_follow_foreign(args):
    """Follow the log of a server specmon did not launch (a file by path, or a unit's journal,
    or a container's docker logs) as follow does a run's (the same framed JSON lines), and
    tell its end: the pid gone (its start time changed: reused), or, for a container without
    a pid, docker logs ending. Reads only what this user may read; a file only if regular."""
    pid = args.pid
    ticks = proc_start_ticks(pid) if pid else None
    if pid and ticks is None:
        emit({"t": "exit", "exit": {"code": None, "signal": None, "unknown": True}})
        return 0
    if args.path:
        tail = FileTail(args.path, pid, args.offset, args.inode)
    elif args.unit:
        tail = StreamTail(journal_argv(args.unit, args.user_unit, args.since), args.offset)
    elif args.container:
        tail = StreamTail(docker_argv(args.container, args.since), args.offset)
    else:
        tail = None
    last_beat = time.time()
    try:
        while True:
            if tail is not None and tail.poll():
                last_beat = time.time()
                continue
            gone = (pid and (proc_start_ticks(pid) != ticks or proc_state(pid) in (None, "Z"))) or (
                not pid and isinstance(tail, StreamTail) and tail.ended
            )
            if gone:
                emit({"t": "exit", "exit": {"code": None, "signal": None, "unknown": True}})
                return 0
            if time.time() - last_beat >= 1.0:
                emit({"t": "beat", "offset": getattr(tail, "offset", 0)})
                last_beat = time.time()
            if stdin_closed(args.interval):
                return 0
    finally:
        if tail is not None:
            tail.close()


def cmd_watch_runs(args):
    """Tell each run of the state dir that is live now, then each new one once its record
    is written ({"t": "run", "run": ...}, as `status` describes it), until stdin closes:
    another client's launch is followed at once."""
    state = state_dir(args.state_dir)
    runs_dir = os.path.join(state, "runs")
    told = set()
    first = True
    while True:
        with contextlib.suppress(OSError):
            for run_id in sorted(os.listdir(runs_dir)):
                if run_id in told:
                    continue
                info = describe(state, run_id)
                if info is None:
                    continue  # its record is not written yet: looked at again next round
                told.add(run_id)
                if info["alive"] or not first:
                    emit({"t": "run", "run": info})
        first = False
        if stdin_closed(args.interval):
            return 0


# --- annotate / supervise -------------------------------------------------------------------


def cmd_annotate(args):
    state = state_dir(args.state_dir)
    rdir = run_dir(state, args.run_id)
    path = os.path.join(rdir, "meta.json")
    meta = read_json(path) or {}
    if args.unless_set and meta.get(args.unless_set) is not None:
        # A late "ready, time unknown" never overwrites a ready time another client saw live.
        emit({"ok": True, "kept": args.unless_set})
        return 0
    meta.update(json.loads(args.json))
    write_json(path, meta)
    emit({"ok": True})
    return 0


def cmd_supervise(args):
    """Run the child with the channel's stdout as its own: nothing relays its output, so no
    process here wakes per line it writes (the GPU agent's nvidia-smi writes a tick row in
    six writes, four times a second). This process only waits, in one select, for the
    channel's stdin to close or the child to exit (a pidfd; where there is none, a 1 s poll),
    then ends the child's process group. A write to stdin reaches the child as SIGUSR1."""
    state_dir(args.state_dir)
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        return fail("supervise: no command")
    sys.stdout.flush()
    child = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent(),  # one thread here: a preexec_fn is safe
    )
    code = None
    try:
        code = wait_child_or_eof(child)
    except OSError:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return 0 if code is None else (code if code >= 0 else 128 - code)


def die_with_parent():
    """A preexec_fn that has Linux SIGTERM the child when this helper dies, even by SIGKILL
    (PR_SET_PDEATHSIG): the child's output no longer passes through the helper, so the
    helper's death no longer ends it through a broken pipe. None where prctl is missing."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    parent = os.getpid()

    def in_child():
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the helper died before the call
            os.kill(os.getpid(), signal.SIGTERM)

    return in_child


def wait_child_or_eof(child):
    """The child's exit status once it exits, or None once stdin reaches end of file. What
    arrives on stdin before that is passed on as SIGUSR1, once a read: the GPU agent then
    reads its GPUs at once (a relaunch waits for the old server's memory to be released)."""
    stdin_fd = sys.stdin.fileno()
    pidfd = None
    with contextlib.suppress(AttributeError, OSError):  # Python < 3.9, Linux < 5.3
        pidfd = os.pidfd_open(child.pid)
    watched = [stdin_fd] if pidfd is None else [stdin_fd, pidfd]
    try:
        while True:
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else 1.0)
            if stdin_fd in ready:
                if not os.read(stdin_fd, 4096):
                    return None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGUSR1)
            if child.poll() is not None:
                return child.returncode
    finally:
        if pidfd is not None:
            os.close(pidfd)


def list_runs(state, limit):
    runs = []
    for run_id in sorted(os.listdir(os.path.join(state, "runs"))):
        info = describe(state, run_id)
        if info is not None:
            runs.append(info)
    return runs[-limit:]


def cmd_hello(args):
    state = state_dir(args.state_dir)
    with open(os.path.abspath(__file__), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    reply = {
        "ok": True,
        "sha256": digest,
        "python": sys.version.split()[0],
        "host": socket.gethostname(),
        "user": os.environ.get("USER") or os.environ.get("LOGNAME"),
        "state_dir": state,
        "time": time.time(),
    }
    if args.with_status:
        reply["runs"] = list_runs(state, 200)
    emit(reply)
    return 0


def cmd_free_port(args):
    """A TCP port free on this host now (for a multi-node server's rendezvous on node 0) and
    the address this host was reached at (SSH_CONNECTION's server side; loopback locally)."""
    state_dir(args.state_dir)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    words = (os.environ.get("SSH_CONNECTION") or "").split()
    emit({"ok": True, "port": port, "address": words[2] if len(words) == 4 else "127.0.0.1"})
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="specmon_helper")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in (
        "hello",
        "launch",
        "status",
        "stop",
        "hold-lock",
        "follow",
        "annotate",
        "supervise",
        "free-port",
        "listener",
        "hold-sweep",
        "watch-runs",
        "servers",
        "environ",
        "follow-foreign",
        "stop-foreign",
        "model-configs",
    ):
        p = sub.add_parser(name)
        p.add_argument("--state-dir", required=True)
        if name in ("stop", "follow", "annotate", "listener"):
            p.add_argument("--run-id", required=True)
    sub.choices["status"].add_argument("--limit", type=int, default=200)
    sub.choices["hello"].add_argument("--with-status", action="store_true")
    sub.choices["stop"].add_argument("--grace", type=float, default=30.0)
    sub.choices["stop"].add_argument("--kill-wait", type=float, default=10.0)
    sub.choices["stop"].add_argument("--by", default="")
    sub.choices["stop"].add_argument("--command", default="")
    sub.choices["stop"].add_argument("--reason", choices=("stop", "replace"), default="stop")
    sub.choices["watch-runs"].add_argument("--interval", type=float, default=0.25)
    sub.choices["hold-lock"].add_argument("--owner", required=True)
    sub.choices["hold-lock"].add_argument("--max-hold", type=float, default=3600.0)
    sub.choices["hold-sweep"].add_argument("--owner", required=True)
    sub.choices["hold-sweep"].add_argument("--sweep", default="")
    sub.choices["hold-sweep"].add_argument("--max-hold", type=float, default=7 * 24 * 3600.0)
    sub.choices["follow"].add_argument("--log-offset", type=int, default=0)
    sub.choices["follow"].add_argument("--probe-offset", type=int, default=0)
    sub.choices["follow"].add_argument("--interval", type=float, default=0.05)
    foreign = sub.choices["follow-foreign"]
    foreign.add_argument("--pid", type=int, default=0)
    foreign.add_argument("--path", default="")
    foreign.add_argument("--unit", default="")
    foreign.add_argument("--user-unit", action="store_true")
    foreign.add_argument("--container", default="")
    foreign.add_argument("--since", type=float, default=0.0)
    foreign.add_argument("--offset", type=int, default=0)
    foreign.add_argument("--inode", type=int, default=0)
    foreign.add_argument("--interval", type=float, default=0.05)
    take = sub.choices["stop-foreign"]
    take.add_argument("--pid", type=int, required=True)
    take.add_argument("--ticks", type=int, required=True)
    take.add_argument("--grace", type=float, default=30.0)
    take.add_argument("--kill-wait", type=float, default=10.0)
    take.add_argument("--supervisor", choices=("", "docker", "systemd"), default="")
    take.add_argument("--dry-run", action="store_true")
    sub.choices["annotate"].add_argument("--json", required=True)
    sub.choices["annotate"].add_argument("--unless-set", default="")
    sub.choices["supervise"].add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    handler = {
        "hello": cmd_hello,
        "launch": cmd_launch,
        "status": cmd_status,
        "stop": cmd_stop,
        "hold-lock": cmd_hold_lock,
        "follow": cmd_follow,
        "annotate": cmd_annotate,
        "supervise": cmd_supervise,
        "free-port": cmd_free_port,
        "listener": cmd_listener,
        "hold-sweep": cmd_hold_sweep,
        "watch-runs": cmd_watch_runs,
        "servers": cmd_servers,
        "environ": cmd_environ,
        "follow-foreign": cmd_follow_foreign,
        "stop-foreign": cmd_stop_foreign,
        "model-configs": cmd_model_configs,
    }[args.cmd]
    try:
        return handler(args)
    except BrokenPipeError:
        return 0
    except OSError as exc:
        return fail(f"{args.cmd}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
