"""An acceptance collapse: a run whose acceptance stays far below the best earlier run on the
same host with the same draft checkpoint, and what changed since (docs/run-diff.md).

The operators this exists for lost days to a draft fed other target layers than it was
trained on (acceptance ~47% -> ~19%) with nothing on screen saying why. Each client that
follows a run notes its acceptance summary in the run's record on the host; a later run is
compared with the best earlier one, and the differences between the two records (state/
run_diff.py) are the diagnosis, most likely cause first. Pure: the session feeds it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from specmon.backends import get_backend
from specmon.model.errors import SpecmonError
from specmon.model.events import AcceptanceCollapse
from specmon.state.run_diff import RunFacts, diagnose, diff_runs
from specmon.state.run_status import RunStatus
from specmon.state.store import StateStore

DROP = 0.30  # a run more than this far below the reference has collapsed
MIN_DRAFTS = 100  # drafts counted at position 1 before its share is compared
MIN_WINDOWS = 5  # accept-length windows (log lines) before their mean is compared

MEASURE_WORDS = {"position_1": "at position 1", "accept_len": "accept length"}


@dataclass(frozen=True, slots=True)
class AcceptanceSummary:
    """A run's acceptance so far: the mean accept length over its windows, the share of
    drafts accepted at position 1 over its counted drafts, and the draft steps it ran with
    (accept lengths compare only at equal steps; position 1 does not depend on them)."""

    accept_len: float | None = None
    windows: int = 0
    position_1: float | None = None
    drafts: int = 0
    steps: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "accept_len": None if self.accept_len is None else round(self.accept_len, 4),
            "windows": self.windows,
            "position_1": None if self.position_1 is None else round(self.position_1, 4),
            "drafts": self.drafts,
            "steps": self.steps,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> AcceptanceSummary | None:
        """A record's summary; None when it is not one (a record is untrusted input)."""
        if not isinstance(data, Mapping):
            return None

        def number(key: str) -> float | None:
            value = data.get(key)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            return float(value) if ok and 0 <= value < 1e6 else None

        def count(key: str) -> int:
            value = data.get(key)
            ok = isinstance(value, int) and not isinstance(value, bool)
            return value if ok and value >= 0 else 0

        steps = data.get("steps")
        return cls(
            accept_len=number("accept_len"),
            windows=count("windows"),
            position_1=number("position_1"),
            drafts=count("drafts"),
            steps=steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
        )

    def value(self, measure: str) -> float | None:
        """The measure, when enough of the run backs it."""
        if measure == "position_1":
            return self.position_1 if self.drafts >= MIN_DRAFTS else None
        return self.accept_len if self.windows >= MIN_WINDOWS else None

    def cycles(self, measure: str) -> int:
        return self.drafts if measure == "position_1" else self.windows

    def more_than(self, other: AcceptanceSummary | None) -> bool:
        """Whether this summary covers more of the run than ``other`` (a record keeps the
        fuller one: two clients following one run note the same counts as they grow)."""
        if other is None:
            return True
        return (self.drafts, self.windows) > (other.drafts, other.windows)


def summary_of(store: StateStore) -> AcceptanceSummary:
    """The followed run's summary from the store."""
    ratios = store.accept_by_position.ratios()
    drafts = store.accept_by_position.drafts
    windows = store.accept_len_windows
    return AcceptanceSummary(
        accept_len=store.accept_len_sum / windows if windows else None,
        windows=windows,
        position_1=ratios[0] if ratios and drafts else None,
        drafts=drafts,
        steps=store.spec_steps,
    )


def draft_path(run: RunStatus) -> str | None:
    """The draft checkpoint a run was launched with (its flags, as the backend reads them)."""
    try:
        return get_backend(run.backend).model_paths(run.argv)[1]
    except SpecmonError:  # a backend this specmon does not know
        return None


@dataclass(frozen=True, slots=True)
class Reference:
    run: RunStatus
    measure: str
    value: float


def best_reference(
    current: RunStatus, summary: AcceptanceSummary, history: Iterable[RunStatus]
) -> Reference | None:
    """The best earlier run on the host with the same draft checkpoint, by the measure both
    runs have: position 1 where both counted enough drafts, else the accept length at the
    same steps. None without one (no earlier run, or none whose acceptance was noted)."""
    path = draft_path(current)
    if not path:
        return None
    best: Reference | None = None
    for run in history:
        if run.run_id == current.run_id or draft_path(run) != path:
            continue
        if (run.started_at or 0.0) > (current.started_at or float("inf")):
            continue
        theirs = AcceptanceSummary.from_json(run.acceptance)
        if theirs is None:
            continue
        for measure in ("position_1", "accept_len"):
            value = theirs.value(measure)
            if value is None or summary.value(measure) is None:
                continue
            if measure == "accept_len" and theirs.steps != summary.steps:
                continue
            if best is None or _better(measure, value, best):
                best = Reference(run, measure, value)
            break  # position 1 where both have it
    return best


def _better(measure: str, value: float, best: Reference) -> bool:
    if measure != best.measure:
        return measure == "position_1"
    return value > best.value


def check(
    current: RunStatus,
    summary: AcceptanceSummary,
    history: Iterable[RunStatus],
    fingerprint: Mapping[str, Any] | None = None,
) -> AcceptanceCollapse | None:
    """The collapse event when the run's acceptance is more than DROP below the best
    earlier run's, else None. ``fingerprint``: the run's own, when its record does not hold
    it yet."""
    reference = best_reference(current, summary, history)
    if reference is None:
        return None
    value = summary.value(reference.measure)
    if value is None or value >= reference.value * (1.0 - DROP):
        return None
    now = RunFacts.from_status(current)
    if fingerprint is not None and now.fingerprint is None:
        now = replace(now, fingerprint=fingerprint)
    diagnoses = tuple(diagnose(diff_runs(RunFacts.from_status(reference.run), now)))
    return AcceptanceCollapse(
        run_id=current.run_id,
        measure=reference.measure,
        value=round(value, 4),
        reference_value=round(reference.value, 4),
        reference_run=reference.run.run_id,
        cycles=summary.cycles(reference.measure),
        message=banner_text(reference.measure, value, reference, diagnoses),
        diagnoses=diagnoses,
    )


def banner_text(measure: str, value: float, reference: Reference, diagnoses: Iterable[Any]) -> str:
    """ "acceptance 0.19 at position 1 against 0.68 in run ID (same draft): changed since:
    auxiliary layers [2, 30, 58] -> [0, 2, 30, 58] (…); …" """
    causes = "; ".join(d.message for d in diagnoses)
    return (
        f"acceptance {value:.2f} {MEASURE_WORDS[measure]} against {reference.value:.2f} in run "
        f"{reference.run.run_id} (same draft): changed since: {causes}"
    )
