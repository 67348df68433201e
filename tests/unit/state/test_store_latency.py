"""``latency`` events in the store (the latest and a bounded history, per run), on the bus (a
sample a lossy console may drop), as `watch --json` prints them and as text."""

from __future__ import annotations

import json

import pytest

from specmon.commands.printers import describe_event, latency_text
from specmon.model.events import Latency, LatencyGroup, RunInfo
from specmon.model.quantiles import WindowQuantiles
from specmon.state.store import DROPPABLE, StateStore

TTFT = WindowQuantiles(count=50.0, mean=0.4, p50=0.3, p90=0.75, p99=0.975)
ITL = WindowQuantiles(count=900.0, mean=0.012, p50=0.011, p90=0.0175, p99=0.024)


def latency(**overrides: object) -> Latency:
    fields: dict[str, object] = {
        "window_s": 60.0,
        "span_s": 60.0,
        "ttft_s": TTFT,
        "itl_s": ITL,
        "requests_per_s": 2.5,
        "finished": (("length", 100.0), ("stop", 50.0)),
        "running": 12,
        "waiting": 0,
        "max_running": 48,
        "kv_usage": 0.25,
    }
    fields.update(overrides)
    return Latency(**fields)  # type: ignore[arg-type]


def test_the_store_keeps_the_latest_and_a_bounded_history_per_run() -> None:
    store = StateStore(history=3)
    store.apply(RunInfo(run_id="a", profile="p"), at=0.0)
    for second in range(5):
        store.apply(latency(running=second), at=float(second))
    assert store.latency is not None and store.latency.running == 4
    assert [at for at, _ in store.latency_history] == [2.0, 3.0, 4.0]
    store.apply(RunInfo(run_id="b", profile="p"), at=9.0)  # a new run: its own figures
    assert store.latency is None and not store.latency_history


def test_a_lossy_subscriber_may_drop_latency_samples() -> None:
    assert Latency in DROPPABLE


def test_the_json_line_has_objects_for_quantiles_reasons_and_groups() -> None:
    group = LatencyGroup(name="1", running=3, ttft_s=TTFT)
    data = json.loads(latency(groups=(group,), group_label="engine").to_json())
    assert data["kind"] == "latency"
    assert data["ttft_s"] == {"count": 50.0, "mean": 0.4, "p50": 0.3, "p90": 0.75, "p99": 0.975}
    assert data["finished"] == {"length": 100.0, "stop": 50.0}
    assert data["queue_s"] is None and data["preemptions"] is None  # absent, never 0
    assert data["groups"][0]["name"] == "1" and data["groups"][0]["ttft_s"]["p90"] == 0.75
    assert data["groups"][0]["queue_s"] is None
    flags = (data["queue_growing"], data["kv_near_full"], data["preempting"])
    assert flags == (False, False, False)


def test_the_text_line_says_p50_p90_capacity_and_the_flags() -> None:
    quiet = latency()
    assert latency_text(quiet) == (
        "TTFT p50 300 ms p90 750 ms, ITL p50 11 ms p90 18 ms, 2.50 req/s, "
        "12/48 running, 0 waiting, KV 25%"
    )
    busy = latency(
        e2e_s=WindowQuantiles(count=5.0, mean=3.0, p50=2.5, p90=4.25, p99=None),
        queue_growing=True,
        kv_near_full=True,
        preempting=True,
        preemptions=3.0,
        max_running=None,
        waiting=7,
    )
    text = describe_event(busy)
    assert text is not None and text.startswith("latency     TTFT p50 300 ms")
    assert "e2e p50 2.50 s p90 4.25 s" in text and "12 running, 7 waiting" in text
    assert text.endswith("; QUEUE GROWING, KV NEAR FULL, 3 PREEMPTED")
    assert latency_text(Latency(window_s=60.0)) == "no latency figures on /metrics"


def test_the_window_is_a_ui_setting_that_reaches_the_session() -> None:
    from specmon.launch.config import parse_config_text
    from specmon.model.errors import ConfigError
    from specmon.session import SessionOptions, open_session

    config = parse_config_text("[ui]\nlatency_window_s = 30\n", None, environ={})
    assert config.ui.latency_window_s == 30.0
    assert open_session("local", config).options.latency_window_s == 30.0
    chosen = SessionOptions(latency_window_s=120.0)  # a caller's own choice wins
    assert open_session("local", config, options=chosen).options.latency_window_s == 120.0
    assert parse_config_text("", None, environ={}).ui.latency_window_s == 60.0
    with pytest.raises(ConfigError, match="latency_window_s"):  # 5-3600 s
        parse_config_text("[ui]\nlatency_window_s = 1\n", None, environ={})
