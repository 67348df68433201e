"""Finding the servers on a host that specmon did not launch (``specmon attach``): one call of
the helper's ``servers``, which scans the host's /proc, docker and nvidia-smi once, then the
reply made into typed records (specmon/state/foreign.py)."""

from __future__ import annotations

import json

from specmon.backends.registry import process_words
from specmon.session.helper_client import HelperClient
from specmon.state.foreign import HostSurvey, survey_from_helper

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
