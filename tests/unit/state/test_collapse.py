"""The acceptance collapse (issue 31 item 3): a run's acceptance summary from the store,
the best earlier run with the same draft, the threshold, and the banner's words."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from typing import Any

import pytest

from specmon.model.events import AcceptanceCollapse, Decode, RunInfo, RunState, SpecDecode
from specmon.model.run_end import RunEnd
from specmon.session.collapse_watch import CollapseWatch
from specmon.state.collapse import (
    DROP,
    MIN_DRAFTS,
    MIN_WINDOWS,
    AcceptanceSummary,
    best_reference,
    check,
    summary_of,
)
from specmon.state.run_status import RunStatus
from specmon.state.store import StateStore
from tests.unit.state.test_run_diff import ARGV, draft, fingerprint

GOOD_FP = fingerprint(draft([2, 30, 58]))
BAD_FP = fingerprint(draft([0, 2, 30, 58]))


def run(
    run_id: str,
    started: float,
    acceptance: AcceptanceSummary | None = None,
    fp: dict | None = GOOD_FP,
    argv: tuple[str, ...] = ARGV,
) -> RunStatus:
    return RunStatus(
        run_id=run_id,
        profile="p",
        argv=argv,
        env={},
        pid=None,
        pgid=None,
        started_at=started,
        alive=False,
        port=30000,
        backend="sglang",
        fingerprint=fp,
        acceptance=acceptance.to_json() if acceptance else None,
    )


def p1(value: float, drafts: int = MIN_DRAFTS) -> AcceptanceSummary:
    return AcceptanceSummary(position_1=value, drafts=drafts, accept_len=1.0, windows=1)


def test_summary_from_the_store_counts_the_whole_run() -> None:
    store = StateStore(history=3)  # the series keeps 3 points; the mean keeps every window
    store.apply(RunInfo(run_id="r", backend="sglang"), 0.0)
    for i, value in enumerate([2.0, 3.0, 4.0, 5.0, 6.0]):
        store.apply(
            Decode(running_req=1, tokens=1, token_usage=0.1, accept_len=value,
                   gen_throughput=10.0, queue_req=0),
            float(i),
        )  # fmt: skip
    summary = summary_of(store)
    assert summary.accept_len == pytest.approx(4.0) and summary.windows == 5
    assert summary.position_1 is None and summary.drafts == 0
    store.apply(SpecDecode(per_position=(0.5, 0.2), drafted=400, mean_accept_len=1.7), 6.0)
    summary = summary_of(store)
    assert summary.position_1 == pytest.approx(0.5) and summary.drafts == 200
    store.apply(RunInfo(run_id="next", backend="sglang"), 7.0)  # a new run starts over
    assert summary_of(store) == AcceptanceSummary()


def test_a_record_is_untrusted() -> None:
    assert AcceptanceSummary.from_json("x") is None  # type: ignore[arg-type]
    odd = AcceptanceSummary.from_json(
        {"accept_len": "2", "windows": -4, "position_1": True, "drafts": 1.5, "steps": "3"}
    )
    assert odd == AcceptanceSummary()
    assert AcceptanceSummary.from_json({"position_1": 1e300}) == AcceptanceSummary()


def test_collapse_against_the_best_earlier_run_with_the_same_draft() -> None:
    history = [
        run("r1", 1.0, p1(0.60)),
        run("r2", 2.0, p1(0.68)),  # the best
        run("r3", 3.0, p1(0.90, drafts=MIN_DRAFTS - 1)),  # too few drafts to count
        run("other", 4.0, p1(0.95), argv=tuple(a.replace("/m/draft", "/m/d2") for a in ARGV)),
        run("later", 9.0, p1(0.99)),  # after the current run: not an earlier run
    ]
    current = run("now", 5.0, fp=BAD_FP)
    found = check(current, p1(0.19, drafts=500), history)
    assert isinstance(found, AcceptanceCollapse)
    assert (found.measure, found.reference_run, found.reference_value) == ("position_1", "r2", 0.68)
    assert found.value == 0.19 and found.cycles == 500 and not found.cleared
    assert found.diagnoses[0].code == "aux_layers_changed"
    assert found.message.startswith(
        "acceptance 0.19 at position 1 against 0.68 in run r2 (same draft): changed since: "
        "auxiliary layers [2, 30, 58] -> [0, 2, 30, 58]"
    )
    assert found.to_dict()["diagnoses"][0]["code"] == "aux_layers_changed"


@pytest.mark.parametrize(
    ("value", "drafts", "collapsed"),
    [
        (0.68 * (1 - DROP) - 0.001, MIN_DRAFTS, True),
        (0.68 * (1 - DROP) + 0.001, MIN_DRAFTS, False),  # 30% below is not "more than"
        (0.10, MIN_DRAFTS - 1, False),  # not yet sustained
    ],
)
def test_threshold_and_cycles(value: float, drafts: int, collapsed: bool) -> None:
    history = [run("good", 1.0, p1(0.68))]
    found = check(run("now", 2.0), p1(value, drafts), history)
    assert (found is not None) is collapsed


def test_accept_length_compares_only_at_equal_steps() -> None:
    def al(value: float, steps: int) -> AcceptanceSummary:
        return AcceptanceSummary(accept_len=value, windows=MIN_WINDOWS, steps=steps)

    history = [run("s5", 1.0, al(3.2, 5)), run("s3", 1.5, al(2.0, 3))]
    ref = best_reference(run("now", 2.0), al(1.2, 3), history)
    assert ref is not None and (ref.run.run_id, ref.measure) == ("s3", "accept_len")
    found = check(run("now", 2.0), al(1.2, 3), history)
    assert found is not None and "accept length" in found.message
    assert check(run("now", 2.0), al(1.2, 4), history) is None  # no run at 4 steps
    assert check(run("now", 2.0), al(1.2, 3), []) is None  # no earlier run: nothing to say


def test_its_own_fingerprint_is_used_before_the_record_holds_it() -> None:
    found = check(run("now", 2.0, fp=None), p1(0.1), [run("g", 1.0, p1(0.7))], BAD_FP)
    assert found is not None and found.diagnoses[0].code == "aux_layers_changed"
    bare = check(run("now", 2.0, fp=None), p1(0.1), [run("g", 1.0, p1(0.7))])
    assert bare is not None and bare.diagnoses[0].code == "no_recorded_change"


class FakeHost:
    """The session's side, in memory: its runs, what was noted, what was published."""

    def __init__(self, store: StateStore, history: list[RunStatus], current: RunStatus) -> None:
        self.store = store
        self.history = history
        self.current_run = current
        self.notes: list[tuple[str, dict, str | None]] = []
        self.published: list[AcceptanceCollapse] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.status_calls = 0

    def follows_own_run(self) -> bool:
        return True

    async def status(self) -> list[RunStatus]:
        self.status_calls += 1
        return self.history

    async def note_run(
        self, run_id: str, notes: Mapping[str, Any], *, unless_set: str | None = None
    ) -> None:
        self.notes.append((run_id, dict(notes), unless_set))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(work))

    def publish(self, event: Any, at: float | None = None) -> None:
        self.store.apply(event, 0.0)
        self.published.append(event)


