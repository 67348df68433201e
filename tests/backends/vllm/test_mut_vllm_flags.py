"""vLLM's launch rules, each with its exact subject and message, at and past every bound, and
the speculative settings folded into one ``--speculative-config``: a rule that quietly stops
firing lets a launch through that vLLM refuses minutes later (docs/testing.md, "Mutation
testing", found these holes)."""

from __future__ import annotations

import pytest

from specmon.backends.vllm.flags import (
    flag_kind,
    read_spec_config,
    setting_flags,
    setting_value,
    spec_config_json,
    token_tree,
    vllm_launch_problems,
)

SPEC = "--speculative-config"
METHODS = (
    "eagle3, eagle, mtp, deepseek_mtp, qwen3_next_mtp, ngram, ngram_gpu, draft_model, suffix, "
    "medusa, mlp_speculator, dflash, dspark, custom_class, extract_hidden_states"
)


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["--tensor-parallel-size", "2", "--tensor-parallel-size", "4"],
            {},
            [("--tensor-parallel-size", "given more than once; give it once")],
        ),
        (
            ["--use-v2-block-manager"],
            {},
            [
                (
                    "--use-v2-block-manager",
                    "was removed from vLLM with the V0 engine; use nothing (removed with V0); "
                    "leave it out",
                )
            ],
        ),
        (
            ["--enforce-eager=yes"],
            {},
            [
                (
                    "--enforce-eager",
                    "is a switch and takes no value (got 'yes'); give it bare, or leave it out "
                    "to turn it off",
                )
            ],
        ),
        (["--port"], {}, [("--port", "needs a value")]),
        (["--tensor-parallel-size", "64", "--port", "65535"], {}, []),
        (["--tensor-parallel-size", "1", "--port", "1"], {}, []),
        (
            ["--tensor-parallel-size", "65", "--port", "0"],
            {},
            [
                ("--tensor-parallel-size", "'65' is not a whole number from 1 to 64"),
                ("--port", "'0' is not a whole number from 1 to 65535"),
            ],
        ),
        (
            ["--tensor-parallel-size", "0"],
            {},
            [("--tensor-parallel-size", "'0' is not a whole number from 1 to 64")],
        ),
        (
            ["--tensor-parallel-size", "two"],
            {},
            [("--tensor-parallel-size", "'two' is not a whole number from 1 to 64")],
        ),
        (["--port", "auto"], {}, []),
        (["--gpu-memory-utilization", "1"], {}, []),
        (
            ["--gpu-memory-utilization", "0"],
            {},
            [
                (
                    "--gpu-memory-utilization",
                    "'0' is not a fraction greater than 0 and at most 1 (e.g. 0.9)",
                )
            ],
        ),
        (
            ["--gpu-memory-utilization", "1.01"],
            {},
            [
                (
                    "--gpu-memory-utilization",
                    "'1.01' is not a fraction greater than 0 and at most 1 (e.g. 0.9)",
                )
            ],
        ),
        (
            ["--gpu-memory-utilization", "x"],
            {},
            [
                (
                    "--gpu-memory-utilization",
                    "'x' is not a fraction greater than 0 and at most 1 (e.g. 0.9)",
                )
            ],
        ),
        (
            [SPEC, '{"method":"eagle3","model":"/d","num_speculative_tokens":3}'],
            {},
            [],
        ),
        (
            [
                SPEC,
                '{"method":"eagle3","model":"/d","num_speculative_tokens":3}',
                "--spec-tokens",
                "3",
            ],
            {},
            [
                (
                    "--spec-tokens",
                    'sets "num_speculative_tokens", which --speculative-config also sets; vLLM '
                    "refuses both: give it in one place",
                )
            ],
        ),
        (["--spec-method", "ngram", "--spec-tokens", "3"], {}, []),
        (
            ["--spec-method", "ngram", "--spec-tokens", "0"],
            {},
            [("num_speculative_tokens", "0 is not a positive whole number")],
        ),
        (
            ["--spec-method", "ngram", "--spec-tokens", "x"],
            {},
            [("num_speculative_tokens", "'x' is not a positive whole number")],
        ),
        (
            ["--spec-tokens", "3"],
            {},
            [
                (
                    "method",
                    'is missing: vLLM needs "method" or a draft "model" in --speculative-config '
                    "(num_speculative_tokens was provided but without speculative model)",
                )
            ],
        ),
        (["--spec-tokens"], {}, [("--spec-tokens", "needs a value")]),
        (
            ["--spec-method", "eagle3"],
            {},
            [
                (
                    "draft_model",
                    'method eagle3 reads a draft model: set "model" in --speculative-config',
                )
            ],
        ),
        (
            [SPEC, '{"method":"egle3"}'],
            {},
            [
                (
                    "method",
                    f"'egle3' is not a vLLM speculative method; one of {METHODS}; "
                    "did you mean 'eagle3'?",
                )
            ],
        ),
        (
            [SPEC, '{"method":7}'],
            {},
            [("method", f"'7' is not a vLLM speculative method; one of {METHODS}")],
        ),
        (
            [
                SPEC,
                '{"method":"foo_mtp","num_speculative_tokens":0,"prompt_lookup_max":true,'
                '"prompt_lookup_min":0}',
            ],
            {},
            [
                ("num_speculative_tokens", "0 is not a positive whole number"),
                ("prompt_lookup_max", "True is not a positive whole number"),
                ("prompt_lookup_min", "0 is not a positive whole number"),
            ],
        ),
        (
            [SPEC, '{"method":"ngram","prompt_lookup_max":1,"prompt_lookup_min":1}'],
            {},
            [],
        ),
        (
            [
                SPEC,
                '{"method":"eagle3","model":"/d","draft_tensor_parallel_size":2}',
                "--tensor-parallel-size",
                "4",
            ],
            {},
            [
                (
                    "draft_tensor_parallel_size",
                    "speculative_draft_tensor_parallel_size=2 cannot be other value than 1 or "
                    "target model tensor_parallel_size=4",
                )
            ],
        ),
        (
            [
                SPEC,
                '{"method":"eagle3","model":"/d","draft_tensor_parallel_size":4}',
                "--tensor-parallel-size",
                "4",
            ],
            {},
            [],
        ),
        (
            [
                SPEC,
                '{"method":"eagle3","model":"/d","draft_tensor_parallel_size":1}',
                "--tensor-parallel-size",
                "4",
            ],
            {},
            [],
        ),
        (
            [SPEC, '{"method":"eagle3","model":"/d","draft_tensor_parallel_size":2}'],
            {},
            [
                (
                    "draft_tensor_parallel_size",
                    "speculative_draft_tensor_parallel_size=2 cannot be other value than 1 or "
                    "target model tensor_parallel_size=1",
                )
            ],
        ),
        (
            [SPEC, '{"method":"eagle3","model":"/d","draft_tensor_parallel_size":0}'],
            {},
            [("draft_tensor_parallel_size", "0 is not a positive whole number")],
        ),
        (
            [SPEC, '{"model":"/d","tensor_parallel_size":2}'],
            {},
            [
                (
                    "draft_tensor_parallel_size",
                    "'tensor_parallel_size' is not a valid argument in the speculative_config. "
                    "Please pass 'draft_tensor_parallel_size' instead.",
                )
            ],
        ),
        (
            [SPEC, "[1]"],
            {},
            [("--speculative-config", "must be a JSON object ({...}), got list")],
        ),
        (
            [],
            {
                "VLLM_SKIP_P2P_CHECK": "yes",
                "VLLM_LOGGING_LEVEL": "warning",
                "VLLM_DISABLE_PYNCCL": "TRUE",
            },
            [("VLLM_SKIP_P2P_CHECK", "'yes' is not 1/0/true/false")],
        ),
        (
            [],
            {"VLLM_USE_NCCL_SYMM_MEM": "y" * 40},
            [("VLLM_USE_NCCL_SYMM_MEM", f"{'y' * 30!r} is not 1/0/true/false")],
        ),
        (
            [],
            {"VLLM_LOGGING_LEVEL": "loud"},
            [("VLLM_LOGGING_LEVEL", "'loud' is not DEBUG, INFO, WARNING, ERROR or CRITICAL")],
        ),
        ([], {"VLLM_LOGGING_LEVEL": "critical"}, []),
    ],
)
def test_each_rule_gives_its_subject_and_exact_message(
    args: list[str], env: dict[str, str], expected: list[tuple[str, str]]
) -> None:
    assert [(p.subject, p.message) for p in vllm_launch_problems(args, env)] == expected


