"""Which server `specmon adopt` takes: `--pid`'s (refused as `attach --pid` refuses), else
the only one on the host; none or several is a one-line refusal."""

from __future__ import annotations

from typing import Any

import pytest

from specmon.backends import get_backend
from specmon.commands.adopt import chosen_server
from specmon.launch.adopt import adopted_table
from specmon.model.errors import UsageError
from specmon.state.foreign import survey_from_helper

PY = "/usr/bin/python3"
SERVER = [PY, "-m", "sglang.launch_server", "--model-path", "m", "--port", "30001"]


def candidate(pid: int, argv: list[str]) -> dict[str, Any]:
    return {
        "pid": pid, "ppid": 1, "pgid": pid, "uid": 1000, "user": "ops", "argv": argv,
        "started_at": 1700000000.0, "listening": [], "gpus": [], "stdout": {}, "stderr": {},
        "cgroup": {}, "candidate_ancestors": [], "specmon_run": None,
    }  # fmt: skip


def survey(*candidates: dict[str, Any], asked: dict[str, Any] | None = None) -> Any:
    reply: dict[str, Any] = {
        "ok": True,
        "candidates": list(candidates),
        "docker": {"present": False, "rows": [], "error": None},
        "journal": {"present": False, "systemd": False},
        "gpus": {"present": False, "error": None},
    }
    if asked is not None:
        reply["asked"] = asked
    return survey_from_helper("gpu-box", reply)


def test_the_only_server_is_chosen() -> None:
    assert chosen_server(survey(candidate(10, SERVER)), None).pid == 10


def test_none_or_several_are_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match=r"^no server on gpu-box that specmon did not launch$"):
        chosen_server(survey(), None)
    with pytest.raises(
        UsageError, match=r"^2 servers on gpu-box \(pids 10, 11\): name one with --pid$"
    ):
        chosen_server(survey(candidate(10, SERVER), candidate(11, SERVER)), None)


def test_pid_is_refused_as_attach_refuses_it() -> None:
    both = survey(candidate(10, SERVER), candidate(11, SERVER))
    assert chosen_server(both, 11).pid == 11
    sleeper = survey(
        candidate(10, SERVER),
        asked={"pid": 12, "exists": True, "argv": ["sleep", "60"], "ancestors": [1]},
    )
    with pytest.raises(UsageError, match="pid 12 on gpu-box is not a server specmon knows"):
        chosen_server(sleeper, 12)
    with pytest.raises(UsageError, match="no process 13 on gpu-box"):
        chosen_server(survey(asked={"pid": 13, "exists": False}), 13)


def test_a_secret_flag_reaches_the_profile_masked() -> None:
    """attach masks secret flags (``--api-key X`` as ``***``): the profile holds the placeholder."""
    server = chosen_server(survey(candidate(10, [*SERVER, "--api-key", "s3cret"])), None)
    table = adopted_table(get_backend(server.backend), server.argv, {})
    assert table["extra_args"] == ["--api-key", "***"]


def test_a_command_line_read_in_part_is_refused() -> None:
    cut = candidate(10, SERVER) | {"argv_truncated": True}
    with pytest.raises(UsageError, match="longer than the host reads"):
        chosen_server(survey(cut), None)
    with pytest.raises(UsageError, match="longer than the host reads"):
        chosen_server(survey(cut), 10)
