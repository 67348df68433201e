"""The request the remote helper's ``launch`` reads: the exact argv and env of a spec, the
port, the run record's meta (owner, backend, the spec itself), the timing probe's files, the
simulated GPUs' state file and the demo's tether. Pure, so it is tested without a host."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmon.backends.flag_grammar import AUTO_PORT
from specmon.model.secrets import redact_argv, redact_env

if TYPE_CHECKING:
    from specmon.launch.config import Profile
    from specmon.launch.spec import LaunchSpec

PROBE_FILE = "{run_dir}/probe.jsonl"  # the helper fills in the run dir
PROBE_DIR = "{run_dir}/probe"


def port_of(spec: LaunchSpec, chosen: Profile | None) -> int | str:
    """The port the server listens on: its flag, the profile's, else the backend's default;
    "auto" (AUTO_PORT) for the helper to choose one free on the host."""
    value: str | int | None = spec.flag("port")
    if value is None and chosen is not None:
        value = chosen.port
    if value == AUTO_PORT:
        return AUTO_PORT
    try:
        return int(value) if value is not None else spec.backend.default_port
    except ValueError:
        return spec.backend.default_port


def launch_payload(
    spec: LaunchSpec,
    *,
    profile: str | None,
    chosen: Profile | None,
    owner: str,
    local_python: str | None = None,
    sim_gpu_state_path: str | None = None,
    tether_grace_s: float | None = None,
    run_id: str | None = None,
    node: Mapping[str, Any] | None = None,
    replaces: tuple[str, ...] = (),
    client: str | None = None,
    replaces_foreign: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The helper's launch request. ``local_python`` replaces a bare python3/python command
    word (a local host runs the simulator in specmon's own interpreter); ``tether_grace_s``
    ties the run to this process (the demo's server must not outlive it, even killed).
    A node of a multi-node server gets its run's shared ``run_id`` and its ``node`` record
    (rank, nnodes, the nodes' labels), kept in the run's meta. ``replaces``: the runs this
    launch stopped to make room (their stop records then name this run); ``client``: the
    launching session's token, so it knows its own run among those that appear.
    ``replaces_foreign``: the server specmon did not launch that a take-over stopped for this
    run ({pid, argv, user}), kept in its meta. ``server_words``: what marks a process that
    holds the port as a server of a backend, so the helper's refusal names it as one."""
    argv = list(spec.argv)
    if local_python and argv and argv[0] in ("python3", "python"):
        argv[0] = local_python
    payload: dict[str, Any] = {
        "argv": argv,
        "env": spec.env_dict(),
        "record_env": redact_env(spec.env),  # what run.json keeps: secrets as ***
        "record_argv": list(redact_argv(argv)),  # likewise secret flag values
        "profile": profile,
        "port": port_of(spec, chosen),
        # The helper refuses the launch while anything listens there: what holds the port
        # would answer for the server. Not for a multi-node server's other nodes (no HTTP).
        "port_must_be_free": node is None or not node.get("rank"),
        "server_words": server_words(),
        "meta": {
            "owner": owner,
            "backend": spec.backend.name,
            "spec": spec.shown().to_json(),
            "replaces": list(replaces),
            "client": client,
        },
        "replaces": list(replaces),
        "run_id": run_id,
        "run_env": {"SPECMON_PROBE_FILE": PROBE_FILE},
        "extra_env": {},
        "prepend_path": {},
        "files": {},
    }
    if node is not None:
        payload["meta"]["node"] = dict(node)
    if replaces_foreign is not None:
        payload["meta"]["replaces_foreign"] = dict(replaces_foreign)
    if tether_grace_s is not None:
        payload["tether"] = {
            "pid": os.getpid(),
            "ticks": start_ticks(os.getpid()),
            "grace": tether_grace_s,
            "owner": owner,
        }
    if sim_gpu_state_path is not None:
        payload["extra_env"]["SPECMON_SIM_GPU_STATE"] = sim_gpu_state_path
    targets = spec.backend.probe_targets() if chosen and chosen.probe else None
    if targets is not None and targets.files:
        payload["files"] = {
            f"probe/{name}": base64.b64encode(data).decode() for name, data in targets.files.items()
        }
        if targets.pythonpath:
            payload["prepend_path"]["PYTHONPATH"] = PROBE_DIR
    return payload


def start_ticks(pid: int) -> int | None:
    """This machine's /proc start time of ``pid`` (what the helper compares against)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def server_words() -> dict[str, str]:
    """{word: backend} of every backend's process words and simulator module: a process
    holding the port whose command line has one is named as that backend's server."""
    from specmon.backends import all_backends

    return {
        word: backend.name
        for backend in all_backends()
        for word in (*backend.process_words, backend.sim_module)
        if word
    }