def test_settings_fold_into_one_speculative_config_in_vllms_key_order() -> None:
    current = [SPEC, '{"method":"eagle3","model":"/d","num_speculative_tokens":3}']
    assert setting_flags(current, {"--port": "1"}) == {"--port": "1"}
    assert setting_flags(
        current, {"num_speculative_tokens": "5", "draft_model": "/e", "port": "8"}
    ) == {
        "port": "8",
        "speculative-config": '{"method":"eagle3","model":"/e","num_speculative_tokens":5}',
    }
    cleared = [SPEC, '{"method":"eagle3","num_speculative_tokens":3}']
    assert setting_flags(cleared, {"num_speculative_tokens": None, "method": False}) == {
        "speculative-config": None
    }
    assert setting_flags(cleared, {"num_speculative_tokens": ""}) == {
        "speculative-config": '{"method":"eagle3"}'
    }
    # A whole number only where the key is one; a changed config in the same edit is the base.
    assert setting_flags([], {"method": "eagle3", "max_model_len": "x12"}) == {
        "speculative-config": '{"method":"eagle3","max_model_len":"x12"}'
    }
    assert setting_flags([], {"draft_model": "7"}) == {"speculative-config": '{"model":"7"}'}
    assert setting_flags(
        [SPEC, '{"method":"ngram"}'],
        {"speculative-config": '{"method":"eagle"}', "num_speculative_tokens": "2"},
    ) == {"speculative-config": '{"method":"eagle","num_speculative_tokens":2}'}


