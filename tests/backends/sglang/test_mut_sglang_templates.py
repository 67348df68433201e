"""The decode fast path's templates, shape by shape: SGLang's decode lines in each version's
form, behind each prefix, read in bulk give the events (and the summary) the line-by-line
reader gives for the same lines; a shape's template matches that shape's lines; and the
summary scan's group filter keeps exactly the groups it is asked to keep (docs/testing.md,
"Mutation testing", found these holes)."""

from __future__ import annotations

import json
import re

import pytest

from specmon.backends.sglang import parser as sglang_parser
from specmon.backends.sglang.parser import (
    SGLangLogParser,
    _only_groups,
    decode_template,
    parse_line,
)
from specmon.backends.sglang.summary import SGLangLogSummary
from specmon.logs.event_lines import json_lines
from specmon.model.events import Event, ServerError

SPEC = "accept len: {acc}, accept rate: {rate}, "
# SGLang's decode line in each version's form (../shared/reference/sglang.md), after the prefix.
SHAPES = {
    "0.4.6": "Decode batch. #running-req: {run}, #token: {tok}, token usage: {use}, "
    "accept len: {acc}, cuda graph: True, gen throughput (token/s): {gen}, #queue-req: {q}",
    "0.5.2": "Decode batch. #running-req: {run}, #token: {tok}, token usage: {use}, "
    "accept len: {acc}, cuda graph: {graph}, gen throughput (token/s): {gen}, #queue-req: {q}, ",
    "0.5.4": "Decode batch [{it}], #running-req: {run}, #token: {tok}, token usage: {use}, "
    + SPEC
    + "cuda graph: {graph}, gen throughput (token/s): {gen}, #queue-req: {q}, ",
    "0.5.23": "Decode batch, #running-req: {run}, #token: {tok}, token usage: {use}, "
    + SPEC
    + "cap len: {acc}, block accept len: {acc}, cuda graph: {graph}, "
    "gen throughput (token/s): {gen}, #queue-req: {q}",
    "hybrid": "Decode batch, #running-req: {run}, #full token: {tok}, full token usage: {use}, "
    "#swa token: {tok}, swa token usage: {use}, "
    + SPEC
    + "cuda graph: {graph}, gen throughput (token/s): {gen}, #queue-req: {q}",
    "disaggregated": "Decode batch, #running-req: {run}, #token: {tok}, token usage: {use}, "
    "pre-allocated usage: {use}, #prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, "
    "cuda graph: {graph}, gen throughput (token/s): {gen}, #queue-req: {q}",
    "no speculation": "Decode batch, #running-req: {run}, #token: {tok}, token usage: {use}, "
    "gen throughput (token/s): {gen}, #queue-req: {q}",
    "a field of another server first": "Decode batch, load: {use}, #running-req: {run}, "
    "#token: {tok}, token usage: {use}, gen throughput (token/s): {gen}, #queue-req: {q}",
    "a field of another server after #running-req": "Decode batch, #running-req: {run}, "
    "load: {use}, #token: {tok}, token usage: {use}, gen throughput (token/s): {gen}, "
    "#queue-req: {q}",
}
# What may stand before `Decode batch`: SGLang's own prefixes and others' (tests/logs).
PREFIXES = {
    "sglang": "[2026-02-10 09:19:{s:02d} TP3] ",
    "sglang ms dp ep": "[2026-02-10 09:19:{s:02d}.123 DP1 TP3 EP3] ",
    "sglang no rank": "[2026-02-10 09:19:{s:02d}] ",
    "docker": "2026-02-10T09:19:{s:02d}.123456789Z [2026-02-10 09:19:{s:02d} TP1] ",
    "operator": "09:19:{s:02d} TP4 | ",
    "rank first": "rank 2 2026-02-10 09:19:{s:02d} INFO ",
    "compose": "pid 42 | ",
}


