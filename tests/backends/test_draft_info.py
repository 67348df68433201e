"""The draft's wiring (issue 31 item 1): which flags name the draft and the target, the
``DraftInfo`` event built from the helper's ``model-configs`` reply, the wirings refused
before launch, and the event kept in the store (latest per run)."""

from __future__ import annotations

import json

import pytest

from specmon.backends import get_backend
from specmon.backends.draft_info import config_request, draft_info, wiring_line
from specmon.model.events import DraftInfo, RunInfo
from specmon.state.store import StateStore

EAGLE3 = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 4096,
    "target_hidden_size": 7168,
    "vocab_size": 129280,
    "draft_vocab_size": 32000,
    "torch_dtype": "bfloat16",
}
TARGET = {"hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 129280, "dtype": "bf16"}


def reply(draft: dict | None, target: dict | None = TARGET, **extra: object) -> dict:
    def entry(path: str, config: dict | None) -> dict:
        return {"path": path, "config": config, "config_sha256": "c" * 64, "error": None}

    out = {"draft": entry("/m/draft", draft), "target": entry("/m/target", target)}
    out["target"]["chat_template_sha256"] = "t" * 64
    out.update(extra)
    return out


@pytest.mark.parametrize(
    ("backend", "argv"),
    [
        (
            "sglang",
            ["python", "-m", "sglang.launch_server", "--model-path", "/m/target",
             "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/m/draft"],
        ),
        (
            "vllm",
            ["vllm", "serve", "/m/target", "--speculative-config",
             json.dumps({"method": "eagle3", "model": "/m/draft", "num_speculative_tokens": 3})],
        ),
    ],
)  # fmt: skip
def test_each_backend_names_its_target_and_draft(backend: str, argv: list[str]) -> None:
    assert get_backend(backend).model_paths(argv) == ("/m/target", "/m/draft")
    without = argv[: argv.index("/m/target") + 1]
    assert get_backend(backend).model_paths(without) == ("/m/target", None)


def test_no_request_without_a_draft_and_the_cache_variables_only() -> None:
    assert config_request("/m/target", None, {}) is None
    request = config_request("org/t", "org/d", {"HF_HOME": "/hf", "PATH": "/bin"})
    assert request == {"models": {"draft": "org/d", "target": "org/t"}, "env": {"HF_HOME": "/hf"}}


def test_checkpoint_layers_and_a_projecting_draft() -> None:
    draft = {**EAGLE3, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    info = draft_info("r1", "sglang", reply(draft))
    assert info.aux_layer_ids == (2, 30, 58) and info.aux_source == "checkpoint"
    assert info.target_layers == 61 and info.problems == () and info.errors == ()
    assert (info.draft_hidden_size, info.draft_fc_hidden_size, info.target_hidden_size) == (
        4096,
        7168,
        7168,
    )  # EAGLE-3 projects the target's hidden states: 4096 against 7168 works
    assert info.draft_mapped_vocab_size == 32000 and info.target_vocab_size == 129280
    assert (info.draft_dtype, info.target_dtype) == ("bfloat16", "bf16")
    assert info.chat_template_sha256 == "t" * 64
    line = wiring_line(info)
    assert line.startswith("draft LlamaForCausalLMEagle3 h4096/h7168 (reads h7168) · aux [2,")
    assert "(checkpoint) · 61 layers" in line
    out = json.loads(info.to_json())
    assert out["kind"] == "draft_info" and out["aux_layer_ids"] == [2, 30, 58]


def test_the_servers_default_when_the_checkpoint_names_none() -> None:
    info = draft_info("r1", "vllm", reply(EAGLE3))
    assert info.aux_layer_ids == (2, 30, 58) and info.aux_source == "default"
    assert info.aux_rule


def test_wirings_that_cannot_work() -> None:
    draft = {**EAGLE3, "eagle_aux_hidden_state_layer_ids": [2, 30, 61]}
    del draft["target_hidden_size"]
    info = draft_info("r1", "vllm", reply(draft))
    assert len(info.problems) == 2
    assert "[61]" in info.problems[0] and "61 layers" in info.problems[0]
    assert "hidden size 4096" in info.problems[1] and "7168" in info.problems[1]


def test_a_file_that_could_not_be_read_is_an_error_not_a_problem() -> None:
    models = reply(None)
    models["draft"]["error"] = "config.json is not JSON: Expecting value"
    info = draft_info("r1", "sglang", models)
    assert info.errors == ("draft: config.json is not JSON: Expecting value",)
    assert info.problems == () and info.aux_layer_ids == ()


def test_the_store_keeps_the_runs_latest() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="a"))
    store.apply(DraftInfo(run_id="a", target_layers=61))
    assert store.draft_info is not None and store.draft_info.target_layers == 61
    store.apply(RunInfo(run_id="b"))
    assert store.draft_info is None  # a new run forgets the old one's wiring
    store.apply(DraftInfo(run_id="a", target_layers=61))  # the replaced run's, late
    assert store.draft_info is None
