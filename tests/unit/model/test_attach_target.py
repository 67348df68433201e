"""The one grammar of ``--attach`` and the host key ``attach``: what it accepts, how it gives
the text back, and its one-line refusals."""

from __future__ import annotations

import pytest

from specmon.model.attach_target import AttachTarget, parse_attach_target


@pytest.mark.parametrize(
    ("value", "target", "text"),
    [
        ("auto", AttachTarget("auto"), "auto"),
        (" auto ", AttachTarget("auto"), "auto"),
        ("4242", AttachTarget("pid", pid=4242), "4242"),
        ("pid:4242", AttachTarget("pid", pid=4242), "4242"),
        (4242, AttachTarget("pid", pid=4242), "4242"),
        ("unit:sglang.service", AttachTarget("unit", name="sglang.service"), "unit:sglang.service"),
        ("unit:llm@a.service", AttachTarget("unit", name="llm@a.service"), "unit:llm@a.service"),
        ("container:vllm-1", AttachTarget("container", name="vllm-1"), "container:vllm-1"),
        ("container:3f2a9c", AttachTarget("container", name="3f2a9c"), "container:3f2a9c"),
    ],
)
def test_accepted(value: object, target: AttachTarget, text: str) -> None:
    parsed = parse_attach_target(value)
    assert parsed == target and parsed.text() == text
    assert parse_attach_target(parsed.text()) == parsed


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("", "not an attach target"),
        ("first", "not an attach target"),
        ("Auto", "not an attach target"),
        ("0", "not a process id"),
        ("99999999999", "not a process id"),
        ("-5", "not an attach target"),
        ("١٢", "not an attach target"),  # digits, but not ASCII ones
        ("unit:", "not a unit name"),
        ("unit:-x", "not a unit name"),
        ("container:--privileged", "not a container name"),
        ("container:a b", "not a container name"),
        ("unit:a;rm -rf /", "not a unit name"),
        ("pod:x", "not an attach target"),
        (True, "not an attach target"),
        (1.5, "expected"),
    ],
)
def test_refused_in_one_line(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as caught:
        parse_attach_target(value)
    assert "\n" not in str(caught.value)
