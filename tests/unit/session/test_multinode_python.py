"""A relaunch of a multi-node server from the console's form hands the controller one ready
spec, built with node 0's python; every node ran that path, so a node whose interpreter lives
elsewhere could not start. Each node now gets its own, as a launch by profile gives it."""

from __future__ import annotations

from pathlib import Path

from specmon.launch.config import BUILTIN_CONFIG_TOML, parse_config_text
from specmon.session.host import HostSession
from specmon.session.multinode import MultiNodeController
from specmon.session.options import SessionOptions
from specmon.session.ssh import SshTarget, SshTransport


def node(python: str, tmp_path: Path, name: str) -> HostSession:
    transport = SshTransport(SshTarget(name, known_hosts=str(tmp_path / "known_hosts")))
    return HostSession(transport, options=SessionOptions(python=python, state_dir=str(tmp_path)))


async def test_each_node_runs_its_own_python_where_the_spec_names_node_0s(tmp_path: Path):
    sessions = [node("/opt/a/bin/python", tmp_path, "gpu-a"), node("/srv/b/py3", tmp_path, "gpu-b")]
    controller = MultiNodeController(sessions)
    launched: list = []

    async def capture(specs, profile):
        launched.extend(specs)
        return "run-1"

    controller._launch = capture  # type: ignore[method-assign]
    profile = parse_config_text(BUILTIN_CONFIG_TOML, None, environ={}).profiles["demo"]
    spec = profile.to_launch_spec(python=controller.host_python)
    assert spec.command[0] == "/opt/a/bin/python"
    await controller.launch_spec(spec, profile="demo")
    assert [s.command[0] for s in launched] == ["/opt/a/bin/python", "/srv/b/py3"]
    assert launched[0] is spec and launched[1].command[1:] == spec.command[1:]
    assert launched[1].args == spec.args and launched[1].env == spec.env
