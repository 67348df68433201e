"""specmon.state.fleet without a terminal: a host's row from its store, sorting, filtering, the host
names a fleet command takes, and a relaunch over several controllers with one refusing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.paths import REPO
from support.tui_replay import FROZEN_NOW, ReplayController, failure_event, recorded_session

from specmon.backends import DEFAULT_BACKEND
from specmon.launch.config import load_config
from specmon.launch.spec import LaunchSpec
from specmon.model.errors import SpecmonError, UsageError
from specmon.model.events import ConnectionState, LoadBegin, RunInfo, ShardProgress
from specmon.state.fleet import (
    SORT_COLUMNS,
    FleetHost,
    filter_rows,
    fleet_names,
    fleet_row,
    fleet_rows,
    next_sort_column,
    relaunch_fleet,
    sort_rows,
)
from specmon.state.store import StateStore


def replayed(events) -> ReplayController:
    controller = ReplayController(events)
    controller.replay()
    return controller


def test_ready_host_row_has_its_figures() -> None:
    store = replayed(recorded_session()).bus.store
    row = fleet_row("alpha", store, FROZEN_NOW, {})
    assert row.state == "ready" and row.profile == "kimi-eagle3-nccl"
    assert row.tokens_per_s == store.throughput_stats()[0] and row.throughput_recent
    assert row.accept_len == store.last_decode.accept_len  # type: ignore[union-attr]
    assert row.verify_ms == pytest.approx(store.phase_means()[1])  # type: ignore[index]
    assert (row.gpus_busy, row.gpus_total) == (8, 8)
    assert row.mem_used_gb is not None and row.mem_total_gb is not None
    assert row.mem_used_gb <= row.mem_total_gb


def test_failed_host_row_names_the_root_cause_not_its_consequence() -> None:
    store = replayed([*recorded_session(ready=False), (FROZEN_NOW, failure_event())]).bus.store
    row = fleet_row("beta", store, FROZEN_NOW, {})
    assert row.state == "failed" and row.detail.startswith("failed (OOM): torch.OutOfMemoryError")
    assert row.tokens_per_s is None and row.throughput_recent == ()


def test_loading_row_shows_phase_percent_and_eta() -> None:
    store = StateStore()
    store.apply(ConnectionState(host="h", state="connected"), 100.0)
    store.apply(RunInfo(run_id="r", profile="p"), 100.0)
    store.apply(LoadBegin(), 100.0)
    store.apply(ShardProgress(done=2, total=8, seconds_per_shard=5.0), 110.0)
    row = fleet_row("h", store, 111.0, {"p": "vllm"})
    assert (row.state, row.detail, row.backend) == ("loading", "target weights 25% ETA 30s", "vllm")


def test_unreachable_row_says_why() -> None:
    store = StateStore()
    store.apply(ConnectionState(host="h", state="disconnected", detail="connection refused"), 1.0)
    row = fleet_row("h", store, 2.0, {})
    assert (row.state, row.detail) == ("unreachable", "connection refused")


def rows():
    ready = replayed(recorded_session())
    failed = replayed([*recorded_session(ready=False), (FROZEN_NOW, failure_event())])
    gone = ReplayController([])
    gone.bus.publish(ConnectionState(host="g", state="disconnected", detail="no route"), 1.0)
    hosts = [FleetHost("c-ready", ready), FleetHost("a-failed", failed), FleetHost("b-gone", gone)]
    return fleet_rows(hosts, FROZEN_NOW)


def test_sorting_every_column_and_cycling() -> None:
    table = rows()
    assert [r.name for r in sort_rows(table, "host")] == ["a-failed", "b-gone", "c-ready"]
    assert [r.name for r in sort_rows(table, "state")] == ["b-gone", "a-failed", "c-ready"]
    # Figures highest first, hosts without the figure last (by name).
    assert [r.name for r in sort_rows(table, "tok/s")] == ["c-ready", "a-failed", "b-gone"]
    assert [r.name for r in sort_rows(table, "gpus")][-1] == "b-gone"
    column, seen = SORT_COLUMNS[0], []
    for _ in SORT_COLUMNS:
        seen.append(column)
        column = next_sort_column(column)
    assert seen == list(SORT_COLUMNS) and column == SORT_COLUMNS[0]
    with pytest.raises(UsageError):
        sort_rows(table, "colour")


def test_filtering_matches_every_word_in_any_field() -> None:
    table = rows()
    assert [r.name for r in filter_rows(table, "OOM")] == ["a-failed"]
    assert [r.name for r in filter_rows(table, "kimi ready")] == ["c-ready"]
    assert [r.name for r in filter_rows(table, "")] == [r.name for r in table]
    assert filter_rows(table, "nothing-like-this") == []


def test_fleet_names(tmp_path: Path) -> None:
    config = load_config(REPO / "specmon.toml")
    assert fleet_names(["a", "b"], config, every=False) == ["a", "b"]
    with pytest.raises(UsageError, match="more than once: a"):
        fleet_names(["a", "b", "a"], config, every=False)
    with pytest.raises(UsageError, match="at least one host"):
        fleet_names([], config, every=False)
    with pytest.raises(UsageError, match="not both"):
        fleet_names(["a"], config, every=True)
    path = tmp_path / "specmon.toml"
    path.write_text('[hosts.gpu-a]\naddress = "10.0.0.1"\n[hosts.gpu-b]\naddress = "10.0.0.2"\n')
    assert fleet_names([], load_config(path), every=True) == ["gpu-a", "gpu-b"]
    path.write_text("")
    with pytest.raises(UsageError, match="names no hosts"):
        fleet_names([], load_config(path), every=True)


class Launcher(ReplayController):
    """Launches by recording the call; refuses when told to (as a busy lock would)."""

    def __init__(self, refuse: str | None = None) -> None:
        super().__init__([])
        self.refuse = refuse
        self.launched: list[tuple[LaunchSpec, str | None]] = []

    async def check_launch(self) -> None:
        if self.refuse:
            raise SpecmonError(self.refuse)

    async def launch_spec(self, spec: LaunchSpec, *, profile: str | None = None) -> str:
        if self.refuse:
            raise SpecmonError(self.refuse)
        self.launched.append((spec, profile))
        return f"run-{profile}"


def test_relaunch_fleet_proceeds_or_launches_none_as_chosen() -> None:
    ok, busy = Launcher(), Launcher(refuse="lock busy")
    hosts = [FleetHost("ok", ok), FleetHost("busy", busy)]
    specs = {
        "ok": LaunchSpec(DEFAULT_BACKEND, ("/opt/ok/python",)),
        "busy": LaunchSpec(DEFAULT_BACKEND, ("/opt/busy/python",)),
    }
    outcomes = asyncio.run(relaunch_fleet(hosts, "p", specs, all_or_none=True))
    assert [(o.name, o.run_id, o.refusal, o.skipped) for o in outcomes] == [
        ("ok", None, None, True),
        ("busy", None, "lock busy", False),
    ]
    assert ok.launched == []
    outcomes = asyncio.run(relaunch_fleet(hosts, "p", specs, all_or_none=False))
    assert [(o.name, o.run_id, o.refusal) for o in outcomes] == [
        ("ok", "run-p", None),
        ("busy", None, "lock busy"),
    ]
    assert ok.launched == [(specs["ok"], "p")]  # each host its own spec, as confirmed
