"""Unicode bidi controls from a server never reach the terminal raw (issue 24, item 6): they
print nothing yet reorder what follows (``rm -rf \\u202e/ tmp``). `safe_text` strips them, so
the text forms of `watch`, `parse` and the summary show the line without them; the JSON forms
stay faithful (the server's exact text, each control escaped as ``\\u202e`` by the encoder's
``ensure_ascii``), so no raw control byte is printed there either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_server import BIDI
from support.hostile import hostile_profile_toml
from support.hosts import free_port, kill_everything_under
from support.paths import REPO

from specmon.model.terminal_text import safe_text

# The list: U+202A-202E, U+2066-2069, U+200E-200F, U+061C.
BIDI_CODE_POINTS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)
RAW_BIDI = set(map(chr, BIDI_CODE_POINTS))


@pytest.mark.parametrize("code_point", BIDI_CODE_POINTS, ids=lambda c: f"U+{c:04X}")
def test_safe_text_strips_each_bidi_control(code_point: int) -> None:
    assert safe_text(f"rm -rf {chr(code_point)}/ tmp") == "rm -rf / tmp"


# Invisible characters that hide a word's spelling, and the line/paragraph separators.
INVISIBLE_CODE_POINTS = (*range(0x200B, 0x200E), *range(0x2060, 0x2065), 0xFEFF, 0x2028, 0x2029)


@pytest.mark.parametrize("code_point", INVISIBLE_CODE_POINTS, ids=lambda c: f"U+{c:04X}")
def test_safe_text_strips_each_invisible_character(code_point: int) -> None:
    assert safe_text(f"rm -rf /{chr(code_point)}tmp") == "rm -rf /tmp"


def test_safe_text_keeps_right_to_left_letters_and_other_unicode() -> None:
    text = "model שלום مرحبا ✓ — 日本"
    assert safe_text(text) == text


def _no_raw_bidi(text: str) -> bool:
    return not RAW_BIDI.intersection(text)


@pytest.fixture
def bidi_box(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    config = tmp_path / "specmon.toml"
    config.write_text(
        hostile_profile_toml("bidi,http:position=1,serve", port=free_port(), backend="vllm")
    )
    state = tmp_path / "state"
    try:
        yield config, ["local", "--state-dir", str(state)]
    finally:
        kill_everything_under(state)


def _specmon(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_watch_parse_and_summary_show_no_bidi_control(
    bidi_box: tuple[Path, list[str]], tmp_path: Path
) -> None:
    config, where = bidi_box
    assert set(BIDI) == RAW_BIDI  # the server's lines and labels carry every listed control
    assert _specmon(config, "launch", *where, "-p", "hostile").returncode == 0
    watched = _specmon(config, "watch", *where, "--log", "--duration", "5")
    assert "log         bidi line: rm -rf / tmp end" in watched.stdout, watched.stdout
    assert "error       [other] RuntimeError: hostile bidi error end" in watched.stdout
    assert _no_raw_bidi(watched.stdout), ascii(watched.stdout)

    as_json = _specmon(config, "watch", *where, "--log", "--json", "--duration", "5")
    assert as_json.stdout.isascii()  # every control escaped: \u202e
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    texts = {event.get("text") for event in events if event["kind"] == "log"}
    assert f"bidi line: rm -rf \u202e/ tmp{BIDI} end" in texts  # faithful once decoded
    labels = [key for e in events if e["kind"] == "metrics" for key, _ in e["values"]]
    assert f'vllm:hostile_note{{note="a\u202eb{BIDI}c"}}' in labels

    log = next(Path(where[2]).glob("runs/*/*.log"))
    parsed = _specmon(config, "parse", "--backend", "vllm", "--summary", "--events", str(log))
    assert "RuntimeError: hostile bidi error end" in parsed.stdout, parsed.stdout
    assert "first error:         RuntimeError: hostile bidi error end" in parsed.stdout
    assert _no_raw_bidi(parsed.stdout), ascii(parsed.stdout)
    parsed_json = _specmon(
        config, "parse", "--backend", "vllm", "--json", "--summary", "--events", str(log)
    )
    assert parsed_json.stdout.isascii() and "\\u202e" in parsed_json.stdout
    assert _specmon(config, "stop", *where).returncode == 0
