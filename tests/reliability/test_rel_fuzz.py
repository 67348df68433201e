"""Zero tracebacks on untrusted input: hypothesis feeds config text, relaunch-form values and
server log bytes to the code that reads them. Bad input may be refused, with specmon's own
one-line error (a SpecmonError), never with any other exception. Bounded examples (more with
SPECMON_RELIABILITY_FULL=1)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.reliability import count

from specmon.backends import get_backend
from specmon.commands.printers import describe_event
from specmon.launch.config import BUILTIN_CONFIG_TOML, parse_config_text
from specmon.launch.spec import form_fields, form_overrides, validate_form
from specmon.model.errors import SpecmonError
from specmon.model.terminal_text import safe_text
from specmon.state.store import StateStore

EXAMPLES = count(2000, 150)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEYS = st.sampled_from(
    [
        "command", "model_path", "draft_model_path", "tp", "port", "mem_fraction_static",
        "extra_args", "probe", "gpu_agent", "stop_grace_s", "theme", "redraw_hz", "log_lines",
        "gpu_sample_hz", "http_poll_s", "address", "user", "identity_file", "state_dir",
        "transport", "python", "algorithm", "num_steps", "eagle_topk", "num_draft_tokens",
    ]
)  # fmt: skip
VALUES = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(
        ["nan", "inf", "-inf", "true", "false", "[]", '["a", 1]', "{}", '""', "'x'", "1e999", "-0"]
    ),
    st.text(max_size=30).map(lambda t: '"' + t.replace("\\", "").replace('"', "") + '"'),
)
TABLES = st.sampled_from(
    ["", "[ui]", "[hosts.h]", "[profiles.p]", "[profiles.p.speculative]", "[profiles.p.env]"]
)
CONFIG_LINE = st.one_of(
    TABLES, st.builds(lambda k, v: f"{k} = {v}", KEYS, VALUES), st.text(max_size=40)
)


@FUZZ
@given(st.lists(CONFIG_LINE, max_size=12))
def test_config_text_is_read_or_refused_with_a_one_line_error(lines: list[str]) -> None:
    try:
        parse_config_text("\n".join(lines), None, environ={})
    except SpecmonError as exc:
        assert "\n" not in str(exc).strip() or str(exc).count("\n") < 40


BASE = parse_config_text(BUILTIN_CONFIG_TOML, None, environ={}).profiles["demo"]
FORM_FIELDS = form_fields(get_backend(BASE.backend))
FORM_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "0", "1", "2", "3", "-1", "1e9", "LL", "Simple", "--tp 8", "A=B C"]),
)


@FUZZ
@given(st.dictionaries(st.sampled_from(FORM_FIELDS), FORM_TEXT))
def test_form_values_are_checked_without_a_traceback(values: dict[str, str]) -> None:
    """Every form is checked and submitted: what the form refuses it says in one line per
    field; a submit that fails is one the form flagged; a launch with no problems renders."""
    base = BASE.to_launch_spec()
    problems = validate_form(values, base=base)
    assert all(message.strip() and "\n" not in message for message in problems.values())
    try:
        flags, env = form_overrides(values, base, BASE.extra_args)
    except SpecmonError as error:
        assert problems, f"submitting failed ({error}) where the form showed no message"
    else:
        spec = base.with_flags(flags).with_env(env)
        if not spec.problems():
            spec.shell_command()


LOG_PIECES = st.sampled_from(
    [
        b"[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.0, ",
        b"accept len: 2.5, gen throughput (token/s): 9.9, #queue-req: 0\n",
        b"Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.0s/it]\r",
        b"[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=70.00 GB\n",
        b"The server is fired up and ready to roll!\n",
        b"torch.OutOfMemoryError: CUDA out of memory.\n",
        b"Traceback (most recent call last):\n",
        b"\x1b]0;t\x07\x1b[2J\x9b\xff\xfe\x00\n",
        b"[2026-01-01 00:00:00 TP9999999999999999999999] ",
        b"Decode batch, #running-req: 99999999999999999999999, gen throughput (token/s): nan\n",
    ]
)


@FUZZ
@given(st.lists(st.one_of(LOG_PIECES, st.binary(max_size=60)), max_size=20))
def test_log_bytes_are_parsed_stored_and_shown_without_a_traceback(chunks: list[bytes]) -> None:
    parser = get_backend("sglang").new_log_parser()
    store = StateStore()
    events = [e for chunk in chunks for e in parser.feed(chunk)] + list(parser.flush())
    for event in events:
        store.apply(event, 0.0)
        text = describe_event(event)
        if text is not None:
            safe_text(text)
        event.to_json()
    for line in b"".join(chunks).decode(errors="replace").split("\n"):
        safe_text(line)
