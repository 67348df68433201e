"""SGLang's launch rules and the flag grammar, each rule with its exact subject and message,
at and past its bounds (multi-node addresses, ranks and TP splits, the speculative trio, the
schema's switches and values): a rule that quietly stops firing lets a launch through that
SGLang refuses minutes later (docs/testing.md, "Mutation testing", found these holes)."""

from __future__ import annotations

import pytest

from specmon.backends.flag_grammar import parse_flags, render_flag
from specmon.backends.sglang.flags import flag_kind, sglang_launch_problems
from specmon.launch.spec import LaunchSpec

SPEC_TRIO = "is missing; with --speculative-num-steps give all three"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "10.0.0.1:5000", "--tp", "8"],
            [("--node-rank", "2 is not below --nnodes 2 (ranks start at 0)")],
        ),
        (
            ["--nnodes", "2", "--node-rank", "1", "--tp", "6"],
            [("--dist-init-addr", "is required with --nnodes 2 (node 0's HOST:PORT)")],
        ),
        (
            ["--nnodes", "2", "--dist-init-addr", "[::1]:70000", "--tp", "8"],
            [("--dist-init-addr", "port 70000 is not in 1..65535")],
        ),
        (["--nnodes", "2", "--dist-init-addr", "[::1]:65535", "--tp", "8"], []),
        (["--dist-init-addr", "h:1"], []),
        (
            ["--nnodes", "2", "--dist-init-addr", "[]:5000", "--tp", "8"],
            [("--dist-init-addr", "'[]:5000' is not HOST:PORT")],
        ),
        (
            ["--nnodes", "2", "--dist-init-addr", "", "--tp", "8"],
            [("--dist-init-addr", "'' is not HOST:PORT")],
        ),
        (
            ["--nnodes", "2", "--dist-init-addr", "h" * 70, "--tp", "8"],
            [("--dist-init-addr", f"{'h' * 60!r} is not HOST:PORT")],
        ),
        (
            ["--nnodes", "2", "--dist-init-addr", "h:1", "--tp", "7"],
            [("--tp", "7 TP ranks do not split evenly over 2 nodes")],
        ),
        (["--nnodes", "3", "--dist-init-addr", "h:1", "--tp-size", "9"], []),
        (
            ["--nnodes", "65"],
            [("--nnodes", "65 is out of range; expected a whole number from 1 to 64")],
        ),
        (
            ["--node-rank", "64"],
            [("--node-rank", "64 is out of range; expected a whole number from 0 to 63")],
        ),
        (["--node-rank", "0"], []),
        (["--speculative-algorithm"], [("--speculative-algorithm", "needs a value")]),
        (
            ["--speculative-algorithm", "X" * 50],
            [
                (
                    "--speculative-algorithm",
                    f"{'X' * 40!r} is not one of EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM",
                )
            ],
        ),
        (
            ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path"],
            [("--speculative-draft-model-path", "needs a path")],
        ),
        (
            [
                "--speculative-algorithm",
                "EAGLE3",
                "--speculative-draft-model-path",
                "/d",
                "--speculative-num-steps",
                "3",
            ],
            [
                ("--speculative-eagle-topk", SPEC_TRIO),
                ("--speculative-num-draft-tokens", SPEC_TRIO),
            ],
        ),
        (
            ["--enable-torch-compile=yes", "--chunked-prefill-size"],
            [
                (
                    "--enable-torch-compile",
                    "is a switch and takes no value (got 'yes'); give it bare, or leave it out "
                    "to turn it off",
                ),
                ("--chunked-prefill-size", "needs a value"),
            ],
        ),
        (["--enable-torch-compile", "--chunked-prefill-size", "4096"], []),
        (["--port"], [("--port", "needs a value (a whole number from 1 to 65535)")]),
        (
            ["--mem-fraction-static"],
            [
                (
                    "--mem-fraction-static",
                    "nothing is not a fraction greater than 0 and at most 1 (e.g. 0.88)",
                )
            ],
        ),
        (["--not-a-flag", "x", "--tp", "2"], [("--not-a-flag", "is not an SGLang flag")]),
        (["---x"], [("arguments", "'---x': not a valid flag name")]),
    ],
)
def test_each_rule_gives_its_subject_and_exact_message(
    args: list[str], expected: list[tuple[str, str]]
) -> None:
    assert [(p.subject, p.message) for p in sglang_launch_problems(args, {})] == expected


def test_the_context_length_override_variable_is_a_boolean() -> None:
    name = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
    problems = sglang_launch_problems([], {name: "yes"})
    assert [(p.subject, p.message) for p in problems] == [(name, "'yes' is not 1/0/true/false")]
    assert sglang_launch_problems([], {name: "1"}) == []


def test_a_flag_renders_as_its_tokens_and_false_has_none() -> None:
    assert render_flag("--tp", "8") == ("--tp", "8")
    assert render_flag("-x", True) == ("--x",)
    assert render_flag("--a-", "v") == ("--a-", "v")  # only leading dashes are the prefix
    assert render_flag("x", "-y") == ("--x=-y",)
    assert render_flag("x", "-1") == ("--x", "-1")
    with pytest.raises(ValueError) as raised:
        render_flag("tp", False)
    assert str(raised.value) == "False removes a flag; it has no tokens"


