"""The command line as a new user meets it (issue 26 items 6, 7 and 8): each test runs the
real ``specmon`` in its own process, in a working directory without a specmon.toml and with
HOME and the XDG dirs in a temp dir, so no file of the real user's is read or written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support.hosts import free_port, processes_mentioning
from support.paths import REPO


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """The environment of a new user whose HOME, config and state dirs are fresh temp dirs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        PYTHONPATH=str(REPO),
        TMPDIR=str(tmp_path),
    )
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return env


def specmon(
    env: dict[str, str], cwd: Path, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmon", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        input=stdin,
    )


def local_host_config(tmp_path: Path) -> Path:
    """A config naming one host, ``box``: this machine, with its own state dir."""
    config = tmp_path / "box.toml"
    config.write_text(f'[hosts.box]\ntransport = "local"\nstate_dir = "{tmp_path / "box-state"}"\n')
    return config


def test_config_works_after_the_subcommand_as_well_as_before(
    tmp_path: Path, home: dict[str, str]
) -> None:
    config = local_host_config(tmp_path)
    work = tmp_path / "work"
    after = specmon(home, work, "status", "box", "--config", str(config))
    assert after.stderr == ""
    assert after.returncode == 0
    assert after.stdout == "no runs on box\n"
    before = specmon(home, work, "--config", str(config), "status", "box")
    assert (before.returncode, before.stdout) == (0, "no runs on box\n")
    missing = specmon(home, work, "status", "box", "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode != 0
    assert "config file does not exist" in missing.stderr


def test_parse_exits_1_when_no_line_is_recognised_and_0_for_errors_alone(
    tmp_path: Path, home: dict[str, str]
) -> None:
    work = tmp_path / "work"
    chatter = specmon(home, work, "parse", "-", stdin="hello\nworld\n")
    assert chatter.returncode == 1
    assert chatter.stdout == ""
    assert chatter.stderr == (
        "specmon: parse: stdin: no log lines of a known server recognised (12 bytes read)\n"
    )
    # No server's line, but an error line: the neutral reader reports it, and that is a read.
    watchdog = REPO / "tests" / "logs" / "c10d-watchdog-only.log"
    errors_alone = specmon(home, work, "parse", str(watchdog), "--kind", "error")
    assert errors_alone.returncode == 0, errors_alone.stderr
    assert "error" in errors_alone.stdout
    assert "exit codes: 0 events were read; 1 no line" in specmon(home, work, "parse", "-h").stdout


def test_a_profile_extends_a_built_in_one(tmp_path: Path, home: dict[str, str]) -> None:
    config = tmp_path / "mine.toml"
    config.write_text(
        '[profiles.my-demo]\nextends = "demo"\n\n'
        "[profiles.my-demo.speculative]\nnum_steps = 3\nnum_draft_tokens = 4\n"
    )
    work, state = tmp_path / "work", str(tmp_path / "state")
    port = f"port={free_port()}"
    where = ("local", "--state-dir", state, "--config", str(config))
    launched = specmon(home, work, "launch", *where, "-p", "my-demo", "--set", port, "--json")
    try:
        assert launched.returncode == 0, launched.stderr
        run = json.loads(launched.stdout)
        assert run["profile"] == "my-demo"
        argv = " ".join(run["argv"])
        assert "-m specmon.sim" in argv  # the built-in demo's command and settings ...
        assert "--speculative-eagle-topk 1" in argv
        assert "--speculative-num-steps 3" in argv  # ... with the file's own on top
        assert run["env"]["SPECMON_SIM_GPUS"] == "8"
    finally:
        stopped = specmon(home, work, "stop", *where)
    assert stopped.returncode == 0, stopped.stderr


def test_parse_summary_prints_the_summary_alone_and_events_on_request(
    tmp_path: Path, home: dict[str, str]
) -> None:
    work, log = tmp_path / "work", str(REPO / "tests" / "logs" / "sglang-0.5.23-startup.log")
    alone = specmon(home, work, "parse", log, "--json", "--summary")
    assert alone.returncode == 0, alone.stderr
    assert [json.loads(line)["kind"] for line in alone.stdout.splitlines()] == ["summary"]
    both = specmon(home, work, "parse", log, "--json", "--summary", "--events")
    kinds = [json.loads(line)["kind"] for line in both.stdout.splitlines()]
    assert kinds[-1] == "summary" and "ready" in kinds and kinds.count("decode") == 4
    assert both.stdout.endswith(alone.stdout)
    lonely = specmon(home, work, "parse", log, "--events")
    assert lonely.returncode == 2 and "--events is for --summary" in lonely.stderr


def test_parse_kind_offers_only_the_kinds_a_log_gives(tmp_path: Path, home: dict[str, str]) -> None:
    work = tmp_path / "work"
    offered = specmon(home, work, "parse", "-h").stdout
    assert "spec_decode" in offered and "weights_loaded" in offered  # vLLM's own
    for never_in_a_log in ("gpu", "probe", "connection"):
        done = specmon(home, work, "parse", "-", "--kind", never_in_a_log, stdin="")
        assert done.returncode == 2, never_in_a_log
        assert f"{never_in_a_log!r} is not a kind of event a log gives" in done.stderr
        assert f" {never_in_a_log}," not in done.stderr
    # Every kind the parsers give over the shipped logs is offered.
    given: set[str] = set()
    for log in sorted((REPO / "tests" / "logs").glob("*.log")):
        done = specmon(home, work, "parse", str(log), "--json")
        given |= {json.loads(line)["kind"] for line in done.stdout.splitlines()}
    from specmon.commands.parse import LOG_KINDS
    from specmon.model.events import LOG_EVENT_KINDS

    assert set(LOG_KINDS) == {cls.kind for cls in LOG_EVENT_KINDS}  # --help's list, checked
    accepted = specmon(home, work, "parse", "-", *[f"--kind={k}" for k in sorted(given)], stdin="")
    assert "not a kind" not in accepted.stderr and len(given) >= 10


HOST_COMMANDS = (
    "connect",
    "launch",
    "stop",
    "status",
    "watch",
    "bench",
    "sweep",
    "nccl-sweep",
    "advise",
    "export",
    "serve",
)


def _words(text: str) -> str:
    return " ".join(text.split())


def test_host_is_described_in_one_wording_by_every_subcommand(
    tmp_path: Path, home: dict[str, str]
) -> None:
    from specmon.commands.arguments import HOST_HELP

    for command in HOST_COMMANDS:
        shown = specmon(home, tmp_path / "work", command, "--help")
        assert shown.returncode == 0, command
        assert _words(HOST_HELP) in _words(shown.stdout), command


def test_an_unknown_host_says_which_config_files_were_searched(
    tmp_path: Path, home: dict[str, str]
) -> None:
    work, config = tmp_path / "work", local_host_config(tmp_path)
    name = "bxo.invalid"  # a typo of box; .invalid never resolves (RFC 6761)
    given = specmon(home, work, "status", name, "--config", str(config))
    assert given.returncode != 0
    assert given.stderr.startswith(f"specmon: cannot reach {name}: ")
    assert given.stderr.count("\n") == 1
    assert f"'{name}' is not a host of the config files searched: {config} (read)" in given.stderr
    looked_for = specmon(home, work, "launch", name, "-p", "demo")
    user_config = tmp_path / "xdg-config" / "specmon" / "specmon.toml"
    assert (
        f"'{name}' is not a host of the config files searched: {work / 'specmon.toml'} (absent), "
        f"{user_config} (absent)"
    ) in looked_for.stderr


def test_every_subcommand_ends_its_help_with_examples_that_parse(
    tmp_path: Path, home: dict[str, str]
) -> None:
    from specmon.cli import COMMANDS, build_parser

    parser = build_parser()
    for name, _, _ in COMMANDS:
        shown = specmon(home, tmp_path / "work", name, "--help")
        assert shown.returncode == 0, name
        examples = shown.stdout.partition("\nexamples:\n")[2]
        commands = [line.strip() for line in examples.splitlines() if line.startswith("  specmon ")]
        assert 2 <= len(commands) <= 3, (name, examples)
        for line in commands:
            words = shlex.split(re.split(r"\s{2,}|[|>]", line)[0])  # the comment or a pipe off
            assert words[:2] == ["specmon", name], line
            parser.parse_args(words[1:])  # every example is a valid command line


def test_config_is_taken_after_a_ledger_action_too(tmp_path: Path, home: dict[str, str]) -> None:
    config = str(local_host_config(tmp_path))
    done = specmon(home, tmp_path / "work", "ledger", "list", "--config", config)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("the ledger ") and done.stdout.endswith(" is empty\n")


def test_stop_takes_a_profile_with_nodes_alone_as_status_advises(
    tmp_path: Path, home: dict[str, str]
) -> None:
    """`status --profile P` advises `specmon stop --profile P`, which asked for a HOST."""
    work = tmp_path / "work"
    config = tmp_path / "nodes.toml"
    config.write_text(
        '[hosts.n0]\ntransport = "local"\nstate_dir = "' + str(tmp_path / "n0") + '"\n'
        '[hosts.n1]\ntransport = "local"\nstate_dir = "' + str(tmp_path / "n1") + '"\n'
        '[profiles.pair]\nextends = "demo"\nnodes = ["n0", "n1"]\ntp = 16\n'
    )
    done = specmon(home, work, "stop", "--profile", "pair", "--config", str(config))
    assert "required: HOST" not in done.stderr
    assert done.returncode == 0, done.stderr
    no_nodes = specmon(home, work, "stop", "--profile", "demo")
    assert no_nodes.returncode == 2
    assert no_nodes.stderr == "specmon: profile 'demo' has no nodes; stop HOST stops its run\n"
    nothing = specmon(home, work, "stop")
    assert nothing.returncode == 2 and "give the HOST" in nothing.stderr


def test_sweep_says_why_its_default_request_count_differs_from_bench(
    tmp_path: Path, home: dict[str, str]
) -> None:
    work = tmp_path / "work"
    bench = _words(specmon(home, work, "bench", "--help").stdout)
    sweep = _words(specmon(home, work, "sweep", "--help").stdout)
    assert "--requests N measured requests (default 8)" in bench
    assert (
        "--requests N measured requests (default 5 per point, fewer than bench's 8: a sweep "
        "measures every point of its grid; --requests 8 to compare with a bench)"
    ) in sweep


@pytest.mark.parametrize("moved_by", ["SPECMON_STATE_DIR", "XDG_STATE_HOME"])
def test_this_machines_runs_go_where_the_state_dir_is_moved(
    tmp_path: Path, home: dict[str, str], moved_by: str
) -> None:
    moved = tmp_path / "moved"
    env = {**home, moved_by: str(moved)}
    state = moved if moved_by == "SPECMON_STATE_DIR" else moved / "specmon"
    work = tmp_path / "work"
    launched = specmon(
        env, work, "launch", "local", "-p", "demo", "--set", f"port={free_port()}", "--json"
    )
    try:
        assert launched.returncode == 0, launched.stderr
        run_dir = Path(json.loads(launched.stdout)["run_dir"])
        assert run_dir.parent == state / "runs"
        assert (run_dir / "run.json").is_file()
    finally:
        stopped = specmon(env, work, "stop", "local")
    assert stopped.returncode == 0, stopped.stderr
    assert not (tmp_path / "home" / ".local" / "state").exists()  # nothing left in the old place


def test_advise_with_nothing_running_says_how_to_start_a_server(
    tmp_path: Path, home: dict[str, str]
) -> None:
    done = specmon(home, tmp_path / "work", "advise", "local", "--timeout", "10")
    assert done.returncode == 1
    assert done.stderr == (
        "specmon: advise local: no server is running there, so there is nothing to measure; "
        "start one with `specmon launch local -p demo --wait ready`, then run advise again\n"
    )


def test_two_users_launch_the_demo_on_one_machine_each_on_a_free_port(
    tmp_path: Path, home: dict[str, str]
) -> None:
    """The built-in demo profiles say port = "auto": the helper picks a free port at launch
    and records it, so two users' `launch local -p demo` no longer collide on 30000."""
    work = tmp_path / "work"
    users = [("--state-dir", str(tmp_path / name)) for name in ("alice", "bob")]
    launches = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "specmon",
                "launch",
                "local",
                *user,
                "-p",
                "demo",
                "--wait",
                "ready",
                "--timeout",
                "120",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=home,
            cwd=work,
        )
        for user in users
    ]
    try:
        answers = [launch.communicate(timeout=180) for launch in launches]
        for launch, (_, err) in zip(launches, answers, strict=True):
            assert launch.returncode == 0, err
        runs = [json.loads(out.splitlines()[0]) for out, _ in answers]
        ports = [run["port"] for run in runs]
        assert all(isinstance(port, int) and port > 0 for port in ports)
        assert ports[0] != ports[1] and 30000 not in ports
        for run in runs:
            assert run["argv"][run["argv"].index("--port") + 1] == str(run["port"])
        listed = specmon(home, work, "status", "local", *users[0], "--json")
        assert json.loads(listed.stdout)["runs"][0]["port"] == ports[0]  # as recorded
    finally:
        for launch in launches:
            if launch.poll() is None:
                launch.kill()
        stops = [specmon(home, work, "stop", "local", *user, "--all") for user in users]
    assert all(stop.returncode == 0 for stop in stops), [stop.stderr for stop in stops]


def test_demo_hosts_3_runs_a_fleet_of_three_simulated_hosts(
    tmp_path: Path, home: dict[str, str]
) -> None:
    """`specmon demo --hosts 3`: three simulated hosts on this machine, each with its own
    state dir and port; headless here (no terminal), the fleet console on one."""
    done = specmon(
        home,
        tmp_path / "work",
        "demo",
        "--hosts",
        "3",
        "--headless",
        "--until",
        "ready",
        "--json",
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    hosts = ("demo-1", "demo-2", "demo-3")
    assert {e["host"] for e in events if e["kind"] == "ready"} == set(hosts)
    runs = {e["host"]: e["argv"] for e in events if e["kind"] == "run"}
    ports = {host: argv[argv.index("--port") + 1] for host, argv in runs.items()}
    assert sorted(ports) == list(hosts) and len(set(ports.values())) == 3
    assert processes_mentioning(str(tmp_path)) == []  # every server stopped at the end
    assert not list(tmp_path.glob("specmon-demo-*"))  # and its state dir removed
    too_many = specmon(home, tmp_path / "work", "demo", "--hosts", "9", "--headless")
    assert too_many.returncode == 2 and "--hosts 9: expected 1 to 8" in too_many.stderr
