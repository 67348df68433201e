"""The remote helper's launch request, built without a host: what the run record keeps (owner,
backend, spec), the probe's files and PYTHONPATH, the simulated GPUs, the demo's tether."""

from __future__ import annotations

import base64
import dataclasses
import os

from specmon.backends import DEFAULT_BACKEND, get_backend
from specmon.launch.config import Profile
from specmon.launch.spec import LaunchSpec
from specmon.session.launch_request import launch_payload, port_of


def profile(**changes: object) -> Profile:
    return dataclasses.replace(Profile("p", "/m", command=("python3", "-m", "x")), **changes)


def test_the_run_record_keeps_the_backend_and_the_exact_spec():
    chosen = profile(port=31000)
    spec = chosen.to_launch_spec()
    payload = launch_payload(spec, profile="p", chosen=chosen, owner="me@box")
    assert payload["meta"]["backend"] == DEFAULT_BACKEND
    assert LaunchSpec.from_json(payload["meta"]["spec"]) == spec
    assert payload["meta"]["owner"] == "me@box" and payload["port"] == 31000
    assert payload["argv"] == list(spec.argv) and payload["files"] == {}
    assert "tether" not in payload and payload["extra_env"] == {}


def test_a_probe_profile_ships_the_backends_probe_files_first_on_pythonpath():
    chosen = profile(probe=True)
    payload = launch_payload(chosen.to_launch_spec(), profile="p", chosen=chosen, owner="me")
    targets = get_backend(DEFAULT_BACKEND).probe_targets()
    assert targets is not None
    assert {name.removeprefix("probe/") for name in payload["files"]} == set(targets.files)
    for name, data in targets.files.items():
        assert base64.b64decode(payload["files"][f"probe/{name}"]) == data
    assert payload["prepend_path"] == {"PYTHONPATH": "{run_dir}/probe"}


def test_local_python_sim_gpus_and_the_tether():
    chosen = profile()
    payload = launch_payload(
        chosen.to_launch_spec(),
        profile="p",
        chosen=chosen,
        owner="me",
        local_python="/venv/bin/python",
        sim_gpu_state_path="/state/sim-gpus.json",
        tether_grace_s=5.0,
    )
    assert payload["argv"][0] == "/venv/bin/python"
    assert payload["extra_env"] == {"SPECMON_SIM_GPU_STATE": "/state/sim-gpus.json"}
    assert payload["tether"]["pid"] == os.getpid() and payload["tether"]["grace"] == 5.0
    assert payload["tether"]["ticks"] is not None


def test_the_port_comes_from_the_flag_then_the_profile_then_the_backend():
    chosen = profile(port=31000)
    assert port_of(chosen.to_launch_spec(flags={"port": "32000"}), chosen) == 32000
    assert port_of(chosen.to_launch_spec(), chosen) == 31000
    assert port_of(profile().to_launch_spec(), None) == get_backend(DEFAULT_BACKEND).default_port
