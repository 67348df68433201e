"""`specmon diff` end to end over the real test sshd (issue 31 item 2): the SGLang simulator
launched by `specmon launch`, then relaunched after the draft's config.json gained the
embedding output ([2, 30, 58] -> [0, 2, 30, 58]) and the profile's NCCL_PROTO changed. Each
run's record on the host keeps its fingerprint; `specmon diff HOST latest~1 latest` names both
fields, the auxiliary layers first, in text and JSON; `specmon bench` of each run records its
sampling and fingerprint in the ledger, from which `diff` compares the sampling too; an unknown
run is one line."""

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
from support.sshd import SshdServer

from specmon.experiments.ledger import Ledger

AUX_KEY = "eagle_aux_hidden_state_layer_ids"
TRAINED = [2, 30, 58]  # SGLang's default for a 61-layer target: what the draft was trained on
TARGET = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
          "num_hidden_layers": 61, "vocab_size": 163840}  # fmt: skip

PROFILE = """\
[profiles.sim]
command = ["{{python}}", "-m", "specmon.sim"]
model_path = "{target}"
draft_model_path = "{draft}"
tp = 1
port = {server_port}
extra_args = ["--enable-metrics"]
gpu_agent = "none"
stop_grace_s = 5.0

[profiles.sim.speculative]
algorithm = "EAGLE3"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4

[profiles.sim.env]
SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = "1"
SPECMON_SIM_TIME_SCALE = "0.003"
SPECMON_SIM_SHARDS = "2"
NCCL_PROTO = "{nccl_proto}"
"""


class Box:
    """A config naming the test sshd as `testbox`, a target and a draft checkpoint on disk."""

    def __init__(self, sshd: SshdServer, root: Path) -> None:
        self.sshd, self.root = sshd, root
        self.state = root / "state"
        self.config = root / "specmon.toml"
        self.target = root / "models" / "Kimi-K2.5"  # the simulator sizes its target by name
        self.draft = root / "models" / "draft"
        for path in (self.target, self.draft):
            path.mkdir(parents=True)
        (self.target / "config.json").write_text(json.dumps(TARGET))
        self.server_port = free_port()

    def set_up(self, aux_ids: list[int], nccl_proto: str) -> None:
        draft = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168,
                 "eagle_config": {AUX_KEY: aux_ids, "use_aux_hidden_state": True}}  # fmt: skip
        (self.draft / "config.json").write_text(json.dumps(draft))
        profile = PROFILE.format(
            target=self.target,
            draft=self.draft,
            server_port=self.server_port,
            nccl_proto=nccl_proto,
        )
        self.config.write_text(self.sshd.host_toml(self.state) + "\n\n" + profile)

    def specmon(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "specmon", "--config", str(self.config), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(REPO), "SPECMON_DATA_DIR": str(self.root)},
            check=False,
        )

    def bench(self, max_tokens: int) -> None:
        done = self.specmon(
            "bench", "testbox", "--requests", "2", "--warmup", "0", "--max-tokens",
            str(max_tokens), "--json", timeout=90,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    def launch(self) -> str:
        done = self.specmon("launch", "testbox", "-p", "sim", "--wait", "ready", "--json")
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout.splitlines()[0])["run_id"])  # then its events


@pytest.fixture
def box(sshd: SshdServer, tmp_path: Path) -> Iterator[Box]:
    made = Box(sshd, tmp_path)
    try:
        yield made
    finally:
        kill_everything_under(made.state)


def test_diff_names_the_draft_config_field_and_the_env_var(box: Box) -> None:
    box.set_up(TRAINED, "Simple")
    good = box.launch()
    box.bench(32)
    box.set_up([0, *TRAINED], "LL")  # the "fix", and a tuning change on the way
    bad = box.launch()
    assert bad != good

    text = box.specmon("diff", "testbox", "latest~1", "latest")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"run {good} (sim) -> run {bad} (sim): "), lines
    assert lines[1].startswith("  aux_layers_changed: auxiliary layers [2, 30, 58] -> [0, 2, 30")
    field = f"draft.config.eagle_config.{AUX_KEY}"
    aux_line = f"      {field}: [2, 30, 58] -> [0, 2, 30, 58]"
    assert aux_line in lines and "      env NCCL_PROTO: Simple -> LL" in lines
    assert lines.index("      env NCCL_PROTO: Simple -> LL") > lines.index(aux_line)
    assert lines[-1].startswith("  not compared: sampling"), lines  # one run benchmarked

    box.bench(48)
    by_prefix = box.specmon("diff", "testbox", good, bad[: len(bad) - 1], "--json")
    assert by_prefix.returncode == 0, by_prefix.stderr
    report = json.loads(by_prefix.stdout)
    assert report["runs"] == [good, bad]
    changes = {c["field"]: c for c in report["changes"]}
    assert changes[field] == {"field": field, "before": TRAINED, "after": [0, *TRAINED]}
    assert changes["env NCCL_PROTO"] == {"field": "env NCCL_PROTO", "before": "Simple",
                                         "after": "LL"}  # fmt: skip
    tokens = changes["sampling.max_new_tokens"]
    assert (tokens["before"], tokens["after"]) == (32, 48)
    codes = [d["code"] for d in report["diagnoses"]]
    assert codes[0] == "aux_layers_changed"
    assert {"sampling_changed", "env_changed"} <= set(codes)
    assert report["not_compared"] == []
    with Ledger(box.root / "ledger.sqlite3") as ledger:
        recorded = {b["run_id"]: b for b in ledger.list_benchmarks()}
    assert recorded[good]["fingerprint"]["aux_layer_ids"] == TRAINED
    assert recorded[bad]["fingerprint"]["aux_layer_ids"] == [0, *TRAINED]
    assert recorded[bad]["sampling"] == {"temperature": 0.0, "max_new_tokens": 48,
                                         "ignore_eos": True}  # fmt: skip

    unknown = box.specmon("diff", "testbox", "no-such-run", "latest")
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and bad in unknown.stderr, unknown.stderr
