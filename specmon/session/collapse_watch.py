"""The session's part in explaining an acceptance collapse (docs/run-diff.md): note the
followed run's acceptance summary, server version and fingerprint in its record on the host
(for later runs, and for other clients), and compare the run with the best earlier run on
the host with the same draft, publishing an ``acceptance_collapse`` event when it appears,
changes or clears. The comparison itself is state/collapse.py."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol

from specmon.model.errors import SpecmonError
from specmon.model.events import (
    AcceptanceCollapse,
    Decode,
    Event,
    ProbeTiming,
    RunInfo,
    RunState,
    ServerInfo,
    SpecDecode,
)
from specmon.state.collapse import DROP, AcceptanceSummary, check, summary_of
from specmon.state.run_status import RunStatus
from specmon.state.store import StateStore

CHECK_INTERVAL_S = 1.0  # at most one comparison a second, however fast events come
NOTE_INTERVAL_S = 10.0  # the record's acceptance summary, at most this often (and at the end)
VALUE_STEP = 0.05  # a collapse is told again when its value moves by this much
ACCEPTANCE_EVENTS = (Decode, SpecDecode, ProbeTiming)


class CollapseHost(Protocol):
    """What the watch needs of the session (host.py's HostSession)."""

    @property
    def current_run(self) -> RunStatus | None: ...

    def follows_own_run(self) -> bool: ...

    async def status(self) -> list[RunStatus]: ...

    async def note_run(
        self, run_id: str, notes: Mapping[str, Any], *, unless_set: str | None = None
    ) -> None: ...

    def spawn(self, work: Coroutine[Any, Any, None]) -> None: ...

    def publish(self, event: Event, at: float | None = None) -> None: ...


class CollapseWatch:
    """One per session: fed every event the session publishes, it notes the followed run's
    summary in its record and compares it with the host's earlier runs (module docstring)."""

    def __init__(
        self, host: CollapseHost, store: StateStore, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.host = host
        self.clock = clock
        self.store = store
        self._later: asyncio.TimerHandle | None = None  # a comparison deferred by the interval
        self._reset(None)

    @property
    def fingerprint(self) -> Mapping[str, Any] | None:
        """The followed run's fingerprint as read on the host (None before it was read)."""
        return self._fingerprint

    # --- inputs ------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """Called by the session after each event it publishes."""
        if isinstance(event, AcceptanceCollapse):
            return
        if isinstance(event, RunInfo):
            if event.run_id != self._run_id:
                self._start(event.run_id)
            return
        if self._run_id is None:
            return
        if isinstance(event, ServerInfo):
            self._note_version()
        elif isinstance(event, RunState) and event.run_id == self._run_id and event.end:
            self.flush()
        elif isinstance(event, ACCEPTANCE_EVENTS):
            self._dirty = True
            self.tick()

    def set_fingerprint(self, run_id: str, fingerprint: Mapping[str, Any]) -> None:
        """The run's fingerprint as just read on the host: kept in its record unless a
        client noted it already (the first reading, nearest its launch, stays)."""
        if run_id != self._run_id:
            return
        self._fingerprint = fingerprint
        if self.host.follows_own_run():
            self._note({"fingerprint": dict(fingerprint)}, unless_set="fingerprint")
        self._dirty = True

    # --- work --------------------------------------------------------------------------

    def _start(self, run_id: str) -> None:
        self.flush()  # the run followed until now: its last summary
        self._reset(run_id)

    def _reset(self, run_id: str | None) -> None:
        """Forget the run followed until now; ``run_id`` is followed from here."""
        self._run_id = run_id
        self._history: list[RunStatus] | None = None  # the host's runs, read once per run
        self._fingerprint: Mapping[str, Any] | None = None
        self._noted: AcceptanceSummary | None = None  # the summary last noted in its record
        self._noted_at = float("-inf")
        self._checked_at = float("-inf")
        self._dirty = False  # acceptance arrived since the last comparison
        self._shown: tuple[str, str, int] | None = None  # (measure, reference, value step)
        self._version_noted = False
        self._latest = AcceptanceSummary()  # the run's, as of the last comparison
        self._loading = False  # the host's runs are being read

    async def _load_history(self, run_id: str) -> None:
        """The host's runs, read once the run has enough to compare (not at its start: the
        run it replaced may still be noting its final summary then)."""
        try:
            history = await self.host.status()
        except SpecmonError:
            history = None
        if run_id != self._run_id:
            return
        self._loading = False
        if history is not None:
            self._history = history
            self._dirty = True
            self._checked_at = float("-inf")
            self.tick()

    def _check_later(self, wait: float) -> None:
        if self._later is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): the next event compares
            return

        def due() -> None:
            self._later = None
            self.tick()

        self._later = loop.call_later(wait, due)

    async def compare_now(self) -> AcceptanceCollapse | None:
        """The comparison as of now, unthrottled (``advise``): the host's runs read first
        when they were not yet; None without a collapse (or a run to compare)."""
        run = self.host.current_run
        if run is None or run.run_id != self._run_id:
            return None
        if self._history is None:
            with contextlib.suppress(SpecmonError):
                self._history = await self.host.status()
        if self._history is None:
            return None
        return check(run, summary_of(self.store), self._history, self._fingerprint)

    def tick(self) -> None:
        """Compare (at most once a CHECK_INTERVAL_S) and note (once a NOTE_INTERVAL_S)."""
        now = self.clock()
        if not self._dirty:
            return
        wait = CHECK_INTERVAL_S - (now - self._checked_at)
        if wait > 0:
            self._check_later(wait)  # the last events of a burst (a replay) are compared too
            return
        self._checked_at = now
        self._dirty = False
        summary = self._latest = summary_of(self.store)
        if now - self._noted_at >= NOTE_INTERVAL_S:
            self._noted_at = now
            self._note_summary(summary)
        self._compare(summary)

    def _compare(self, summary: AcceptanceSummary) -> None:
        run = self.host.current_run
        if run is None or run.run_id != self._run_id:
            return
        if self._history is None:
            comparable = any(summary.value(m) is not None for m in ("position_1", "accept_len"))
            if comparable and not self._loading:
                self._loading = True
                self.host.spawn(self._load_history(self._run_id))
            return
        found = check(run, summary, self._history, self._fingerprint)
        if found is None:
            if self._shown is not None:
                self._shown = None
                self.host.publish(_cleared(run.run_id))
            return
        # Told again when its reference changes or its value moves by a step of VALUE_STEP:
        # the banner's figure stays current without an event per window.
        shown = (found.measure, found.reference_run, round(found.value / VALUE_STEP))
        if shown != self._shown:
            self._shown = shown
            self.host.publish(found)

    def flush(self) -> None:
        """Note the run's latest summary now (its end, a new run followed, the session's
        close), when it covers more than the record holds. The store forgets a run as soon
        as the next one is followed: its summary from the last comparison is noted then."""
        if self._run_id is None:
            return
        run = self.store.run
        ours = run is not None and run.run_id == self._run_id
        self._note_summary(summary_of(self.store) if ours else self._latest)

    def _note_summary(self, summary: AcceptanceSummary) -> None:
        if not self.host.follows_own_run() or not (summary.drafts or summary.windows):
            return
        if not summary.more_than(self._noted):
            return
        self._noted = summary
        self._note({"acceptance": summary.to_json()})

    def _note_version(self) -> None:
        version = self.store.server_info.get("version")
        if version and not self._version_noted and self.host.follows_own_run():
            self._version_noted = True
            self._note({"server_version": str(version)[:80]}, unless_set="server_version")

    def _note(self, notes: Mapping[str, Any], *, unless_set: str | None = None) -> None:
        run_id = self._run_id
        if run_id is None:
            return
        self.host.spawn(_quietly(self.host.note_run(run_id, notes, unless_set=unless_set)))


async def _quietly(work: Awaitable[None]) -> None:
    with contextlib.suppress(SpecmonError, asyncio.TimeoutError):
        await work


def _cleared(run_id: str) -> AcceptanceCollapse:
    return AcceptanceCollapse(
        run_id=run_id,
        measure="",
        value=0.0,
        reference_value=0.0,
        reference_run="",
        cycles=0,
        message=f"acceptance back within {DROP:.0%} of the best earlier run",
        cleared=True,
    )
