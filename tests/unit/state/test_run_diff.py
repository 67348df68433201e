"""Run fingerprints and their diff (issue 31 item 2): a config.json kept as bounded flat
fields, every difference between two run records, and the likely causes in order."""

from __future__ import annotations

import pytest

from specmon.backends.draft_info import FIELDS_MAX, config_fields, draft_info, run_fingerprint
from specmon.model.diagnosis import Change
from specmon.state.run_diff import RunFacts, diagnose, diff_runs, split_argv, unknown_parts

TARGET = {"hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 129280}
TRAINED = [2, 30, 58]
ARGV = (
    "python3", "-m", "sglang.launch_server", "--model-path", "/m/target",
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/m/draft",
    "--speculative-num-steps", "3", "--tp", "8",
)  # fmt: skip


def draft(layers: list[int] | None, **extra: object) -> dict:
    config: dict = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168, **extra}
    if layers is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": layers}
    return config


def fingerprint(draft_config: dict, backend: str = "sglang", template: str = "t" * 64) -> dict:
    models = {
        "draft": {"path": "/m/draft", "config": draft_config, "config_sha256": str(draft_config)},
        "target": {
            "path": "/m/target",
            "config": TARGET,
            "config_sha256": "T",
            "chat_template_sha256": template,
        },
    }
    return run_fingerprint(draft_info("r", backend, models), models, backend)


def facts(run_id: str, fp: dict | None, argv=ARGV, env=None, **kw: object) -> RunFacts:
    return RunFacts(run_id, "sglang", tuple(argv), env or {}, fp, **kw)


def test_config_fields_are_flat_and_bounded() -> None:
    fields = config_fields(
        {
            "a": {"b": {"c": 1}},
            "ids": [2, 30, 58],
            "big": list(range(1000)),
            "nested_list": [{"x": 1}],
            "text": "x" * 5000,
            "flag": True,
        }
    )
    assert fields["a.b.c"] == 1 and fields["ids"] == [2, 30, 58] and fields["flag"] is True
    for key in ("big", "nested_list", "text"):  # kept as a short hash, never as they are
        assert isinstance(fields[key], str) and fields[key].startswith("sha256:")
        assert len(fields[key]) < 40
    many = config_fields({f"k{i:04d}": i for i in range(FIELDS_MAX + 50)})
    assert len(many) == FIELDS_MAX + 1 and many["…truncated"] == 50


def test_fingerprint_holds_the_layers_in_effect_and_what_the_draft_is_fed() -> None:
    fp = fingerprint(draft(TRAINED))
    assert fp["aux_layer_ids"] == TRAINED and fp["aux_source"] == "checkpoint"
    assert fp["aux_captured"] == [3, 31, 59]  # SGLang shifts a checkpoint's ids by one
    assert fp["draft"]["fields"]["eagle_config.eagle_aux_hidden_state_layer_ids"] == TRAINED
    assert fp["target"]["fields"]["num_hidden_layers"] == 61
    assert fp["chat_template_sha256"] == "t" * 64
    default = fingerprint(draft(None))
    assert default["aux_layer_ids"] == TRAINED and default["aux_source"] == "default"
    assert default["aux_captured"] == TRAINED


def test_the_documented_bug_is_diagnosed_first_naming_the_field() -> None:
    good = facts("good", fingerprint(draft(TRAINED)), server_version="0.5.9")
    bad = facts("bad", fingerprint(draft([0, *TRAINED])), server_version="0.5.9")
    changes = diff_runs(good, bad)
    fields = {c.field for c in changes}
    assert "draft.config.eagle_config.eagle_aux_hidden_state_layer_ids" in fields
    assert "aux_layer_ids" in fields and "aux_layers_captured" in fields
    diagnoses = diagnose(changes)
    assert diagnoses[0].code == "aux_layers_changed"
    assert "[2, 30, 58] -> [0, 2, 30, 58]" in diagnoses[0].message
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in diagnoses[0].message
    assert diagnoses[0].to_dict()["changed"][0].keys() == {"field", "before", "after"}
    # the config's bytes changed too, but only the layer key: nothing else is reported
    assert [d.code for d in diagnoses] == ["aux_layers_changed"]


