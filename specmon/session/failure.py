"""Why a run died or hung, as the ServerFailed event the console shows: the root cause is the
server's own error lines, else its argparse usage error, else what is known of the exit."""

from __future__ import annotations

import re
from collections.abc import Iterable

from specmon.model.events import ServerError, ServerFailed

USAGE_EXIT_CODE = 2  # argparse's exit status for a command-line mistake
_USAGE_ERROR = re.compile(r"^\S*: error: |^error: ")


def usage_error_line(lines: Iterable[str]) -> str | None:
    """The argparse ``prog: error: ...`` line among a dead server's last lines, if any."""
    found = None
    for line in lines:
        if _USAGE_ERROR.search(line.strip()):
            found = line.strip()
    return found


def exit_text(code: int | None, sig: int | None) -> str:
    if sig is not None:
        return f"was killed by signal {sig}"
    if code is not None:
        return f"exited with code {code}"
    return "ended (exit status unknown)"


def failure_event(
    run_id: str,
    errors: Iterable[ServerError],
    recent_lines: Iterable[str],
    *,
    command: str | None,
    last_phase: str | None,
    exit_code: int | None = None,
    signal: int | None = None,
    hung: bool = False,
    reason: str | None = None,
) -> ServerFailed:
    """The failure of ``run_id`` from its error lines and last log lines."""
    found = list(errors)
    category = found[0].category if found else "other"
    root = tuple(e.message for e in found)
    usage = usage_error_line(recent_lines) if exit_code == USAGE_EXIT_CODE else None
    if not root and usage is not None:
        root = (usage,)
    if not root:
        root = (reason or f"the server {exit_text(exit_code, signal)} with no error line",)
    elif reason:
        root = (*root, reason)
    return ServerFailed(
        run_id=run_id,
        category=category,
        exit_code=exit_code,
        signal=signal,
        root_cause=root,
        command=command,
        hung=hung,
        last_phase=last_phase,
    )


def hang_reason(
    now: float, last_output: float, last_http: float, connected_at: float, limit: float
) -> str | None:
    """Hung: neither log output nor an HTTP answer for ``limit`` seconds (time while we were
    disconnected proves nothing, so the clock starts at the latest connect). The reason's
    start, or None while the run is not hung."""
    quiet = now - max(last_output, connected_at)
    no_http = now - max(last_http, connected_at)
    if quiet >= limit and no_http >= limit:
        return f"no log output and no HTTP answer for {quiet:.0f}s"
    return None
