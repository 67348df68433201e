"""The helper's `servers` (what `specmon attach` reads on a host): its parsing pieces as pure
functions, and the whole subcommand run in this process against a real process that the test
starts (its command line, listening socket, log file and start time)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specmon.remote import helper


def test_parse_stat_reads_fields_after_the_last_parenthesis() -> None:
    text = "42 (a) (b) c) S 7 40 40 0 -1 4194560 " + " ".join(["0"] * 12) + " 9876 0 0\n"
    stat = helper.parse_stat(text)
    assert stat is not None
    assert (stat["ppid"], stat["pgid"], stat["sid"], stat["start_ticks"]) == (7, 40, 40, 9876)
    assert stat["comm"] == "a) (b) c"
    assert helper.parse_stat("no parenthesis") is None
    assert helper.parse_stat("1 (x) S 1 2") is None


def test_start_time_from_boot_time_and_clock_ticks() -> None:
    assert helper.boot_time("cpu 1 2 3\nbtime 1700000000\nprocesses 5\n") == 1700000000
    assert helper.boot_time("cpu 1\n") is None
    assert helper.boot_time("btime x\n") is None
    assert helper.start_epoch(12345, 1700000000, 100) == 1700000123.45
    assert helper.start_epoch(None, 1700000000, 100) is None
    assert helper.start_epoch(5, None, 100) is None


def test_this_process_start_time_is_when_it_started() -> None:
    stat = helper.parse_stat(Path("/proc/self/stat").read_text())
    assert stat is not None
    btime = helper.boot_time(Path("/proc/stat").read_text())
    started = helper.start_epoch(stat["start_ticks"], btime, os.sysconf("SC_CLK_TCK"))
    assert started is not None
    assert time.time() - 3600 * 24 < started <= time.time() + 1


@pytest.mark.parametrize(
    ("text", "unit", "user_unit", "container"),
    [
        ("0::/system.slice/llm-server.service\n", "llm-server.service", False, None),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/serve.service\n",
            "serve.service",
            True,
            None,
        ),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None, False, None),
        (
            "0::/system.slice/docker-" + "ab" * 32 + ".scope\n",
            None,
            False,
            "ab" * 32,
        ),
        (
            "12:pids:/docker/" + "cd" * 32 + "\n1:name=systemd:/docker/" + "cd" * 32 + "\n",
            None,
            False,
            "cd" * 32,
        ),
        ("1:name=systemd:/system.slice/ssh.service\n", "ssh.service", False, None),
        ("0::/\n", None, False, None),
        ("garbage\n", None, False, None),
        ("0::/system.slice/docker-notanid.scope\n", None, False, None),
    ],
)
def test_parse_cgroup(text: str, unit: str | None, user_unit: bool, container: str | None) -> None:
    found = helper.parse_cgroup(text)
    assert (found["unit"], found["user_unit"], found["container"]) == (unit, user_unit, container)


def test_fd_targets(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"x" * 10)
    assert helper.fd_target(None)["kind"] == "unreadable"
    assert helper.fd_target("pipe:[123]")["kind"] == "pipe"
    assert helper.fd_target("socket:[456]")["kind"] == "socket"
    assert helper.fd_target("/dev/null")["kind"] == "null"
    assert helper.fd_target("/dev/pts/3") == {"kind": "tty", "path": "/dev/pts/3"}
    found = helper.fd_target(str(log), os.stat(log))
    assert found == {"kind": "file", "path": str(log), "size": 10, "deleted": False}
    gone = helper.fd_target(f"{log} (deleted)", os.stat(log))
    assert gone["kind"] == "file" and gone["path"] == str(log) and gone["deleted"]
    assert helper.fd_target("anon_inode:[eventfd]")["kind"] == "other"
    assert helper.fd_target(str(tmp_path), os.stat(tmp_path))["kind"] == "other"


def test_listen_table_keeps_listening_rows_only() -> None:
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
        "  timeout inode\n"
        "   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
        "        0 1111 1 0000000000000000 100 0 0 10 0\n"
        "   1: 0100007F:7530 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0"
        "        0 2222 1 0000000000000000 100 0 0 10 0\n"
        "   2: short\n"
    )
    assert helper.listen_table(text) == {1111: (30000, "0100007F")}


def test_split_cmdline_drops_a_retitled_processs_padding() -> None:
    assert helper.split_cmdline(b"python\0-m\0x\0") == ["python", "-m", "x"]
    assert helper.split_cmdline(b"title: x\0\0\0\0") == ["title: x"]
    assert helper.split_cmdline(b"a\0b\0c\0", 2) == ["a", "b"]
    assert helper.split_cmdline(b"\xff\0") == ["\ufffd"]


def test_docker_rows_and_nvidia_smi_rows() -> None:
    rows = helper.parse_docker_rows(
        json.dumps(
            {
                "ID": "f" * 64,
                "Names": "llm",
                "Image": "img:1",
                "Ports": "0.0.0.0:1->2/tcp",
                "Command": '"python3 -m x"',
                "Status": "Up 3 hours",
            }
        )
        + "\nnot json\n[1]\n"
    )
    assert rows == [
        {
            "id": "f" * 64,
            "name": "llm",
            "image": "img:1",
            "ports": "0.0.0.0:1->2/tcp",
            "command": '"python3 -m x"',
            "status": "Up 3 hours",
        }
    ]
    by_pid = helper.parse_compute_apps(
        "123, GPU-aaa, 4000\n123, GPU-bbb, 10\nbad line\n9, GPU-zzz, [N/A]\n",
        "0, GPU-aaa\n1, GPU-bbb\n",
    )
    assert by_pid[123] == [
        {"index": 0, "uuid": "GPU-aaa", "used_mb": 4000.0},
        {"index": 1, "uuid": "GPU-bbb", "used_mb": 10.0},
    ]
    assert by_pid[9] == [{"index": None, "uuid": "GPU-zzz", "used_mb": None}]


def test_run_tool_is_bounded_in_time_and_bytes() -> None:
    began = time.monotonic()
    code, out, _ = helper.run_tool(["sleep", "5"], timeout=0.3)
    assert code is None and out == b"" and time.monotonic() - began < 3
    code, out, _ = helper.run_tool([sys.executable, "-c", "print('x' * 100000)"], limit=1000)
    assert code == 0 and out == b"x" * 1000
    code, _, err = helper.run_tool(["/nonexistent/tool"])
    assert code is None and err


WORD = "attachprobeword"  # no real process holds it


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    """A process with WORD in its command line, listening on a port, its output in a file,
    with one child of the same command line (a worker)."""
    log = tmp_path / "server.log"
    code = (
        "import os, socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True)\n"
        "if os.fork() == 0:\n"
        "    time.sleep(60); os._exit(0)\n"
        "time.sleep(60)\n"
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, WORD],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 10
        while not log.read_text().strip():
            assert time.monotonic() < deadline, "the listener did not start"
            time.sleep(0.02)
        yield proc, int(log.read_text().split()[0]), log
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def run_servers(state: Path, request: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> dict:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(request)))
    monkeypatch.setattr(sys, "stdout", out)
    code = helper.main(["servers", "--state-dir", str(state)])
    lines = out.getvalue().splitlines()
    assert code == (0 if request.get("words") else 3), lines
    return json.loads(lines[-1])


def test_servers_finds_the_top_process_with_its_port_log_and_start(
    listener: tuple[subprocess.Popen[bytes], int, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proc, port, log = listener
    began = time.time()
    reply = run_servers(
        tmp_path / "state", {"words": [WORD.upper()], "pid": 999999999}, monkeypatch
    )
    found = {c["pid"]: c for c in reply["candidates"]}
    top = found[proc.pid]
    assert top["argv"][-1] == WORD and top["uid"] == os.getuid()
    assert top["listening"] == [{"port": port, "pid": proc.pid, "address": "0100007F"}]
    assert top["stdout"]["kind"] == "file" and top["stdout"]["path"] == str(log)
    assert top["stdout"] == top["stderr"]
    assert began - 120 < top["started_at"] <= time.time() + 1
    assert top["candidate_ancestors"] == [] and top["specmon_run"] is None
    workers = [c for c in reply["candidates"] if c["pid"] != proc.pid]
    assert [w["candidate_ancestors"] for w in workers] == [[proc.pid]]
    assert not any(os.getpid() == c["pid"] for c in reply["candidates"])
    assert reply["asked"] == {
        "pid": 999999999,
        "exists": False,
        "argv": [],
        "ancestors": [],
        "mine": False,
    }
    assert set(reply["docker"]) == {"present", "rows", "error"}
    assert set(reply["journal"]) == {"present", "systemd"}
    assert reply["gpus"]["present"] in (True, False)


def test_servers_needs_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reply = run_servers(tmp_path / "state", {"words": []}, monkeypatch)
    assert reply == {"ok": False, "error": "servers: no words to look for"}
