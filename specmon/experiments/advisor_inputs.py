"""What the tuning advisor is fed, gathered from one host's live store (and the ledger's verify
times): the running draft settings, the probe's phase means, requests per cycle and acceptance
by position. Server-agnostic: it reads only the store's typed state, and asks the run's backend
what its launch and server info say about the draft (``Backend.draft_shape``); it never reads a
server's own names for things.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from specmon.backends import DEFAULT_BACKEND, Backend, backend_for_command, get_backend
from specmon.experiments.advisor import (
    MIN_CYCLES,
    Advice,
    AdvisorError,
    AdvisorInputs,
    LoadModel,
    advise,
    predict_loads,
)
from specmon.experiments.ledger import VerifySample
from specmon.model.errors import SpecmonError
from specmon.state.store import StateStore

WINDOW_CYCLES = 2000  # the most recent probe cycles the means are taken over


@dataclass(frozen=True, slots=True)
class DraftSettings:
    """The running server's draft shape; None where neither the server nor its launch says."""

    num_steps: int | None
    topk: int | None
    num_draft_tokens: int | None


def run_backend(store: StateStore) -> Backend:
    """The backend of the followed run (the default one before any run is seen)."""
    name = store.run.backend if store.run is not None else None
    return get_backend(name or DEFAULT_BACKEND)


def steps_setting(store: StateStore) -> str | None:
    """The setting a sweep over the run's step count varies (e.g. as a grid axis name)."""
    return run_backend(store).steps_setting


def draft_settings(store: StateStore) -> DraftSettings:
    """Steps, topk and draft tokens in force: the backend's reading of the server's own report
    and the launch's flags (``Backend.draft_shape``), a run-time step change (adaptive
    speculation) over both, and the probe's tokens per request as the last resort for the
    draft tokens."""
    argv: tuple[str, ...] = ()
    env: dict[str, str] = {}
    if store.run is not None:
        argv, env = tuple(store.run.argv), dict(store.run.env)
    shape = run_backend(store).draft_shape(argv, env, store.server_info)
    steps, topk, tokens = shape.steps, shape.topk, shape.verify_tokens
    if tokens is None:
        tokens = probe_tokens_per_request(store)
    if store.spec_steps is not None:
        steps = store.spec_steps
        if topk in (None, 1):
            tokens = steps + 1
    if steps is None and tokens is not None and topk in (None, 1):
        steps = tokens - 1
    if topk is None and steps is not None and tokens == steps + 1:
        topk = 1  # a chain checks steps + 1 tokens; a tree checks more
    return DraftSettings(steps, topk, tokens)


def _sample_backend(argv: Sequence[str], fallback: str | None) -> Backend:
    """The backend a benchmark's launch ran (by its command), else ``fallback``'s."""
    try:
        name = backend_for_command(tuple(argv))
    except SpecmonError:
        name = None
    return get_backend(name or fallback or DEFAULT_BACKEND)


def verify_by_draft_tokens(
    samples: Sequence[VerifySample],
    requests_per_cycle: float | None = None,
    backend: str | None = None,
) -> dict[int, float]:
    """Mean verify ms per draft-token count. Of the concurrencies measured at two or more
    token counts, the one nearest ``requests_per_cycle`` (a verify's cost depends on the
    requests it checks); empty when none was. Each launch is read by the backend its command
    runs (``backend``: the live run's, for a command no backend claims)."""
    by_concurrency: dict[int, dict[int, list[float]]] = {}
    for sample in samples:
        shape = _sample_backend(sample.argv, backend).draft_shape(sample.argv, sample.env, {})
        tokens = shape.verify_tokens
        if tokens is None and shape.steps is not None and shape.topk == 1:
            tokens = shape.steps + 1
        if tokens is None or tokens < 1:
            continue
        group = by_concurrency.setdefault(sample.concurrency, {})
        group.setdefault(tokens, []).append(sample.verify_ms)
    usable = {c: points for c, points in by_concurrency.items() if len(points) >= 2}
    if not usable:
        return {}
    target = requests_per_cycle if requests_per_cycle is not None else 1.0
    nearest = min(usable, key=lambda c: (abs(c - target), c))
    return {t: sum(ms) / len(ms) for t, ms in sorted(usable[nearest].items())}


