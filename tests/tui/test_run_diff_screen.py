"""`d` in the console (issue 31 item 2): the host's runs, the latest two compared with the
same text as `specmon diff`, other runs marked with space; a record's text never reaches the
terminal raw."""

from __future__ import annotations

from support.paths import REPO
from support.tui_replay import FROZEN_NOW, ReplayController, recorded_session
from textual.widgets import DataTable, Static

from specmon.launch.config import load_config
from specmon.state.run_status import RunStatus
from specmon.tui.app import SpecmonApp
from specmon.tui.screens.history_charts import HistoryScreen
from specmon.tui.screens.run_diff import RunDiffScreen

ARGV = ("python3", "-m", "sglang.launch_server", "--model-path", "/m/t",
        "--speculative-draft-model-path", "/m/d", "--speculative-num-steps")  # fmt: skip


def fingerprint(ids: list[int]) -> dict:
    fields = {"eagle_config.eagle_aux_hidden_state_layer_ids": ids, "hidden_size": 7168}
    return {
        "v": 1,
        "draft": {"path": "/m/d", "config_sha256": str(ids), "revision": None, "fields": fields},
        "target": {"path": "/m/t", "config_sha256": "t", "revision": None, "fields": {}},
        "chat_template_sha256": "c",
        "aux_layer_ids": ids,
        "aux_source": "checkpoint",
        "aux_captured": [i + 1 for i in ids],
    }


def run(run_id: str, started: float, ids: list[int], steps: str, **env: str) -> RunStatus:
    return RunStatus(
        run_id=run_id, profile="kimi", argv=(*ARGV, steps), env=env, pid=None, pgid=None,
        started_at=started, alive=False, port=30000, fingerprint=fingerprint(ids),
        server_version="0.5.9",
    )  # fmt: skip


class HostRuns(ReplayController):
    """The replayed session, with runs on the host as its records say."""

    def __init__(self, runs: list[RunStatus]) -> None:
        super().__init__(recorded_session(ready=True))
        self.runs = runs

    async def status(self) -> list[RunStatus]:
        return self.runs


async def test_d_compares_the_latest_two_and_space_picks_others() -> None:
    runs = [
        run("r1-old", 1.0, [2, 30, 58], "3", NCCL_PROTO="LL"),
        run("r2-good", 2.0, [2, 30, 58], "3", NCCL_PROTO="Simple"),
        run("r3-bad\x1b[31m", 3.0, [0, 2, 30, 58], "3", NCCL_PROTO="Simple"),
    ]
    app = SpecmonApp(HostRuns(runs), load_config(REPO / "specmon.toml"), clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(140, 44)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("h")
        await pilot.pause(0.2)
        assert isinstance(app.screen, HistoryScreen)
        await pilot.press("d")  # from the history, as from the main screen
        for _ in range(30):
            if isinstance(app.screen, RunDiffScreen):
                break
            await pilot.pause(0.1)
        screen = app.screen
        assert isinstance(screen, RunDiffScreen)
        text = str(screen.query_one("#diff", Static).render())
        assert "run r2-good (kimi) -> run r3-bad" in text and "\x1b" not in text
        assert "aux_layers_changed: auxiliary layers [2, 30, 58] -> [0, 2, 30, 58]" in text
        assert (
            "eagle_config.eagle_aux_hidden_state_layer_ids: [2, 30, 58] -> [0, 2, 30, 58]" in text
        )
        assert "env NCCL_PROTO" not in text
        table = screen.query_one(DataTable)
        assert table.row_count == 3
        table.move_cursor(row=2)  # the oldest run, r1-old
        await pilot.press("space")  # marked: the earlier of the two marks (r3) gives way
        await pilot.pause(0.1)
        text = str(screen.query_one("#diff", Static).render())
        assert "run r1-old (kimi) -> run r2-good (kimi): 1 difference" in text
        assert "env NCCL_PROTO: LL -> Simple" in text
        await pilot.press("escape")
        assert isinstance(app.screen, HistoryScreen)