def numbers(index: int) -> dict[str, object]:
    """Varied numbers for line ``index``, as SGLang prints them (floats with `:.2f`)."""
    return {
        "s": index % 60,
        "it": 40 * index,
        "run": index % 7 + 1,
        "tok": 1000 + 37 * index,
        "use": f"{index % 90 / 100:.2f}",
        "acc": f"{2 + index % 9 / 10:.2f}",
        "rate": f"{0.5 + index % 5 / 10:.2f}",
        "graph": "True" if index % 3 else "False",
        "gen": f"{100 + index * 3.25:.2f}",
        "q": index % 4,
    }


def log_lines(prefix: str, shape: str, count: int = 30) -> list[str]:
    return [(prefix + shape).format(**numbers(index)) for index in range(count)]


@pytest.fixture(autouse=True)
def fresh_templates() -> None:
    """Templates are cached by shape in the module: an earlier test (or the process a
    mutation test's worker is forked from) may have built every shape used here. Emptied,
    each test's shapes are built, not taken from the cache."""
    sglang_parser._template_cache.clear()


def read_in_bulk(lines: list[str]) -> list[Event]:
    parser = SGLangLogParser()
    return parser.feed("\n".join(lines) + "\n") + parser.flush()


def read_line_by_line(lines: list[str]) -> list[Event]:
    return [event for event in map(parse_line, lines) if event is not None]


def as_json(events: list[Event]) -> list[object]:
    """`specmon parse --json`'s lines, read back (the bulk writer writes the texts as read)."""
    return [json.loads(line) for line in json_lines(events, Event.to_json).splitlines()]


def summary_alone(lines: list[str]) -> dict[str, object]:
    """`specmon parse --summary --no-events`: decode lines summed from their texts."""
    summary, parser = SGLangLogSummary(), SGLangLogParser()
    parser.summarize("\n".join(lines) + "\n", summary)
    parser.summarize("", summary)
    return summary.result(parser.unparsed_decode_like)


def summary_of(events: list[Event]) -> dict[str, object]:
    summary = SGLangLogSummary()
    for event in events:
        summary.add(event)
    return summary.result()


def check_bulk_is_line_by_line(lines: list[str]) -> None:
    expected = read_line_by_line(lines)
    assert len(expected) == len(lines)  # every line a decode: the comparison reads them all
    events = read_in_bulk(lines)
    # Written first: a bulk-read decode is written from its texts until its values are read.
    assert as_json(events) == [json.loads(event.to_json()) for event in expected]
    assert events == expected
    assert summary_alone(lines) == summary_of(expected)


@pytest.mark.parametrize("shape", SHAPES)
def test_each_versions_decode_lines_read_in_bulk_as_line_by_line(shape: str) -> None:
    check_bulk_is_line_by_line(log_lines(PREFIXES["sglang"], SHAPES[shape]))


@pytest.mark.parametrize("prefix", PREFIXES)
def test_decode_lines_behind_each_prefix_read_in_bulk_as_line_by_line(prefix: str) -> None:
    check_bulk_is_line_by_line(log_lines(PREFIXES[prefix], SHAPES["0.5.23"]))


def test_a_shapes_template_matches_that_shapes_lines() -> None:
    """decode_template: one line's shape -> a regex that matches every line of that shape
    (other numbers, other blanks in the prefix), and not a line of another shape."""
    for prefix in PREFIXES.values():
        for shape in SHAPES.values():
            first, *others = log_lines(prefix, shape, 12)
            head = re.search(r"Decode batch(?: \[\d+\])?[.,] ", first)
            assert head is not None
            template = decode_template(head.group(), first[head.end() :], first[: head.start()])
            assert template is not None, first
            assert all(template.matches(line) for line in others), first
            other_version = first.replace("#queue-req", "#queue-reqs")
            assert not template.matches(other_version)


def test_digits_of_other_scripts_give_the_same_events_and_valid_json() -> None:
    """int() and float() read any script's digits (a log passed through a translating or
    garbling tool: `٣` is 3), so the line-by-line reader gives a decode; the bulk reading must
    give the same one, and JSON must get numbers, not the log's text."""
    arabic = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
    lines = log_lines(PREFIXES["sglang"], SHAPES["no speculation"], 20)
    for index in (5, 6, 7, 12):
        head, _, fields = lines[index].partition("] ")
        lines[index] = head + "] " + fields.translate(arabic)
    check_bulk_is_line_by_line(lines)
    check_bulk_is_line_by_line(lines[:8])  # the last line in other digits: its shape is learned


