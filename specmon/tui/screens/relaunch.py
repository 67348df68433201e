"""The relaunch form (`r`): edit the speculative and NCCL settings, see the exact command, confirm.

Every keystroke re-runs the launch spec's own rules (``specmon.launch.spec.validate_form`` and
``LaunchSpec.problems``), shown inline under the field; the Launch button stays disabled while
anything is wrong, so an invalid launch cannot be submitted. A restart costs minutes.

On a server specmon did not launch (``--attach``) the form is a take-over: submitting asks the
host first (TakeOverAsked, answered with TakeOverChecked), and the confirmation names the
process that will be stopped, or the form shows the one-line refusal; nothing is stopped before
the operator confirms.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from specmon.backends import DEFAULT_BACKEND, Backend, get_backend
from specmon.launch.config import Config, Profile
from specmon.launch.spec import (
    FORM_EXTRA_ARGS,
    FORM_EXTRA_ENV,
    LaunchSpec,
    SecretValues,
    extra_args_text,
    form_fields,
    form_overrides,
    form_values,
    parse_extra_args,
    restore_form_secrets,
    validate_form,
)
from specmon.model.errors import SpecmonError
from specmon.model.terminal_text import safe_text
from specmon.state.controller import HostController
from specmon.state.foreign import TakeOverPlan
from specmon.tui.messages import (
    RelaunchRequested,
    TakeOverAsked,
    TakeOverChecked,
    TakeOverRequested,
)
from specmon.tui.screens.confirm import ConfirmScreen

EXTRA_LABELS: dict[str, str] = {FORM_EXTRA_ARGS: "extra args", FORM_EXTRA_ENV: "extra env"}
UNSET = "(unset)"
LABEL_WIDTH = 16  # the label column, widened to the backend's longest label
MAX_LABEL_WIDTH = 32


def field_id(name: str) -> str:
    return "f-" + name.replace("_", "-").lower()


class RelaunchScreen(ModalScreen[None]):
    """The form. Posts RelaunchRequested to the app once the operator confirms; with
    ``take_over`` (the console follows a server specmon did not launch), TakeOverAsked, then
    TakeOverRequested once the operator confirms the host's plan. ``preselect``: the profile
    to start on when no run of a profile is current (a take-over of a profile's attach
    target)."""

    DEFAULT_CSS = """
    RelaunchScreen { align: center middle; }
    RelaunchScreen > VerticalScroll { width: 100; max-width: 100%; height: auto; max-height: 100%;
        border: thick $primary; background: $panel; padding: 0 1; }
    RelaunchScreen .row { height: auto; margin-bottom: 0; }
    RelaunchScreen .row > Label.name { width: 16; padding: 0 1 0 0; text-style: bold; }
    RelaunchScreen .row > Vertical { height: auto; width: 1fr; }
    RelaunchScreen Input, RelaunchScreen Select { width: 1fr; }
    RelaunchScreen Input { background: $surface; }
    RelaunchScreen Input:focus { background: $boost; text-style: bold; }
    RelaunchScreen .problem { color: $error; height: auto; padding-left: 1; }
    RelaunchScreen .problem.-ok { display: none; }
    RelaunchScreen #preview { height: auto; background: $surface; padding: 0 1; margin-top: 1; }
    RelaunchScreen #spec-problems { color: $error; height: auto; }
    RelaunchScreen #take-over { height: auto; margin-bottom: 1; }
    RelaunchScreen #take-over-problem { color: $error; height: auto; }
    RelaunchScreen #buttons { height: 1; margin-top: 1; }
    RelaunchScreen #buttons Button { margin-right: 1; }
    RelaunchScreen #save-name { width: 22; margin-right: 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "submit", "Launch…"),
    ]

    def __init__(
        self,
        controller: HostController,
        config: Config,
        *,
        take_over: bool = False,
        preselect: str | None = None,
        from_running: bool = False,
    ) -> None:
        super().__init__()
        self.from_running = from_running  # preselect: the attached server's own settings
        self.controller = controller
        self.config = config
        self.take_over = take_over
        self.checking = False  # a take-over's question to the host is out
        self.asked_changes = ""
        self.profile_names = [p for p in controller.profiles() if p in config.profiles]
        store = controller.bus.store
        current = store.run.profile if store.run is not None else None
        if current in self.profile_names:
            self.profile_name = current
        elif preselect in self.profile_names:
            self.profile_name = preselect
        elif config.default_profile in self.profile_names:
            self.profile_name = config.default_profile
        else:
            self.profile_name = self.profile_names[0] if self.profile_names else ""
        # a take-over's server named by a profile's attach key: the form starts on that profile
        self.described = preselect in self.profile_names
        self.problems: dict[str, str] = {}
        self.loaded_values: dict[str, str] = {}
        self.secret_values = SecretValues()  # the real values behind the form's ***
        self.spec: LaunchSpec | None = None
        self.use_backend_of(self.profile_name)

    def backend_of(self, profile_name: str) -> Backend:
        profile = self.config.profiles.get(profile_name)
        return get_backend(profile.backend if profile is not None else DEFAULT_BACKEND)

    def use_backend_of(self, profile_name: str) -> None:
        """The form's fields, labels and select values are the profile's backend's
        (docs/backends.md)."""
        self.backend = self.backend_of(profile_name)
        fields = self.backend.form_fields()
        self.fields: tuple[str, ...] = form_fields(self.backend)
        self.flag_fields = frozenset(f.name for f in fields if not f.is_env)
        self.env_fields = frozenset(f.name for f in fields if f.is_env)
        self.select_choices = {f.name: f.choices for f in fields if f.choices}
        self.labels = {**{f.name: f.shown_as for f in fields}, **EXTRA_LABELS}

    # --- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = f"Relaunch on {self.controller.host_label}"
            if self.take_over:
                scroll.border_title = f"Take over {self.attached()} on {self.controller.host_label}"
                yield Static(self.take_over_intro(), id="take-over", markup=False)
            with Horizontal(classes="row"):
                yield Label("profile", classes="name")
                yield Select(
                    [(name, name) for name in self.profile_names],
                    value=self.profile_name or Select.NULL,
                    allow_blank=False,
                    compact=True,
                    id="profile",
                )
            for name in self.fields:
                with Horizontal(classes="row"):
                    yield Label(self.labels[name], classes="name")
                    with Vertical():
                        if name in self.select_choices:
                            yield Select(
                                [(UNSET, "")] + [(v, v) for v in self.select_choices[name]],
                                allow_blank=False,
                                compact=True,
                                id=field_id(name),
                            )
                        else:
                            # Not selected on focus: the first keystroke would replace the
                            # value (a draft model path became "5").
                            yield Input(
                                id=field_id(name),
                                placeholder=_placeholder(name),
                                compact=True,
                                select_on_focus=False,
                            )
                        yield Static("", classes="problem -ok", id=field_id(name) + "-problem")
            yield Static(id="preview")
            yield Static(id="spec-problems")
            if self.take_over:
                yield Static("", id="take-over-problem", markup=False)
            with Horizontal(id="buttons"):
                label = "Take over… ^s" if self.take_over else "Launch… ^s"
                yield Button(label, id="launch", variant="warning", compact=True)
                yield Button("Cancel", id="cancel", compact=True)
                yield Input(placeholder="new profile name", id="save-name", compact=True)
                yield Button("Save as profile", id="save", compact=True)

    def attached(self) -> str:
        """How the attached server is named: "pid 4242"."""
        run = self.controller.bus.store.run
        if run is None:
            return "the attached server"
        return f"pid {run.pid}" if run.pid is not None else run.run_id

    def take_over_intro(self) -> str:
        """What the take-over form does, above its fields (the host's text made safe)."""
        run = self.controller.bus.store.run
        who = f"{run.backend}, run by {run.owner or '?'}" if run is not None else "?"
        text = (
            f"{self.attached()} ({who}) was not launched by specmon. Choose a profile and its "
            "settings: the host is asked first, then you confirm the process it stops; then "
            "the profile is launched in its place as a specmon run."
        )
        if self.from_running and self.described:
            text += (
                f" The form starts from its own command line and environment (profile "
                f"{self.profile_name}, in memory, as `specmon adopt` reads them: a secret "
                "shows as *** until you type it)."
            )
        elif not self.described:  # the form starts on some other profile: say how to get its own
            text += (
                " No profile describes this server: `specmon adopt HOST -p NAME` writes one "
                "from its command line and environment (then this form starts on it)."
            )
        return safe_text(text)

    def on_mount(self) -> None:
        if not self.profile_names:
            self.query_one("#preview", Static).update(
                "No launch profile of this host is in the config: add one to specmon.toml."
            )
            self.query_one("#launch", Button).disabled = True
            return
        self.fit_labels()
        self.load_profile(self.profile_name)
        self.first_input().focus()

    def fit_labels(self) -> None:
        """Every label on one line: a label that wrapped onto a second line ran into its
        field's error line ("GPU memory utilisation")."""
        widest = max((len(label) for label in self.labels.values()), default=0)
        width = min(MAX_LABEL_WIDTH, max(LABEL_WIDTH, widest + 1))
        for label in self.query("Label.name"):
            label.styles.width = width

    def first_input(self) -> Input:
        """Where the cursor starts: the field people change most, the backend's draft step
        count (``steps_setting``), else the backend's first typed field."""
        typed = [name for name in self.fields if name not in self.select_choices]
        steps = self.backend.steps_setting
        first = steps if steps in typed else typed[0]
        return self.query_one("#" + field_id(first), Input)

    # --- reading and filling the form ---------------------------------------------------------

    def load_profile(self, name: str) -> None:
        """Fill every field from the profile (with the running launch's values if it is that
        profile's run, so the form starts from what is running)."""
        self.profile_name = name
        profile = self.config.profiles[name]
        spec = profile.to_launch_spec()
        values = form_values(spec, profile.extra_args)
        self.secret_values = SecretValues.of(spec)
        run = self.controller.bus.store.run
        if run is not None and run.profile == name and run.argv:
            running = LaunchSpec(spec.backend, (), _args_after_command(run.argv), dict(run.env))
            self.secret_values = SecretValues.of(spec, running)
            for key, value in form_values(running).items():
                if key not in (FORM_EXTRA_ARGS, FORM_EXTRA_ENV):
                    values[key] = value
            # flags the run was launched with beyond the profile's (e.g. the demo's free
            # port) stay, so relaunching changes only what the operator edits
            extra = list(profile.extra_args)
            for item in running.flag_items():
                if item.name in self.flag_fields or running.flag(item.name) == spec.flag(item.name):
                    continue
                value = running.flag(item.name)
                extra += [f"--{item.name}"] + ([value] if value else [])
            values[FORM_EXTRA_ARGS] = extra_args_text(extra)  # secrets shown as ***
        with self.prevent(Input.Changed, Select.Changed):
            for key, value in values.items():
                self.set_field(key, value)
        self.loaded_values = self.values()  # what the confirmation's diff starts from
        self.revalidate()

    def set_field(self, name: str, value: str) -> None:
        if name in self.select_choices:
            select = self.query_one("#" + field_id(name), Select)
            if value and value not in self.select_choices[name]:
                # a profile's own value (a comma list, a ^negation) stays selectable as is
                select.set_options(
                    [(UNSET, ""), (value, value), *_pairs(self.select_choices[name])]
                )
            select.value = value
        else:
            self.query_one("#" + field_id(name), Input).value = value

    def values(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name in self.fields:
            if name in self.select_choices:
                value = self.query_one("#" + field_id(name), Select).value
                out[name] = "" if value is Select.NULL else str(value)
            else:
                out[name] = self.query_one("#" + field_id(name), Input).value
        return out

    # --- validation and preview ---------------------------------------------------------------

    def revalidate(self) -> None:
        values = self.values()
        profile = self.config.profiles[self.profile_name] if self.profile_name else None
        python = self.controller.host_python
        base = profile.to_launch_spec(python=python) if profile is not None else None
        # The profile's own speculative algorithm applies (a NEXTN or STANDALONE profile is
        # not judged by EAGLE3's rules).
        problems = validate_form(values, base=base)
        self.spec = None
        spec_problems: list[str] = []
        if not problems and profile is not None and base is not None:
            try:
                flags, env = form_overrides(values, base, profile.extra_args, self.secret_values)
                self.spec = base.with_flags(flags).with_env(env)
                spec_problems = self.spec.problems()
            except SpecmonError as exc:
                spec_problems = [str(exc)]
        self.problems = problems
        for name in self.fields:
            label = self.query_one("#" + field_id(name) + "-problem", Static)
            message = problems.get(name, "")
            label.update(message)
            label.set_class(not message, "-ok")
        preview = Text()
        if self.spec is not None:
            preview.append("command: ", style="bold")
            preview.append(self.spec.shown().shell_command())
        else:
            preview.append("Fix the fields marked in red to see the command.", style="italic")
        self.query_one("#preview", Static).update(preview)
        self.query_one("#spec-problems", Static).update("\n".join(spec_problems))
        valid = self.spec is not None and not spec_problems
        self.query_one("#launch", Button).disabled = not valid
        self.query_one("#save", Button).disabled = not valid

    @property
    def valid(self) -> bool:
        return not self.query_one("#launch", Button).disabled

    @on(Input.Changed)
    @on(Select.Changed)
    async def _changed(self, event: Input.Changed | Select.Changed) -> None:
        if event.control.id == "profile":
            if isinstance(event.value, str) and event.value != self.profile_name:
                if self.backend_of(event.value).name != self.backend.name:
                    # another server's profile: its own fields (a vLLM profile after an SGLang one)
                    self.profile_name = event.value
                    self.use_backend_of(event.value)
                    await self.recompose()
                    self.fit_labels()
                    self.load_profile(event.value)
                    self.first_input().focus()
                else:
                    self.load_profile(event.value)
            return
        if event.control.id != "save-name":
            self.revalidate()

    # --- actions ------------------------------------------------------------------------------

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#launch")
    def _launch_pressed(self) -> None:
        self.action_submit()  # by name, so a subclass's submit (the fleet form's) is the one run

    def action_submit(self) -> None:
        self.revalidate()
        if not self.valid or self.spec is None:
            self.notify("The form has problems; fix the fields marked in red.", severity="error")
            return
        if self.take_over:
            if not self.checking:
                self.checking = True
                self.asked_changes = self.change_summary()  # of the spec sent, not later edits
                self.show_take_over_problem(f"Asking {self.controller.host_label}…")
                self.app.post_message(TakeOverAsked(self.profile_name, self.spec))
            return
        store = self.controller.bus.store
        run = store.run
        if run is not None and store.run_state not in ("stopped", "failed"):
            what = (
                f"This stops run {run.run_id} (profile {run.profile or '-'}, pid {run.pid or '-'})"
            )
            what += " and waits for its GPU memory to be released, then launches:\n\n"
        else:
            what = "No server is running. This launches:\n\n"
        question = what + self.change_summary() + "\n\n" + self.spec.shown().shell_command()
        self.app.push_screen(ConfirmScreen(question, "Relaunch"), self._confirmed)

    def change_summary(self) -> str:
        """The edit as a diff, above the exact command: a restart costs minutes, so what
        changes must be seen at a glance ("num steps 5 -> 2", "+NCCL_PROTO=LL")."""
        lines = form_diff(self.loaded_values, self.values(), self.labels, self.env_fields)
        if self.take_over:  # the form started from the profile, not from what runs
            edits = "; ".join(lines) if lines else "none"
            return f"Changes to profile {self.profile_name}: {edits}"
        run = self.controller.bus.store.run
        if run is not None and run.profile and run.profile != self.profile_name:
            lines.insert(0, f"profile {run.profile} -> {self.profile_name}")
        return "Changes: " + ("; ".join(lines) if lines else "none (the same settings again)")

    def show_take_over_problem(self, text: str) -> None:
        self.query_one("#take-over-problem", Static).update(safe_text(text))

    @on(TakeOverChecked)
    def _take_over_checked(self, message: TakeOverChecked) -> None:
        """The host's answer: a refusal stays on the form (one line; nothing stopped), a
        plan is confirmed with the process it stops named, then the spec it launches."""
        self.checking = False
        if message.plan is None:
            self.show_take_over_problem(message.refusal or "refused")
            return
        self.show_take_over_problem("")
        plan, spec = message.plan, message.spec
        question = (
            "\n".join(safe_text(line) for line in plan.lines())
            + "\n\n"
            + self.asked_changes
            + "\n\n"
            + spec.shown().shell_command()
        )
        self.app.push_screen(
            ConfirmScreen(question, "Take over"),
            lambda answer: self._take_over_confirmed(answer, plan, spec),
        )

    def _take_over_confirmed(
        self, answer: bool | None, plan: TakeOverPlan, spec: LaunchSpec
    ) -> None:
        if not answer:
            self.show_take_over_problem(f"Not taken over: {self.attached()} left running.")
            return
        self.app.post_message(TakeOverRequested(plan, spec))
        self.dismiss(None)

    def _confirmed(self, answer: bool | None) -> None:
        if not answer:
            return
        if self.spec is None:  # the question is asked only with a valid spec; kept by the modal
            return
        self.app.post_message(RelaunchRequested(self.profile_name, self.spec))
        self.dismiss(None)

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        from specmon.launch.config import save_profile, secrets_as_placeholders, user_config_path

        name = self.query_one("#save-name", Input).value.strip()
        if not name:
            self.notify("Type a name for the new profile first.", severity="warning")
            self.query_one("#save-name", Input).focus()
            return
        profile = self.config.profiles[self.profile_name]
        try:
            values = restore_form_secrets(self.values(), self.secret_values)
            new_profile = profile_from_form(profile, name, values, self.backend)
            new_profile, masked = secrets_as_placeholders(new_profile, profile)
            # Without a config file in use (built-in profiles only, or ./specmon.toml passed over
            # as untrusted) the profile goes to the user's own file, never to an ignored one.
            path = self.config.source if self.config.source is not None else user_config_path()
            new_profile = save_profile(path, new_profile)
        except SpecmonError as exc:
            self.notify(str(exc), title="Not saved", severity="error", timeout=15)
            return
        self.config.profiles[name] = new_profile
        self.controller.add_profile(name, new_profile)  # the session keeps its own copy
        if name not in self.profile_names:
            self.profile_names = sorted([*self.profile_names, name])
            select = self.query_one("#profile", Select)
            with self.prevent(Select.Changed):
                select.set_options([(p, p) for p in self.profile_names])
                select.value = self.profile_name
        if masked:  # not launchable until filled in: the file says where
            self.notify(
                f"Saved profile {name!r} to {path}. {', '.join(masked)} written as *** (specmon "
                "stores no secret it was not given in that file): fill in the secret there "
                "before launching it",
                title="Saved",
                severity="warning",
                timeout=15,
            )
        else:
            self.notify(f"Saved profile {name!r} to {path}; it can be launched now", title="Saved")


def form_diff(
    before: dict[str, str],
    after: dict[str, str],
    labels: dict[str, str],
    env_fields: frozenset[str],
) -> list[str]:
    """One entry per changed field, in the form's order: ``label old -> new`` for a flag,
    ``+NAME=value``, ``-NAME`` or ``NAME=old -> new`` for an environment variable."""
    out: list[str] = []
    for name, new in after.items():
        old = before.get(name, "")
        if old.strip() == new.strip():
            continue
        if name in env_fields:
            if not old:
                out.append(f"+{name}={new}")
            elif not new:
                out.append(f"-{name}")
            else:
                out.append(f"{name}={old} -> {new}")
            continue
        label = labels.get(name, name)
        out.append(f"{label} {old or UNSET} -> {new or UNSET}")
    return out


def profile_from_form(
    profile: Profile, name: str, values: dict[str, str], backend: Backend
) -> Profile:
    """A copy of ``profile`` named ``name`` with the form's settings as its own fields (the
    backend says which profile key each flag field stands for)."""
    from specmon.launch.config import SpeculativeSettings
    from specmon.launch.spec import parse_extra_env

    changes: dict[str, Any] = {}
    speculative: dict[str, Any] = {}
    env = parse_extra_env(values.get(FORM_EXTRA_ENV, ""))
    for field in backend.form_fields():
        text = values.get(field.name, "").strip()
        if field.is_env:
            if text:
                env[field.name] = text
            continue
        key = backend.profile_key_of(f"--{field.name}")
        if key is None:
            continue
        if len(key) == 2 and key[0] == "speculative":
            speculative[key[1]] = _number(text)
        else:
            changes[key[0]] = _number(text)
    if speculative.get("algorithm") is None:
        speculative.pop("algorithm", None)  # a blank method keeps the profile's
    current = profile.speculative
    if current is not None or any(value is not None for value in speculative.values()):
        algorithm = backend.default_speculative_algorithm or ""
        changes["speculative"] = replace(
            current or SpeculativeSettings(algorithm=algorithm), **speculative
        )
    return replace(
        profile,
        name=name,
        extra_args=tuple(parse_extra_args(values.get(FORM_EXTRA_ARGS, ""))),
        env=env,
        description=f"saved from the console, based on {profile.name}",
        **changes,
    )


def _number(text: str) -> int | float | str | None:
    """A form field's value: whole numbers as int, other numbers as float, blank as None,
    anything else (a method name, a draft model path) as the text."""
    if not text:
        return None
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _placeholder(name: str) -> str:
    if name == FORM_EXTRA_ARGS:
        return "--flag value ... (shell quoting)"
    if name == FORM_EXTRA_ENV:
        return "NAME=VALUE ..."
    return "blank = not set"


def _pairs(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


def _args_after_command(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The flags of a recorded argv: everything from the first ``--flag`` on."""
    for index, token in enumerate(argv):
        if token.startswith("--"):
            return argv[index:]
    return ()
