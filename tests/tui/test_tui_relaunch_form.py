"""Issue 26 item 4: the relaunch form starts on the field people change, does not select a
field's text on focus (the first keystroke replaced vLLM's draft model with "5"), keeps every
label on one line, and shows the change as a diff above the exact command."""

from __future__ import annotations

import dataclasses
import shlex

from support.paths import REPO
from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session
from textual.widgets import Input, Label, Select, Static

from specmon.launch.config import load_config
from specmon.launch.spec import LaunchSpec
from specmon.tui.app import SpecmonApp
from specmon.tui.screens.relaunch import RelaunchScreen, field_id

VLLM_PROFILE = "llama70b-eagle3-vllm"


def vllm_app() -> SpecmonApp:
    controller = ReplayController([], profiles=[VLLM_PROFILE])
    return SpecmonApp(controller, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)


async def open_form(app: SpecmonApp, pilot: object) -> RelaunchScreen:
    await pilot.pause(0.2)  # type: ignore[attr-defined]
    await pilot.press("r")  # type: ignore[attr-defined]
    await pilot.pause(0.3)  # type: ignore[attr-defined]
    assert isinstance(app.screen, RelaunchScreen)
    return app.screen


async def test_vllm_form_starts_on_num_speculative_tokens() -> None:
    app = vllm_app()
    async with app.run_test(size=(120, 48)) as pilot:
        form = await open_form(app, pilot)
        tokens = form.query_one("#" + field_id("num_speculative_tokens"), Input)
        assert tokens.has_focus
        assert tokens.value == "3"


async def test_focusing_a_field_does_not_select_it_so_typing_never_replaces_it() -> None:
    app = vllm_app()
    async with app.run_test(size=(120, 48)) as pilot:
        form = await open_form(app, pilot)
        draft = form.query_one("#" + field_id("draft_model"), Input)
        draft.focus()
        await pilot.pause(0.1)
        await pilot.press("5")
        assert draft.value == "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B5"  # typed at the end


async def test_sglang_form_starts_on_num_steps() -> None:
    controller = ReplayController(recorded_session())
    app = SpecmonApp(controller, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 48)) as pilot:
        form = await open_form(app, pilot)
        assert form.query_one("#" + field_id("speculative-num-steps"), Input).has_focus


async def test_long_labels_stay_on_one_line_clear_of_the_error_line() -> None:
    app = vllm_app()
    async with app.run_test(size=(120, 48)) as pilot:
        form = await open_form(app, pilot)
        form.query_one("#" + field_id("gpu-memory-utilization"), Input).value = "1.7"
        await pilot.pause(0.2)
        problem = form.query_one("#" + field_id("gpu-memory-utilization") + "-problem", Static)
        assert str(problem.render())  # the field's error line shows
        for label in form.query("Label.name").results(Label):
            assert label.region.height == 1, str(label.render())


async def test_the_confirmation_shows_the_change_as_a_diff_above_the_command() -> None:
    app = vllm_app()
    async with app.run_test(size=(120, 48)) as pilot:
        form = await open_form(app, pilot)
        form.query_one("#" + field_id("num_speculative_tokens"), Input).value = "5"
        form.query_one("#" + field_id("NCCL_PROTO"), Select).value = "LL"
        await pilot.pause(0.2)
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        question = str(app.screen.query_one("#question", Static).render())
        assert "num speculative tokens 3 -> 5" in question
        assert "+NCCL_PROTO=LL" in question
        assert question.index("+NCCL_PROTO=LL") < question.index("vllm serve")


class LaunchRecordingController(ReplayController):
    """A replayed host whose python is not ``python3`` and which records what it launches."""

    def __init__(self, profiles: list[str]) -> None:
        super().__init__([], profiles=profiles)
        self.launched: list[tuple[LaunchSpec, str | None]] = []

    @property
    def host_python(self) -> str:
        return "/opt/venv/bin/python"

    async def launch_spec(self, spec: LaunchSpec, *, profile: str | None = None) -> str:
        self.launched.append((spec, profile))
        return "run-1"


