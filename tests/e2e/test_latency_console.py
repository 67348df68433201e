"""The console's Latency & capacity panel on the simulator's vLLM personality over real HTTP:
a bounded load (4 clients x 3 requests of 100 tokens) read from the server's own /metrics
shows a real ITL p90 (a figure with its unit, not "—"), TTFT and e2e rows, running against
the requests, the KV bar, and an ITL p90 point in the history chart's series. About 15 s."""

from __future__ import annotations

import re
import threading

import httpx
from support.sim import VLLM_EAGLE3_ARGS, VLLM_READY_LINE, start_sim

from specmon.session.options import SessionOptions
from specmon.session.url import UrlController, parse_url_target
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.latency import LatencyPanel

MODEL = "meta-llama/Llama-3.3-70B-Instruct"
FIGURE = r"\d+(\.\d+)? (µs|ms|s)"  # a latency as the panel writes it


def send_bounded_load(url: str) -> None:
    """4 clients, 3 completions of 100 tokens each, in parallel; then done."""

    def client() -> None:
        with httpx.Client(timeout=60) as http:
            for _ in range(3):
                body = {"model": MODEL, "prompt": "hi " * 40, "max_tokens": 100}
                http.post(f"{url}/v1/completions", json=body).raise_for_status()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


async def test_the_console_shows_the_simulators_itl_p90(tmp_path) -> None:
    with start_sim(
        tmp_path / "vllm",
        module="specmon.sim.vllm",
        base_args=VLLM_EAGLE3_ARGS,
        env={"SPECMON_SIM_SHARDS": "4"},
        probe=False,
    ) as sim:
        sim.wait_for_log(VLLM_READY_LINE, 60)
        url = f"http://127.0.0.1:{sim.port}"
        controller = UrlController(
            parse_url_target(url), options=SessionOptions(health_interval_s=0.25)
        )
        app = SpecmonApp(controller, None, read_only=True)
        async with app.run_test(size=(140, 44)) as pilot:
            store = controller.bus.store
            for _ in range(100):  # the first window: two /metrics pages
                await pilot.pause(0.1)
                if store.latency is not None:
                    break
            assert store.latency is not None, "no latency event from the simulator's /metrics"
            load = threading.Thread(target=send_bounded_load, args=(url,), daemon=True)
            load.start()
            panel = app.main.query_one(LatencyPanel)
            itl_row = re.compile(rf"ITL\s+{FIGURE}\s+(?P<p90>{FIGURE})\s+{FIGURE}")
            e2e_row = re.compile(rf"e2e\s+{FIGURE}")  # once requests finished, in a later page
            for _ in range(300):  # up to 30 s: the load's tokens in a later scrape's window
                await pilot.pause(0.1)
                text = str(panel.render())
                if itl_row.search(text) and e2e_row.search(text) and not load.is_alive():
                    break
            load.join(timeout=60)
            text = str(panel.render())
            assert panel.display, "the panel fits a 140x44 console"
            assert itl_row.search(text), text
            latency = store.latency
            assert latency is not None and latency.itl_s is not None
            assert latency.itl_s.p90 is not None and latency.itl_s.p90 > 0
            assert re.search(rf"TTFT\s+{FIGURE}", text) and e2e_row.search(text), text
            assert re.search(r"running \d+/", text) and re.search(r"KV \S*.* \d+%", text)
            assert app.session_history.itl_p90_ms, "no ITL p90 point for the history chart"
            assert all(value > 0 for _, value in app.session_history.itl_p90_ms)
