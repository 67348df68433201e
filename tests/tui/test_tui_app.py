"""The console driven by Textual's Pilot over a replayed, deterministic session.

The events are the reference transcript through the real SGLang parser plus GPU samples and
probe timings; the tests read what the widgets show, not internal state.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support.console import wait_until
from support.paths import REPO
from support.tui_replay import FROZEN_NOW, ReplayController, failure_event, recorded_session
from textual.widgets import Button, Footer, Input, Select, Sparkline, Static

from specmon.launch.config import load_config
from specmon.model.events import ConnectionState
from specmon.tui.app import SpecmonApp
from specmon.tui.commands import PALETTE_ACTIONS
from specmon.tui.screens.help import HelpScreen, key_label
from specmon.tui.screens.relaunch import RelaunchScreen, field_id
from specmon.tui.widgets.banner import Banner
from specmon.tui.widgets.gpus import GpuPanel
from specmon.tui.widgets.header import HeaderBar
from specmon.tui.widgets.log_pane import FollowingLog, LogPane
from specmon.tui.widgets.timing import TimingPanel


def make_app(*, ready: bool = True, failed: bool = False) -> SpecmonApp:
    events = recorded_session(ready=ready)
    if failed:
        events.append((FROZEN_NOW, failure_event()))
    controller = ReplayController(events)
    return SpecmonApp(controller, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)


def text_of(widget: Static) -> str:
    return str(widget.render())


async def test_live_panels_show_gpus_throughput_and_the_amdahl_bound():
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        main = app.main
        assert main.has_class("-live")
        header = text_of(main.query_one(HeaderBar))
        assert "kimi-eagle3-nccl" in header and "ready" in header
        assert "steps=3" in header and "PROTO=LL" in header and "P2P=SYS" in header
        gpu_lines = text_of(main.query_one(GpuPanel)).splitlines()
        assert [line.split()[0] for line in gpu_lines] == [str(i) for i in range(8)]
        assert "95%" in gpu_lines[0] and "/140G" in gpu_lines[0]
        spark = main.query_one("#tps-spark", Sparkline)
        assert list(spark.data) == [412.55, 688.31, 731.09, 602.74, 566.2]
        # The panel words itself for its width, which settles a tick or two after mount on a
        # loaded machine: wait for the full-width wording rather than race the layout.
        expected = "a draft phase infinitely faster would gain at most 3.1%"
        for _ in range(50):
            timing = text_of(main.query_one(TimingPanel))
            if expected in timing:
                break
            await pilot.pause(0.1)
        assert expected in timing
        assert "verify 96.1%" in timing


async def test_help_lists_every_binding():
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        console = Console(width=100, file=io.StringIO(), record=True)
        console.print(app.screen.table)
        lines = [line.strip() for line in console.export_text().splitlines()]
        for binding in app.BINDINGS:
            assert any(
                line.split()[0] == key_label(binding.key) and binding.description in line
                for line in lines
            ), binding
        assert any(line.startswith("ctrl+p") for line in lines)
        await pilot.press("escape")
        assert app.screen is app.main


async def test_command_palette_offers_every_bound_action():
    actions = {action for _, _, action in PALETTE_ACTIONS}
    bound = {binding.action for binding in SpecmonApp.BINDINGS}
    assert bound <= actions


async def test_failure_banner_shows_root_cause_and_command():
    app = make_app(ready=False, failed=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        banner = app.main.query_one(Banner)
        assert banner.display and banner.has_class("-failed")
        text = text_of(banner)
        assert "Server failed (OOM) exit code 137 during KV cache" in text
        assert "CUDA out of memory" in text
        assert "command: python3 -m sglang.launch_server" in text
        assert "failed" in text_of(app.main.query_one(HeaderBar))


async def test_reconnecting_banner_counts_attempts():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.controller.bus.publish(
            ConnectionState(
                host="root@gpu-box:22", state="reconnecting", attempt=3, detail="connection reset"
            )
        )
        await pilot.pause(0.3)
        banner = app.main.query_one(Banner)
        assert banner.has_class("-reconnecting")
        assert "reconnecting (attempt 3)" in text_of(banner)
        assert "reconnecting #3" in text_of(app.main.query_one(HeaderBar))
        app.controller.bus.publish(ConnectionState(host="root@gpu-box:22", state="connected"))
        await pilot.pause(0.3)
        assert not banner.display


async def test_log_filter_narrows_and_escape_restores():
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        view = app.main.query_one(LogPane).log_view
        everything = len(view.lines)
        await pilot.press("slash", *"Decode batch", "enter")
        await pilot.pause(0.2)
        assert len(view.lines) == 5
        assert all("Decode batch" in line.text for line in view.lines)
        await pilot.press("slash", "escape")
        await pilot.pause(0.2)
        assert len(view.lines) == everything


async def test_the_filter_box_shows_what_is_typed_and_the_footer_says_how_to_leave():
    """Issue 26 item 1: the box's text row was clipped to nothing by the focused Input's tall
    border, and the footer went blank (the console's letter keys go into the box)."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("slash", *"accept")
        await pilot.pause(0.2)
        box = app.main.query_one("#log-filter", Input)
        assert box.has_focus and box.content_region.height == 1
        row = "".join(segment.text for segment in box.render_line(0))
        assert "accept" in row
        footer = " ".join(str(key.render()) for key in app.main.query_one(Footer).children)
        assert "Keep filter" in footer and "Clear filter" in footer
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert not app.main.query_one(LogPane).has_class("-filtering")
        assert "Quit" in " ".join(str(key.render()) for key in app.main.query_one(Footer).children)


async def test_pause_freezes_live_panels_and_theme_cycles():
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        assert app.theme == "specmon-dark"
        await pilot.press("t")
        assert app.theme == "specmon-high-contrast"
        await pilot.press("t", "t")
        assert app.theme == "specmon-dark"
        await pilot.press("p")
        assert "PAUSED" in text_of(app.main.query_one(HeaderBar))
        spark = app.main.query_one("#tps-spark", Sparkline)
        before = list(spark.data)
        from specmon.model.events import Decode

        app.controller.bus.publish(
            Decode(running_req=1, tokens=1, token_usage=0.0, gen_throughput=999.0, queue_req=0)
        )
        await pilot.pause(0.3)
        assert list(spark.data) == before
        await pilot.press("p")
        await pilot.pause(0.3)
        assert list(spark.data)[-1] == 999.0


async def test_no_color_is_honoured(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app()
    assert app.no_color
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.1)


async def test_relaunch_form_rejects_invalid_values_inline_and_previews_the_command():
    app = make_app()
    async with app.run_test(size=(120, 48)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("r")
        await pilot.pause(0.2)
        form = app.screen
        assert isinstance(form, RelaunchScreen)
        launch = form.query_one("#launch", Button)
        assert not launch.disabled
        preview = text_of(form.query_one("#preview", Static))
        assert "--speculative-num-steps 3" in preview and "NCCL_PROTO=LL" in preview
        steps = form.query_one("#" + field_id("speculative-num-steps"), Input)
        steps.value = "5"  # topk 1 needs draft tokens == steps + 1 == 6, still 4
        await pilot.pause(0.1)
        assert launch.disabled
        problem = text_of(
            form.query_one("#" + field_id("speculative-num-draft-tokens") + "-problem", Static)
        )
        assert "6" in problem
        await pilot.press("ctrl+s")
        await pilot.pause(0.1)
        assert app.screen is form  # nothing to confirm while invalid
        form.query_one("#" + field_id("speculative-num-draft-tokens"), Input).value = "6"
        form.query_one("#" + field_id("NCCL_ALGO"), Select).value = "Tree"
        form.query_one("#" + field_id("mem-fraction-static"), Input).value = "1.5"
        await pilot.pause(0.1)
        assert launch.disabled
        assert text_of(form.query_one("#" + field_id("mem-fraction-static") + "-problem", Static))
        form.query_one("#" + field_id("mem-fraction-static"), Input).value = "0.85"
        await pilot.pause(0.1)
        assert not launch.disabled
        preview = text_of(form.query_one("#preview", Static))
        assert "--speculative-num-steps 5" in preview
        assert "--speculative-num-draft-tokens 6" in preview
        assert "NCCL_ALGO=Tree" in preview and "--mem-fraction-static 0.85" in preview
        await pilot.press("ctrl+s")
        await pilot.pause(0.1)
        assert "This stops run 20260210-091402-kimi" in text_of(
            app.screen.query_one("#question", Static)
        )
        await pilot.press("n")
        assert app.screen is form
        await pilot.press("escape")
        assert app.screen is app.main


async def test_gpu_detail_and_history_charts_open_and_close():
    from textual.widgets import DataTable
    from textual_plotext import PlotextPlot

    from specmon.tui.screens.gpu_detail import GpuDetailScreen
    from specmon.tui.screens.history_charts import HistoryScreen

    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("g")
        await pilot.pause(0.3)
        assert isinstance(app.screen, GpuDetailScreen)
        table = app.screen.query_one(DataTable)
        assert table.row_count == 8
        assert table.get_row("0")[:3] == ["0", "NVIDIA H200", "95"]
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is app.main, 10, "the GPU detail to close")
        await pilot.press("h")
        # a loaded machine (a full run on 2 cores) takes longer than a fixed pause for the
        # seven charts
        await wait_until(
            pilot, lambda: isinstance(app.screen, HistoryScreen), 10, "the history charts"
        )
        # with acceptance by position, ITL p90 and TTFT p90 (issue 29)
        assert len(app.screen.query(PlotextPlot)) == 7
        assert "launch 1: kimi-eagle3-nccl steps=3 topk=1 draft=4" in str(
            app.screen.query_one("#legend", Static).render()
        )
        await pilot.press("escape")
        assert app.screen is app.main


async def test_the_gpu_detail_redraw_skips_a_screen_whose_table_is_gone():
    """A pushed screen is current before its widgets are mounted, and at shutdown its widgets
    go while it is still current; the timer's redraw must not raise NoMatches then (a full
    run on a loaded machine hit it: the app died and ignored the next keys)."""
    from textual.widgets import DataTable

    from specmon.tui.screens.gpu_detail import GpuDetailScreen

    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("g")
        await wait_until(
            pilot, lambda: isinstance(app.screen, GpuDetailScreen), 10, "the GPU detail"
        )
        await app.screen.query_one(DataTable).remove()
        app.refresh_view(app.view, FROZEN_NOW, live_due=True)
        await pilot.pause(0.2)  # a timer tick too
        assert isinstance(app.screen, GpuDetailScreen)


async def test_quit_during_a_relaunch_asks_first():
    from specmon.tui.screens.confirm import ConfirmScreen

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.relaunch_in_progress = True
        await pilot.press("q")
        await pilot.pause(0.1)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert app.screen is app.main and app.is_running
        app.relaunch_in_progress = False
        await pilot.press("q")
        await pilot.pause(0.2)
    assert app.return_code == 0


async def test_agent_error_shows_in_the_gpu_panel_and_l_focuses_the_log():
    from textual.widgets import RichLog

    from specmon.model.events import AgentStatus

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        app.controller.bus.publish(
            AgentStatus(state="error", detail="no NVIDIA driver on host gpu-box: libnvidia-ml.so")
        )
        await pilot.pause(0.4)
        text = text_of(app.main.query_one(GpuPanel))
        assert text.startswith("GPU agent: no NVIDIA driver on host gpu-box")
        await pilot.press("l")
        assert isinstance(app.focused, RichLog)


def app_with_config_copy(tmp_path: Path) -> tuple[SpecmonApp, Path]:
    """A console over the recorded session with the shipped specmon.toml copied to tmp_path
    as its config (what "Save as profile" writes to)."""
    config_path = tmp_path / "specmon.toml"
    config_path.write_text((REPO / "specmon.toml").read_text())
    controller = ReplayController(recorded_session(ready=True))
    return SpecmonApp(controller, load_config(config_path), clock=lambda: FROZEN_NOW), config_path


async def save_form(pilot, form, name: str) -> None:
    form.query_one("#save-name", Input).value = name
    await pilot.pause(0.1)
    form.query_one("#save", Button).press()
    await pilot.pause(0.2)


async def test_the_edited_form_is_saved_as_a_new_profile(tmp_path: Path):
    app, config_path = app_with_config_copy(tmp_path)
    async with app.run_test(size=(120, 48)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("r")
        await pilot.pause(0.2)
        form = app.screen
        form.query_one("#" + field_id("speculative-num-steps"), Input).value = "2"
        form.query_one("#" + field_id("speculative-num-draft-tokens"), Input).value = "3"
        form.query_one("#" + field_id("NCCL_PROTO"), Select).value = "LL128"
        await save_form(pilot, form, "kimi-steps2")
    saved = load_config(config_path).profiles["kimi-steps2"]
    assert saved.speculative is not None
    assert (saved.speculative.num_steps, saved.speculative.num_draft_tokens) == (2, 3)
    assert saved.env["NCCL_PROTO"] == "LL128"
    assert saved.env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] == "1"
    spec = saved.to_launch_spec()
    assert spec.problems() == []
    assert spec.flag("model-path") == "moonshotai/Kimi-K2.5"


async def test_a_secret_typed_into_the_form_is_saved_as_a_placeholder_never_in_clear(
    tmp_path: Path,
):
    """ "Save as profile" wrote the form's secrets, restored to their real values, into the
    config file in clear. A secret the source profile did not hold in that file is now written
    as *** with "# fill in the secret", and the saved profile refuses to launch until filled."""
    app, config_path = app_with_config_copy(tmp_path)
    async with app.run_test(size=(120, 48)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("r")
        await pilot.pause(0.2)
        form = app.screen
        env = form.query_one("#" + field_id("extra-env"), Input)
        env.value = (env.value + " HF_TOKEN=hf_sEcReT123").strip()
        args = form.query_one("#" + field_id("extra-args"), Input)
        args.value = (args.value + " --api-key sk-live-999").strip()
        await save_form(pilot, form, "with-token")
        assert "with-token" in app.config.profiles
        assert app.config.profiles["with-token"].unfilled  # refused at launch, like adopt's
    text = config_path.read_text()
    assert "hf_sEcReT123" not in text and "sk-live-999" not in text
    assert 'HF_TOKEN = "***"  # fill in the secret' in text
    saved = load_config(config_path).profiles["with-token"]
    assert saved.env["HF_TOKEN"] == "***" and "***" in saved.extra_args
    assert saved.unfilled


async def test_a_profile_saved_without_a_config_file_in_use_goes_to_the_users_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Built-in profiles only (./specmon.toml passed over as untrusted): the save goes to the
    user config dir's specmon.toml (its directory made 0700), never into the ignored file."""
    import dataclasses

    ignored = tmp_path / "checkout" / "specmon.toml"
    ignored.parent.mkdir()
    ignored.write_text("# an untrusted file the console passed over\n")
    user_dir = tmp_path / "config" / "specmon"
    monkeypatch.setenv("SPECMON_CONFIG_DIR", str(user_dir))
    monkeypatch.chdir(ignored.parent)
    shipped = load_config(REPO / "specmon.toml")
    # The user's new file holds the saved profile alone: it may name no other profile.
    profiles = {
        name: dataclasses.replace(profile, baseline_profile=None)
        for name, profile in shipped.profiles.items()
    }
    config = dataclasses.replace(shipped, source=None, profiles=profiles)
    controller = ReplayController(recorded_session(ready=True))
    app = SpecmonApp(controller, config, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 48)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("r")
        await pilot.pause(0.2)
        form = app.screen
        form.query_one("#" + field_id("speculative-num-steps"), Input).value = "2"
        form.query_one("#" + field_id("speculative-num-draft-tokens"), Input).value = "3"
        form.query_one("#save-name", Input).value = "kimi-steps2"
        await pilot.pause(0.1)
        form.query_one("#save", Button).press()
        await pilot.pause(0.2)
    assert ignored.read_text() == "# an untrusted file the console passed over\n"
    saved = load_config(user_dir / "specmon.toml").profiles["kimi-steps2"]
    assert saved.speculative is not None and saved.speculative.num_steps == 2
    assert (user_dir.stat().st_mode & 0o777, user_dir.parent.stat().st_mode & 0o777) == (
        0o700,
        0o700,
    )


async def test_tab_walks_the_panels_and_the_palette_runs_actions():
    from specmon.tui.screens.gpu_detail import GpuDetailScreen
    from specmon.tui.widgets.throughput import ThroughputPanel

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        seen = []
        for _ in range(5):
            await pilot.press("tab")
            seen.append(type(app.focused))
        assert {GpuPanel, ThroughputPanel, TimingPanel, FollowingLog} <= set(seen)
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
        await pilot.press(*"GPU detail")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause(0.5)
        assert isinstance(app.screen, GpuDetailScreen)


async def test_the_configured_theme_is_used():
    from dataclasses import replace

    config = load_config(REPO / "specmon.toml")
    config = replace(config, ui=replace(config.ui, theme="high-contrast"))
    app = SpecmonApp(ReplayController(recorded_session()), config, clock=lambda: FROZEN_NOW)
    assert app.theme == "specmon-high-contrast"
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("t")
        assert app.theme == "specmon-light"


async def test_log_follows_the_tail_unless_the_operator_scrolled_back():
    from specmon.model.events import LogLine

    async def settle(pilot: Any, done: Callable[[], bool]) -> None:
        """Wait (bounded) for the console to have drawn what ``done`` checks: a loaded
        machine takes longer than a fixed pause."""
        for _ in range(100):
            if done():
                return
            await pilot.pause(0.05)

    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.main.query_one(LogPane).log_view
        await settle(pilot, lambda: view.max_scroll_y > 0 and view.scroll_y == view.max_scroll_y)
        assert view.max_scroll_y > 0 and view.scroll_y == view.max_scroll_y
        view.scroll_to(y=0, animate=False)
        await pilot.pause(0.1)
        for number in range(5):
            app.controller.bus.publish(LogLine(text=f"new line {number}"))
        await settle(pilot, lambda: view.lines[-1].text == "new line 4")
        await pilot.pause(0.1)
        assert view.lines[-1].text == "new line 4"
        assert view.scroll_y == 0
        view.scroll_end(animate=False)
        await pilot.pause(0.1)
        app.controller.bus.publish(LogLine(text="one more line"))
        await settle(
            pilot,
            lambda: view.lines[-1].text == "one more line" and view.scroll_y == view.max_scroll_y,
        )
        assert view.scroll_y == view.max_scroll_y
        assert view.lines[-1].text == "one more line"


@pytest.mark.parametrize(("size", "compact"), [((80, 24), True), ((160, 48), False)])
async def test_every_gpu_row_shows_while_loading_even_at_80x24(size, compact):
    from specmon.tui.widgets.loading import LoadingPanel

    app = make_app(ready=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        loading = app.screen.query_one(LoadingPanel)
        gpus = app.screen.query_one(GpuPanel)
        assert loading.display and loading.has_class("-compact") is compact
        assert len(app.controller.bus.store.gpus) == 8
        assert gpus.outer_size.height == 8 + 2  # a row per GPU, and the border
        assert app.screen.query_one(LogPane).outer_size.height >= 4  # the log stays visible


async def test_a_following_log_stays_at_the_tail_when_the_pane_shrinks():
    """A layout change with no new line (the terminal shrinks, a panel appears) moves the
    bottom away from the view: a log that followed the tail must follow it there, not wait
    for the server's next line (found by CI: 45 of 51 on a loaded machine)."""
    from specmon.model.events import LogLine

    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        view = app.main.query_one(LogPane).log_view
        for number in range(80):
            app.controller.bus.publish(LogLine(text=f"line {number}"))
        for _ in range(100):
            if view.lines and view.lines[-1].text == "line 79":
                break
            await pilot.pause(0.05)
        view.scroll_end(animate=False)
        await pilot.pause(0.1)
        assert view.following and view.scroll_y == view.max_scroll_y
        await pilot.resize_terminal(100, 26)
        for _ in range(40):
            await pilot.pause(0.05)
        assert view.max_scroll_y > 0
        assert view.scroll_y == view.max_scroll_y
        view.scroll_to(y=0, animate=False)
        await pilot.pause(0.1)
        await pilot.resize_terminal(100, 34)
        await pilot.pause(0.3)
        assert view.scroll_y == 0  # reading back stays put on a resize too
