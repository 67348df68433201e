"""`specmon advise` on a server nobody sends requests to waited its whole --timeout (120 s)
without a word. It now says every 10 s how many probe cycles it has of those it needs and, while
none come, that the server decodes (and the probe times cycles) only while requests come."""

from __future__ import annotations

import argparse

from specmon.commands.advise import waiting_text
from specmon.model.events import ProbeTiming
from specmon.state.store import StateStore


def args(cycles: int = 300) -> argparse.Namespace:
    return argparse.Namespace(host="gpu-box", cycles=cycles, timeout=120.0)


def test_an_idle_server_is_told_to_get_requests_and_how():
    text = waiting_text(StateStore(), args(), 95.4)
    assert text.startswith("waiting for probe cycles: 0 of 300, 0 of 300 drafts (95 s left")
    assert "send it requests (`specmon bench gpu-box` sends some)" in text
    assert "probe = true" in text


def test_cycles_coming_in_are_counted_and_the_hint_goes():
    store = StateStore()
    for wall in range(40):
        store.apply(
            ProbeTiming(
                wall=float(wall),
                draft_ms=1.0,
                verify_ms=28.0,
                extend_ms=0.3,
                cycle_ms=29.3,
                accepted_per_request=(2,),
                draft_tokens=6,
                batch_size=1,
            ),
            at=float(wall),
        )
    text = waiting_text(store, args(cycles=60), 30.0)
    assert text.startswith("waiting for probe cycles: 40 of 60, 40 of 60 drafts (30 s left")
    assert "bench" not in text
