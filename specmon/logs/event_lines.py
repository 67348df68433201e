"""Events as output lines, a chunk at a time: JSON Lines and the readable text form.

A serving log is almost all decode lines, and a log parser hands them over as the log's own
texts (``Decode.from_texts``). Converting each one's numbers and encoding a dict per line was
most of what `specmon parse` spent (``json.dumps`` alone about 3 µs a line); here a run of such
decodes is written with one %-template, the texts as they are, so a decode line runs no Python
bytecode. By the ``from_texts`` contract the number texts are valid JSON numbers (ints and
floats with a dot) and the timestamp needs no escaping; what the template cannot say (a leading
zero, an absent value) is found on the whole block and mended, or the run is written line by
line, each line as the template writes it alone where it can (so a line reads the same in
whichever run it comes). Every other event is written one at a time by the given function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import partial
from itertools import groupby
from operator import itemgetter
from typing import cast

from specmon.model.events import Decode, Event, text_rows

EventLine = Callable[[Event], str]

# A row of texts, as Decode.from_texts takes it: ts, rank, #running-req, #token, token usage,
# accept len, accept rate, cuda graph, gen throughput, #queue-req, then items ignored.
_GRAPH = itemgetter(7)
_ROW_ITEMS = 10

_JSON_HEAD = (
    '{"kind": "' + Decode.kind + '", "ts": "%s", "rank": %s, "running_req": %s, "tokens": %s, '
    '"token_usage": %s, "accept_len": %s, "accept_rate": %s%.0s, "gen_throughput": %s, '
    '"queue_req": %s, "cuda_graph": '
)
_JSON_GRAPH = {"True": "true", "": "null"}  # any other text: false, as Decode reads it
# A JSON number may not start with 0 and another digit; the log's `007` must be written 7.
_JSON_LEADING_ZERO = re.compile(r'": 0\d')
_JSON_TO_MEND = re.compile(r'": (?:0\d|,)|"ts": "",')

_TEXT_HEAD = (
    "%-23s TP%-2s " + f"{Decode.kind:<14} " + "running_req=%s tokens=%s token_usage=%s "
    "accept_len=%s accept_rate=%s%.0s gen_throughput=%s queue_req=%s"
)
_TEXT_GRAPH = {"True": " cuda_graph=yes", "": ""}  # any other text: no
_TEXT_EMPTY_FIELD = re.compile(r" [a-z_]+=(?= |\n)")
_TEXT_NO_TS = "\n" + " " * 24 + "TP"
_TEXT_NO_RANK = " TP   " + Decode.kind + " "


def json_lines(events: list[Event], one: EventLine) -> str:
    """The events as JSON Lines (each line ended by a newline); ``one`` writes any event
    that is not a decode still holding its texts."""
    return "".join(_pieces(events, one, _json_block))


def text_lines(events: list[Event], one: EventLine) -> str:
    """The events in the text form, one line each (ended by a newline); ``one`` writes any
    event that is not a decode still holding its texts. Decode numbers are shown as the log
    wrote them; the texts are ASCII digits, so they need no sanitising."""
    return "".join(_pieces(events, one, _text_block))


def _pieces(
    events: list[Event],
    one: EventLine,
    block: Callable[[list[tuple[str, ...]]], str | None],
) -> Iterator[str]:
    rows = text_rows(events)
    count = len(rows)
    position = 0
    while position < count:
        if rows[position] is None:
            yield one(events[position]) + "\n"
            position += 1
            continue
        try:
            end = rows.index(None, position)
        except ValueError:
            end = count
        run = cast("list[tuple[str, ...]]", rows[position:end])  # no None up to ``end``
        # The templates leave out an engine index (item 11): such runs go line by line.
        with_engine = any(len(row) > _ROW_ITEMS and row[_ROW_ITEMS] for row in run)
        written = None if with_engine else block(run)
        if written is None:  # a text the template cannot write: line by line
            written = "".join(map(partial(_one_line, one, block), events[position:end], run))
        yield written
        position = end


def _one_line(
    one: EventLine,
    block: Callable[[list[tuple[str, ...]]], str | None],
    event: Event,
    row: tuple[str, ...],
) -> str:
    """One decode of a run the template could not write whole, as the template writes it
    where it can: a line reads the same whichever run it came in (`specmon parse` reading
    a file in parts cuts runs elsewhere than one pass does)."""
    if len(row) <= _ROW_ITEMS or not row[_ROW_ITEMS]:
        written = block([row])
        if written is not None:
            return written
    return one(event) + "\n"


def _json_block(rows: list[tuple[str, ...]]) -> str | None:
    extra = "%.0s" * (len(rows[0]) - _ROW_ITEMS)
    try:
        lines = "\n".join(
            "\n".join(
                map((_JSON_HEAD + _JSON_GRAPH.get(graph, "false") + "}" + extra).__mod__, run)
            )
            for graph, run in groupby(rows, _GRAPH)
        )
    except TypeError:  # rows of different lengths
        return None
    if _JSON_TO_MEND.search(lines) is None:  # one pass where three would look
        return lines + "\n"
    if _JSON_LEADING_ZERO.search(lines) is not None:
        return None
    if '": ,' in lines:  # an absent value (accept len, a rank-less prefix)
        lines = lines.replace('": ,', '": null,')
    if '"ts": "",' in lines:
        lines = lines.replace('"ts": "",', '"ts": null,')
    return lines + "\n"


def _text_block(rows: list[tuple[str, ...]]) -> str | None:
    extra = "%.0s" * (len(rows[0]) - _ROW_ITEMS)
    try:
        lines = "\n".join(
            "\n".join(
                map((_TEXT_HEAD + _TEXT_GRAPH.get(graph, " cuda_graph=no") + extra).__mod__, run)
            )
            for graph, run in groupby(rows, _GRAPH)
        )
    except TypeError:
        return None
    lines += "\n"
    # Absent values are left out, as format_event does. Only #queue-req ends a line (the
    # graph's text may be nothing), and a long text is quicker to look for than `=\n`.
    if "= " in lines or "queue_req=\n" in lines:
        lines = _TEXT_EMPTY_FIELD.sub("", lines)
    if lines.startswith(_TEXT_NO_TS[1:]) or _TEXT_NO_TS in lines:
        lines = ("\n" + lines).replace(_TEXT_NO_TS, "\n-" + " " * 23 + "TP")[1:]
    if _TEXT_NO_RANK in lines:
        lines = lines.replace(_TEXT_NO_RANK, " -    " + Decode.kind + " ")
    return lines