async def test_the_watch_notes_compares_publishes_and_clears() -> None:
    store = StateStore()
    host = FakeHost(store, [run("good", 1.0, p1(0.68))], run("now", 2.0, fp=None))
    clock = 100.0
    watch = CollapseWatch(host, store, clock=lambda: clock)

    def feed(event: Any) -> None:
        nonlocal clock
        clock += 1.5  # past the check interval: each event is compared
        store.apply(event, clock)
        watch.on_event(event)

    feed(RunInfo(run_id="now", backend="sglang"))
    await asyncio.gather(*host.tasks)
    watch.set_fingerprint("now", BAD_FP)
    await asyncio.gather(*host.tasks)
    assert ("now", {"fingerprint": BAD_FP}, "fingerprint") in host.notes
    assert host.status_calls == 0  # the runs are read once there is enough to compare
    feed(SpecDecode(per_position=(0.19,), drafted=60, mean_accept_len=1.2))
    await asyncio.gather(*host.tasks)
    assert host.status_calls == 0  # 60 drafts: not yet
    feed(SpecDecode(per_position=(0.19,), drafted=300, mean_accept_len=1.2))
    await asyncio.gather(*host.tasks)
    assert host.status_calls == 1
    assert len(host.published) == 1 and store.collapse is host.published[0]
    assert store.collapse.diagnoses[0].code == "aux_layers_changed"
    feed(SpecDecode(per_position=(0.19,), drafted=300, mean_accept_len=1.2))  # same: once
    assert len(host.published) == 1
    for _ in range(20):  # recovers: the run's share climbs back over 70% of 0.68
        feed(SpecDecode(per_position=(0.9,), drafted=300, mean_accept_len=2.5))
    assert host.published[-1].cleared and store.collapse is None
    await asyncio.gather(*host.tasks)
    acceptance = [n for _, n, _ in host.notes if "acceptance" in n]
    assert acceptance and acceptance[-1]["acceptance"]["drafts"] >= 300
    noted = len(acceptance)
    feed(RunState(run_id="now", state="stopped", end=RunEnd("stopped")))
    await asyncio.gather(*host.tasks)
    acceptance = [n for _, n, _ in host.notes if "acceptance" in n]
    assert len(acceptance) == noted + 1  # its end notes the final summary
    assert acceptance[-1]["acceptance"]["drafts"] == summary_of(store).drafts
    await asyncio.gather(*host.tasks)