def test_a_bad_flag_name_is_quoted_up_to_sixty_characters() -> None:
    token = "---" + "a" * 70
    assert parse_flags([token]) == ([], [f"{token[:60]!r}: not a valid flag name"])


def test_edges_of_the_node_address_the_unknown_flag_and_the_speculative_trio() -> None:
    def problems(args: list[str]) -> list[tuple[str, str]]:
        return [(p.subject, p.message) for p in sglang_launch_problems(args, {})]

    assert problems(["--nnodes", "2", "--dist-init-addr", "X:5000", "--tp", "8"]) == []
    assert problems(["--not-a-flag", "--enable-torch-compile=yes"]) == [
        ("--not-a-flag", "is not an SGLang flag"),
        (
            "--enable-torch-compile",
            "is a switch and takes no value (got 'yes'); give it bare, or leave it out to "
            "turn it off",
        ),
    ]
    alone = (
        "needs --speculative-num-steps too (without it SGLang picks steps, topk and draft "
        "tokens itself); give all three or none"
    )
    assert problems(
        [
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            "/d",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ]
    ) == [("--speculative-eagle-topk", alone), ("--speculative-num-draft-tokens", alone)]
    assert render_flag("Xtp", "1") == ("--Xtp", "1")


def messages(args: list[str], env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    return [(p.subject, p.message) for p in sglang_launch_problems(args, env or {})]


def test_two_spellings_of_one_flag_are_named_together() -> None:
    assert messages(["--tp", "2", "--tp-size", "2"]) == [
        ("--tp-size", "--tp and --tp-size mean the same; give one")
    ]


def test_an_unknown_flag_is_refused_with_the_three_nearest_names() -> None:
    """A typo is answered with the flags meant most likely, so the fix is one look away."""
    assert messages(["--tp-sise", "2"]) == [
        ("--tp-sise", "is not an SGLang flag; did you mean --tp-size, --pp-size, --ep-size?")
    ]


def test_a_bad_value_is_quoted_up_to_its_first_forty_characters() -> None:
    """A pasted value can be long; the message quotes its start, not the whole of it."""
    long = "z" * 50
    shown = repr("z" * 40)
    assert messages(["--port", long]) == [
        ("--port", f"{shown} is not a whole number from 1 to 65535")
    ]
    assert messages([f"--enable-torch-compile={long}"]) == [
        (
            "--enable-torch-compile",
            f"is a switch and takes no value (got {shown}); give it bare, or leave it out to "
            "turn it off",
        )
    ]
    assert messages(["--mem-fraction-static", long]) == [
        (
            "--mem-fraction-static",
            f"{shown} is not a fraction greater than 0 and at most 1 (e.g. 0.88)",
        )
    ]
    name = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
    assert messages([], {name: long}) == [(name, f"{'z' * 30!r} is not 1/0/true/false")]


def test_a_memory_fraction_out_of_range_is_quoted() -> None:
    assert messages(["--mem-fraction-static", "1.5"]) == [
        (
            "--mem-fraction-static",
            "'1.5' is not a fraction greater than 0 and at most 1 (e.g. 0.88)",
        )
    ]


def test_a_model_path_without_a_value_is_refused() -> None:
    assert messages(["--model-path"]) == [("--model-path", "needs a path or a model name")]
    assert messages(["--model-path", "/models/llama"]) == []


def test_draft_tokens_other_than_steps_plus_one_with_topk_one_say_the_right_count() -> None:
    """SGLang would change the count to steps + 1 silently; the message gives that count."""
    args = [
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-draft-model-path",
        "/d",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "8",
    ]
    assert messages(args) == [
        (
            "--speculative-num-draft-tokens",
            "must be --speculative-num-steps + 1 = 4 when --speculative-eagle-topk is 1 "
            "(got 8); SGLang would silently change it to 4, specmon asks you to say so",
        )
    ]


def test_flag_kinds_and_a_flag_that_is_both_keeps_its_value() -> None:
    """A flag SGLang takes bare or with a value (``--enable-fused-qk-norm-rope``) is set with
    the value given, not read as a switch's true/false (which would drop "false")."""
    assert flag_kind("enable-torch-compile") == "switch"
    assert flag_kind("chunked-prefill-size") == "value"
    assert flag_kind("enable-fused-qk-norm-rope") == "value"
    spec = LaunchSpec("sglang", ("python3", "-m", "sglang.launch_server"), ())
    changed = spec.with_flags({"enable-fused-qk-norm-rope": "false"})
    assert changed.args == ("--enable-fused-qk-norm-rope", "false")


def test_a_flag_given_by_its_argparse_prefix_is_checked_as_the_flag() -> None:
    """SGLang's argparse reads ``--speculative-algo`` as ``--speculative-algorithm``: the
    launch is not refused for lacking the flag it gives, and a prefix's value meets the
    full flag's rules (a fraction of 1.5 is refused however the flag is spelled)."""
    assert messages(["--speculative-algo", "EAGLE", "--speculative-draft-model-path", "/d"]) == []
    assert messages(["--mem-frac", "1.5"]) == [
        (
            "--mem-fraction-static",
            "'1.5' is not a fraction greater than 0 and at most 1 (e.g. 0.88)",
        )
    ]
    assert messages(["--speculative-algo", "EAGLE", "--speculative-algorithm", "EAGLE"])[0] == (
        "--speculative-algorithm",
        "given more than once; give it once",
    )
