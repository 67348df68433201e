"""One server over two nodes: two "hosts" that are two state dirs on this machine (the local
transport), the simulator's real rendezvous between them, watched, stopped and failed as one
run through the MultiNodeController."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support import hosts
from support.hosts import (
    free_port,
    group_alive,
    kill_everything_under,
    run_pgids,
    sim_profiles,
)
from support.sshd import SshdServer, start_sshd, stop_sshd

from specmon.backends import BACKENDS, NodePlacement, get_backend, registry
from specmon.backends.sglang import SGLangBackend
from specmon.launch.config import parse_config_text
from specmon.model.errors import ConfigError, SpecmonError, UsageError
from specmon.model.events import GpuReading, GpuSample, NodeStatus
from specmon.session.host import HostSession, SessionOptions
from specmon.session.local import LocalTransport
from specmon.session.multinode import MultiNodeController, open_nodes
from specmon.state.store import StateStore

TIMEOUT = 60.0


@pytest.fixture
def state_dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    dirs = (tmp_path / "node-a", tmp_path / "node-b")
    try:
        yield dirs
    finally:
        for path in dirs:
            kill_everything_under(path)


def two_node_controller(
    dirs: tuple[Path, Path],
    *,
    order: tuple[int, int] = (0, 1),
    grace: float = 5.0,
    env: dict[str, str] | None = None,
    hang_after_s: float = 300.0,
) -> MultiNodeController:
    """node-a and node-b as two local hosts; TP16 over them (TP8 per simulated 8-GPU node)."""
    fast = sim_profiles(env=env)["fast"]
    profile = dataclasses.replace(
        fast, tp=16, nodes=("node-a", "node-b"), node_grace_s=grace, probe=False
    )
    sessions = [
        HostSession(
            LocalTransport(label=("node-a", "node-b")[i]),
            profiles={"two": profile},
            options=hosts.test_options(dirs[i], hang_after_s=hang_after_s),
        )
        for i in order
    ]
    return MultiNodeController(sessions, profiles={"two": profile}, settle_s=0.5)


async def until(check: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def port_free(port: int) -> bool:
    """Nothing listens there (a server rebinding it sets SO_REUSEADDR, as uvicorn does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def node_runs(path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (path / "runs").glob("*/run.json")]


async def test_two_node_server_launches_watches_as_one_run_and_stops(
    state_dirs: tuple[Path, Path],
) -> None:
    controller = two_node_controller(state_dirs, hang_after_s=1.5)
    store: StateStore = controller.bus.store
    await controller.start()
    try:
        run_id = await controller.launch("two")
        await until(lambda: store.run_state == "ready", "the two-node server to be ready")

        # One run, recorded on both nodes with its node rank.
        records = [node_runs(path) for path in state_dirs]
        assert [len(r) for r in records] == [1, 1]
        assert {r[0]["run_id"] for r in records} == {run_id}
        assert [r[0]["meta"]["node"]["rank"] for r in records] == [0, 1]
        argv0, argv1 = (r[0]["argv"] for r in records)
        init = argv0[argv0.index("--dist-init-addr") + 1]
        assert argv1[argv1.index("--dist-init-addr") + 1] == init
        assert argv1[argv1.index("--node-rank") + 1] == "1"

        # Merged loading: every node's progress, node 1 done too.
        await until(lambda: len(store.loading.nodes) == 2, "both nodes' status")
        await until(
            lambda: all(n.state == "ready" for n in store.loading.nodes.values()),
            "node 1 shown ready",
        )
        assert store.loading.nodes[1].shards_done == store.loading.nodes[1].shards_total == 8

        # Logs tagged with their node, each node logging its own TP ranks.
        texts = [line.text for line in store.log]
        assert any(t.startswith("[node1 node-b]") and " TP15]" in t for t in texts)
        assert any(t.startswith("[node0 node-a]") and " TP7]" in t for t in texts)
        assert not any(t.startswith("[node1 node-b]") and " TP7]" in t for t in texts)

        # GPUs grouped by node, ids node-major.
        await until(lambda: len(store.gpu_nodes) == 16, "16 GPUs from two nodes")
        assert {g for g, n in store.gpu_nodes.items() if n == 1} == set(range(8, 16))

        # HTTP from node 0.
        base = await controller.http_base_url()
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            assert (await client.get(f"{base}/health")).status_code == 200

        # Node 1 serves no HTTP: it is not polled, and its silence once loaded is no hang.
        assert controller.nodes[1].session.poll_target() is None
        await asyncio.sleep(2.5)
        assert store.failure is None and store.run_state == "ready"

        report = await controller.stop()
        assert report is not None and report.run_id == run_id
        pgids = [pgid for path in state_dirs for pgid in run_pgids(path)]
        assert len(pgids) == 2 and not any(group_alive(p) for p in pgids)
        assert port_free(int(init.rpartition(":")[2]))
        assert port_free(int(argv0[argv0.index("--port") + 1]))
        assert store.failure is None
    finally:
        await controller.close()


# A stop after a node's death takes a few seconds (the settle, SIGTERM, the group gone);
# node 0 outlives its dead peer by 60 s (SPECMON_SIM_PEER_LOST_S), so one left unstopped is
# still there at this bound.
STOPPED_WITHIN_S = 20.0


async def test_killing_one_node_fails_the_run_with_its_cause_and_stops_the_other(
    state_dirs: tuple[Path, Path],
) -> None:
    """The failure as one typed event naming node 1 and its signal, and node 0's stop seen
    directly: its stop steps on the merged stream, its group gone, its run recorded as stopped
    by specmon (issue 30 item 4: a missing stop was caught only ~60 s later, by a log text)."""
    # Node 0 outlives its dead peer (NCCL's watchdog can take minutes): specmon stops it.
    controller = two_node_controller(state_dirs, env={"SPECMON_SIM_PEER_LOST_S": "60"})
    store = controller.bus.store
    await controller.start()
    recorder = hosts.Recorder(controller)  # type: ignore[arg-type]  # the merged bus
    try:
        await controller.launch("two")
        await until(lambda: store.run_state == "ready", "the two-node server to be ready")
        node0_pgid, node1_pgid = (run_pgids(path)[0] for path in state_dirs)
        killed_at = time.monotonic()
        os.killpg(node1_pgid, signal.SIGKILL)

        (failed,) = await recorder.wait_kind("server_failed", STOPPED_WITHIN_S)
        assert failed.root_cause[0].startswith("node 1 (node-b)"), failed.root_cause
        assert failed.signal == signal.SIGKILL
        assert store.run_state == "failed" and store.failure == failed

        def node0_steps() -> list[str]:
            return [
                e.step
                for e in recorder.kinds("stop_progress")
                if (e.detail or "").startswith("[node0 node-a]")
            ]

        left = STOPPED_WITHIN_S - (time.monotonic() - killed_at)
        await recorder.wait_until(
            "node 0's group gone", lambda: "group_gone" in node0_steps(), left
        )
        stopped_after = time.monotonic() - killed_at
        assert node0_steps()[0] == "sigterm" and not group_alive(node0_pgid), node0_steps()
        assert stopped_after < STOPPED_WITHIN_S
        (run,) = await controller.nodes[0].session.status()
        assert run.end is not None and run.end.kind == "stopped", run.end
        assert store.run_state == "failed"  # the stop after a failure leaves it failed
        assert controller.current_run is not None
    finally:
        recorder.close()
        await controller.close()


async def test_a_half_server_found_on_connect_is_failed_and_stopped(
    state_dirs: tuple[Path, Path],
) -> None:
    """Node 1 died while no console watched: the next console reports it and stops node 0."""
    env = {"SPECMON_SIM_PEER_LOST_S": "60"}
    first = two_node_controller(state_dirs, env=env)
    await first.start()
    try:
        await first.launch("two")
        await until(lambda: first.bus.store.run_state == "ready", "the server to be ready")
    finally:
        await first.close()
    os.killpg(run_pgids(state_dirs[1])[0], signal.SIGKILL)
    node0_pgid = run_pgids(state_dirs[0])[0]
    second = two_node_controller(state_dirs, env=env)
    await second.start()
    try:
        store = second.bus.store
        await until(lambda: store.failure is not None, "the half-server reported")
        assert store.failure.root_cause[0].startswith("node 1 (node-b): its part of run")
        # Well before node 0 would end by itself (60 s after its peer), and by specmon's stop.
        await until(lambda: not group_alive(node0_pgid), "node 0 stopped", STOPPED_WITHIN_S)
        (run,) = await second.nodes[0].session.status()
        assert run.end is not None and run.end.kind == "stopped", run.end
    finally:
        await second.close()


async def test_locks_are_taken_in_label_order_whatever_the_node_order(
    state_dirs: tuple[Path, Path],
) -> None:
    """Two consoles over the same nodes listed in opposite orders: both take node-a's lock
    first, so one of them always gets both locks (never each one, both refused)."""
    first = two_node_controller(state_dirs, order=(0, 1))
    second = two_node_controller(state_dirs, order=(1, 0))
    await asyncio.gather(first.start(), second.start())
    try:
        for _ in range(4):

            async def hold(controller: MultiNodeController) -> bool:
                try:
                    async with controller._locked("test"):
                        await asyncio.sleep(0.3)
                        return True
                except UsageError:
                    raise
                except Exception:
                    return False

            results = await asyncio.gather(hold(first), hold(second))
            assert any(results), results
    finally:
        await asyncio.gather(first.close(), second.close())


def test_sglang_renders_and_validates_the_node_flags() -> None:
    backend = get_backend("sglang")
    flags = backend.multinode_args(NodePlacement(1, 2, "10.0.0.5", 29555))
    assert flags == ("--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.5:29555")
    assert backend.launch_problems(["--model-path", "m", "--tp", "16", *flags], {}) == []
    v6 = backend.multinode_args(NodePlacement(0, 2, "fd00::5", 29555))
    assert v6 is not None and v6[-1] == "[fd00::5]:29555"
    problems = backend.validate_launch(
        ["--model-path", "m", "--tp", "10", "--nnodes", "4", "--node-rank", "4"], {}
    )
    assert any(p.startswith("--node-rank: 4 is not below") for p in problems)
    assert any(p.startswith("--dist-init-addr: is required") for p in problems)
    assert any(p.startswith("--tp: 10 TP ranks do not split evenly") for p in problems)
    assert backend.validate_launch(["--model-path", "m", "--dist-init-addr", "host"], {})


PROFILE = """
[profiles.two]
command = ["{python}", "-m", "specmon.sim"]
model_path = "m"
tp = 16
"""


def test_nodes_key_is_checked_and_node_flags_are_never_typed() -> None:
    config = parse_config_text(PROFILE + 'nodes = ["gpu-a", "root@gpu-b:2222"]\n', None)
    assert config.profiles["two"].nodes == ("gpu-a", "root@gpu-b:2222")
    assert config.profiles["two"].node_grace_s == 60.0
    for line, message in (
        ('nodes = ["gpu-a"]', "two or more hosts"),
        ('nodes = ["gpu-a", "gpu-a"]', "named twice"),
        ('nodes = ["gpu-a", "bad host"]', "bad host"),
        ('extra_args = ["--node-rank", "1"]', "--node-rank is set by specmon"),
        ("node_grace_s = -1", "out of range"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_config_text(PROFILE + line + "\n", None)


class _NoNodesBackend(SGLangBackend):
    """A server whose multi-node mode would need a cluster manager (the base's answer)."""

    name = "nonodes"

    def multinode_args(self, node: NodePlacement) -> tuple[str, ...] | None:
        return None


def test_a_backend_without_a_multinode_launch_is_refused(
    monkeypatch: pytest.MonkeyPatch, state_dirs: tuple[Path, Path]
) -> None:
    monkeypatch.setitem(BACKENDS, "nonodes", f"{__name__}:_NoNodesBackend")
    text = PROFILE + 'backend = "nonodes"\nnodes = ["a", "b"]\n'
    with pytest.raises(ConfigError, match="cannot span nodes"):
        parse_config_text(text, None)
    controller = two_node_controller(state_dirs)
    spec = dataclasses.replace(controller._profiles["two"].to_launch_spec(), backend="nonodes")
    with pytest.raises(UsageError, match="cannot span nodes"):
        controller._node_specs([spec, spec], "127.0.0.1", 29555)
    with contextlib.suppress(KeyError):
        del registry._instances["nonodes"]


def specmon(*args: str, config: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "SPECMON_SIM_TIME_SCALE": "0.003"},
    )


def test_cli_launches_watches_and_stops_a_profile_over_two_config_hosts(
    state_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    """`specmon launch --profile P` (no HOST), `watch NODE --profile P`, `stop --profile P`:
    two hosts of specmon.toml, each with transport = "local" and its own state dir."""
    port = free_port()
    config = tmp_path / "specmon.toml"
    config.write_text(
        f"""
[hosts.node-a]
transport = "local"
state_dir = "{state_dirs[0]}"

[hosts.node-b]
transport = "local"
state_dir = "{state_dirs[1]}"

[profiles.two]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "moonshotai/Kimi-K2.5"
tp = 16
port = {port}
gpu_agent = "sim"
stop_grace_s = 5.0
nodes = ["node-a", "node-b"]
node_grace_s = 10

[profiles.two.env]
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "8"
"""
    )
    launched = specmon("launch", "--profile", "two", "--json", config=config)
    assert launched.returncode == 0, launched.stderr
    run_id = json.loads(launched.stdout)["run_id"]
    assert [len(node_runs(path)) for path in state_dirs] == [1, 1]
    whole = specmon("status", "--profile", "two", config=config)
    assert f"run {run_id} over 2 nodes is complete: node 0 node-a: running" in whole.stdout
    assert "incomplete" not in whole.stdout, whole.stdout
    watched = specmon(
        "watch",
        "node-b",
        "--profile",
        "two",
        "--duration",
        "4",
        "--json",
        "--log",
        config=config,
    )
    assert watched.returncode == 0, watched.stderr
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert any(e["kind"] == "node" and e["node_rank"] == 1 for e in events)
    assert any(e["kind"] == "log" and e["text"].startswith("[node1 node-b]") for e in events)
    assert any(e["kind"] == "run" and e["run_id"] == run_id for e in events)
    assert any(e["kind"] == "ready" for e in events)  # node 0's, replayed from its log
    wrong = specmon("watch", "node-c", "--profile", "two", config=config)
    assert wrong.returncode != 0 and "not a node of profile" in wrong.stderr
    stopped = specmon("stop", "node-a", "--profile", "two", config=config)
    assert stopped.returncode == 0, stopped.stderr
    pgids = [pgid for path in state_dirs for pgid in run_pgids(path)]
    assert len(pgids) == 2 and not any(group_alive(p) for p in pgids)
    assert port_free(port)


@pytest.fixture
def sshd_server(tmp_path: Path) -> Iterator[SshdServer]:
    server = start_sshd(tmp_path / "sshd")
    try:
        yield server
    finally:
        server.drop_connections()
        stop_sshd(server.proc)


async def test_two_node_server_over_two_ssh_aliases(
    state_dirs: tuple[Path, Path], tmp_path: Path, sshd_server: SshdServer
) -> None:
    """Two hosts of specmon.toml whose addresses are ssh config aliases of the test sshd:
    node 0's rendezvous address is the one ssh reached it at (127.0.0.1)."""
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(
        "".join(
            f"Host ssh-{name}\n  HostName 127.0.0.1\n  Port {sshd_server.port}\n"
            f"  User {sshd_server.user}\n  IdentityFile {sshd_server.client_key}\n"
            for name in ("node-a", "node-b")
        )
    )
    port = free_port()
    text = "".join(
        f'[hosts.{name}]\naddress = "ssh-{name}"\nknown_hosts = "{sshd_server.known_hosts}"\n'
        f'python = "{sys.executable}"\nstate_dir = "{path}"\n\n'
        for name, path in zip(("node-a", "node-b"), state_dirs, strict=True)
    )
    text += f"""
[profiles.two]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "moonshotai/Kimi-K2.5"
tp = 16
port = {port}
gpu_agent = "sim"
stop_grace_s = 5.0
nodes = ["node-a", "node-b"]
node_grace_s = 1

[profiles.two.env]
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "8"
"""
    config = parse_config_text(text, None)
    controller = open_nodes(
        config.profiles["two"],
        config,
        # Each node's state dir is its host's (options keep the default, so the config's win).
        options=hosts.test_options(Path(SessionOptions().state_dir)),
        ssh_config=(str(ssh_config),),
    )
    store = controller.bus.store
    await controller.start()
    try:
        await controller.launch("two")
        await until(lambda: store.run_state == "ready", "the two-node server to be ready")
        argv = node_runs(state_dirs[1])[0]["argv"]
        assert argv[argv.index("--dist-init-addr") + 1].startswith("127.0.0.1:")
        assert any(line.text.startswith("[node1 ") for line in store.log)
        base = await controller.http_base_url()
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            assert (await client.get(f"{base}/health")).status_code == 200
        await controller.stop()
        pgids = [pgid for path in state_dirs for pgid in run_pgids(path)]
        assert len(pgids) == 2 and not any(group_alive(p) for p in pgids)

        # Relaunched, then the hosts become unreachable past node_grace_s: the run fails.
        await controller.launch("two")
        await until(lambda: store.run_state == "ready", "the relaunched server to be ready")
        await asyncio.sleep(1.5)  # a stopped run's lost link fails nothing; a live one's does
        os.kill(sshd_server.proc.pid, signal.SIGSTOP)  # no new connection gets an answer
        try:
            sshd_server.drop_connections()  # and the open ones die
            await until(lambda: store.failure is not None, "the run reported failed")
        finally:
            os.kill(sshd_server.proc.pid, signal.SIGCONT)
        assert "unreachable for more than 1s" in store.failure.root_cause[0]
        assert store.failure.root_cause[0].startswith("node 0 (ssh-node-a)")
    finally:
        await controller.close()


@pytest.mark.parametrize(
    ("rank", "text"),
    [
        (
            0,
            "torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. "
            "8/16 clients joined.",
        ),
        (
            1,
            "torch.distributed.DistNetworkError: The client socket has timed out after 1000ms "
            "while trying to connect to (127.0.0.1, {port}).",
        ),
    ],
)
def test_a_simulated_node_whose_peer_never_comes_fails_as_torch_does(
    tmp_path: Path, rank: int, text: str
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "SPECMON_SIM_TIME_SCALE": "0.001",
        "SPECMON_SIM_DIST_TIMEOUT": "1",
        "SPECMON_SIM_GPU_STATE": str(tmp_path / "gpus.json"),
    }
    argv = ["--model-path", "m", "--tp", "16", "--nnodes", "2", "--node-rank", str(rank)]
    argv += ["--dist-init-addr", f"127.0.0.1:{port}", "--port", str(free_port())]
    done = subprocess.run(
        [sys.executable, "-m", "specmon.sim", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert done.returncode == -signal.SIGKILL  # SGLang's kill_process_tree
    lines = done.stderr.splitlines()
    own = f" TP{8 * rank + 7}] " + text.format(port=port)
    assert any(line.endswith(own) for line in lines), lines[-4:]
    assert f" TP{8 * (1 - rank)}]" not in done.stderr  # each node logs its own ranks only
    assert "Received sigquit from a child process" in lines[-1]


def test_the_console_groups_gpus_by_node_and_shows_a_lagging_node() -> None:
    from specmon.tui.widgets.gpus import render_gpu_rows
    from specmon.tui.widgets.loading import node_line

    store = StateStore()
    store.apply(
        NodeStatus(node_rank=0, host="gpu-a", connection="connected", state="ready", gpus=(0, 1))
    )
    store.apply(
        NodeStatus(
            node_rank=1,
            host="gpu-b",
            connection="connected",
            state="loading",
            phase="target weights",
            shards_done=5,
            shards_total=8,
            gpus=(2, 3),
        )
    )
    store.apply(
        GpuSample(
            wall=time.time(),
            gpus=tuple(
                GpuReading(index=i, util_gpu=10.0, mem_used_mb=1000.0, mem_total_mb=143771.0)
                for i in range(4)
            ),
        )
    )
    rows = render_gpu_rows(store, 80).plain.splitlines()
    assert rows[0] == "node 0 gpu-a" and rows[3] == "node 1 gpu-b"
    assert [row.split()[0] for row in (rows[1], rows[2], rows[4], rows[5])] == ["0", "1", "2", "3"]
    line = node_line(store).plain
    assert "node0 gpu-a ready" in line and "node1 gpu-b 5/8 target weights" in line
    store.apply(NodeStatus(node_rank=1, host="gpu-b", connection="reconnecting"))
    assert "node1 gpu-b reconnecting" in node_line(store).plain


def test_a_launch_killed_between_nodes_leaves_a_node_marked_part_of_an_incomplete_run(
    state_dirs: tuple[Path, Path], tmp_path: Path, sshd_server: SshdServer
) -> None:
    """`specmon launch --profile P` SIGKILLed after node 0 was launched and before node 1 was:
    node 0 runs alone. Before, plain `status node-a` showed it as `running`; now it says it
    is a part of an incomplete 2-node run, and `status --profile P` shows the whole.
    node-b is reached over the test sshd with a python that holds its `launch` call, so the
    kill lands between the nodes every time."""
    held = tmp_path / "python-holding-launch"
    held.write_text(
        f'#!/bin/sh\ncase " $* " in *" launch "*) sleep 120 ;; esac\nexec {sys.executable} "$@"\n'
    )
    held.chmod(0o755)
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(
        f"Host ssh-node-b\n  HostName 127.0.0.1\n  Port {sshd_server.port}\n"
        f"  User {sshd_server.user}\n  IdentityFile {sshd_server.client_key}\n"
    )
    config = tmp_path / "specmon.toml"
    config.write_text(
        f"""
[hosts.node-a]
transport = "local"
state_dir = "{state_dirs[0]}"

[hosts.node-b]
address = "ssh-node-b"
known_hosts = "{sshd_server.known_hosts}"
python = "{held}"
state_dir = "{state_dirs[1]}"

[profiles.two]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "moonshotai/Kimi-K2.5"
tp = 16
port = {free_port()}
gpu_agent = "none"
stop_grace_s = 5.0
nodes = ["node-a", "node-b"]

[profiles.two.env]
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "8"
SPECMON_SIM_PEER_LOST_S = "600"
"""
    )
    ssh = ("--ssh-config", str(ssh_config))
    launcher = subprocess.Popen(
        [sys.executable, "-m", "specmon", "--config", str(config), "launch", "-p", "two", *ssh],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            holding = [
                cmd
                for _, cmd in hosts.processes_mentioning(str(state_dirs[1]))
                if " launch " in f" {cmd} " and "sleep" not in cmd
            ]
            if node_runs(state_dirs[0]) and holding:
                break
            assert launcher.poll() is None, "the launch ended before node 1's launch"
            time.sleep(0.05)
        else:
            raise AssertionError("node 1's launch never started")
        launcher.kill()
    finally:
        if launcher.poll() is None:
            launcher.kill()
        launcher.wait(10)
    assert [len(node_runs(path)) for path in state_dirs] == [1, 0]
    run_id = node_runs(state_dirs[0])[0]["run_id"]

    plain = specmon("status", "node-a", *ssh, config=config)
    assert plain.returncode == 0, plain.stderr
    head = next(line for line in plain.stdout.splitlines() if line.startswith(run_id))
    assert "running as node 0 of an incomplete 2-node run" in head, plain.stdout
    as_json = specmon("status", "node-a", "--json", *ssh, config=config)
    run = json.loads(as_json.stdout)["runs"][0]
    assert run["alive"] and run["multinode_incomplete"] and run["nnodes"] == 2, run

    whole = specmon("status", "--profile", "two", *ssh, config=config)
    assert whole.returncode == 0, whole.stderr
    assert (
        f"run {run_id} over 2 nodes is incomplete: node 0 node-a: running, "
        "node 1 node-b: missing" in whole.stdout
    ), whole.stdout


async def test_a_draft_that_cannot_work_is_refused_before_any_node_starts(
    state_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    """The pre-launch wiring check of a one-host launch holds for a multi-node one: every
    node's files are read (each node has its own disk) before anything is stopped or started."""
    target, draft = tmp_path / "Kimi-K2.5", tmp_path / "draft"
    for path, config in (
        (target, {"hidden_size": 7168, "num_hidden_layers": 61}),
        (draft, {"hidden_size": 7168, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 61]}}),
    ):  # fmt: skip
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
    controller = two_node_controller(state_dirs)
    profile = dataclasses.replace(
        sim_profiles()["fast"], tp=16, nodes=("node-a", "node-b"), probe=False,
        model_path=str(target), draft_model_path=str(draft),
    )  # fmt: skip
    controller.add_profile("two", profile)
    await controller.start()
    try:
        with pytest.raises(SpecmonError, match=r"\[61\].*61 layers"):
            await controller.launch("two")
        for node in controller.nodes:  # nothing launched on either node
            assert await node.session.status() == []
    finally:
        await controller.close()