# Patterns with groups, escapes and character classes of every form sre takes, each with a
# text it matches in full: `[]...]` and `[^]...]` (a `]` first is a member), a `(` inside a
# class, `\(` and `\\(`, lookarounds and non-capturing groups.
GROUP_PATTERNS = [
    (r"(a)[(](b)", "a(b"),
    (r"[](](x)(y)", "]xy"),
    (r"[^](](x)(y)", "axy"),
    (r"[]](a)(b)", "]ab"),
    (r"[x][](](c)(d)", "x(cd"),
    (r"\((e)\)[\](](f)", "(e)]f"),
    (r"\\(g)(?:h)(?=i)(i)", "\\ghi"),
    (r"(j[(])[^(\]](k)", "j(xk"),
]


@pytest.mark.parametrize(("pattern", "text"), GROUP_PATTERNS)
def test_only_the_groups_asked_for_keep_capturing(pattern: str, text: str) -> None:
    """The summary scan's pattern is the line template with most groups made non-capturing:
    the result matches the same texts, and its groups are the kept ones, in order."""
    whole = re.fullmatch(pattern, text)
    assert whole is not None
    count = re.compile(pattern).groups
    for keep in ({1}, {count}, {1, count}, set(range(2, count + 1)), set()):
        filtered = _only_groups(pattern, frozenset(keep))
        match = re.fullmatch(filtered, text)
        assert match is not None, filtered
        assert match.groups() == tuple(whole.group(number) for number in sorted(keep)), filtered


# Known fields out of SGLang's order, or twice: the line-by-line reader reads each by name (a
# repeated one's last value); no template may read them by place instead.
REORDERED = {
    "token usage before #running-req": "Decode batch, token usage: {use}, #running-req: {run}, "
    "#token: {tok}, gen throughput (token/s): {gen}, #queue-req: {q}",
    "accept rate before accept len": "Decode batch, #running-req: {run}, #token: {tok}, "
    "token usage: {use}, accept rate: {rate}, accept len: {acc}, cuda graph: {graph}, "
    "gen throughput (token/s): {gen}, #queue-req: {q}",
    "#running-req twice": "Decode batch, #running-req: {q}, #token: {tok}, token usage: {use}, "
    "#running-req: {run}, gen throughput (token/s): {gen}, #queue-req: {q}",
    "#full token before #token": "Decode batch, #running-req: {run}, #full token: {q}, "
    "#token: {tok}, token usage: {use}, gen throughput (token/s): {gen}, #queue-req: {q}",
}


@pytest.mark.parametrize("shape", REORDERED)
def test_decode_lines_with_fields_out_of_order_read_in_bulk_as_line_by_line(shape: str) -> None:
    check_bulk_is_line_by_line(log_lines(PREFIXES["sglang"], REORDERED[shape]))


# PyTorch c10d's watchdog line under its glog header; the level letter is the one c10d chose.
C10D_WATCHDOG = (
    "[PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=1184, OpType=ALLREDUCE) ran for 600031 milliseconds before timing out."
)


@pytest.mark.parametrize("level", "IWEF")
def test_c10d_lines_at_every_glog_level_keep_their_process_group_rank_and_text(
    level: str,
) -> None:
    """The glog header is the prefix at every level (info, warning, error, fatal): the
    `[PG ... Rank 3]` tag that starts the message names the rank, and the message is c10d's
    text after the header, the tag included, as an operator greps for it."""
    line = f"[{level}1210 09:14:15.123456 ProcessGroupNCCL.cpp:616] {C10D_WATCHDOG}"
    expected = ServerError(ts="09:14:15.123456", rank=3, category="nccl", message=C10D_WATCHDOG)
    assert parse_line(line) == expected
    assert read_in_bulk([line]) == [expected]