async def test_a_replaced_runs_late_collapse_is_not_shown() -> None:
    store = StateStore()
    store.apply(RunInfo(run_id="new", backend="sglang"), 0.0)
    found = check(run("old", 2.0), p1(0.1), [run("g", 1.0, p1(0.7))])
    assert found is not None
    store.apply(found, 1.0)
    assert store.collapse is None
    store.apply(replace(found, run_id="new"), 1.0)
    assert store.collapse is not None


async def test_a_run_replaced_without_an_end_seen_keeps_its_summary() -> None:
    """The store forgets a run when the next is followed: its last summary is noted then."""
    store = StateStore()
    host = FakeHost(store, [], run("old", 1.0))
    clock = 0.0
    watch = CollapseWatch(host, store, clock=lambda: clock)
    for event in (
        RunInfo(run_id="old", backend="sglang"),
        SpecDecode(per_position=(0.6,), drafted=250, mean_accept_len=1.6),  # noted at once
        SpecDecode(per_position=(0.6,), drafted=250, mean_accept_len=1.6),  # within 10 s
        RunInfo(run_id="new", backend="sglang"),
    ):
        clock += 2.0
        store.apply(event, clock)
        watch.on_event(event)
    await asyncio.gather(*host.tasks)
    old = [n["acceptance"] for rid, n, _ in host.notes if rid == "old" and "acceptance" in n]
    assert old and old[-1]["drafts"] == 500 and old[-1]["position_1"] == 0.6
    assert not [n for rid, n, _ in host.notes if rid == "new" and "acceptance" in n]


async def test_the_last_events_of_a_burst_are_compared_too() -> None:
    """A replayed log arrives within one check interval: the comparison it holds back is
    made once the interval is over, not at the next event (which may never come)."""
    store = StateStore()
    host = FakeHost(store, [run("good", 1.0, p1(0.68))], run("now", 2.0, fp=None))
    clock = 10.0
    watch = CollapseWatch(host, store, clock=lambda: clock)
    for event, at in (
        (RunInfo(run_id="now", backend="sglang"), 10.0),
        (SpecDecode(per_position=(0.19,), drafted=40, mean_accept_len=1.2), 10.0),  # compared
        (SpecDecode(per_position=(0.19,), drafted=400, mean_accept_len=1.2), 10.95),  # held
    ):
        clock = at
        store.apply(event, at)
        watch.on_event(event)
    assert host.status_calls == 0
    clock = 11.1  # the interval is over when the deferred check runs (0.05 s later)
    await asyncio.sleep(0.2)
    await asyncio.gather(*host.tasks)
    assert host.status_calls == 1 and store.collapse is not None
