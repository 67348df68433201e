"""The command palette (ctrl+p): every console action by name, so no key must be remembered."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

# (title, help, action name on the app) — the same actions as the key bindings.
PALETTE_ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("Relaunch server…", "open the relaunch form (r)", "relaunch"),
    ("Experiments…", "run and compare grid sweeps (e)", "experiments"),
    ("Stop server…", "stop the running server, after a confirmation (s)", "stop"),
    ("Focus server log", "move the focus to the log pane (l)", "focus_log"),
    ("Filter server log", "type a substring to filter the log (/)", "filter_log"),
    ("GPU detail", "every field the GPU agent reports (g)", "gpu_detail"),
    (
        "History charts",
        "tok/s, accept length, verify ms, GPU util, ITL and TTFT p90 across launches (h)",
        "history",
    ),
    (
        "Compare two runs…",
        "every recorded difference between two of the host's runs, latest two first (d)",
        "compare_runs",
    ),
    (
        "Latency & capacity panel",
        "show or hide TTFT/ITL/e2e/queue quantiles, KV cache and requests (c)",
        "toggle_latency",
    ),
    (
        "Tuning advisor",
        "predicted tok/s per draft step count from the running server, and a sweep to check (a)",
        "advisor",
    ),
    ("Cycle theme", "dark, high contrast, light (t)", "cycle_theme"),
    (
        "Pause / resume live panels",
        "freeze the GPU, throughput and timing panels (p)",
        "toggle_pause",
    ),
    ("Help: key bindings", "list every key (?)", "help"),
    ("Quit specmon", "leave the console; a remote server keeps running (q)", "quit"),
)


class ConsoleCommands(Provider):
    """Offers PALETTE_ACTIONS; fuzzy-matched on the title."""

    def _offered(self) -> list[tuple[str, str, str]]:
        """The actions the app allows now (none that change a server in read-only mode)."""
        return [item for item in PALETTE_ACTIONS if self.app.check_action(item[2], ()) is not False]

    async def discover(self) -> Hits:
        for title, help_text, action in self._offered():
            yield DiscoveryHit(title, partial(self.app.run_action, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, action in self._offered():
            score = matcher.match(title)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(title),
                    partial(self.app.run_action, action),
                    help=help_text,
                )