def test_a_c10d_line_inside_a_traceback_is_its_own_error_and_the_traceback_goes_on() -> None:
    """c10d's watchdog thread writes its line while another thread's traceback is being
    written: the c10d line is an error of its own (it has a prefix), and the traceback still
    ends with its exception line, not cut."""
    lines = [
        "[2026-02-10 09:19:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/scheduler.py", line 10, in run',
        "    self.step()",
        f"[E1210 09:19:02.123456 ProcessGroupNCCL.cpp:616] {C10D_WATCHDOG}",
        "RuntimeError: step failed",
    ]
    assert read_in_bulk(lines) == [
        ServerError(ts="09:19:02.123456", rank=3, category="nccl", message=C10D_WATCHDOG),
        ServerError(
            ts="2026-02-10 09:19:01", rank=0, category="other", message="RuntimeError: step failed"
        ),
    ]


def test_an_error_run_into_its_logger_name_is_reported_without_the_prefix() -> None:
    """An operator's format may join the level or logger name to the message with a dot
    (`INFO.Capture ...`): the prefix ends where the event's text begins, so the error's message
    is SGLang's text alone, its time and rank read from the prefix."""
    assert parse_line("09:19:03 TP3 INFO.Capture cuda graph failed: out of memory") == (
        ServerError(
            ts="09:19:03",
            rank=3,
            category="other",
            message="Capture cuda graph failed: out of memory",
        )
    )


@pytest.mark.parametrize("odd_field", ["cuda graph True", ": 3"], ids=["no colon", "no name"])
def test_a_decode_shape_with_a_field_it_cannot_name_gets_no_template(odd_field: str) -> None:
    """decode_template learns only shapes whose every field is `name: value`: a field without
    its `: ` or without a name gets none (such lines are read field by field), and its lines
    still give the line-by-line reader's events."""
    shape = SHAPES["no speculation"].replace("#queue-req", odd_field + ", #queue-req")
    first = log_lines(PREFIXES["sglang"], shape, 1)[0]
    head = re.search(r"Decode batch[.,] ", first)
    assert head is not None
    assert decode_template(head.group(), first[head.end() :], first[: head.start()]) is None
    check_bulk_is_line_by_line(log_lines(PREFIXES["sglang"], shape))


def test_the_bulk_scan_leads_with_the_shape_of_the_chunks_last_decode_line() -> None:
    """Where a log changes shape (a restarted server's new version, a line without a prefix),
    the next chunk most likely continues the last decode line's shape: after a chunk, that
    shape's template is the one the bulk scan tries first, and the events are the line by
    line reader's."""
    old = log_lines(PREFIXES["sglang"], SHAPES["0.5.23"], 20)
    new = log_lines(PREFIXES["sglang"], SHAPES["no speculation"], 20)
    parser = SGLangLogParser()
    assert parser.feed("\n".join(old + new) + "\n") == read_line_by_line(old + new)
    assert parser._templates[0].matches(new[-1])
    bare = SHAPES["0.5.4"].format(**numbers(3))  # no prefix: the chunk starts with the decode
    assert parser.feed(bare + "\n") == read_line_by_line([bare])
    assert parser._templates[0].matches(bare)


def test_a_decode_line_still_being_written_does_not_choose_the_chunks_shape() -> None:
    """A chunk's cut last line (the rest comes in the next chunk) is not one of its lines: the
    shape the bulk scan leads with is that of the last complete decode line, even when the cut
    line reads as a line of another known shape."""
    old = log_lines(PREFIXES["sglang"], SHAPES["0.5.23"], 20)
    new = log_lines(PREFIXES["sglang"], SHAPES["no speculation"], 20)
    parser = SGLangLogParser()
    parser.feed("\n".join(new) + "\n")
    parser.feed("\n".join(old) + "\n")
    cut = re.sub(r"#queue-req: \d+$", "#queue-req: 12", old[0])  # cut: `#queue-req: 1`
    assert parser.feed("\n".join(new) + "\n" + cut) == read_line_by_line(new)
    assert parser._templates[0].matches(new[-1])
    assert parser.flush() == read_line_by_line([cut])
