"""Several hosts at once: the fleet overview's rows, their sorting and filtering, and a
relaunch applied to several hosts. UI-free, so the fleet console and the headless commands
share it and tests reach it without a terminal.

Each host keeps its own controller, event bus and store; nothing here couples one host to
another, so a host that fails, hangs or never connects leaves the others untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Literal

from specmon.model.errors import SpecmonError, UsageError
from specmon.model.quantiles import WindowQuantiles
from specmon.state.saturation import saturation_badges
from specmon.state.store import PHASES, StateStore

if TYPE_CHECKING:
    from specmon.launch.config import Config
    from specmon.launch.spec import LaunchSpec
    from specmon.state.controller import HostController

BUSY_UTIL_PERCENT = 5.0  # a GPU above this utilisation counts as busy
SPARK_POINTS = 30  # throughput samples a row's sparkline is drawn from
VERIFY_CYCLES = 200  # probe cycles the verify mean is over (as the timing panel's)
UNREACHABLE_STATES = ("reconnecting", "disconnected")

RowState = Literal["connecting", "unreachable", "failed", "loading", "ready", "stopped", "other"]
SORT_COLUMNS: tuple[str, ...] = (
    "host",
    "state",
    "tok/s",
    "accept",
    "verify",
    "itl",
    "gpus",
    "age",
)
# Worst first when sorting by state: what needs the operator's eye comes to the top.
STATE_ORDER: dict[str, int] = {
    "unreachable": 0,
    "failed": 1,
    "loading": 2,
    "connecting": 3,
    "other": 4,
    "stopped": 5,
    "ready": 6,
}


@dataclass(frozen=True, slots=True)
class FleetHost:
    """One host of the fleet: the name the operator gave and its controller."""

    name: str
    controller: HostController


@dataclass(frozen=True, slots=True)
class FleetRow:
    """What the overview shows for one host, computed from its store alone."""

    name: str
    backend: str | None
    profile: str | None
    state: RowState
    detail: str  # loading phase with % and ETA, the failure's root cause, why unreachable
    tokens_per_s: float | None
    throughput_recent: tuple[float, ...]
    accept_len: float | None
    verify_ms: float | None  # only when the probe reports cycles
    gpus_busy: int
    gpus_total: int
    mem_used_gb: float | None
    mem_total_gb: float | None
    last_event_age_s: float | None
    # From the server's /metrics (the latest ``latency`` event): inter-token latency p90 in
    # seconds (None: not served, or no token in the window) and the saturation badges up;
    # ``latency_known`` says whether any figures came at all (no badge then means none is up).
    itl_p90_s: float | None = None
    itl_window: WindowQuantiles | None = None  # the figures it comes from ("<" or ">" a bound)
    saturation: tuple[str, ...] = ()
    latency_known: bool = False


def fleet_row(name: str, store: StateStore, now: float, backends: Mapping[str, str]) -> FleetRow:
    """The row for host ``name``; ``backends`` maps profile names to backends (the config's),
    for runs whose RunInfo does not say."""
    run = store.run
    profile = run.profile if run is not None else None
    backend = run.backend if run is not None and run.backend else backends.get(profile or "")
    state, detail = _state_and_detail(store, now)
    # The newest samples only: a row is redrawn several times a second for every host.
    current = store.throughput[-1].value if store.throughput else None
    accept = store.last_decode.accept_len if store.last_decode is not None else None
    recent_probe = list(islice(reversed(store.probe), VERIFY_CYCLES))
    verify = sum(p.verify_ms for p in recent_probe) / len(recent_probe) if recent_probe else None
    readings = list(store.gpus.values())
    busy = sum(1 for r in readings if (r.util_gpu or 0.0) > BUSY_UTIL_PERCENT)
    used = [r.mem_used_mb for r in readings if r.mem_used_mb is not None]
    total = [r.mem_total_mb for r in readings if r.mem_total_mb is not None]
    recent = tuple(p.value for p in islice(reversed(store.throughput), SPARK_POINTS))[::-1]
    latency = store.latency if state == "ready" else None
    itl = latency.itl_s if latency is not None else None
    return FleetRow(
        name=name,
        backend=backend,
        profile=profile,
        state=state,
        detail=detail,
        tokens_per_s=current if state == "ready" else None,
        throughput_recent=recent if state == "ready" else (),
        accept_len=accept if state == "ready" else None,
        verify_ms=verify if state == "ready" else None,
        gpus_busy=busy,
        gpus_total=len(readings),
        mem_used_gb=sum(used) / 1024 if used else None,
        mem_total_gb=sum(total) / 1024 if total else None,
        last_event_age_s=max(0.0, now - store.last_event_at) if store.last_event_at else None,
        itl_p90_s=itl.p90 if itl is not None else None,
        itl_window=itl,
        saturation=saturation_badges(latency),
        latency_known=latency is not None,
    )


def unreachable_why(store: StateStore) -> str | None:
    """Why the host cannot be reached now (its connection's own words), or None when it can
    (or is still connecting)."""
    connection = store.connection
    if connection is None or connection.state not in UNREACHABLE_STATES:
        return None
    return connection.detail or (
        f"reconnecting (attempt {connection.attempt})"
        if connection.state == "reconnecting"
        else "not connected"
    )


def _state_and_detail(store: StateStore, now: float) -> tuple[RowState, str]:
    connection = store.connection
    why = unreachable_why(store)
    if why is not None:
        return "unreachable", why
    if connection is None or connection.state == "connecting":
        return "connecting", "connecting…"
    state = store.run_state
    if state in ("failed", "hung"):
        failure = store.failure
        how = "hung" if state == "hung" else "failed"
        if failure is None:
            return "failed", how
        if failure.category != "other":
            how += f" ({failure.category.upper()})"
        # The server's first error line is the root cause; later ones are its consequences.
        cause = failure.root_cause[0] if failure.root_cause else ""
        return "failed", f"{how}: {cause}" if cause else how
    if state == "loading":
        notice = store.end_notice()  # the run followed now replaced another client's
        detail = loading_detail(store, now)
        return "loading", f"{detail}; {notice}" if notice else detail
    if state == "ready":
        notice = store.end_notice()
        return "ready", f"ready; {notice}" if notice else "ready"
    if state == "stopped":
        if store.run is None:
            return "stopped", "no server"
        end = store.run_end if store.run_end_id == store.run.run_id else None
        return "stopped", end.text() if end is not None else "stopped"
    return "other", state


def loading_detail(store: StateStore, now: float) -> str:
    """The loading phase, its progress in % and the ETA: "target weights 40% ETA 1m05s"."""
    loading = store.loading
    phase = loading.phase or "starting"
    if loading.phase == "target weights" and loading.shards_total:
        percent = 100 * loading.shards_done / loading.shards_total
    else:
        done = len([p for p in loading.done_phases if p in PHASES])
        percent = 100 * done / len(PHASES)
    text = f"{phase} {percent:.0f}%"
    eta = loading.eta_seconds(now)
    if eta is not None:
        minutes, seconds = divmod(int(eta), 60)
        text += f" ETA {minutes}m{seconds:02d}s" if minutes else f" ETA {seconds}s"
    return text


def fleet_rows(
    hosts: Sequence[FleetHost], now: float, backends: Mapping[str, str] | None = None
) -> list[FleetRow]:
    return [fleet_row(h.name, h.controller.bus.store, now, backends or {}) for h in hosts]


def sort_rows(rows: Sequence[FleetRow], column: str) -> list[FleetRow]:
    """Rows ordered by ``column`` (one of SORT_COLUMNS): names ascending, states worst first,
    figures highest first, ages freshest first; rows lacking the figure go last."""
    if column not in SORT_COLUMNS:
        raise UsageError(f"unknown sort column {column!r}; known: {', '.join(SORT_COLUMNS)}")
    by_name = sorted(rows, key=lambda r: r.name)
    if column == "host":
        return by_name
    if column == "state":
        return sorted(by_name, key=lambda r: STATE_ORDER[r.state])
    figure = {
        "tok/s": lambda r: r.tokens_per_s,
        "accept": lambda r: r.accept_len,
        "verify": lambda r: r.verify_ms,
        "itl": lambda r: r.itl_p90_s,  # slowest tokens first
        "gpus": lambda r: float(r.gpus_busy) if r.gpus_total else None,
        "age": lambda r: -r.last_event_age_s if r.last_event_age_s is not None else None,
    }[column]
    return sorted(by_name, key=lambda r: (figure(r) is None, -(figure(r) or 0.0)))


def next_sort_column(column: str) -> str:
    return SORT_COLUMNS[(SORT_COLUMNS.index(column) + 1) % len(SORT_COLUMNS)]


def filter_rows(rows: Sequence[FleetRow], text: str) -> list[FleetRow]:
    """Rows whose host, backend, profile, state or detail contains ``text`` (any case);
    several words must all match."""
    words = text.lower().split()
    if not words:
        return list(rows)

    def haystack(row: FleetRow) -> str:
        return " ".join(
            part or "" for part in (row.name, row.backend, row.profile, row.state, row.detail)
        ).lower()

    return [row for row in rows if all(word in haystack(row) for word in words)]


def fleet_names(
    given: Sequence[str], config: Config | None, *, every: bool, offers_all: bool = True
) -> list[str]:
    """The hosts a fleet command names: those given, or with ``every`` all of specmon.toml's
    (``offers_all``: the command has ``--all``, and the message for none says so);
    a clear UsageError for none or a host named twice."""
    names = list(given)
    if every:
        if names:
            raise UsageError("give hosts or --all, not both")
        names = [
            n
            for n, h in (config.hosts if config is not None else {}).items()
            if h != _builtin_hosts().get(n)
        ]  # `local` is built in, not the file's
        if not names:
            raise UsageError("--all: specmon.toml names no hosts ([hosts.NAME] tables)")
    if not names:
        raise UsageError(
            "name at least one host (or --all for every host in specmon.toml)"
            if offers_all
            else "name at least one HOST (e.g. root@gpu-box, or local)"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"host named more than once: {', '.join(twice)}")
    return names


def _builtin_hosts() -> dict[str, object]:
    from specmon.launch.config import BUILTIN_CONFIG_TOML, parse_config_text

    return dict(parse_config_text(BUILTIN_CONFIG_TOML, None, environ={}).hosts)


# --- one relaunch on several hosts ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostOutcome:
    """What a fleet relaunch did on one host: the run launched, or why the host refused."""

    name: str
    run_id: str | None = None
    refusal: str | None = None
    skipped: bool = False  # not attempted: another host refused and the operator chose all-or-none


async def relaunch_fleet(
    hosts: Sequence[FleetHost],
    profile: str,
    specs: Mapping[str, LaunchSpec],
    *,
    all_or_none: bool,
) -> list[HostOutcome]:
    """Relaunch ``profile`` on every host at once: each host's own spec (``specs`` by host name,
    the ones the operator confirmed, validated again by the host), each through its own
    controller (which takes that host's lock). With ``all_or_none``, each host is first asked whether it would accept
    (its lock taken and its runs checked); if one refuses, none is launched. Otherwise a host
    that refuses is reported and the others proceed."""
    if all_or_none:
        checks = await asyncio.gather(
            *(h.controller.check_launch() for h in hosts), return_exceptions=True
        )
        refusals = {h.name: _why(c) for h, c in zip(hosts, checks, strict=True) if c is not None}
        if refusals:
            return [
                HostOutcome(h.name, refusal=refusals.get(h.name), skipped=h.name not in refusals)
                for h in hosts
            ]
    results = await asyncio.gather(
        *(h.controller.launch_spec(specs[h.name], profile=profile) for h in hosts),
        return_exceptions=True,
    )
    return [
        HostOutcome(h.name, run_id=r)
        if isinstance(r, str)
        else HostOutcome(h.name, refusal=_why(r))
        for h, r in zip(hosts, results, strict=True)
    ]


def _why(error: object) -> str:
    if isinstance(error, SpecmonError):
        return str(error)
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return str(error)