def load_model_from_samples(
    samples: Sequence[VerifySample], backend: str | None = None
) -> LoadModel | None:
    """The load model's knee from the ledger: a least-squares line of verify ms against the
    tokens a verify processes (concurrency x draft tokens) over benchmarks at two or more
    concurrencies; knee = intercept / slope. None when the ledger cannot say (one load only,
    or no growth with tokens measured)."""
    points: list[tuple[float, float]] = []
    for sample in samples:
        shape = _sample_backend(sample.argv, backend).draft_shape(sample.argv, sample.env, {})
        tokens = shape.verify_tokens
        if tokens is None and shape.steps is not None and shape.topk == 1:
            tokens = shape.steps + 1
        if tokens is not None and tokens >= 1 and sample.verify_ms > 0:
            points.append((float(sample.concurrency * tokens), sample.verify_ms))
    if len({sample.concurrency for sample in samples}) < 2 or len({x for x, _ in points}) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    intercept = mean_y - slope * mean_x
    if slope <= 0 or intercept <= 0:
        return None
    return LoadModel(knee_tokens=intercept / slope, source="ledger")


def probe_tokens_per_request(store: StateStore) -> int | None:
    """Tokens one request's verify checks, from the latest probe record that counts them: the
    draft positions the backend says it stands for, plus the root."""
    backend = run_backend(store)
    for record in reversed(store.probe):
        if record.batch_size and record.draft_tokens:
            return backend.probe_draft_positions(record.draft_tokens, record.batch_size) + 1
    return None


def model_of(store: StateStore) -> str | None:
    """The served model, as the benchmarks in the ledger name it: the path the server loaded
    it from, else the name it serves it as."""
    info = store.server_info
    return info.get("model_path") or info.get("model") or None


def gather_inputs(
    store: StateStore, verify_by_tokens: Mapping[int, float] | None = None
) -> AdvisorInputs:
    """The advisor's inputs from the store; AdvisorError (one line) when something is missing."""
    settings = draft_settings(store)
    if settings.num_steps is None:
        raise AdvisorError("the running server's draft step count is unknown (no run seen yet)")
    if settings.topk is None:
        raise AdvisorError(
            "the running server's draft topk is unknown (neither its info nor its launch says)"
        )
    recent = [r for r in list(store.probe)[-WINDOW_CYCLES:] if r.source == "probe"]
    if not recent:
        raise AdvisorError(
            "no probe cycles yet: the advisor needs the draft/verify probe (profile probe = "
            "true) and a server that is decoding"
        )
    n = len(recent)
    draft_ms = sum(r.draft_ms for r in recent) / n
    sizes = [r.batch_size for r in recent if r.batch_size]
    steps = settings.num_steps
    return AdvisorInputs(
        num_steps=steps,
        topk=settings.topk,
        accept_at_least=tuple(store.accept_by_position.ratios()[:steps]),
        draft_ms_per_step=draft_ms / steps if steps else 0.0,
        verify_ms=sum(r.verify_ms for r in recent) / n,
        extend_ms=sum(r.extend_ms for r in recent) / n,
        requests_per_cycle=sum(sizes) / len(sizes) if sizes else 1.0,
        cycles=n,
        num_draft_tokens=settings.num_draft_tokens,
        verify_by_tokens=dict(verify_by_tokens or {}),
    )


def advise_from_store(
    store: StateStore, ledger: LedgerReader | None, host: str, loads: Sequence[int] = ()
) -> tuple[Advice, str | None]:
    """The advice for the host's running server, with the ledger's verify times for this host
    and model when there are any; returns (advice, model). AdvisorError when it cannot.
    ``loads``: also predict the best step count at each of these concurrencies."""
    model = model_of(store)
    verify_by_tokens: dict[int, float] = {}
    load_model: LoadModel | None = None
    if ledger is not None:
        sizes = [r.batch_size for r in list(store.probe)[-WINDOW_CYCLES:] if r.batch_size]
        per_cycle = sum(sizes) / len(sizes) if sizes else None
        backend = store.run.backend if store.run is not None else None
        samples = ledger.speculative_verify_times(host, model)
        verify_by_tokens = verify_by_draft_tokens(samples, per_cycle, backend)
        load_model = load_model_from_samples(samples, backend)
    advice = advise(gather_inputs(store, verify_by_tokens))
    if loads:
        advice = predict_loads(advice, loads, load_model)
    return advice, model


def probe_cycles(store: StateStore) -> int:
    """The probe's own cycle records the store holds (not the step-time stand-ins)."""
    return sum(1 for r in store.probe if r.source == "probe")


def enough_data(store: StateStore, cycles: int = MIN_CYCLES) -> bool:
    """Whether the store holds ``cycles`` probe cycles (at least the advisor's minimum) and as
    many request-verifies for acceptance by position."""
    wanted = max(MIN_CYCLES, cycles)
    return probe_cycles(store) >= wanted and store.accept_by_position.drafts >= wanted


class LedgerReader(Protocol):
    """The one ledger query the advisor makes (specmon.experiments.ledger.Ledger offers it)."""

    def speculative_verify_times(self, host: str, model: str | None) -> list[VerifySample]: ...
