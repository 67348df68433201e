"""One relaunch for several hosts: the same form as `r`, then one confirmation that lists every
host with its exact command and lets the operator choose what a refusal means. Each host's spec
is built once, for the confirmation, and that very spec is what is launched there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from specmon.launch.config import Config
from specmon.launch.spec import LaunchSpec, SecretValues, form_overrides
from specmon.model.errors import SpecmonError
from specmon.state.fleet import FleetHost, unreachable_why
from specmon.tui.messages import FleetRelaunchRequested
from specmon.tui.screens.relaunch import RelaunchScreen

FleetAnswer = Literal["proceed", "all_or_none", "leave_out"] | None


class FleetRelaunchScreen(RelaunchScreen):
    """The relaunch form (profiles and current flags from the first host), for ``targets``."""

    def __init__(self, targets: Sequence[FleetHost], config: Config) -> None:
        super().__init__(targets[0].controller, config)
        self.targets = list(targets)

    def on_mount(self) -> None:  # Textual runs RelaunchScreen.on_mount after this one
        self.query_one(VerticalScroll).border_title = "Relaunch on " + ", ".join(
            t.name for t in self.targets
        )

    def load_profile(self, name: str) -> None:
        """As the one-host form, but a ``***`` is given back only from the profile's own
        secrets: one read from the first host's run is that host's, never sent to the others,
        so the form asks for it (a spec problem) where the first host's run alone knew it."""
        super().load_profile(name)
        self.secret_values = SecretValues.of(self.config.profiles[name].to_launch_spec())
        self.revalidate()

    def host_specs(self) -> dict[str, LaunchSpec]:
        """Each host's exact launch, from the form as it stands (with that host's python)."""
        profile = self.config.profiles[self.profile_name]
        flags, env = form_overrides(
            self.values(), profile.to_launch_spec(), profile.extra_args, self.secret_values
        )
        return {
            t.name: profile.to_launch_spec(flags=flags, env=env, python=t.controller.host_python)
            for t in self.targets
        }

    def action_submit(self) -> None:
        self.revalidate()
        if not self.valid or self.spec is None:
            self.notify("The form has problems; fix the fields marked in red.", severity="error")
            return
        try:
            specs = self.host_specs()
        except SpecmonError as exc:  # the form changed under the check: say so, stay here
            self.notify(str(exc), title="Not launched", severity="error", timeout=15)
            return
        self.app.push_screen(
            FleetConfirmScreen(specs, self.unreachable(), self.change_summary()),
            lambda answer: self._fleet_confirmed(answer, specs),
        )

    def unreachable(self) -> list[tuple[str, str]]:
        """(host, why) for each selected host that cannot be reached now: its launch would
        only be refused after the others', so the confirmation says so first."""
        out = []
        for target in self.targets:
            why = unreachable_why(target.controller.bus.store)
            if why is not None:
                out.append((target.name, why))
        return out

    def _fleet_confirmed(self, answer: FleetAnswer, specs: Mapping[str, LaunchSpec]) -> None:
        """Launch the specs the confirmation showed, or leave the unreachable hosts out and
        confirm again (their specs built anew, for the hosts left)."""
        if answer is None:
            return
        if answer == "leave_out":  # drop the unreachable hosts, then confirm again
            left_out = {name for name, _ in self.unreachable()}
            self.targets = [t for t in self.targets if t.name not in left_out]
            self.query_one(VerticalScroll).border_title = "Relaunch on " + ", ".join(
                t.name for t in self.targets
            )
            if not self.targets:
                self.notify("Every selected host is unreachable: nothing to relaunch.")
                self.dismiss(None)
                return
            self.action_submit()
            return
        self.app.post_message(
            FleetRelaunchRequested(
                self.profile_name, dict(specs), all_or_none=answer == "all_or_none"
            )
        )
        self.dismiss(None)


class FleetConfirmScreen(ModalScreen[FleetAnswer]):
    """Every host and its command (its spec, shown with secrets as ***); `y` launches where
    accepted, `a` only if all accept."""

    DEFAULT_CSS = """
    FleetConfirmScreen { align: center middle; }
    FleetConfirmScreen > Vertical { width: 110; max-width: 98%; height: auto; max-height: 95%;
        border: thick $warning; background: $panel; padding: 1 2; }
    FleetConfirmScreen VerticalScroll { height: auto; max-height: 30; }
    FleetConfirmScreen .host { text-style: bold; height: auto; }
    FleetConfirmScreen .command { height: auto; margin-bottom: 1; padding-left: 2; }
    FleetConfirmScreen Horizontal { height: 3; align-horizontal: right; }
    FleetConfirmScreen Button { margin-left: 2; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer('proceed')", "Launch where accepted"),
        Binding("a", "answer('all_or_none')", "Only if all accept"),
        Binding("x", "leave_out", "Leave unreachable out"),
        Binding("n", "answer(None)", "No"),
        Binding("escape", "answer(None)", "Cancel"),
    ]

    def __init__(
        self,
        specs: Mapping[str, LaunchSpec],
        unreachable: Sequence[tuple[str, str]] = (),
        changes: str = "",
    ) -> None:
        super().__init__()
        self.specs = dict(specs)  # host -> the spec that is launched there if confirmed
        self.commands = [(host, spec.shown().shell_command()) for host, spec in specs.items()]
        self.unreachable = list(unreachable)  # (host, why) among the selected
        self.changes = changes  # the form's edit as a diff (against the first host's run)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`x` only where there is an unreachable host to leave out."""
        return action != "leave_out" or bool(self.unreachable)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                f"Relaunch on {len(self.commands)} hosts. Each host's run is stopped (GPU memory "
                "released), then its command starts; each host's lock is taken.",
                markup=False,
            )
            if self.changes:
                yield Static(self.changes, id="changes", markup=False)
            with VerticalScroll():
                for host, command in self.commands:
                    yield Static(host, classes="host", markup=False)
                    yield Static(command, classes="command", markup=False)
            if self.unreachable:
                hosts = "; ".join(f"{name} ({why})" for name, why in self.unreachable)
                yield Static(
                    f"{len(self.unreachable)} of the selected hosts cannot be reached now: "
                    f"{hosts}. Their launch will be refused. Leave them out (x)?",
                    id="unreachable",
                    markup=False,
                )
            yield Static(
                "If a host refuses (lock busy, a run of another console): launch on the others "
                "(y), or launch on none unless every host accepts (a)?",
                markup=False,
            )
            with Horizontal():
                yield Button("No (n)", id="no")
                if self.unreachable:
                    yield Button("Leave unreachable out (x)", id="leave-out", variant="primary")
                yield Button("Only if all accept (a)", id="all-or-none", variant="warning")
                yield Button("Launch where accepted (y)", id="proceed", variant="warning")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, answer: FleetAnswer) -> None:
        self.dismiss(answer)

    def action_leave_out(self) -> None:
        if self.unreachable:
            self.dismiss("leave_out")

    @on(Button.Pressed, "#leave-out")
    def _leave_out(self) -> None:
        self.dismiss("leave_out")

    @on(Button.Pressed, "#proceed")
    def _proceed(self) -> None:
        self.dismiss("proceed")

    @on(Button.Pressed, "#all-or-none")
    def _all(self) -> None:
        self.dismiss("all_or_none")

    @on(Button.Pressed, "#no")
    def _no(self) -> None:
        self.dismiss(None)
