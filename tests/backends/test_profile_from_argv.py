"""`LaunchRules.profile_from_argv` (what `specmon adopt` reads of a running server) is the
inverse of the profile's rendering: a profile built from a server's argv launches the same
argv. What may differ, and only there: the flags the profile renders come first, in its own
order (then the rest, in the server's order); ``--name=value`` becomes ``--name value``; a
vLLM ``--speculative-config`` is re-rendered as compact JSON; ``vllm serve --model M``
becomes ``vllm serve M``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmon.backends import get_backend
from specmon.backends.flag_grammar import parse_flags
from specmon.launch.adopt import adopted_table, render_fragment
from specmon.launch.config import parse_config_text
from specmon.model.errors import UsageError

SGLANG = ("/usr/bin/python3", "-m", "sglang.launch_server")
VLLM = ("/opt/venv/bin/vllm", "serve")


def spec_argv(backend: str, argv: Sequence[str]) -> tuple[str, ...]:
    """argv -> the profile's TOML -> the config parser's Profile -> its spec's argv."""
    table = adopted_table(get_backend(backend), argv, {})
    config = parse_config_text(render_fragment("adopted", table), None)
    spec = config.profiles["adopted"].to_launch_spec()
    spec.validate()
    return (*spec.command, *spec.args)


def flags_of(args: Sequence[str]) -> list[tuple[str, Any]]:
    """The flags as (name, value), a --speculative-config's value as its JSON object."""
    out = []
    for item in parse_flags(args)[0]:
        value: Any = item.value
        if item.name == "speculative-config" and value is not None:
            value = json.loads(value)
        out.append((item.name, value))
    return out


SGLANG_CASES = [
    [*SGLANG, "--model-path", "/m/Kimi-K2.5", "--tp", "8", "--port", "30000"],
    [
        *SGLANG, "--model-path", "m", "--trust-remote-code", "--tp", "8", "--host", "0.0.0.0",
        "--port=30001", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
        "/d", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.88",
        "--enable-metrics", "--context-length", "8192",
    ],
    # Written as the profile would not write it back: stays in extra_args, as given.
    [*SGLANG, "--model-path", "m", "--tp", "08", "--mem-fraction-static", ".9"],
]  # fmt: skip

VLLM_CASES = [
    [*VLLM, "meta-llama/Llama-3.3-70B-Instruct", "--tensor-parallel-size", "8", "--port", "8001"],
    [
        *VLLM, "m", "--enforce-eager", "--host", "127.0.0.1", "--gpu-memory-utilization", "0.9",
        "--speculative-config",
        '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}',
        "--max-model-len", "4096",
    ],
    # A key a profile cannot set: the whole JSON stays in extra_args.
    [*VLLM, "m", "--speculative-config", '{"method":"ngram","prompt_lookup_max":4}'],
    ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "8002"],
]  # fmt: skip


@pytest.mark.parametrize("argv", SGLANG_CASES)
def test_sglang_argv_round_trips(argv: list[str]) -> None:
    out = spec_argv("sglang", argv)
    assert out[:3] == SGLANG
    assert sorted(flags_of(out[3:])) == sorted(flags_of(argv[3:]))


def test_sglang_flags_come_in_the_profile_order_then_the_rest_in_theirs() -> None:
    out = spec_argv("sglang", SGLANG_CASES[1])
    assert list(out[3:]) == [
        "--model-path", "m", "--tp", "8", "--host", "0.0.0.0", "--port", "30001",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.88",
        "--trust-remote-code", "--enable-metrics", "--context-length", "8192",
    ]  # fmt: skip
    # Already in the profile's order: the same argv, token for token.
    assert spec_argv("sglang", SGLANG_CASES[0]) == tuple(SGLANG_CASES[0])


def test_sglang_keys_read() -> None:
    keys = get_backend("sglang").profile_from_argv(SGLANG_CASES[1])
    assert keys["speculative"] == {
        "algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
    }  # fmt: skip
    assert (keys["tp"], keys["port"], keys["mem_fraction_static"]) == (8, 30001, 0.88)
    assert keys["extra_args"] == [
        "--trust-remote-code",
        "--enable-metrics",
        "--context-length",
        "8192",
    ]
    odd = get_backend("sglang").profile_from_argv(SGLANG_CASES[2])
    assert "tp" not in odd and odd["extra_args"] == ["--tp", "08", "--mem-fraction-static", ".9"]
    # Numbers without the algorithm stay in extra_args (the profile renders them only with it;
    # SGLang refuses them so, and so does the adopted profile).
    alone = [*SGLANG, "--model-path", "m", "--speculative-num-steps", "3"]
    assert get_backend("sglang").profile_from_argv(alone)["extra_args"] == alone[-2:]
    # An alias beside the flag: neither moves (moving one could change which one wins; SGLang
    # refuses both, and so does the adopted profile, naming them).
    both = [*SGLANG, "--model-path", "m", "--tp", "2", "--tp-size", "2"]
    assert get_backend("sglang").profile_from_argv(both)["extra_args"] == both[-4:]