async def test_what_the_form_shows_is_exactly_what_is_launched() -> None:
    """Issue 27 item 4: the preview was built with ``python3`` while the launch used the
    host's python; now the confirmed spec itself is launched, built with the host's python."""
    controller = LaunchRecordingController(["demo"])
    app = SpecmonApp(controller, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 48)) as pilot:
        form = await open_form(app, pilot)
        form.query_one("#" + field_id("speculative-num-steps"), Input).value = "2"
        form.query_one("#" + field_id("speculative-num-draft-tokens"), Input).value = "3"
        await pilot.pause(0.2)
        shown = form.spec
        assert shown is not None, form.problems
        preview = str(form.query_one("#preview", Static).render())
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        await pilot.click("#yes")
        await pilot.pause(0.5)
    assert len(controller.launched) == 1
    launched, profile = controller.launched[0]
    assert profile == "demo"
    assert launched.argv == shown.argv
    assert launched.argv[0] == "/opt/venv/bin/python"
    assert "--speculative-num-steps 2" in " ".join(launched.argv)
    assert shlex.join(launched.shown().argv) in " ".join(preview.split())


async def test_a_take_over_form_starts_on_the_profile_whose_attach_key_is_followed() -> None:
    """`connect HOST -p P` with P's ``attach`` key: r on that server opens the take-over form
    on P (not the config's default or the first profile); without it, as before."""
    from specmon.model.events import RunInfo, RunState

    foreign = RunInfo(
        run_id="pid-4242", backend="sglang", pid=4242, reattached=True, owner="ops",
        foreign=True, log_source="file: /srv/server.log",
    )  # fmt: skip
    config = load_config(REPO / "specmon.toml")
    chosen = []
    for attach_profile in ("kimi-baseline", None):
        ready = RunState(run_id="pid-4242", state="ready")
        controller = ReplayController([(FROZEN_NOW, foreign), (FROZEN_NOW, ready)])
        app = SpecmonApp(
            controller, config, clock=lambda: FROZEN_NOW, attach_profile=attach_profile
        )
        async with app.run_test(size=(120, 48)) as pilot:
            form = await open_form(app, pilot)
            assert form.take_over
            chosen.append((form.profile_name, form.query_one("#profile", Select).value))
            intro = form.take_over_intro()
            # without a profile of its own, the form says how to get one (it started on
            # another profile with no word about it)
            hint = "No profile describes this server: `specmon adopt HOST -p NAME` writes one"
            assert (hint in intro) == (attach_profile is None), intro
    assert chosen == [("kimi-baseline", "kimi-baseline"), ("kimi-eagle3", "kimi-eagle3")]


class ReadsItsCommandLine(ReplayController):
    """An attached server whose command line the host reads (or, with ``refuse``, cannot)."""

    def __init__(self, events: list, profile: object = None, refuse: str | None = None) -> None:
        super().__init__(events)
        self.profile, self.refuse, self.asked = profile, refuse, []

    async def running_profile(self, name: str):  # type: ignore[override]
        from specmon.model.errors import UsageError

        self.asked.append(name)
        if self.refuse is not None:
            raise UsageError(self.refuse)
        return dataclasses.replace(self.profile, name=name)  # type: ignore[arg-type]


async def test_a_take_over_form_without_a_profile_starts_from_the_servers_own_settings() -> None:
    """With no profile naming the attached server, the form started on the config's default
    (another model, another port): a take-over meant to change the step count would have
    replaced the server with something else. It now starts from the server's command line
    and environment, read on the host as adopt reads them; when they cannot be read, on the
    default as before, saying why."""
    from specmon.model.events import RunInfo, RunState

    foreign = RunInfo(
        run_id="pid-4242", backend="sglang", pid=4242, reattached=True, owner="ops",
        foreign=True, log_source="file: /srv/server.log",
    )  # fmt: skip
    events = [(FROZEN_NOW, foreign), (FROZEN_NOW, RunState(run_id="pid-4242", state="ready"))]
    config = load_config(REPO / "specmon.toml")
    own = dataclasses.replace(config.profiles["kimi-eagle3"], port=30123, extra_args=())
    controller = ReadsItsCommandLine(events, profile=own)
    app = SpecmonApp(controller, config, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 48)) as pilot:
        form = await open_form(app, pilot)
        assert controller.asked == ["running-pid-4242"]
        assert form.take_over and form.profile_name == "running-pid-4242"
        assert "--port 30123" in str(form.query_one("#preview", Static).render())
        assert "starts from its own command line and environment" in form.take_over_intro()
    refusing = ReadsItsCommandLine(events, refuse="pid 4242 on gpu-box: no such process")
    app = SpecmonApp(refusing, load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 48)) as pilot:
        form = await open_form(app, pilot)
        assert form.profile_name == "kimi-eagle3"  # the config's default, as before
        assert "No profile describes this server" in form.take_over_intro()
