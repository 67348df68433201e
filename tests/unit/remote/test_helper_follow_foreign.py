"""The helper's ``follow-foreign`` (what ``--attach`` reads on a host): the log of a server
specmon did not launch followed by path from the start, rotation and truncation told, only a
regular file read, the end of its process told; the journalctl and docker command lines it
runs (neither systemd nor a docker daemon is here: their lines are checked, not run)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specmon.remote import helper

HELPER = Path(helper.__file__)


class Follow:
    """The helper's follow-foreign as a process, its JSON lines read one at a time."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPER), "follow-foreign", "--state-dir", str(tmp_path),
             "--interval=0.02", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def next(self, *kinds: str, timeout: float = 10.0) -> dict[str, Any]:
        """The next message of one of ``kinds`` (beats skipped)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            assert line, "the helper ended"
            msg = json.loads(line)
            if msg["t"] != "beat":
                assert msg["t"] in kinds, msg
                return msg
        raise AssertionError(f"no {kinds} within {timeout}s")

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(10)


def data(msg: dict[str, Any]) -> bytes:
    if "z" in msg:
        return zlib.decompress(base64.b64decode(msg["z"]))
    return base64.b64decode(msg["b"])


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for the server (its end ends the follow)."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_file_replayed_from_its_start_then_rotation_truncation_and_the_end(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"loading\nready\n")
    follow = Follow(tmp_path, f"--path={log}", f"--pid={sleeper.pid}")
    try:
        source = follow.next("source")
        assert source["inode"] == log.stat().st_ino and source["size"] == 14
        first = follow.next("log")
        assert (first["o"], data(first)) == (0, b"loading\nready\n")
        with log.open("ab") as f:
            f.write(b"decode 1\n")
        msg = follow.next("log")
        assert (msg["o"], data(msg)) == (14, b"decode 1\n")
        # logrotate: rename, a last line into the old file, then a new file at the path
        log.rename(tmp_path / "server.log.1")
        with (tmp_path / "server.log.1").open("ab") as f:
            f.write(b"last of old\n")
        log.write_bytes(b"first of new\n")
        msg = follow.next("log")
        assert (msg["o"], data(msg)) == (23, b"last of old\n")  # the old file read to its end
        reset = follow.next("reset")
        assert reset["why"] == "rotated" and reset["inode"] == log.stat().st_ino
        msg = follow.next("log")
        assert (msg["o"], data(msg)) == (0, b"first of new\n")
        # truncation (`> server.log` again): shorter than what was read, restarted at 0
        log.write_bytes(b"n\n")
        assert follow.next("reset")["why"] == "truncated"
        msg = follow.next("log")
        assert (msg["o"], data(msg)) == (0, b"n\n")
        sleeper.kill()
        sleeper.wait()
        assert follow.next("exit")["exit"] == {"code": None, "signal": None, "unknown": True}
        assert follow.proc.wait(10) == 0
    finally:
        follow.close()


def test_resume_after_a_reconnect(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"abc\ndef\n")
    inode = log.stat().st_ino
    same = Follow(
        tmp_path, f"--path={log}", f"--pid={sleeper.pid}", "--offset=4", f"--inode={inode}"
    )
    try:
        same.next("source")
        msg = same.next("log")
        assert (msg["o"], data(msg)) == (4, b"def\n")  # from where the reader stood
    finally:
        same.close()
    other = Follow(tmp_path, f"--path={log}", f"--pid={sleeper.pid}", "--offset=4", "--inode=1")
    try:
        assert other.next("reset")["why"] == "rotated"  # another file at the path meanwhile
        other.next("source")
        assert other.next("log")["o"] == 0
    finally:
        other.close()
    short = Follow(
        tmp_path, f"--path={log}", f"--pid={sleeper.pid}", "--offset=99", f"--inode={inode}"
    )
    try:
        assert short.next("reset")["why"] == "truncated"
        short.next("source")
        assert data(short.next("log")) == b"abc\ndef\n"
    finally:
        short.close()


def test_only_a_regular_file_is_read(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path, Path("/dev/zero"), tmp_path / "missing"):
        follow = Follow(tmp_path, f"--path={path}", f"--pid={sleeper.pid}")
        try:
            why = follow.next("nolog")["why"]
            assert why.startswith(f"{path}: "), why
            assert "not a regular file" in why or "No such file" in why
        finally:
            assert follow.close() == 0  # still watching the pid: ends with stdin


def test_a_deleted_log_is_read_through_the_servers_own_descriptor(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(["sh", "-c", "echo started; exec sleep 60"], stdout=out)
    try:
        deadline = time.monotonic() + 5
        while log.stat().st_size == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        log.unlink()
        follow = Follow(tmp_path, f"--path={log}", f"--pid={server.pid}")
        try:
            follow.next("source")
            assert data(follow.next("log")) == b"started\n"
        finally:
            follow.close()
    finally:
        server.kill()
        server.wait()


def test_a_pid_already_gone_ends_at_once(tmp_path: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    follow = Follow(tmp_path, f"--path={tmp_path / 'x'}", f"--pid={done.pid}")
    assert follow.next("exit")["exit"]["unknown"] is True
    assert follow.proc.wait(10) == 0


def test_journal_and_docker_command_lines() -> None:
    assert helper.journal_argv("sglang.service", False, 1700000000.7) == [
        "journalctl", "--unit=sglang.service", "--follow", "--output=cat", "--no-pager",
        "--since=@1700000000",
    ]  # fmt: skip
    assert helper.journal_argv("llm.service", True, None) == [
        "journalctl", "--user", "--unit=llm.service", "--follow", "--output=cat", "--no-pager",
        "--lines=10000",
    ]  # fmt: skip
    assert helper.docker_argv("vllm-1", 1700000000) == [
        "docker", "logs", "--follow", "--since=1700000000", "--", "vllm-1",
    ]  # fmt: skip
    assert helper.docker_argv("-x", None) == ["docker", "logs", "--follow", "--", "-x"]


def test_a_tools_output_counted_in_bytes_and_skipped_on_resume(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tail = helper.StreamTail(["sh", "-c", "printf 'ab\\ncd\\n'"], offset=3)
    deadline = time.monotonic() + 5
    while not tail.ended and time.monotonic() < deadline:
        tail.poll()
        time.sleep(0.01)
    tail.close()
    msgs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert msgs[0] == {"t": "source", "kind": "stream", "argv": ["sh", "-c", "printf 'ab\\ncd\\n'"]}
    logs = [m for m in msgs if m["t"] == "log"]
    assert b"".join(data(m) for m in logs) == b"cd\n" and logs[0]["o"] == 3
    assert msgs[-1] == {"t": "nolog", "why": "sh ended (code 0)"}


def test_a_missing_tool_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    tail = helper.StreamTail(["/nonexistent/journalctl", "--unit=x"], offset=0)
    assert tail.ended is not None and tail.poll() is False
    tail.close()
    msg = json.loads(capsys.readouterr().out)
    assert msg["t"] == "nolog" and msg["why"].startswith("/nonexistent/journalctl: ")
