"""The draft/verify panel: per-cycle phase times, their shares and the Amdahl bound.

It exists to answer "is the draft phase worth optimising?" before anyone spends hours on it.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from specmon.backends.draft_info import wiring_line
from specmon.model.events import DraftInfo
from specmon.state.store import StateStore
from specmon.tui.formatting import amdahl_gain_percent, format_number

WINDOW = 200  # cycles averaged

PHASE_STYLES = (("draft", "magenta"), ("verify", "cyan"), ("extend", "yellow"))


class TimingPanel(Static):
    """Mean draft/verify/extend ms over the last cycles, from ``store.probe``."""

    DEFAULT_CSS = """
    TimingPanel { height: 7; border: round $primary; border-title-color: $primary; padding: 0 1; }
    TimingPanel:focus { border: round $accent; }
    """

    can_focus = True

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "Draft / verify"
        self._last: tuple[object, ...] | None = None
        self.wanted_rows = 7  # border included

    def update_from(self, store: StateStore, *, probe_on: bool | None = None) -> None:
        """``probe_on``: whether the run's profile has the probe on (None: not known)."""
        width = max(20, self.size.width - 4)
        last = store.probe[-1] if store.probe else None
        foreign = store.run is not None and store.run.foreign
        wiring = shown_wiring(store)
        key = (len(store.probe), last, width, probe_on, store.last_decode is None, foreign, wiring)
        if key == self._last:
            return
        self._last = key
        self.border_subtitle = timing_subtitle(store)
        rows = 8 if wiring is not None else 7  # one line more for the draft's wiring
        relayout = rows != self.wanted_rows
        self.wanted_rows = rows  # the main screen sizes its row (and this panel) to fit
        body = render_timing(store, width, probe_on=probe_on)
        if wiring is not None:
            body = Text("\n", no_wrap=True, overflow="ellipsis").join([render_wiring(wiring), body])
        self.update(body, layout=relayout)


def shown_wiring(store: StateStore) -> DraftInfo | None:
    """The run's draft wiring when there is something to show: a draft config read, or a
    wiring that cannot work (a file that could not be read is said by `watch`, not here)."""
    info = store.draft_info
    if info is None or not (info.draft_config_sha256 or info.problems):
        return None
    return info


def render_wiring(info: DraftInfo) -> Text:
    """One line: the wiring, red and marked when it cannot work (the first reason after it)."""
    if info.problems:
        text = Text("✗ " + wiring_line(info), style="bold red", no_wrap=True, overflow="ellipsis")
        text.append(" · " + info.problems[0], style="red")
        return text
    return Text(wiring_line(info), style="dim", no_wrap=True, overflow="ellipsis")


def render_timing(store: StateStore, width: int, *, probe_on: bool | None = None) -> Text:
    """Five lines: phase ms, a stacked bar of shares, the shares, the Amdahl bound (wrapped).
    With no cycle yet: waiting for traffic when the probe is on, else how to turn it on."""
    text = Text(no_wrap=True, overflow="ellipsis")
    means = store.phase_means(WINDOW)
    if means is None and store.run is not None and store.run.foreign:
        text.append("No probe: attached server.\n", style="bold")
        text.append("specmon did not launch it, and the\n", style="dim")
        text.append("probe cannot be injected into a\n", style="dim")
        text.append("running server: press r for a\n", style="dim")
        text.append("take-over relaunch that adds it.", style="dim")
        return text
    if means is None and probe_on and store.last_decode is None:
        text.append("Waiting for traffic.\n", style="bold")
        text.append("The probe is on: draft and\n", style="dim")
        text.append("verify times show once\n", style="dim")
        text.append("requests arrive.", style="dim")
        return text
    if means is None and probe_on:
        text.append("No probe cycle yet.\n", style="bold")
        text.append("The profile has probe = true and\n", style="dim")
        text.append("requests are served: check the\n", style="dim")
        text.append("server's source (docs/probe.md).", style="dim")
        return text
    if means is None:
        text.append("No per-cycle timing yet.\n", style="bold")
        text.append("Set probe = true in the launch\n", style="dim")
        text.append("profile to time draft, verify\n", style="dim")
        text.append("and extend (docs/probe.md).", style="dim")
        return text
    draft, verify, extend = means
    cycle = draft + verify + extend
    narrow = width < 60
    names = ("draft", "verify", "ext") if narrow else ("draft", "verify", "extend")
    shown = 3 if store.has_extend_phase else 2  # no extend figures for a server without one
    if narrow:
        text.append("ms ", style="dim")
    for name, (_, style), value in zip(names[:shown], PHASE_STYLES, means, strict=False):
        text.append(f"{name} ", style=f"bold {style}")
        text.append(f"{format_number(value, 2)}{'' if narrow else ' ms'}  ")
    if not narrow:
        text.append(f"cycle {format_number(cycle, 1)} ms")
    text.append("\n")
    text.append_text(_stacked_bar(means, width))
    text.append("\n")
    for name, (_, style), value in zip(names[:shown], PHASE_STYLES, means, strict=False):
        share = 100 * value / cycle if cycle else 0.0
        text.append(f"{name} {share:.1f}%  ", style=style)
    text.append("\n")
    gain = amdahl_gain_percent(draft, verify, extend)
    if gain is not None:
        sentence = f"a draft phase infinitely faster would gain at most {gain:.1f}%"
        text.append_text(_wrap_bold_tail(sentence, width, f"{gain:.1f}%"))
    return text


def timing_subtitle(store: StateStore) -> str:
    """Where the numbers come from, shown in the panel's bottom border."""
    if not store.probe:
        return ""
    source = "probe" if store.probe[-1].source == "probe" else "whole-step time, no probe"
    return f"{source} · last {min(WINDOW, len(store.probe))} cycles"


def _wrap_bold_tail(sentence: str, width: int, tail: str) -> Text:
    """The sentence on one line if it fits, else two, with the figure in bold."""
    if len(sentence) > width:
        cut = sentence.rfind(" ", 0, width)
        sentence = sentence[:cut] + "\n" + sentence[cut + 1 :]
    text = Text(sentence[: -len(tail)])
    text.append(tail, style="bold")
    return text


def _stacked_bar(means: tuple[float, float, float], width: int) -> Text:
    total = sum(means)
    text = Text()
    if total <= 0:
        return text
    cells = [round(width * value / total) for value in means]
    cells[1] += width - sum(cells)  # rounding remainder goes to verify, the largest share
    for (_, style), count in zip(PHASE_STYLES, cells, strict=True):
        if count > 0:
            text.append("█" * count, style=style)
    return text
