"""The draft's wiring end to end against the simulator's vLLM personality, local transport:
a launch whose draft directory holds a config.json gives a ``draft_info`` event in `watch
--json` (read on the host by the helper; the simulator itself ignores the file), and a draft
whose auxiliary layers lie past the target's layers is refused before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosts import free_port, kill_everything_under
from support.paths import REPO

PROFILE = """
[profiles.{name}]
backend = "vllm"
command = ["{{python}}", "-m", "specmon.sim.vllm", "serve"]
model_path = "{target}"
draft_model_path = "{draft}"
host_bind = "127.0.0.1"
port = {port}
gpu_agent = "none"
stop_grace_s = 10.0
extra_args = ["--served-model-name", "tiny", "--max-model-len", "1024"]

[profiles.{name}.speculative]
method = "eagle3"
num_speculative_tokens = 3

[profiles.{name}.env]
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "2"
"""

TARGET_DIR = "Llama-3.1-8B-Instruct"  # the simulator sizes its weights by the model's name
TARGET = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32}
DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 4096,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
    "torch_dtype": "bfloat16",
}


class Box:
    def __init__(self, tmp_path: Path) -> None:
        self.state = tmp_path / "state"
        self.config = tmp_path / "specmon.toml"
        models = tmp_path / "models"
        for name, config in (
            (TARGET_DIR, TARGET),
            ("draft", DRAFT),
            ("bad-draft", {**DRAFT, "eagle_aux_hidden_state_layer_ids": [2, 16, 40]}),
        ):
            (models / name).mkdir(parents=True)
            (models / name / "config.json").write_text(json.dumps(config))
        (models / TARGET_DIR / "chat_template.jinja").write_text("{{ messages }}")
        self.config.write_text(
            "".join(
                PROFILE.format(
                    name=name, target=models / TARGET_DIR, draft=models / draft, port=free_port()
                )
                for name, draft in (("good", "draft"), ("bad", "bad-draft"))
            )
        )

    def run(self, command: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "specmon", "--config", str(self.config), command, "local"]
        argv += ["--state-dir", str(self.state), *args]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
        )


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    made = Box(tmp_path)
    try:
        yield made
    finally:
        kill_everything_under(made.state)


def test_watch_json_carries_the_drafts_wiring_and_a_bad_one_is_refused(box: Box) -> None:
    refused = box.run("launch", "-p", "bad", "--wait", "ready", "--json")
    assert refused.returncode != 0
    assert "[40]" in refused.stderr and "32 layers" in refused.stderr, refused.stderr
    assert not (box.state / "runs").exists() or not any((box.state / "runs").iterdir())

    launched = box.run("launch", "-p", "good", "--wait", "ready", "--json")
    assert launched.returncode == 0, launched.stderr
    watched = box.run("watch", "--json", "--duration", "3", timeout=90)
    assert watched.returncode == 0, watched.stderr
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    infos = [e for e in events if e["kind"] == "draft_info"]
    assert infos, sorted({e["kind"] for e in events})
    info = infos[-1]
    assert info["draft_architecture"] == "LlamaForCausalLMEagle3"
    assert (info["draft_hidden_size"], info["target_hidden_size"]) == (4096, 4096)
    assert info["aux_layer_ids"] == [2, 16, 29] and info["aux_source"] == "default"
    assert info["target_layers"] == 32 and info["draft_mapped_vocab_size"] == 32000
    assert len(info["draft_config_sha256"]) == 64 and len(info["chat_template_sha256"]) == 64
    assert info["problems"] == [] and info["errors"] == []
    status = box.run("status", "--json")
    assert status.returncode == 0, status.stderr
    (live,) = [r for r in json.loads(status.stdout)["runs"] if r["alive"]]
    assert live["draft_info"]["aux_layer_ids"] == [2, 16, 29]
    stopped = box.run("stop")
    assert stopped.returncode == 0, stopped.stderr