def test_a_setting_reads_its_key_of_the_last_config_given() -> None:
    args = [SPEC, '{"method":"ngram"}', SPEC, '{"method":"eagle3","num_speculative_tokens":3}']
    assert setting_value(args, "num_speculative_tokens") == "3"
    assert setting_value(args, "method") == "eagle3"
    assert setting_value([SPEC, '{"method":"eagle3"}'], "num_speculative_tokens") is None
    assert setting_value(args, "bogus") is None
    assert setting_value(["--x"], "method") is None


def test_the_token_tree_gives_its_widest_branching_and_its_nodes() -> None:
    def tree(text: object) -> tuple[int, int] | None:
        return token_tree([SPEC, spec_config_json({"speculative_token_tree": text})])

    assert tree("[(0,), (1,), (0, 0), (0, 1), (0, 2)]") == (3, 5)
    assert tree("[(0,), (0, 0), (0, 0, 0)]") == (1, 3)
    assert tree("[]") == (1, 0)
    assert tree("[0]") is None
    assert tree("[(0,") is None
    assert tree(5) is None
    assert token_tree(["--x"]) is None


def test_flag_kinds_config_json_and_config_errors() -> None:
    assert [
        flag_kind(n)
        for n in ("--enforce-eager", "--tensor_parallel_size", "num_speculative_tokens", "--nope")
    ] == ["switch", "value", "value", None]
    assert spec_config_json({"zz": 1, "model": "/d", "method": "eagle3", "max_model_len": 9}) == (
        '{"method":"eagle3","model":"/d","max_model_len":9,"zz":1}'
    )
    assert read_spec_config(None) == (
        {},
        'needs a JSON object, e.g. \'{"method":"eagle3","model":"/draft"}\'',
    )
    assert read_spec_config("{x") == (
        {},
        "is not valid JSON (Expecting property name enclosed in double quotes at character 1)",
    )
    assert read_spec_config('{"a": 1}') == ({"a": 1}, None)


def test_grammar_problems_and_an_empty_fraction_are_named() -> None:
    problems = vllm_launch_problems(["---x", "--gpu-memory-utilization="], {})
    assert [(p.subject, p.message) for p in problems] == [
        ("arguments", "'---x': not a valid flag name"),
        (
            "--gpu-memory-utilization",
            "'' is not a fraction greater than 0 and at most 1 (e.g. 0.9)",
        ),
    ]
