"""`specmon attach`'s client side: which command lines are servers (through the backends),
which port and log a server has, and the helper's reply made into the servers found (the top
process of each, specmon's own runs left out, containers from docker ps)."""

from __future__ import annotations

from typing import Any

import pytest

from specmon.backends.registry import process_words
from specmon.state.foreign import (
    Container,
    choose_port,
    classify,
    container_server,
    flag_port,
    log_source,
    published_ports,
    survey_from_helper,
)

PY = "/usr/bin/python3"


@pytest.mark.parametrize(
    ("argv", "backend"),
    [
        ([PY, "-m", "sglang.launch_server", "--model-path", "m", "--port", "30000"], "sglang"),
        (["/opt/venv/bin/sglang.launch_server", "--model-path", "m"], "sglang"),
        (["/opt/venv/bin/vllm", "serve", "m", "--port", "8001"], "vllm"),
        ([PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "vllm"),
        ([PY, "-m", "specmon.sim", "--model-path", "m"], "sglang"),
        ([PY, "-m", "specmon.sim.vllm", "serve", "m"], "vllm"),
        ([PY, "-m", "specmon.sim.gpu_agent", "--state", "x"], None),
        ([PY, "-m", "pytest", "tests/e2e/test_vllm_e2e.py"], None),
        (["sh", "-c", "python -m sglang.launch_server --port 1"], None),
        (["/bin/bash", "-c", "vllm serve m"], None),
        (["sudo", PY, "-m", "sglang.launch_server"], None),
        (["docker", "run", "img", "vllm", "serve", "m"], None),
        (["tail", "-F", "sglang.launch_server.log"], None),
        (["sglang::scheduler_TP0"], None),
        ([], None),
    ],
)
def test_classify(argv: list[str], backend: str | None) -> None:
    assert classify(argv) == backend


def test_process_words_come_from_every_backend_and_its_simulator() -> None:
    words = process_words()
    assert {"sglang", "vllm", "specmon.sim", "specmon.sim.vllm"} <= set(words)
    assert len(words) == len(set(words))


def test_ports() -> None:
    argv = [PY, "-m", "sglang.launch_server", "--model-path", "/m", "--port", "31000"]
    assert flag_port(argv) == 31000
    assert flag_port([*argv[:-2], "--port=8123"]) == 8123
    assert flag_port([*argv[:-2], "--port", "99999"]) is None
    assert flag_port(argv[:-2]) is None
    # its own listening socket wins, the flag's port first among several
    assert choose_port(argv, "sglang", [5000, 31000], [5000, 31000, 29500]) == (31000, "socket")
    assert choose_port(argv, "sglang", [5000], [5000, 29500]) == (5000, "socket")
    assert choose_port(argv[:-2], "sglang", [30000, 4000], []) == (30000, "socket")
    assert choose_port(argv[:-2], "sglang", [], [4001, 4000]) == (4000, "socket")
    # not listening yet: the flag, else the backend's default (a guess)
    assert choose_port(argv, "sglang", [], []) == (31000, "flag")
    assert choose_port(argv[:-2], "vllm", [], []) == (8000, "default")
    assert published_ports("0.0.0.0:8080->8000/tcp, :::8080->8000/tcp, 9000/udp") == {8000: 8080}


FILE = {"kind": "file", "path": "/srv/server.log", "size": 5, "deleted": False}


def test_log_sources() -> None:
    nohup = log_source(FILE, FILE, {}, None)
    assert (nohup.kind, nohup.path, nohup.follow) == (
        "file",
        "/srv/server.log",
        "tail -F /srv/server.log",
    )
    assert nohup.detail == ""
    split = log_source(FILE, {"kind": "pipe"}, {}, None)
    assert split.path == "/srv/server.log" and split.detail == "stderr: a pipe"
    unit = log_source({"kind": "socket"}, {"kind": "socket"}, {"unit": "llm.service"}, None)
    assert (unit.kind, unit.follow) == ("journal", "journalctl -fu llm.service")
    user_unit = {"unit": "llm.service", "user_unit": True}
    assert log_source({"kind": "unreadable"}, {}, user_unit, None).follow == (
        "journalctl --user -fu llm.service"
    )
    box = Container(id="a" * 64, name="llm", image="img", ports="")
    docker = log_source({"kind": "pipe"}, {"kind": "pipe"}, {"container": "a" * 64}, box)
    assert (docker.kind, docker.follow) == ("docker", "docker logs -f llm")
    tty = log_source({"kind": "tty", "path": "/dev/pts/1"}, {"kind": "tty"}, {}, None)
    assert tty.kind == "none" and tty.text() == "nowhere readable (stdout: a terminal (/dev/pts/1))"
    hostile = dict(FILE, path="/tmp/a b;rm -rf x")
    assert log_source(hostile, hostile, {}, None).follow == "tail -F '/tmp/a b;rm -rf x'"


def candidate(pid: int, argv: list[str], **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "pid": pid,
        "ppid": 1,
        "pgid": pid,
        "uid": 1000,
        "user": "ops",
        "argv": argv,
        "started_at": 1700000000.0,
        "listening": [],
        "gpus": [],
        "stdout": FILE,
        "stderr": FILE,
        "cgroup": {},
        "candidate_ancestors": [],
        "specmon_run": None,
    }
    base.update(extra)
    return base


SGLANG = [
    PY,
    "-m",
    "sglang.launch_server",
    "--model-path",
    "m",
    "--port",
    "30001",
    "--api-key",
    "s3cret",
]


def reply(candidates: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "ok": True,
        "candidates": candidates,
        "docker": {"present": False, "rows": [], "error": None},
        "journal": {"present": False, "systemd": False},
        "gpus": {"present": True, "error": None},
        "truncated": False,
    }
    base.update(extra)
    return base


def test_survey_keeps_top_processes_and_leaves_specmons_runs_out() -> None:
    survey = survey_from_helper(
        "box",
        reply(
            [
                candidate(
                    10,
                    SGLANG,
                    listening=[{"port": 30001, "pid": 10, "address": "0"}],
                    gpus=[{"index": 0, "uuid": "GPU-a", "used_mb": 70000.0, "pid": 11}],
                ),
                candidate(11, ["sglang::scheduler_TP0"], candidate_ancestors=[10]),
                candidate(12, SGLANG, candidate_ancestors=[10]),  # a fork of the server
                candidate(20, [PY, "-m", "specmon.sim"], specmon_run="20261204-a"),
                candidate(30, ["bash", "-c", "vllm serve m"]),
                candidate(
                    31,
                    ["/usr/bin/vllm", "serve", "m"],
                    candidate_ancestors=[30],
                    stdout={"kind": "pipe"},
                    stderr={"kind": "pipe"},
                ),
                candidate(40, ["grep", "sglang"]),
            ]
        ),
    )
    assert [s.pid for s in survey.servers] == [10, 31]
    first, second = survey.servers
    assert (first.backend, first.port, first.port_source, first.user) == (
        "sglang",
        30001,
        "socket",
        "ops",
    )
    assert "s3cret" not in " ".join(first.argv)
    assert first.gpus is not None and first.gpus_text() == "0"
    assert (second.backend, second.port, second.port_source) == ("vllm", 8000, "default")
    assert second.log.kind == "none" and second.log.detail == "stdout: a pipe"
    assert survey.specmon_runs == ("20261204-a",)
    lines = survey.host_lines()
    assert lines[0] == "docker: not installed on box: containers not searched"
    assert lines[1] == "journal: journalctl not installed on box: systemd units' logs not readable"
    assert lines[2] == "gpus: from nvidia-smi on box"
    assert "20261204-a" in lines[3]
    assert survey.host_dict()["docker"] == {"present": False, "error": None, "containers": 0}
    assert first.to_dict()["kind"] == "server"


def test_refusals() -> None:
    survey = survey_from_helper(
        "box",
        reply(
            [candidate(10, SGLANG), candidate(20, [PY, "-m", "specmon.sim"], specmon_run="r1")],
            asked={"pid": 11, "exists": True, "argv": ["x"], "ancestors": [10, 1]},
        ),
    )
    assert survey.refusal(11) == "pid 11 on box is a worker of server pid 10; use --pid 10"
    survey = survey_from_helper("box", reply([], asked={"pid": 5, "exists": False}))
    assert survey.refusal(5) == "no process 5 on box"
    survey = survey_from_helper(
        "box", reply([], asked={"pid": 5, "exists": True, "argv": ["sleep", "60"], "ancestors": []})
    )
    assert survey.refusal(5) == "pid 5 on box is not a server specmon knows (sleep 60)"
    survey = survey_from_helper(
        "box",
        reply(
            [candidate(20, [PY, "-m", "specmon.sim"], specmon_run="r1")],
            asked={"pid": 20, "exists": True},
        ),
    )
    assert survey.refusal(20) == "pid 20 on box is specmon's own run r1 (see specmon status)"


def test_containers_from_docker_ps() -> None:
    cid = "b" * 64
    rows = [
        {
            "id": cid,
            "name": "sgl",
            "image": "lmsysorg/sglang:latest",
            "ports": "0.0.0.0:8080->30000/tcp",
            "command": '"python3 -m sglang.launch_server --model-path m"',
        },
        {
            "id": "c" * 64,
            "name": "vl",
            "image": "vllm/vllm-openai:v0.9",
            "ports": "",
            "command": '"--model m"',
        },
        {
            "id": "d" * 64,
            "name": "db",
            "image": "postgres",
            "ports": "5432/tcp",
            "command": '"postgres"',
        },
    ]
    seen = candidate(
        50,
        [PY, "-m", "sglang.launch_server", "--model-path", "m"],
        cgroup={"container": cid},
        listening=[{"port": 30000, "pid": 50, "address": "0"}],
        stdout={"kind": "pipe"},
        stderr={"kind": "pipe"},
    )
    survey = survey_from_helper(
        "box", reply([seen], docker={"present": True, "rows": rows, "error": None})
    )
    assert [(s.pid, s.backend) for s in survey.servers] == [(50, "sglang"), (None, "vllm")]
    inside = survey.servers[0]
    assert (inside.port, inside.port_source) == (8080, "docker")
    assert inside.container is not None and inside.container.name == "sgl"
    assert (inside.log.kind, inside.log.follow) == ("docker", "docker logs -f sgl")
    hidden = survey.servers[1]
    assert hidden.log.follow == "docker logs -f vl" and hidden.port is None
    assert survey.host_lines()[0] == "docker: 3 container(s) running on box"
    assert (
        container_server(Container(id="e", name="x", image="redis", ports="", command="")) is None
    )
    failed = survey_from_helper(
        "box", reply([], docker={"present": True, "rows": [], "error": "permission denied"})
    )
    assert failed.host_lines()[0] == (
        "docker: `docker ps` failed on box (permission denied): containers not searched"
    )


# --- choosing the server `--attach` watches -----------------------------------------------

VLLM = [PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "8000"]


def test_attach_auto_wants_exactly_one_server() -> None:
    from specmon.model.attach_target import AttachTarget
    from specmon.model.errors import UsageError
    from specmon.state.foreign import choose_server

    auto = AttachTarget("auto")
    one = survey_from_helper("box", reply([candidate(10, SGLANG)]))
    assert choose_server(one, auto).pid == 10
    # specmon's own runs do not count: they are no foreign server
    mixed = survey_from_helper(
        "box",
        reply([candidate(10, SGLANG), candidate(20, [PY, "-m", "specmon.sim"], specmon_run="r1")]),
    )
    assert choose_server(mixed, auto).pid == 10
    two = survey_from_helper("box", reply([candidate(10, SGLANG), candidate(30, VLLM)]))
    with pytest.raises(UsageError) as several:
        choose_server(two, auto)
    assert str(several.value) == (
        "--attach auto: 2 servers on box that specmon did not launch (pid 10, pid 30); "
        "choose one with --attach PID"
    )
    with pytest.raises(UsageError, match="no server on box that specmon did not launch"):
        choose_server(survey_from_helper("box", reply([])), auto)


def test_attach_pid_unit_and_container() -> None:
    from specmon.model.attach_target import AttachTarget
    from specmon.model.errors import UsageError
    from specmon.state.foreign import choose_server

    survey = survey_from_helper(
        "box",
        reply(
            [
                candidate(10, SGLANG),
                candidate(
                    30,
                    VLLM,
                    stdout={"kind": "socket"},
                    stderr={"kind": "socket"},
                    cgroup={"unit": "vllm.service"},
                ),
            ],
            asked={"pid": 11, "exists": True, "argv": ["x"], "ancestors": [10, 1]},
        ),
    )
    assert choose_server(survey, AttachTarget("pid", pid=10)).pid == 10
    with pytest.raises(UsageError, match=r"^pid 11 on box is a worker of server pid 10"):
        choose_server(survey, AttachTarget("pid", pid=11))  # the survey's own refusal
    assert choose_server(survey, AttachTarget("unit", name="vllm")).pid == 30
    assert choose_server(survey, AttachTarget("unit", name="vllm.service")).pid == 30
    with pytest.raises(UsageError, match="no server on box runs in unit other"):
        choose_server(survey, AttachTarget("unit", name="other"))
    cid = "c" * 64
    docker = {
        "present": True,
        "error": None,
        "rows": [
            {
                "id": cid,
                "name": "llm",
                "image": "vllm/vllm-openai",
                "ports": "",
                "command": '"vllm serve m"',
            }
        ],
    }
    boxed = survey_from_helper("box", reply([], docker=docker))
    assert choose_server(boxed, AttachTarget("container", name="llm")).pid is None
    assert choose_server(boxed, AttachTarget("container", name="cccc")).container.name == "llm"
    with pytest.raises(UsageError, match=r"no server on box runs in container ccc$"):
        choose_server(boxed, AttachTarget("container", name="ccc"))  # too short an id prefix


def test_foreign_server_as_a_followed_run() -> None:
    from specmon.state.foreign import foreign_refusal, foreign_run_status, server_name

    survey = survey_from_helper(
        "box",
        reply([candidate(10, SGLANG, listening=[{"pid": 10, "port": 30001}], pgid=9)]),
    )
    run = foreign_run_status(survey.servers[0])
    assert (run.run_id, run.pid, run.pgid, run.port, run.backend) == (
        "pid-10",
        10,
        9,
        30001,
        "sglang",
    )
    assert run.profile is None and run.alive and run.log_size == 5  # the file's size: the replay
    assert run.started_at == 1700000000.0 and run.owner == "ops"
    assert "s3cret" not in " ".join(run.argv)
    text = foreign_refusal(server_name(survey.servers[0]), "box", "stop")
    assert text.startswith("pid 10 on box is not specmon's run") and "take-over" in text
    assert "\n" not in text
    boxed = container_server(
        Container(id="d" * 64, name="My LLM", image="x", ports="", command='"vllm serve m"')
    )
    assert boxed is not None and foreign_run_status(boxed).run_id == "container-my-llm"
    assert server_name(boxed) == "container My LLM"


def test_take_over_refusals_name_the_supervisors_stop_command() -> None:
    """A server in a container or a unit is not killed behind its supervisor's back: refused
    in one line with the command, unless the profile's ``take_over`` names that supervisor;
    a server started by hand is taken over; its start ticks name the process."""
    from specmon.state.foreign import (
        start_ticks_of,
        supervisor_command,
        take_over_lines,
        take_over_problem,
    )

    survey = survey_from_helper(
        "box",
        reply(
            [
                candidate(10, SGLANG, start_ticks=4242),
                candidate(
                    30, VLLM, stdout={"kind": "socket"}, stderr={"kind": "socket"},
                    cgroup={"unit": "vllm.service"},
                ),
                candidate(
                    40, VLLM, cgroup={"container": "ab" * 32},
                ),
            ],
            docker={
                "present": True, "error": None,
                "rows": [{"id": "ab" * 32, "name": "llm", "image": "vllm/vllm-openai", "ports": ""}],
            },
        ),
    )  # fmt: skip
    by_hand, unit, container = (survey.server(pid) for pid in (10, 30, 40))
    assert by_hand is not None and unit is not None and container is not None
    assert supervisor_command(by_hand) is None
    assert take_over_problem(by_hand, "box", None) is None
    assert start_ticks_of(survey, 10) == 4242 and start_ticks_of(survey, 99) is None
    assert supervisor_command(unit) == ("systemd", "systemctl stop vllm.service")
    assert supervisor_command(container) == ("docker", "docker stop llm")
    refused = take_over_problem(container, "box", None)
    assert refused is not None and "\n" not in refused
    assert refused.startswith("pid 40 on box runs in container llm: specmon will not kill it")
    assert "`docker stop llm`" in refused and 'take_over = "docker"' in refused
    assert "`systemctl stop vllm.service`" in (take_over_problem(unit, "box", "docker") or "")
    assert take_over_problem(unit, "box", "systemd") is None
    assert take_over_problem(container, "box", "docker") is None
    lines = take_over_lines(by_hand, "box", "prod")
    assert lines[0].startswith("take over pid 10 on box (user ops, sglang, port 30001")
    assert "--api-key ***" in lines[1] and "s3cret" not in "".join(lines)
    assert "SIGTERM" in lines[2] and "launch profile prod" in lines[2]
