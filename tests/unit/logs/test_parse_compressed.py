"""`specmon parse` reads rotated logs as they are kept: gzip, bzip2 or xz, told by their first
bytes, from a file or stdin, with the same output as the plain log; a stream cut short gives
what it held and says so; zstd (no decoder in the standard library) is one clear line."""

from __future__ import annotations

import bz2
import gzip
import lzma
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import TESTS

LOGS = TESTS / "logs"
FIELD_LOG = LOGS / "sglang-oom-traceback.log"


def parse(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "parse", *argv],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("suffix", "compress"), [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)]
)
def test_a_compressed_log_reads_as_the_plain_one(tmp_path: Path, suffix: str, compress) -> None:
    plain = parse(str(FIELD_LOG), "--json", "--summary", "--events")
    assert plain.returncode == 0 and b'"kind": "error"' in plain.stdout
    packed = tmp_path / ("rotated.log.1" + suffix)
    packed.write_bytes(compress(FIELD_LOG.read_bytes()))
    assert parse(str(packed), "--json", "--summary", "--events").stdout == plain.stdout
    # from stdin, and whatever the file is called
    renamed = tmp_path / "server.log"
    renamed.write_bytes(packed.read_bytes())
    assert parse(str(renamed), "--json", "--summary", "--events").stdout == plain.stdout
    assert (
        parse("-", "--json", "--summary", "--events", stdin=packed.read_bytes()).stdout
        == plain.stdout
    )


def test_a_compressed_log_cut_short_gives_what_it_held(tmp_path: Path) -> None:
    data = FIELD_LOG.read_bytes() * 20
    cut = tmp_path / "server.log.gz"
    cut.write_bytes(gzip.compress(data)[:-200])
    done = parse(str(cut), "--summary", "--events")
    assert done.returncode == 0
    assert b"compressed data ends early" in done.stderr
    assert b"errors:" in done.stdout and b"Traceback" not in done.stderr


def test_damaged_and_zstd_logs_are_one_line(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.log.xz"
    damaged.write_bytes(lzma.compress(FIELD_LOG.read_bytes())[:40] + b"\x00" * 400)
    done = parse(str(damaged))
    assert done.returncode == 2
    assert done.stderr.count(b"\n") == 1 and b"cannot read" in done.stderr
    zstd = tmp_path / "server.log.zst"
    zstd.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 64)
    done = parse(str(zstd))
    assert done.returncode == 2
    assert done.stderr.count(b"\n") == 1 and b"zstd -dc" in done.stderr


def test_a_plain_log_that_starts_like_bzip2_text_is_read_as_text(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"BZh9 not a bzip2 stream\n" + FIELD_LOG.read_bytes())
    plain = parse(str(FIELD_LOG), "--json")
    assert parse(str(log), "--json").stdout == plain.stdout