@pytest.mark.parametrize("argv", VLLM_CASES)
def test_vllm_argv_round_trips(argv: list[str]) -> None:
    out = spec_argv("vllm", argv)
    assert out[:3] == tuple(argv[:3])  # vllm serve MODEL, or python3 -m MODULE
    assert sorted(flags_of(out[3:]), key=repr) == sorted(flags_of(argv[3:]), key=repr)


def test_vllm_speculative_config_read_as_the_profile_keys() -> None:
    keys = get_backend("vllm").profile_from_argv(VLLM_CASES[1])
    assert keys["command"] == list(VLLM) and keys["model_path"] == "m"
    assert keys["speculative"] == {"method": "eagle3", "num_speculative_tokens": 3}
    assert keys["draft_model_path"] == "/d" and keys["mem_fraction_static"] == 0.9
    kept = get_backend("vllm").profile_from_argv(VLLM_CASES[2])
    assert "speculative" not in kept and "--speculative-config" in kept["extra_args"]


def test_vllm_serve_with_model_flag_becomes_the_positional_model() -> None:
    out = spec_argv("vllm", [*VLLM, "--model", "m", "--port", "8003"])
    assert out == (*VLLM, "m", "--port", "8003")


def test_no_model_is_refused() -> None:
    with pytest.raises(UsageError, match="--model-path"):
        get_backend("sglang").profile_from_argv([*SGLANG, "--tp", "2"])
    with pytest.raises(UsageError, match="names no model"):
        get_backend("vllm").profile_from_argv([*VLLM, "--port", "8000"])


_EXTRA_FLAGS = st.lists(
    st.tuples(
        st.sampled_from(["context-length", "random-seed", "served-model-name"]),
        st.sampled_from(["1", "8", "4096"]),
    ),
    max_size=3,
    unique_by=lambda pair: pair[0],
)


@given(
    tp=st.one_of(st.none(), st.integers(1, 64)),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    mem=st.one_of(st.none(), st.sampled_from([0.5, 0.88, 0.9, 1.0])),
    steps=st.one_of(st.none(), st.integers(1, 32)),
    extra=_EXTRA_FLAGS,
    shuffle=st.randoms(use_true_random=False),
)
def test_sglang_round_trip_property(tp, port, mem, steps, extra, shuffle) -> None:  # type: ignore[no-untyped-def]
    """Any argv the profile could have written, flags in any order: the same flags back."""
    pairs: list[tuple[str, str]] = [("model-path", "/m")]
    if tp is not None:
        pairs.append(("tp", str(tp)))
    if port is not None:
        pairs.append(("port", str(port)))
    if mem is not None:
        pairs.append(("mem-fraction-static", repr(mem)))
    if steps is not None:
        pairs += [("speculative-algorithm", "EAGLE3"), ("speculative-num-steps", str(steps))]
        pairs += [("speculative-draft-model-path", "/d"), ("speculative-eagle-topk", "1")]
        pairs += [("speculative-num-draft-tokens", str(steps + 1))]
    pairs += extra
    shuffle.shuffle(pairs)
    argv = [*SGLANG]
    for name, value in pairs:
        argv += [f"--{name}={value}"] if value.startswith("-") else [f"--{name}", value]
    out = spec_argv("sglang", argv)
    assert sorted(flags_of(out[3:])) == sorted(flags_of(argv[3:]))
    # Read back, the spec's argv gives the same profile: adopting is idempotent.
    assert get_backend("sglang").profile_from_argv(out) == get_backend("sglang").profile_from_argv(
        argv
    )


@given(
    tp=st.one_of(st.none(), st.integers(1, 64)),
    k=st.one_of(st.none(), st.integers(1, 64)),
    mem=st.one_of(st.none(), st.sampled_from([0.5, 0.9])),
    shuffle=st.randoms(use_true_random=False),
)
def test_vllm_round_trip_property(tp, k, mem, shuffle) -> None:  # type: ignore[no-untyped-def]
    pairs: list[tuple[str, str]] = [("enforce-eager", "")]
    if tp is not None:
        pairs.append(("tensor-parallel-size", str(tp)))
    if mem is not None:
        pairs.append(("gpu-memory-utilization", repr(mem)))
    if k is not None:
        config = {"method": "eagle3", "model": "/d", "num_speculative_tokens": k}
        pairs.append(("speculative-config", json.dumps(config)))
    shuffle.shuffle(pairs)
    argv = [*VLLM, "org/model"]
    for name, value in pairs:
        argv += [f"--{name}", value] if value else [f"--{name}"]
    out = spec_argv("vllm", argv)
    assert out[:3] == tuple(argv[:3])
    assert sorted(flags_of(out[3:]), key=repr) == sorted(flags_of(argv[3:]), key=repr)
