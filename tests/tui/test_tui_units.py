"""Pure parts of the console: formatting, the Amdahl bound, themes, session history."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import REPO

from specmon.model.errors import ConfigError
from specmon.model.events import Decode, GpuSample, ProbeTiming, RunInfo
from specmon.remote.agent import GpuReading
from specmon.tui import themes
from specmon.tui.formatting import (
    amdahl_gain_percent,
    bar,
    format_duration,
    key_flags,
    mini_sparkline,
)
from specmon.tui.history import SessionHistory
from specmon.tui.screens.history_charts import split_segments


def test_amdahl_bound_matches_the_measured_kimi_split():
    # figures.md: draft 0.87 ms = 2.9% of the cycle, verify 28.7 ms: at most ~3% to gain
    gain = amdahl_gain_percent(0.87, 28.7, 0.4)
    assert gain == pytest.approx((0.87 + 28.7 + 0.4) / (28.7 + 0.4) * 100 - 100)
    assert 2.9 < gain < 3.1
    assert amdahl_gain_percent(0.0, 0.0, 0.0) is None


def test_durations_and_bars():
    assert format_duration(None) == "-"
    assert format_duration(59.6) == "1m00s"
    assert format_duration(4000) == "1h06m"
    assert bar(1.0, 5) == "█████"
    assert bar(0.0, 5) == "     "
    assert bar(0.5, 4) == "██  "
    assert bar(None, 3) == "···"
    assert mini_sparkline([0, 50, 100], 3, top=100) == "▁▄█"
    assert mini_sparkline([], 4) == "    "


def test_key_flags_come_from_the_recorded_argv_and_env():
    run = RunInfo(
        run_id="r1",
        argv=("python3", "-m", "sglang.launch_server", "--tp", "8", "--speculative-num-steps=5"),
        env=(("NCCL_PROTO", "LL"), ("HF_HOME", "/x")),
    )
    assert key_flags(run) == [("steps", "5"), ("tp", "8"), ("PROTO", "LL")]
    assert key_flags(None) == []


def test_shipped_themes_load_and_the_top_level_themes_are_the_packaged_ones():
    """One copy (issue 27 item 7): the checkout's themes/ is the package's folder itself."""
    canonical = REPO / "themes"
    packaged = themes.PACKAGED_THEMES_DIR
    assert themes.themes_dir() == packaged
    assert canonical.resolve() == packaged.resolve()
    names = sorted(p.name for p in canonical.glob("*.toml"))
    assert names == ["dark.toml", "high-contrast.toml", "light.toml"]
    loaded = {t.name: t for t in themes.load_themes(packaged)}
    assert set(loaded) == {"specmon-dark", "specmon-light", "specmon-high-contrast"}
    assert loaded["specmon-light"].dark is False


def test_theme_names_resolve_and_bad_files_say_which(tmp_path: Path):
    available = ["specmon-dark", "specmon-light"]
    assert themes.resolve_theme_name("light", available) == "specmon-light"
    assert themes.resolve_theme_name(None, available) == "specmon-dark"
    with pytest.raises(ConfigError, match="unknown theme 'pink'"):
        themes.resolve_theme_name("pink", available)
    broken = tmp_path / "broken.toml"
    broken.write_text('name = "x"\nprimary = \n')
    with pytest.raises(ConfigError, match=str(broken)):
        themes.load_themes(tmp_path)
    broken.write_text('name = "x"\nprimary = "#fff"\nsparkle = "#000"\n')
    with pytest.raises(ConfigError, match="unknown theme keys: sparkle"):
        themes.load_themes(tmp_path)


def test_session_history_keeps_runs_apart_and_averages_per_second():
    history = SessionHistory(limit=100)
    history.record(
        100.0, RunInfo(run_id="a", profile="demo", argv=("--speculative-num-steps", "5"))
    )
    history.record(
        101.0,
        Decode(
            running_req=1,
            tokens=1,
            token_usage=0.0,
            gen_throughput=70.0,
            queue_req=0,
            accept_len=1.8,
        ),
    )
    for wall, verify in ((101.1, 28.0), (101.6, 30.0), (102.2, 25.0)):
        history.record(
            wall,
            ProbeTiming(wall=wall, draft_ms=1, verify_ms=verify, extend_ms=0, cycle_ms=verify + 1),
        )
    history.record(
        103.0,
        GpuSample(
            wall=103.0,
            gpus=(GpuReading(index=0, util_gpu=80.0), GpuReading(index=1, util_gpu=90.0)),
        ),
    )
    history.record(
        200.0, RunInfo(run_id="b", profile="demo", argv=("--speculative-num-steps", "2"))
    )
    history.record(
        201.0, Decode(running_req=1, tokens=1, token_usage=0.0, gen_throughput=76.0, queue_req=0)
    )
    history.flush()
    assert list(history.verify_ms) == [(101.0, 29.0), (102.0, 25.0)]
    assert list(history.gpu_util) == [(103.0, 85.0)]
    assert [m.label for m in history.launches] == ["demo steps=5", "demo steps=2"]
    segments = split_segments(list(history.tok_s), list(history.launches))
    assert segments == [[], [(101.0, 70.0)], [(201.0, 76.0)]]


def test_history_is_bounded():
    history = SessionHistory(limit=10)
    for second in range(1000):
        history.record(
            float(second),
            Decode(running_req=1, tokens=1, token_usage=0.0, gen_throughput=1.0, queue_req=0),
        )
    assert len(history.tok_s) == 10


def test_log_pane_keeps_only_first_and_last_state_of_progress_bars():
    from specmon.tui.widgets.log_pane import is_intermediate_progress, style_line

    shards = (
        "Loading safetensors checkpoint shards: {pct}% Completed | {n}/64 [01:27<01:45,  3.01s/it]"
    )
    assert not is_intermediate_progress(shards.format(pct=0, n=0))
    assert is_intermediate_progress(shards.format(pct=45, n=29))
    assert not is_intermediate_progress(shards.format(pct=100, n=64))
    graphs = (
        "Capturing batches (bs=1 avail_mem=24.02 GB): 100%|██████████| 8/8 [00:19<00:00,  2.41s/it]"
    )
    assert not is_intermediate_progress(graphs)
    assert not is_intermediate_progress("[2026-02-10 09:19:12 TP0] Decode batch, #running-req: 6")
    assert style_line("torch.OutOfMemoryError: CUDA out of memory.").style == "bold red"
    assert (
        style_line("[2026-02-10 09:18:06 TP0] Warning: Target model's context_length").style
        == "yellow"
    )