def test_same_ids_read_otherwise_is_a_wiring_change() -> None:
    """SGLang: a checkpoint naming [2, 30, 58] is wired one layer later than the default
    [2, 30, 58]: the ids are equal, what the draft is fed is not."""
    changes = diff_runs(
        facts("a", fingerprint(draft(None))), facts("b", fingerprint(draft(TRAINED)))
    )
    diagnoses = diagnose(changes)
    assert diagnoses[0].code == "aux_layers_changed"
    assert "[2, 30, 58] -> [3, 31, 59]" in diagnoses[0].message


def test_ids_moved_with_the_same_layers_in_effect_are_a_draft_change_only() -> None:
    """vLLM reads a top-level key: the same layers named there as the default gives are no
    wiring change, only a change of the draft's config."""
    a = fingerprint({"hidden_size": 7168}, backend="vllm")
    b = fingerprint({"hidden_size": 7168, "eagle_aux_hidden_state_layer_ids": TRAINED}, "vllm")
    codes = [d.code for d in diagnose(diff_runs(facts("a", a), facts("b", b)))]
    assert codes == ["draft_changed"]


def test_every_kind_of_difference_in_the_order_of_likely_cause() -> None:
    a = facts(
        "a",
        fingerprint(draft(TRAINED)),
        env={"NCCL_PROTO": "LL", "KEEP": "1"},
        server_version="0.5.9",
        sampling={"temperature": 0.0, "max_tokens": 256},
    )
    b_argv = [*ARGV[:-3], "4", "--tp", "8", "--disable-cuda-graph"]
    b_fp = fingerprint(draft(TRAINED, rope_theta=2.0), template="u" * 64)
    b_fp["target"]["revision"] = "abc123"
    b = facts(
        "b",
        b_fp,
        argv=b_argv,
        env={"NCCL_PROTO": "Simple", "KEEP": "1"},
        server_version="0.5.18",
        sampling={"temperature": 0.7, "max_tokens": 256},
    )
    changes = diff_runs(a, b)
    by_field = {c.field: c for c in changes}
    assert by_field["draft.config.rope_theta"] == Change("draft.config.rope_theta", None, 2.0)
    assert by_field["target.revision"].after == "abc123"
    assert by_field["flag --speculative-num-steps"] == Change(
        "flag --speculative-num-steps", "3", "4"
    )
    assert by_field["flag --disable-cuda-graph"] == Change("flag --disable-cuda-graph", None, True)
    assert by_field["env NCCL_PROTO"] == Change("env NCCL_PROTO", "LL", "Simple")
    assert "env KEEP" not in by_field and "flag --tp" not in by_field
    assert by_field["sampling.temperature"].after == 0.7
    assert by_field["server_version"].after == "0.5.18"
    assert [d.code for d in diagnose(changes)] == [
        "draft_changed",
        "target_changed",
        "chat_template_changed",
        "sampling_changed",
        "server_changed",
        "flags_changed",
        "env_changed",
    ]
    assert unknown_parts(a, b) == []


def test_where_it_listens_comes_last_as_no_cause() -> None:
    moved = facts("b", None, argv=[*ARGV, "--port", "30001", "--mem-fraction-static", "0.8"])
    codes = [
        d.code
        for d in diagnose(diff_runs(facts("a", None, argv=[*ARGV, "--port", "30000"]), moved))
    ]
    assert codes == ["flags_changed", "address_changed"]


def test_nothing_recorded_changed_says_so_and_what_was_not_compared() -> None:
    a = facts("a", fingerprint(draft(TRAINED)))
    assert diff_runs(a, a) == []
    assert [d.code for d in diagnose([])] == ["no_recorded_change"]
    old = facts("old", None)  # a record from before fingerprints: not a difference
    assert diff_runs(old, a) == []
    assert "draft and target configs" in unknown_parts(old, a)


@pytest.mark.parametrize(
    ("argv", "words", "flags"),
    [
        (["vllm", "serve", "/m", "--port", "8000"], ("vllm", "serve", "/m"), {"port": "8000"}),
        (["x", "--a=1", "--b", "--c", "-2"], ("x",), {"a": "1", "b": True, "c": "-2"}),
        ([], (), {}),
    ],
)
def test_split_argv(argv: list[str], words: tuple, flags: dict) -> None:
    assert split_argv(argv) == (words, flags)
